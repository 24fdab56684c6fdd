"""What a user says about themselves, for the offline extraction's profile (R-5.2): pure rules.

A chat turn sends the user's identity and preferences with every message (the stable memory
block), so a request that needs a personal fact without naming it ("What should we organise
before our holiday?" for a dog, "Can you plan a surprise party?" for a partner's birthday)
is answered with it. An LLM's extraction writes these facts; without one, these patterns
find the usual ways to state them in English and German:

- family: a relative with what they do, where they live or a birthday ("my sister lives in
  Porto", "meine Frau hat am 14. März Geburtstag"), or how many there are ("I have two kids");
- pets and vehicles the user has ("our dog", "I drive a", "unser Kater", "ich fahre einen");
- routines, hobbies and lessons ("I go swimming every", "I'm learning", "ich übe", "ich lerne");
- home and work ("I live in", "working as", "ich wohne", "als Pflegerin beim").

Health is not here: an allergy or a diagnosis is sensitive, and the stable block never holds
sensitive memories (an LLM's extraction marks them so).

A relative alone is no fact ("I talked to my sister yesterday"): the family patterns want a
verb of living, working, moving, a name-giving or a birthday within a few words. German puts
the verb at the end of the clause, so its window is wider.

Four rules find such facts outside a plain statement: `premise`, the circumstances a question
gives ("Now that I'm a nurse at St. Mary's, how do I ...?", "I just traded in my old car for a
Tesla, so which insurance ...?"), `updates_profile`, a change of a fact the profile already
holds, however it is worded ("I moved my swimming to Monday"), `corrects_profile`, a no to the
assistant's check of such a fact ("Is your sister still living in Porto?" - "No, she moved to
Leeds."), and `asks_about_life`, the assistant's question that makes a short reply such a fact
("Which car do you drive?" - "A grey Ford Focus.").
`IDENTITY_PATTERNS` (name, role, employer) are the older identity rules, kept here beside them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from engram.domain import life_topics
from engram.domain.dates import MONTHS, WEEKDAYS_DE, WEEKDAYS_EN
from engram.domain.facts import CHECKED_WORDS, content_tokens, corrected_check, is_check, says_changed

_RELATIVES_EN = (
    r"(wife|husband|partner|boyfriend|girlfriend|fianc[ée]e?|sons?|daughters?|kids|children|mother|mom|mum|"
    r"father|dad|sisters?|brothers?|parents|grand(ma|pa|mother|father|parents)|aunt|uncle|cousins?|nieces?|"
    r"nephews?|in-laws)"
)
_RELATIVE_FACTS_EN = (
    r"(lives|living|live|moved|moving|moves|works|working|turns|born|called|named|studies|studying|married|"
    r"expecting|birthday|retired|started)"
)
_PETS_EN = (
    r"(dogs?|cats?|pupp(y|ies)|kittens?|rabbits?|bunn(y|ies)|hamsters?|guinea pigs?|parrots?|budgies?|horses?|"
    r"ponies|pony|tortoises?|pets?)"
)
_VEHICLES_EN = r"(car|motorbike|motorcycle|scooter|van|e-?bike|bicycle|bike|campervan)"
_ACTIVITIES_EN = (
    r"(swimming|running|jogging|climbing|bouldering|cycling|hiking|skiing|surfing|dancing|rowing|sailing|"
    r"to the gym|to yoga|to pilates|to choir|to band practice)"
)

_RELATIVES_DE = (
    r"(frau|mann|ehefrau|ehemann|partner(in)?|freund(in)?|verlobte[rn]?|sohn|tochter|kinder|mutter|mama|vater|"
    r"papa|schwester|bruder|eltern|oma|opa|gro(ß|ss)(mutter|vater|eltern)|tante|onkel|cousine?|nichte|neffe|"
    r"schwieger(eltern|mutter|vater))"
)
_RELATIVE_FACTS_DE = (
    r"(wohnt|lebt|gezogen|zieht|arbeitet|hei(ß|ss)t|geburtstag|wird|studiert|geboren|geheiratet|heiratet|"
    r"erwartet|angefangen)"
)
_PETS_DE = (
    r"(hund|hündin|welpen?|katzen?|kater|kätzchen|kaninchen|hasen?|hamster|meerschweinchen|wellensittich|"
    r"papagei|pferd|pony|schildkröte|haustier(e)?)"
)
_VEHICLES_DE = r"(auto|wagen|fahrrad|rad|e-bike|motorrad|roller|transporter|wohnmobil)"
_POSSESSIVE_DE = r"(mein|meine|meinen|meinem|meiner|unser|unsere|unseren|unserem|unserer)"

IDENTITY_PATTERNS: tuple[str, ...] = (
    r"\bmein name ist\b",
    r"\bich hei(ß|ss)e\b",
    r"\bich (bin|arbeite) (als|bei|im|in der)\b",
    r"\bich bin (zuständig|verantwortlich)\b",
    r"\bmy name is\b",
    r"\bi('m| am) (the|a|an) [a-z]+ (at|of|for|in)\b",
    r"\bi work (at|for|as|in)\b",
    r"\bi('m| am) responsible for\b",
)

PERSONAL_PATTERNS: tuple[str, ...] = (
    # family (English)
    rf"\bmy {_RELATIVES_EN}\b(\W+\w+){{0,3}}?\W+{_RELATIVE_FACTS_EN}\b",
    rf"\bmy {_RELATIVES_EN}('s)? (is|are) (now |currently )?(in|at|a|an)\b",
    rf"\bi have (a|an|one|two|three|four|five) (\w+ )?{_RELATIVES_EN}\b",
    r"\bi('m| am) (married|engaged|divorced|widowed|a (single )?(mother|father|mum|mom|dad|parent))\b",
    # pets and vehicles (English)
    rf"\b(my|our) (new |old |little )?{_PETS_EN}\b(?! peeve)",
    rf"\b(i|we) (adopted|got|have|rescued) (a|an|two|three) (\w+ )?{_PETS_EN}\b",
    r"\bi (drive|ride) (a|an)\b",
    rf"\b(my|our) (new |old )?{_VEHICLES_EN}\b",
    # routines, hobbies, lessons (English)
    r"\bi('ve| have)? ?(been )?tak(e|ing) \w+ (lessons|classes)\b",
    r"\bi('m| am|'ve been| have been) (now )?learning\b",
    r"\bi (practi[cs]e|play|train) (the |in |for |at )?\w+",
    rf"\bi (go|usually go|always go) {_ACTIVITIES_EN}\b",
    r"\b(my hobby|my hobbies|in my (free|spare) time)\b",
    r"\bi signed up for\b",
    # home and work (English)
    r"\b(i|we) live (in|near|on|with|outside)\b",
    r"\b(i|we) (just |recently )?moved (to|into)\b",
    r"\b(new job|started|joined|switched jobs)\b.*\b(as|at) (a |an |the )?\w",
    r"\b(working|to work) as\b",
    r"\bi('m| am) (now |currently )?(a|an|the) [a-z-]+ (at|of|for|in)\b",
    # family (German)
    rf"\b{_POSSESSIVE_DE} {_RELATIVES_DE}\b(\W+\w+){{0,6}}?\W+{_RELATIVE_FACTS_DE}\b",
    rf"\bich habe (eine?n?|zwei|drei|vier|fünf) (\w+ )?({_RELATIVES_DE}|söhne|töchter|geschwister|enkel)\b",
    r"\bich bin (verheiratet|verlobt|geschieden|verwitwet|alleinerziehend|mutter|vater)\b",
    # pets and vehicles (German)
    rf"\b{_POSSESSIVE_DE} (neue[nmrs]? |alte[nmrs]? |kleine[nmrs]? )?{_PETS_DE}\b",
    rf"\b(wir haben|ich habe) (einen|eine|ein|zwei|drei) (\w+ )?{_PETS_DE}\b",
    r"\bich fahre (einen|eine|ein)\b",
    rf"\b{_POSSESSIVE_DE} (neue[nmrs]? |alte[nmrs]? )?{_VEHICLES_DE}\b",
    rf"\b(ich habe|wir haben) (\w+ ){{0,2}}{_VEHICLES_DE} (\w+ ){{0,2}}(verkauft|gekauft|abgegeben)\b",
    # routines, hobbies, lessons (German)
    r"\bich (lerne|übe|spiele|trainiere)\b",
    r"\bich gehe (jeden|jede|immer|regelmäßig|einmal|zweimal|dreimal)\b",
    r"\bich (nehme|mache|besuche) (\w+ )?\w*(kurs|unterricht|stunden)\b",
    r"\bich habe mich\b.*\bangemeldet\b",
    r"\b(mein hobby|meine hobbys|in meiner freizeit)\b",
    # home and work (German)
    r"\b(ich wohne|wir wohnen|ich lebe|wir leben) (in|bei|am|auf|im|seit|jetzt|nahe)\b",
    r"\b(ich bin|wir sind) (\w+ )?nach \w+ gezogen\b",
    r"\bich (bin|arbeite) (jetzt |nun |inzwischen |seit \w+ )?(als|bei|beim|im|in der)\b",
    r"\bals \w+ (bei|beim|im|in der)\b",
    life_topics.WORK_AT_PLACE_DE,  # "als Lehrerin an der Lindenschule"
    # a subordinate clause puts the verb last ("seit ich Geige lerne", "wo ich in Leipzig wohne")
    r"\b(dass|seit|seitdem|wo|weil|da|nachdem|obwohl|wenn) (ich|wir) (\w+ ){1,4}?"
    r"(wohne|wohnen|lebe|leben|arbeite|lerne|übe|spiele|trainiere|fahre)\b",
    r"\bich bin (jetzt |nun |inzwischen )?\w+(in|er|or|ent|ant|ist) (bei|beim)\b",
    # after a leading adverbial the verb comes first ("seit Montag arbeite ich als", "jetzt fahre ich einen")
    r"\b(arbeite|wohne|lebe) ich (jetzt |nun |inzwischen |seit \w+ )?(als|bei|beim|in|im|am|an der)\b",
    r"\bfahre ich (jetzt |nun |inzwischen )?(einen|eine|ein)\b",
)

# a user's favourites and diet: preferences (the stable block holds those too)
PREFERENCE_PATTERNS: tuple[str, ...] = (
    r"\bmy (all-time )?favou?rite\b",
    r"\bi('m| am) (a )?(vegetarian|vegan|pescatarian)\b",
    r"\bmein(e|en|em)? lieblings\w*",
    r"\b(liebe|mag) ich\b",
    r"\bich (bin|esse) (vegetarisch|vegan|vegetarier(in)?|veganer(in)?)\b",
)


# a question that gives its premise states it: "Now that I'm a nurse at St. Mary's, how do I ...?"
# ("..., wo mein Bruder inzwischen in Salzburg lebt?": a trailing "wo" after a comma is "now that")
# "when"/"wenn" with a word that it is so now states one too ("..., wenn Schwimmen ab jetzt am
# Donnerstag ist?"); "if"/"falls" and a "when" without it are a supposition
_PREMISE = re.compile(
    r"\b(now that|since|given that|seeing that|jetzt,? wo|nun,? wo|jetzt,? da|seit(dem)?|da ich|da wir|nachdem)\b"
    r"|(?<=,\s)wo\b"
    r"|\b(when|wenn)\b(?=[^,?]*\b(now|from now on|these days|nowadays|jetzt|nun|inzwischen|mittlerweile)\b)",
    re.IGNORECASE,
)
# a question led by a statement: "I just traded in my old car for a Tesla, so which insurance ...?",
# "Ich habe das alte Auto verkauft, welche Versicherung passt jetzt?"
_ASKING = (
    r"(which|what|how|where|when|who|whom|why|should|shall|can|could|do|does|is|are|will|would|"
    r"welche[rsnm]?|was|wie|wo|wann|wer|warum|soll|sollte|kann|könnte|muss|passt|ist|gibt)"
)
_LEADING_STATEMENT = re.compile(
    rf"^(?!{_ASKING}\b)(?P<clause>[^,?]{{12,}}),\s+(so |and |but |also |und |dann |aber )?{_ASKING}\b", re.IGNORECASE
)
_PERSONAL = tuple(re.compile(p, re.IGNORECASE | re.UNICODE) for p in (*IDENTITY_PATTERNS, *PERSONAL_PATTERNS))


# the assistant asks about the user's life: their family, pets, vehicle, work, home or routine, in the
# second person ("Which city does your sister live in?", "What are you driving these days?", "Was
# machen Sie beruflich?"); a question about a date, a time or a choice ("When works for you?") is none
_ASKS_ABOUT_LIFE: tuple[str, ...] = (
    rf"\byour (new |old |little )?({_RELATIVES_EN}|{_PETS_EN}|{_VEHICLES_EN})\b",
    r"\b(do|are) you (still |usually |currently |normally |now )?(drive|driving|ride|riding|live|living|work|"
    r"working|exercise|exercising|train|training|learn|learning|play|playing|practi[cs]e|practi[cs]ing)\b",
    r"\bwhat do you do (for work|for a living)\b",
    rf"\b(ihr|ihre|ihren|ihrem|ihrer|dein|deine|deinen|deinem|deiner) (neue[nmrs]? |alte[nmrs]? )?"
    rf"({_RELATIVES_DE}|{_PETS_DE}|{_VEHICLES_DE})\b",
    r"\b(wohnen|leben|arbeiten|fahren|lernen|üben|spielen|trainieren) (sie|du)\b",
    r"\b(wohnst|lebst|arbeitest|fährst|lernst|übst|spielst|trainierst) du\b",
    r"\b(machen sie|machst du) (\w+ )?(beruflich|sport)\b",
)
_ASKS = tuple(re.compile(p, re.IGNORECASE | re.UNICODE) for p in _ASKS_ABOUT_LIFE)


def asks_about_life(question: str | None) -> bool:
    """Whether the assistant's question asks about the user's family, pets, vehicle, work, home or
    routine (this module's topics, in the second person): the short reply ("A grey Ford Focus.",
    "Leeds, since May.") is then such a fact, read with the question. A check of what the user
    said ("Is your sister still living in Porto?") is not: a yes repeats it, a no corrects it
    (`corrects_profile`)."""
    if not question or not question.rstrip().endswith("?") or is_check(question):
        return False
    return any(p.search(question) for p in _ASKS)


def premise(sentence: str) -> str | None:
    """The premise a question states, with its conjunction: users give their circumstances while
    they ask. A leading premise runs to the first comma ("Since we adopted a kitten, which plants
    should go?" -> "Since we adopted a kitten"), a trailing one to the end ("... desserts
    without kiwi, since I react badly to it?"), and a statement before the comma of a question is
    one too ("I just traded in my old car for a Tesla, so which insurance should I look at?"). None
    for a statement or a question without one."""
    if not sentence.rstrip().endswith("?"):
        return None
    if leading := _LEADING_STATEMENT.match(sentence.strip()):
        return leading.group("clause").strip()
    found = _PREMISE.search(sentence)
    if found is None or len(sentence[found.end() :].strip(" ,?")) < 8:
        return None
    text = sentence[found.start() :]
    if not sentence[: found.start()].strip(" ,"):
        text = text.split(",", 1)[0]
    return text.strip(" ,?")


# a question whether to do something, or for a value, takes none as given: "Should I move my swimming
# to Monday?", "Where does my sister live?", "On which day do I go swimming?"; nor does a supposition
# ("..., falls Schwimmen jetzt am Donnerstag ist?") or one about someone else's ("Is your sister ...?")
_NOT_GIVEN = re.compile(
    r"^\W*(should|shall|could|can|would|may|might|must|soll|sollte|sollten|kann|könnte|könnten|darf|muss|müssen)"
    r" (i|we|ich|wir)\b|\b(where|which|when|what day|what time|wo|wohin|woher|welche[rsmn]?|wann|an welchem"
    r"|you|your|du|dein\w*|if|in case|suppose|falls|wenn|angenommen)\b|(?-i:\bIhr\w*\b)",
    re.IGNORECASE,
)


def told_in_question(sentence: str) -> bool:
    """A question that takes the current value of a fact of the user's life as given ("How do I
    recover after my swimming every Monday morning?", "Is my blue Volkswagen Golf good enough for a
    long road trip?", "Wie frage ich als Produktdesigner bei Formwerk nach mehr Gehalt?"): a fact with
    one value at a time (`life_topics.gives_value_of`, not a plan), in a question that neither asks whether to change
    it nor asks for it (`_NOT_GIVEN`), so a question never retires the fact it asks about."""
    if not sentence.rstrip().endswith("?") or _NOT_GIVEN.search(sentence):
        return False
    return life_topics.gives_value_of(sentence, ())


def personal(text: str) -> bool:
    """Whether `text` tells something of the user's identity or life (this module's patterns)."""
    return any(p.search(text) for p in _PERSONAL)


# when something happens is no topic: "I moved the dentist to Monday morning" changes no routine
_WHEN = content_tokens(
    f"{' '.join(MONTHS)} {' '.join(WEEKDAYS_EN)} {' '.join(WEEKDAYS_DE)} morning mornings evening evenings night nights"
    " day days week weeks month months year years today tomorrow time morgen abend abends nacht tag tage woche"
    " wochen monat monate jahr jahre heute zeit früh"
)


def updates_profile(sentence: str, profile: Sequence[str]) -> bool:
    """A statement that says something changed and shares a word (not a time) with an entry of the
    user's profile: that fact changed ("I moved my swimming to Monday mornings" after "I go
    swimming every Friday morning"), so the new value belongs in the profile too, however it is
    phrased."""
    if not profile or sentence.rstrip().endswith("?") or not says_changed(sentence):
        return False
    said = content_tokens(sentence) - _WHEN
    return any(said & content_tokens(entry) for entry in profile)


def corrects_profile(question: str | None, reply: str, profile: Sequence[str]) -> bool:
    """A no to the assistant's check of a fact the profile holds ("Is your sister still living in
    Porto?" - "No, she moved to Leeds a while ago."): the reply, read with the check, is the new
    value of that fact (`facts.corrected_check`, `CHECKED_WORDS` of the check's words in an
    entry). Its own words may share none with the entry, so `updates_profile` misses it."""
    if not question or not profile:
        return False
    checked = corrected_check(question, reply)
    return bool(checked) and any(len(checked & content_tokens(entry)) >= CHECKED_WORDS for entry in profile)
