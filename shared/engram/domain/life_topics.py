"""Which fact of the user's life a statement gives a value for: pure rules, for consolidation,
recall's newer statement first and the offline extraction.

A user's profile holds facts that have one value at a time: where they live, where they work,
the car they drive, where a relative lives, the day of a weekly routine. When the user says one
changed ("My sister moved to Leeds", "I sold my old car and bought a Tesla", "I moved my
swimming to Monday mornings"), the statement before it no longer holds, even though the two
share few words and their vectors are not close ("My sister Lena lives in Porto" and "she moved
to Leeds" are neither a near duplicate nor a `k=v` fact): consolidation's other rules cannot
tell, and the stable memory block then gave the old and the new value side by side. The next trip
is a topic too, but a plan: a later one replaces it only when it says so (`ONLY_WHEN_CHANGED`).

`topics` names those facts ("home:sister", "vehicle:car", "routine:swimming") in English and
German, also as the assistant asks about them ("Which car do you drive?", "Is your sister still
living in Porto?", as the offline extraction titles a reply with the question it answers).
A topic wants the verb that gives the value, not just the noun: "My car needs new tyres" says
nothing about which car, "I love swimming" nothing about the day. A relative with another
adjective ("my older sister") or another name ("my sister Lena" / "my sister Mia") is another
person (`names`, `shared_fact`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from engram.domain.dates import DAY_MONTH_PATTERNS, MONTH_PATTERN, RELATIVE_DAY_PATTERN, WEEKDAYS_DE, WEEKDAYS_EN

# the observation types of the user's profile (the stable memory block); a session's summary or a
# digest names many facts at once and is never one of them
PROFILE_TYPES: tuple[str, ...] = ("preference", "identity")

_I = re.IGNORECASE | re.UNICODE


def _canonical(spec: str) -> dict[str, str]:
    """Words and the one they stand for: "mum=mother" maps, "sister" stands for itself."""
    return {w.split("=", 1)[0]: w.split("=", 1)[-1] for w in spec.split()}


def _group(name: str, words: dict[str, str]) -> str:
    """A named regex group of the words, the longest first ("grandmother" before "mother")."""
    return f"(?P<{name}>" + "|".join(sorted((re.escape(w) for w in words), key=len, reverse=True)) + ")"


_RELATIVES = _canonical(
    "wife husband partner boyfriend girlfriend son daughter mother father sister brother parents aunt uncle cousin"
    " niece nephew grandmother grandfather grandparents mom=mother mum=mother dad=father grandma=grandmother"
    " grandpa=grandfather fiance fiancé=fiance fiancee=fiance fiancée=fiance frau=wife ehefrau=wife mann=husband"
    " ehemann=husband partnerin=partner freund=boyfriend freundin=girlfriend sohn=son tochter=daughter"
    " mutter=mother mama=mother vater=father papa=father schwester=sister bruder=brother eltern=parents"
    " oma=grandmother opa=grandfather tante=aunt onkel=uncle cousine=cousin nichte=niece neffe=nephew"
    " großmutter=grandmother grossmutter=grandmother großvater=grandfather grossvater=grandfather"
)
_RELATIVE = _group("rel", _RELATIVES)
# "my older sister" is another person than "my sister"; the adjective is part of who it is
_WHICH = r"(?P<adj>older|younger|elder|eldest|youngest|little|big|twin|other|ältere|jüngere|große|kleine|älterer|jüngerer|großer|kleiner|ältester|jüngster)?\s*"  # noqa: E501
# "Ihre Schwester" is the assistant's "your sister"; "ihre Schwester" is someone else's ("her sister")
_POSSESSIVE = (
    r"(my|our|your|mein|meine|meinen|meinem|meiner|unser|unsere|unseren|unserem|unserer|dein|deine|deinen|deinem|"
    r"deiner|(?-i:Ihr|Ihre|Ihren|Ihrem|Ihrer))"
)
_WHO = rf"\b{_POSSESSIVE}\s+{_WHICH}{_RELATIVE}\b"

# where a relative lives, where they work: the verb after the relative (German: within the clause)
_RELATIVE_HOME = (
    rf"{_WHO}(\W+\w+){{0,6}}?\W+(lives|living|live|moved|moving|moves|relocated|is now in|is in|are in|"
    r"wohnt|lebt|gezogen|umgezogen|zieht)\b",
    rf"\b(wohnt|lebt|wohnen|leben)\s+{_POSSESSIVE}\s+{_WHICH}{_RELATIVE}\b",
    rf"\b(where|which city) (does|do|is|are) {_POSSESSIVE}\s+{_WHICH}{_RELATIVE}\b",
)
_RELATIVE_WORK = (
    rf"{_WHO}(\W+\w+){{0,6}}?\W+(works|working|started a new job|arbeitet)\b",
    rf"\b(arbeitet)\s+{_POSSESSIVE}\s+{_WHICH}{_RELATIVE}\b",
)

# where the user lives and works ("I live in", "we moved to", "ich wohne jetzt in", "where do you live")
_HOME = (
    r"\b(i|we) (now |currently |still )?(live|am living|'m living|are living|'re living) (in|near|on|outside|with)\b",
    r"\b(i|we) (just |recently |finally |have |'ve )?(moved|relocated) (to|into|back to)\b",
    r"\b(where|which city) (do|are) you (still |now |currently )?(live|living)\b",
    r"\b(ich wohne|wir wohnen|ich lebe|wir leben) (jetzt |nun |inzwischen |seit \w+ (\w+ )?)?(in|bei|am|im|nahe|auf)\b",
    r"\b(ich bin|wir sind) (\w+ ){0,3}nach \w+ (gezogen|umgezogen)\b",
    r"\b(wohne|lebe) ich (jetzt |nun |inzwischen |seit \w+ )?(in|bei|am|im|nahe)\b",
    r"\b(wo) (wohnen|leben) (sie|du)\b|\b(wohnst|lebst) du\b",
)
# work at a school, a university, a hospital: "als Lehrerin an der Lindenschule", "Ärztin am Klinikum"
# (a job noun's ending and a capitalised place; not "als Letzter am Bahnhof"); `personal_facts` too
WORK_AT_PLACE_DE = (
    r"\b(als|bin) (?!(erst|zweit|dritt|letzt|nächst)e)\w+(in|er|or|ent|ant|ist|eur|e) (an der|am) (?-i:[A-ZÄÖÜ])"
)
_WORK = (
    r"\bi (now |currently |still )?work (as|at|for|in)\b",
    r"\b(working|to work) as\b",
    r"\bi (just |recently )?(joined|started at|started with) [^?!;\n]{1,40}? as (a|an|the)\b",
    r"\bi (just |recently |have |'ve )?started (as (a|an)\b|at (?-i:[A-Z]))",
    r"\bi('m| am) (now |currently )?(a|an|the) [a-z-]+ (at|for|in)\b",
    r"\b(new job|switched jobs|changed jobs|left my (old )?(job|position))\b",
    r"\b(what do you do for (work|a living)|where do you work|are you (still )?working)\b",
    r"\bich (arbeite|bin) (jetzt |nun |inzwischen |seit \w+ )?(als|bei|beim)\b",
    r"\barbeite ich (jetzt |nun |inzwischen |seit \w+ )?(als|bei|beim|an der|im)\b",
    r"\bals \w+ (bei|beim|im|in der)\b",
    WORK_AT_PLACE_DE,
    r"\bich bin (jetzt |nun |inzwischen )?\w+(in|er|or|ent|ant|ist) (bei|beim)\b",
    r"\b(stelle|job) gewechselt\b|\bneue stelle\b",
    r"\b(was machen sie|was machst du) beruflich\b|\bwo arbeite(n sie|st du)\b",
)

# a car's make names the car ("ich habe einen weißen BMW i3"); makes that are common words are left out
_MAKES = _canonical(
    "audi=car bmw=car volkswagen=car vw=car toyota=car honda=car tesla=car skoda=car škoda=car opel=car"
    " fiat=car mercedes=car renault=car peugeot=car citroën=car citroen=car kia=car hyundai=car mazda=car"
    " nissan=car volvo=car dacia=car porsche=car subaru=car ford=car chevrolet=car jeep=car lexus=car suzuki=car"
    " mitsubishi=car jaguar=car cupra=car polestar=car"
)
_VEHICLES = (
    _canonical(
        "car auto=car autos=car wagen=car wagens=car van transporter=van campervan wohnmobil=campervan motorbike"
        " motorcycle=motorbike motorrad=motorbike scooter roller=scooter bike=bicycle bicycle fahrrad=bicycle e-bike"
        " ebike=e-bike"
    )
    | _MAKES
)
_VEHICLE = _group("veh", _VEHICLES)
# which vehicle the user has: parting with one, or a verb of owning or driving with "a" (a value),
# not any sentence about the car ("I have to take my car to the garage", "I drive my car to work")
_VEHICLE_OWNED = (
    rf"\b(sold|traded in|verkauft|abgegeben)\b[^.?!;]{{0,30}}?\b{_VEHICLE}\b",
    rf"\b{_VEHICLE}\b[^.?!;]{{0,30}}?\b(sold|traded in|verkauft|abgegeben|ist weg|gekauft)\b",
    rf"\b(bought|got|have|own|drive|ride|fahre|habe|besitze)\b (now |still |jetzt |nun )?(a|an|einen|eine|ein)\b"
    rf"[^.?!;,]{{0,30}}?"
    rf"\b{_VEHICLE}\b",
    # "my green Skoda Octavia", "mein grüner Skoda": a make the user calls theirs (not "my old Skoda")
    rf"\b(my|mein|meinen|meinem|meiner|meine)\s+(?!old\b|alte)(\w+\s+){{0,2}}?{_group('veh', _MAKES)}\b",
)
_DRIVES = (  # driving without naming the vehicle: a car
    r"\bi (now |still )?drive (a|an|the)\b",
    r"\b(are|do) you (still |now )?(drive|driving)\b",
    r"\b(ich fahre|fahre ich) (jetzt |nun |inzwischen )?(einen|eine|ein)\b",
    r"\b(fahren sie|fährst du)\b",
    r"\b(ich|wir) (\w+ ){0,2}?(einen|eine|ein)\b[^.?!;,]{0,40}?\b(fahre|fahren)\b",  # the verb last
)

# the day of a weekly routine: the activity and a weekday or "every ..."
_ACTIVITIES = _canonical(
    "swimming running jogging climbing bouldering cycling hiking yoga skiing surfing dancing rowing sailing pilates"
    " choir gym tennis schwimmen=swimming laufen=running joggen=jogging klettern=climbing bouldern=bouldering"
    " radfahren=cycling wandern=hiking tanzen=dancing rudern=rowing segeln=sailing chor=choir fitnessstudio=gym"
)
_ACTIVITY = _group("act", _ACTIVITIES)
_DAYS_EN = "|".join(WEEKDAYS_EN)
_DAYS_DE = "|".join(WEEKDAYS_DE)
# a habit, not one day: "every Friday", "Mondays", "Monday mornings", "is on Monday", "moved to
# Thursday", "ist am Montag", "auf den Donnerstag", "der Samstagmorgen", "noch am Samstag" ("I
# skipped swimming on Monday" gives no routine)
_SCHEDULE = (
    rf"(\b(every|each|jeden|jede|jedes)\b|\b({_DAYS_EN}|{_DAYS_DE})s\b"
    rf"|\b({_DAYS_EN}|{_DAYS_DE}) ?(mornings?|evenings?|afternoons?|nights?|morgen|abend|nachmittag)\b"
    rf"|\b(is|are) (now )?on ({_DAYS_EN})\b|\bto ({_DAYS_EN})\b|\b(ist|sind) (\w+ )?am ({_DAYS_DE})\b"
    rf"|\bam ({_DAYS_DE}) ist\b|\bauf den ({_DAYS_DE})\b|\b(noch|jetzt|nun|immer) am ({_DAYS_DE})\b"
    rf"|\b(still|now) on ({_DAYS_EN})\b)"
)
_ROUTINE = (
    rf"\b{_ACTIVITY}\b[^.?!;]{{0,40}}?{_SCHEDULE}",
    rf"{_SCHEDULE}[^.?!;]{{0,40}}?\b{_ACTIVITY}\b",
    rf"\b(ist|sind) (das |der |die )?{_ACTIVITY} (jetzt |nun )?am ({_DAYS_DE})\b",  # "ab jetzt ist Yoga am Montag"
)

# the next trip: a plan, not a fact with one value for good (two trips can both be booked), so a
# later one replaces it only when it says so ("the old trip is cancelled; Morocco is the new plan")
_TRIP = (
    r"\b(trip|holiday|vacation|getaway|reise|urlaub)\b",
    r"\b(fly|flying|going|travel|travelling|traveling|heading) to (?-i:[A-Z])\w+ (in|for|this|next)\b",
    r"\b(fliegen|fahren|reisen|geht es) (\w+ ){0,4}nach (?-i:[A-ZÄÖÜ])",  # "fahren jetzt doch im April nach"
    r"\bnach (?-i:[A-ZÄÖÜ])\w+ (fliegen|fahren|reisen)\b",  # the verb last: "bevor wir nach Kreta fliegen"
    # a place and a month as the plan: "now that Iceland in June is the new plan", "Kreta im August ist der neue Plan"
    rf"\b(?-i:[A-ZÄÖÜ])\w+ (in|im) ({MONTH_PATTERN}) (is |ist )?(the|our|der|unser) (new|next|neue|nächste) plan\b",
)

# the next appointment (a dentist, a doctor, the vet, physio, the hairdresser, an interview, an exam)
# and its date: a plan too ("I have a dentist
# appointment on 3 March and a check-up in May" may both hold), replaced only when the later one
# says it moved ("the dentist moved my appointment to 18 April", "Termin auf den 18. April verschoben")
_APPOINTMENTS = _canonical(
    "dentist dental=dentist orthodontist=dentist zahnarzt=dentist zahnärztin=dentist zahnarzttermin=dentist"
    " zahnarztpraxis=dentist kieferorthopäde=dentist doctor gp=doctor physician=doctor arzt=doctor ärztin=doctor"
    " arzttermin=doctor hausarzt=doctor hausärztin=doctor hausarztpraxis=doctor arztpraxis=doctor augenarzt=doctor"
    " vet tierarzt=vet tierärztin=vet tierarzttermin=vet physio physiotherapist=physio physiotherapy=physio"
    " physiotherapie=physio hairdresser haircut=hairdresser barber=hairdresser friseur=hairdresser"
    " friseurin=hairdresser friseurtermin=hairdresser interview vorstellungsgespräch=interview"
    " bewerbungsgespräch=interview exam prüfung=exam klausur=exam"
)
_APPOINTMENT = _group("appt", _APPOINTMENTS)
# the day of an appointment, in the forms `dates.plan_date` reads
_WHEN = rf"({'|'.join(DAY_MONTH_PATTERNS)}|\b({_DAYS_EN}|{_DAYS_DE})\b|{RELATIVE_DAY_PATTERN})"
_APPOINTMENT_ON = (
    rf"\b{_APPOINTMENT}\b[^.?!;]{{0,60}}?{_WHEN}",
    rf"{_WHEN}[^.?!;]{{0,40}}?\b{_APPOINTMENT}\b",
)
# any other appointment, its day after it ("an appointment at the bank on Monday", "einen Termin beim
# Amt am 3. März"), when the sentence names no kind above (`topics`; not "der alte Termin")
APPOINTMENT = "appointment:"
OTHER_APPOINTMENT = f"{APPOINTMENT}other"
_OTHER_APPOINTMENT_ON = re.compile(
    rf"\b(an|my|the|our|ein|einen|meinen|mein|den)\s+(appointment|termin)\b[^.?!;]{{0,60}}?{_WHEN}", _I
)
ONLY_WHEN_CHANGED = frozenset(
    {"trip:next", OTHER_APPOINTMENT, *(f"{APPOINTMENT}{who}" for who in set(_APPOINTMENTS.values()))}
)

_RULES: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...] = (
    ("home:", tuple(re.compile(p, _I) for p in _RELATIVE_HOME)),
    ("work:", tuple(re.compile(p, _I) for p in _RELATIVE_WORK)),
    ("vehicle:", tuple(re.compile(p, _I) for p in _VEHICLE_OWNED)),
    ("routine:", tuple(re.compile(p, _I) for p in _ROUTINE)),
    (APPOINTMENT, tuple(re.compile(p, _I) for p in _APPOINTMENT_ON)),
)
_MINE: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...] = (
    ("home:me", tuple(re.compile(p, _I) for p in _HOME)),
    ("work:me", tuple(re.compile(p, _I) for p in _WORK)),
    ("vehicle:car", tuple(re.compile(p, _I) for p in _DRIVES)),
    ("trip:next", tuple(re.compile(p, _I) for p in _TRIP)),
)
# a name right after the relative ("my sister Lena", "meine Schwester Lena"): case matters here
_NAMED = re.compile(rf"(?i:\b{_POSSESSIVE}\s+{_WHICH}{_RELATIVE})\s+(?P<name>[A-ZÄÖÜ][a-zäöüß]+)\b")


# where a relative lives is a place: "lives in Porto", "moved to Leeds", "nach Zürich gezogen", or
# the reply to where ("my sister lives far away" gives none)
_PLACE = re.compile(r"(?i:\b(in|to|near|nach|bei))\s+[A-ZÄÖÜ]|(?i:\b(wo|where|which city|welche[rn]? stadt)\b)")


def _who(match: re.Match[str]) -> str:
    adj = (match.groupdict().get("adj") or "").casefold()
    rel = _RELATIVES[match.group("rel").casefold()]
    return f"{adj} {rel}".strip()


# a statement about the past or a second one of a kind gives no current value: "my sister lived
# in Porto back then", "I also have an old Fiat"
BYGONE = r"used to|previously|formerly|back then|früher|damals"  # words of the past (`plan_topics` too)
_NOT_CURRENT = re.compile(
    rf"\b({BYGONE}|lived|worked|drove|before that|wohnte|arbeitete|fuhr|"
    r"ehemals|too|as well|another|a second|zweites|zweiten|außerdem|zusätzlich|auch)\b|\balso\b(?!,)",
    _I,
)


def current(text: str) -> bool:
    """Whether `text` gives the current value of what it is about: neither the past ("used to",
    "damals") nor one more of a kind ("also", "another", "auch")."""
    return _NOT_CURRENT.search(text) is None


# a word every topic's patterns need one of (a prefix suffices): most statements have none, and
# recall reads the topics of every statement among its hits
_TRIGGER = re.compile(
    r"\b("
    + "|".join(
        sorted({re.escape(w) for w in (*_RELATIVES, *_VEHICLES, *_ACTIVITIES, *_APPOINTMENTS)}, key=len, reverse=True)
    )
    + r"|liv|moved|reloc|wohn|leb|gezogen|zieht|work|job|position|joined|started|arbeit|beruf|stelle|als|bei"
    + r"|i'm|i am|driv|fahr|fährst|trip|holiday|vacation|getaway|reise|urlaub|fly|flying|going|travel|heading"
    + r"|flieg|geht es|plan|appointment|termin)",
    _I,
)


@lru_cache(maxsize=4_096)  # consolidation reads each candidate's text once per pair
def topics(text: str) -> frozenset[str]:
    """The facts of the user's life that `text` gives a value for: "home:me", "work:me",
    "home:sister", "work:older brother", "vehicle:car", "routine:swimming", "appointment:dentist"."""
    if _TRIGGER.search(text) is None:
        return frozenset()
    found: set[str] = set()
    for prefix, patterns in _RULES:
        for pattern in patterns:
            for match in pattern.finditer(text):
                groups = match.groupdict()
                if groups.get("rel"):
                    if prefix != "home:" or _PLACE.search(text):
                        found.add(prefix + _who(match))
                elif groups.get("veh"):
                    found.add(prefix + _VEHICLES[groups["veh"].casefold()])
                elif groups.get("act"):
                    found.add(prefix + _ACTIVITIES[groups["act"].casefold()])
                elif groups.get("appt"):
                    found.add(prefix + _APPOINTMENTS[groups["appt"].casefold()])
    for topic, patterns in _MINE:
        if any(p.search(text) for p in patterns):
            found.add(topic)
    if not any(t.startswith(APPOINTMENT) for t in found) and _OTHER_APPOINTMENT_ON.search(text):
        found.add(OTHER_APPOINTMENT)  # "my dentist appointment" is the dentist's
    return frozenset(found)


def names(text: str) -> dict[str, str]:
    """The names `text` gives relatives ("my sister Lena" -> {"sister": "Lena"})."""
    return {_who(m): m.group("name") for m in _NAMED.finditer(text)}


def gives_value_of(text: str, profile: Sequence[str]) -> bool:
    """Whether `text` gives a value of a fact of the user's life, whatever else the sentence looks
    like ("From now on swimming is on Monday" is worded as a decision, "ab jetzt ist Yoga am
    Montag" too): the current value of one that has one value at a time (a home, a job, a car, a
    routine's day; not a plan, `ONLY_WHEN_CHANGED`), whether or not the profile holds it yet (a
    late event brings the old value after the new one), or a new value of one that an entry of
    their `profile` holds."""
    if current(text) and any(t not in ONLY_WHEN_CHANGED for t in topics(text)):
        return True
    return any(shared_topic(text, entry) for entry in profile)


def shared_topic(a: str, b: str) -> str | None:
    """The first fact of the user's life that both texts give a value for, about the same person."""
    return shared_fact(facts_of(a), facts_of(b))


def facts_of(text: str) -> frozenset[tuple[str, str]]:
    """`topics` with the relative's name where `text` gives one ("" otherwise): what `shared_fact`
    compares (recall keeps these per statement)."""
    named = names(text)
    return frozenset((t, named.get(t.split(":", 1)[1], "")) for t in topics(text))


def shared_fact(a: frozenset[tuple[str, str]], b: frozenset[tuple[str, str]]) -> str | None:
    """The topic two `facts_of` share about the same person (a name on one side only agrees)."""
    return next(
        (ta for ta, na in sorted(a) for tb, nb in sorted(b) if ta == tb and (not na or not nb or na == nb)), None
    )


def replaces(topic: str, *, changed: bool, current: bool) -> bool:
    """Whether a later statement of `topic` replaces the earlier value: it says that it changed, or
    it gives a current value of a fact that has one at a time (not of a plan: `ONLY_WHEN_CHANGED`)."""
    return changed or (current and topic not in ONLY_WHEN_CHANGED)
