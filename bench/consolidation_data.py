"""The generated memory of `bench.consolidation`: German and English, from a seed.

Per language one tenant with a sales user's private memory and the tenant-wide CRM records:
customers (city, contact person, payment terms), projects (deadline, budget, lead),
preferences of people (answer style, meeting time, channel) and decisions (which technology
for which service). Every statement is one observation; some carry `k=v` facts (CRM records,
extraction with facts), the rest are free text (marks, chat extraction without facts). Sources
and ages vary (a CRM record, the user, an agent's inference; minutes to months old).

What is planted, with its gold label:

- **duplicates**: the same statement two or three times in other words (a paraphrase pool per
  kind; with facts, the fact sets may be subsets of each other) -> must merge;
- **ordered updates**: the same attribute with a new value days later (with facts, or in free
  text saying that it changed) -> the newer must supersede the older;
- **conflicts**: the same attribute with two values and no clear order (recorded minutes apart,
  or an agent's later guess against a person's verified statement) -> must be linked;
- **look-alikes**: the same sentence about another customer, project, person, service or
  amount -> must not merge (both are true);
- **singles**: unique statements, the background.

Questions: one per fact that did not change (singles, duplicates, look-alikes: is it still
found in the top 10?) and one per update (is the outdated value ranked above the current one,
or are both in the top 10?).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

Lang = Literal["en", "de"]
Kind = Literal["duplicate", "update", "conflict", "lookalike", "single"]


@dataclass
class Item:
    label: str  # unique within the data set
    lang: Lang
    title: str
    narrative: str = ""
    facts: list[str] = field(default_factory=list)
    type: str = "fact"
    tenant_wide: bool = False  # a CRM record (public, user_id NULL) instead of the user's private memory
    source: Literal["user", "agent", "system"] = "user"
    verified: bool = True
    age_minutes: float = 60 * 24 * 20  # how long ago it was recorded
    kind: Kind = "single"
    group: str = ""  # items of one duplicate group, update pair or conflict pair share it
    role: str = ""  # update: "old"/"new"


@dataclass
class Question:
    lang: Lang
    text: str
    gold: list[str]  # labels that answer it (any of them)
    kind: Literal["unchanged", "update"]
    stale: list[str] = field(default_factory=list)  # update: the outdated statement(s)


@dataclass
class DataSet:
    items: list[Item]
    questions: list[Question]


EN_FIRMS = [
    "Acme",
    "Brightwater",
    "Cobalt",
    "Dunmore",
    "Everline",
    "Foxglove",
    "Granite",
    "Harbor",
    "Ironwood",
    "Juniper",
    "Kestrel",
    "Lakeside",
    "Maple",
    "Northwind",
    "Oakridge",
    "Pinecrest",
    "Quarry",
    "Redwood",
    "Silverline",
    "Thistle",
]
EN_TRADES = [
    "Logistics",
    "Foods",
    "Robotics",
    "Textiles",
    "Energy",
    "Pharma",
    "Analytics",
    "Shipping",
    "Tools",
    "Media",
]
DE_FIRMS = [
    "Müller",
    "Becker",
    "Schneider",
    "Fischer",
    "Weber",
    "Wagner",
    "Hoffmann",
    "Schäfer",
    "Koch",
    "Bauer",
    "Richter",
    "Klein",
    "Wolf",
    "Schröder",
    "Neumann",
    "Schwarz",
    "Zimmermann",
    "Braun",
    "Krüger",
    "Hartmann",
]
DE_TRADES = ["Maschinenbau", "Elektro", "Logistik", "Feinkost", "Werkzeuge", "Bau", "Textil", "Medizintechnik", "Druck"]
EN_CITIES = ["Boston", "Denver", "Seattle", "Austin", "Chicago", "Portland", "Atlanta", "Phoenix", "Detroit", "Miami"]
DE_CITIES = ["Stuttgart", "Hamburg", "München", "Köln", "Leipzig", "Bremen", "Dresden", "Hannover", "Nürnberg", "Kiel"]
EN_PEOPLE = [
    "Alice",
    "Brian",
    "Chloe",
    "Daniel",
    "Emma",
    "Frank",
    "Grace",
    "Henry",
    "Isla",
    "Jack",
    "Karen",
    "Liam",
    "Mia",
    "Noah",
    "Olivia",
    "Peter",
    "Quinn",
    "Ruby",
    "Sam",
    "Tina",
]
DE_PEOPLE = [
    "Anna",
    "Bernd",
    "Clara",
    "Dieter",
    "Eva",
    "Florian",
    "Greta",
    "Hannes",
    "Ines",
    "Jonas",
    "Katrin",
    "Lukas",
    "Marie",
    "Niklas",
    "Olga",
    "Paul",
    "Rita",
    "Sven",
    "Tanja",
    "Uwe",
]
EN_CONTACTS = ["Mr Carter", "Ms Lopez", "Mr Nguyen", "Ms Patel", "Mr Okafor", "Ms Rossi", "Mr Smith", "Ms Walsh"]
DE_CONTACTS = ["Herr Schmidt", "Frau Weber", "Herr Meyer", "Frau Schulz", "Herr Lange", "Frau Vogel", "Herr Keller"]
PROJECTS = [
    "Apollo",
    "Borealis",
    "Cygnus",
    "Delphi",
    "Equinox",
    "Fjord",
    "Gemini",
    "Helios",
    "Ikarus",
    "Juno",
    "Kepler",
    "Lyra",
    "Mistral",
    "Nova",
    "Orion",
    "Pegasus",
    "Quasar",
    "Rigel",
    "Sirius",
    "Titan",
]
SERVICES_EN = [
    "billing",
    "reporting",
    "search",
    "checkout",
    "invoicing",
    "inventory",
    "notification",
    "login",
    "shipping",
    "pricing",
    "payroll",
    "scheduling",
    "analytics",
    "archive",
    "catalog",
    "support",
    "recommendation",
    "audit",
]
SERVICES_DE = [
    "Abrechnung",
    "Berichtswesen",
    "Suche",
    "Kasse",
    "Rechnungsstellung",
    "Lagerverwaltung",
    "Anmeldung",
    "Versand",
    "Preisfindung",
    "Lohnbuchhaltung",
    "Terminplanung",
    "Auswertung",
    "Archiv",
    "Katalog",
    "Kundendienst",
    "Prüfung",
    "Empfehlungen",
    "Benachrichtigung",
]
TECH = ["PostgreSQL", "Kafka", "Redis", "Elasticsearch", "RabbitMQ", "MongoDB", "ClickHouse"]
MONTHS_EN = ["March", "April", "May", "June", "July", "September", "October", "November"]
MONTHS_DE = ["März", "April", "Mai", "Juni", "Juli", "September", "Oktober", "November"]


# ---- paraphrase pools: (title, narrative) templates per kind and language -----------------------

CITY = {
    "en": [
        ("{c} is based in {city}", "The customer {c} has its head office in {city}."),
        ("{c} has its office in {city}", "{c} runs its business from {city}."),
        ("Customer {c} sits in {city}", "Our customer {c} is located in {city}."),
    ],
    "de": [
        ("{c} hat seinen Sitz in {city}", "Der Kunde {c} hat seinen Hauptsitz in {city}."),
        ("Der Kunde {c} sitzt in {city}", "{c} ist in {city} ansässig."),
        ("{c} ist in {city} ansässig", "Unser Kunde {c} befindet sich in {city}."),
    ],
}
CITY_MOVED = {
    "en": ("{c} moved to {city}", "The customer {c} has now moved its head office to {city}."),
    "de": ("{c} ist nach {city} umgezogen", "Der Kunde {c} hat seinen Sitz jetzt in {city}."),
}
CONTACT = {
    "en": [
        ("Our contact at {c} is {p}", "For {c}, talk to {p}."),
        ("{p} is the contact person at {c}", "{c} is handled by {p} on their side."),
    ],
    "de": [
        ("Ansprechpartner bei {c} ist {p}", "Bei {c} wenden wir uns an {p}."),
        ("{p} ist unser Kontakt bei {c}", "Für {c} ist {p} zuständig."),
    ],
}
PAYMENT = {
    "en": [
        ("{c} pays invoices within {n} days", "Payment terms for {c}: {n} days net."),
        ("Payment terms of {c} are {n} days", "{c} settles its invoices {n} days after receipt."),
    ],
    "de": [
        ("{c} zahlt Rechnungen innerhalb von {n} Tagen", "Zahlungsziel für {c}: {n} Tage netto."),
        ("Das Zahlungsziel von {c} beträgt {n} Tage", "{c} begleicht Rechnungen {n} Tage nach Eingang."),
    ],
}
DEADLINE = {
    "en": [
        ("Project {j} is due on {d}", "The deadline of project {j} is {d}."),
        ("{j} must be delivered by {d}", "We have to hand over project {j} by {d}."),
        ("Deadline for {j}: {d}", "Project {j} ends on {d}."),
    ],
    "de": [
        ("Projekt {j} ist am {d} fällig", "Die Deadline von Projekt {j} ist der {d}."),
        ("{j} muss bis zum {d} geliefert werden", "Wir müssen Projekt {j} bis zum {d} übergeben."),
        ("Abgabetermin für {j}: {d}", "Projekt {j} endet am {d}."),
    ],
}
DEADLINE_MOVED = {
    "en": ("The {j} deadline moved to {d}", "Project {j} was postponed: it is now due on {d}."),
    "de": ("Die Deadline von {j} wurde auf den {d} verschoben", "Projekt {j} ist jetzt erst am {d} fällig."),
}
BUDGET = {
    "en": [
        ("Project {j} has a budget of {n} EUR", "The budget approved for {j} is {n} EUR."),
        ("{j} budget: {n} EUR", "We may spend {n} EUR on project {j}."),
    ],
    "de": [
        ("Projekt {j} hat ein Budget von {n} EUR", "Das freigegebene Budget für {j} beträgt {n} EUR."),
        ("Budget für {j}: {n} EUR", "Für Projekt {j} stehen {n} EUR zur Verfügung."),
    ],
}
STYLE = {
    "en": [
        ("{p} prefers short answers", "{p} wants answers kept brief and to the point."),
        ("{p} likes brief replies", "Keep replies to {p} short."),
        ("Answers for {p} should be concise", "{p} does not like long answers."),
    ],
    "de": [
        ("{p} bevorzugt kurze Antworten", "{p} möchte knappe Antworten ohne Umschweife."),
        ("{p} mag knappe Antworten", "Antworten an {p} bitte kurz halten."),
        ("Antworten für {p} sollen kurz sein", "{p} mag keine langen Antworten."),
    ],
}
STYLE_CHANGED = {
    "en": ("{p} now prefers detailed answers", "{p} no longer wants short replies: explain things in depth."),
    "de": ("{p} möchte jetzt ausführliche Antworten", "{p} will nicht mehr nur kurze Antworten, sondern Details."),
}
MEETING = {
    "en": [
        ("{p} prefers meetings at {h} o'clock", "Schedule meetings with {p} at {h}:00."),
        ("Meetings with {p} best at {h}:00", "{p} likes to meet at {h} o'clock."),
    ],
    "de": [
        ("{p} bevorzugt Termine um {h} Uhr", "Besprechungen mit {p} am besten um {h}:00 legen."),
        ("Termine mit {p} am liebsten um {h}:00", "{p} trifft sich gern um {h} Uhr."),
    ],
}
DECISION = {
    "en": [
        ("We decided to use {t} for the {s} service", "The team agreed on {t} as the store of the {s} service."),
        ("The {s} service will run on {t}", "Decision: {t} for {s}."),
        ("{t} was chosen for the {s} service", "After the review we picked {t} for the {s} service."),
    ],
    "de": [
        (
            "Wir haben entschieden, {t} für den Dienst {s} zu nutzen",
            "Das Team hat sich für {t} im Dienst {s} entschieden.",
        ),
        ("Der Dienst {s} läuft künftig auf {t}", "Entscheidung: {t} für {s}."),
        ("Für den Dienst {s} wurde {t} gewählt", "Nach der Prüfung haben wir {t} für den Dienst {s} ausgewählt."),
    ],
}


def _date(rng: random.Random, lang: Lang) -> tuple[str, int, int]:
    day, month = rng.randint(1, 28), rng.randrange(len(MONTHS_EN))
    text = f"{day} {MONTHS_EN[month]} 2026" if lang == "en" else f"{day}. {MONTHS_DE[month]} 2026"
    return text, day, month


class Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.items: list[Item] = []
        self.questions: list[Question] = []
        self.n = 0

    def item(self, lang: Lang, title: str, narrative: str, **kw: object) -> Item:
        self.n += 1
        it = Item(f"{lang}-{self.n:04d}", lang, title, narrative, **kw)  # type: ignore[arg-type]
        self.items.append(it)
        return it

    def ask(self, lang: Lang, text: str, gold: list[Item], kind: str = "unchanged", stale: list[Item] = ()) -> None:  # type: ignore[assignment]
        self.questions.append(Question(lang, text, [g.label for g in gold], kind, [s.label for s in stale]))  # type: ignore[arg-type]

    def age(self, low_days: float, high_days: float) -> float:
        return self.rng.uniform(low_days, high_days) * 24 * 60

    # ---- one language ----------------------------------------------------------------------------

    def language(self, lang: Lang, scale: int) -> None:
        rng = self.rng
        firms, trades = (EN_FIRMS, EN_TRADES) if lang == "en" else (DE_FIRMS, DE_TRADES)
        customers = [f"{f} {t}" for f in firms for t in trades]
        people = list(EN_PEOPLE if lang == "en" else DE_PEOPLE)
        projects = list(PROJECTS)
        rng.shuffle(customers)
        rng.shuffle(people)
        rng.shuffle(projects)
        cities = EN_CITIES if lang == "en" else DE_CITIES
        contacts = EN_CONTACTS if lang == "en" else DE_CONTACTS
        services = SERVICES_EN if lang == "en" else SERVICES_DE
        q = QUESTIONS[lang]
        for i, c in enumerate(customers[: 4 * scale]):
            cid = f"{1000 + i + (0 if lang == 'en' else 500)}"
            city = rng.choice(cities)
            plan = i % 4
            structured = rng.random() < 0.6
            if plan == 0:  # duplicates of the customer's city
                chosen = rng.sample(CITY[lang], rng.choice((2, 3)))
                group = []
                for k, (title, narrative) in enumerate(chosen):
                    facts = [f"customer_id={cid}", f"city={city}"] + ([f"customer_name={c}"] if k else [])
                    group.append(
                        self.item(
                            lang,
                            title.format(c=c, city=city),
                            narrative.format(c=c, city=city),
                            facts=facts if structured else [],
                            kind="duplicate",
                            group=f"dup-city-{lang}-{i}",
                            age_minutes=self.age(3, 60),
                            source=rng.choice(("user", "system")),
                            verified=True,
                        )
                    )
                self.ask(lang, q["city"].format(c=c), group)
            elif plan == 1:  # ordered update of the city
                new_city = rng.choice([x for x in cities if x != city])
                title, narrative = rng.choice(CITY[lang])
                old = self.item(
                    lang,
                    title.format(c=c, city=city),
                    narrative.format(c=c, city=city),
                    facts=[f"customer_id={cid}", f"city={city}"] if structured else [],
                    kind="update",
                    group=f"upd-city-{lang}-{i}",
                    role="old",
                    age_minutes=self.age(40, 90),
                    source="system" if structured else "user",
                )
                title, narrative = CITY_MOVED[lang] if not structured or rng.random() < 0.5 else rng.choice(CITY[lang])
                new = self.item(
                    lang,
                    title.format(c=c, city=new_city),
                    narrative.format(c=c, city=new_city),
                    facts=[f"customer_id={cid}", f"city={new_city}"] if structured else [],
                    kind="update",
                    group=f"upd-city-{lang}-{i}",
                    role="new",
                    age_minutes=self.age(1, 20),
                    source="system" if structured else "user",
                )
                self.ask(lang, q["city"].format(c=c), [new], "update", [old])
            elif plan == 2:  # a conflict about the contact person
                a, b = rng.sample(contacts, 2)
                ta, na = rng.choice(CONTACT[lang])
                tb, nb = rng.choice(CONTACT[lang])
                first = self.item(
                    lang,
                    ta.format(c=c, p=a),
                    na.format(c=c, p=a),
                    facts=[f"customer_id={cid}", f"contact={a}"],
                    kind="conflict",
                    group=f"conf-{lang}-{i}",
                    age_minutes=self.age(10, 30),
                    source="user",
                    verified=True,
                )
                guess = rng.random() < 0.5  # an agent's later, unverified guess; else two statements at once
                self.item(
                    lang,
                    tb.format(c=c, p=b),
                    nb.format(c=c, p=b),
                    facts=[f"customer_id={cid}", f"contact={b}"],
                    kind="conflict",
                    group=f"conf-{lang}-{i}",
                    age_minutes=self.age(1, 5) if guess else first.age_minutes - rng.uniform(1, 5),
                    source="agent" if guess else "user",
                    verified=not guess,
                )
            else:  # look-alikes: two customers, the same payment terms sentence
                other = customers[-1 - i]  # never one of the customers above
                oid = f"{1900 + i + (0 if lang == 'en' else 50)}"
                days = rng.choice((14, 30, 45, 60))
                title, narrative = rng.choice(PAYMENT[lang])
                pair = []
                for name, ident in ((c, cid), (other, oid)):
                    pair.append(
                        self.item(
                            lang,
                            title.format(c=name, n=days),
                            narrative.format(c=name, n=days),
                            facts=[f"customer_id={ident}", f"payment_days={days}"] if structured else [],
                            kind="lookalike",
                            group=f"look-pay-{lang}-{i}",
                            age_minutes=self.age(2, 60),
                            tenant_wide=False,
                        )
                    )
                for it, name in zip(pair, (c, other), strict=True):
                    self.ask(lang, q["payment"].format(c=name), [it])
        self.projects(lang, projects[: 2 * scale], projects[2 * scale :], q)
        self.people(lang, people[: 2 * scale], q)
        self.decisions(lang, services, q, scale)

    def projects(self, lang: Lang, projects: list[str], spare: list[str], q: dict[str, str]) -> None:
        rng = self.rng
        for i, j in enumerate(projects):
            d, _day, _month = _date(rng, lang)
            if i % 3 == 0:  # duplicates of the deadline (free text)
                group = [
                    self.item(
                        lang, t.format(j=j, d=d), n.format(j=j, d=d), kind="duplicate", group=f"dup-dl-{lang}-{i}"
                    )
                    for t, n in rng.sample(DEADLINE[lang], 2)
                ]
                for it in group:
                    it.age_minutes = self.age(2, 50)
                self.ask(lang, q["deadline"].format(j=j), group)
            elif i % 3 == 1:  # the deadline moved (free text, says so)
                later, _, _ = _date(rng, lang)
                while later == d:
                    later, _, _ = _date(rng, lang)
                t, n = rng.choice(DEADLINE[lang])
                old = self.item(
                    lang,
                    t.format(j=j, d=d),
                    n.format(j=j, d=d),
                    kind="update",
                    group=f"upd-dl-{lang}-{i}",
                    role="old",
                    age_minutes=self.age(30, 60),
                )
                t, n = DEADLINE_MOVED[lang]
                new = self.item(
                    lang,
                    t.format(j=j, d=later),
                    n.format(j=j, d=later),
                    kind="update",
                    group=f"upd-dl-{lang}-{i}",
                    role="new",
                    age_minutes=self.age(1, 10),
                )
                self.ask(lang, q["deadline"].format(j=j), [new], "update", [old])
            else:  # look-alike budgets: ten times the amount is another project's
                amount = rng.choice((20_000, 50_000, 80_000))
                other = spare.pop()  # a project nothing else is said about
                t, n = rng.choice(BUDGET[lang])
                shown = [
                    f"{amount:,}".replace(",", "." if lang == "de" else ","),
                    f"{amount * 10:,}".replace(",", "." if lang == "de" else ","),
                ]
                pair = [
                    self.item(
                        lang,
                        t.format(j=name, n=value),
                        n.format(j=name, n=value),
                        kind="lookalike",
                        group=f"look-bud-{lang}-{i}",
                        age_minutes=self.age(5, 60),
                    )
                    for name, value in ((j, shown[0]), (other, shown[1]))
                ]
                for it, name in zip(pair, (j, other), strict=True):
                    self.ask(lang, q["budget"].format(j=name), [it])

    def people(self, lang: Lang, people: list[str], q: dict[str, str]) -> None:
        rng = self.rng
        for i, p in enumerate(people):
            if i % 3 == 0:  # duplicates of the answer style
                group = [
                    self.item(
                        lang,
                        t.format(p=p),
                        n.format(p=p),
                        type="preference",
                        kind="duplicate",
                        group=f"dup-style-{lang}-{i}",
                        age_minutes=self.age(2, 80),
                        source=rng.choice(("user", "agent")),
                        verified=rng.random() < 0.5,
                    )
                    for t, n in rng.sample(STYLE[lang], rng.choice((2, 3)))
                ]
                self.ask(lang, q["style"].format(p=p), group)
            elif i % 3 == 1:  # the style changed (free text, says so, no value an offline rule can compare)
                t, n = rng.choice(STYLE[lang])
                old = self.item(
                    lang,
                    t.format(p=p),
                    n.format(p=p),
                    type="preference",
                    kind="update",
                    group=f"upd-style-{lang}-{i}",
                    role="old",
                    age_minutes=self.age(30, 90),
                )
                t, n = STYLE_CHANGED[lang]
                new = self.item(
                    lang,
                    t.format(p=p),
                    n.format(p=p),
                    type="preference",
                    kind="update",
                    group=f"upd-style-{lang}-{i}",
                    role="new",
                    age_minutes=self.age(1, 10),
                )
                self.ask(lang, q["style"].format(p=p), [new], "update", [old])
            else:  # look-alikes: two people, the same meeting time
                other = people[(i + 1) % len(people)]
                h = rng.choice((8, 9, 10, 14, 16))
                t, n = rng.choice(MEETING[lang])
                pair = [
                    self.item(
                        lang,
                        t.format(p=name, h=h),
                        n.format(p=name, h=h),
                        type="preference",
                        kind="lookalike",
                        group=f"look-meet-{lang}-{i}",
                        age_minutes=self.age(2, 60),
                    )
                    for name in (p, other)
                ]
                for it, name in zip(pair, (p, other), strict=True):
                    self.ask(lang, q["meeting"].format(p=name), [it])

    def decisions(self, lang: Lang, services: list[str], q: dict[str, str], scale: int) -> None:
        rng = self.rng
        pool = list(services)
        rng.shuffle(pool)
        for i in range(2 * scale):
            s, other = pool.pop(), pool[-1] if i % 2 else ""
            if i % 2:
                pool.pop()
            t = rng.choice(TECH)
            if i % 2 == 0:  # duplicates of a decision
                group = [
                    self.item(
                        lang,
                        ti.format(t=t, s=s),
                        na.format(t=t, s=s),
                        type="decision",
                        kind="duplicate",
                        group=f"dup-dec-{lang}-{i}",
                        age_minutes=self.age(2, 40),
                    )
                    for ti, na in rng.sample(DECISION[lang], 2)
                ]
                self.ask(lang, q["decision"].format(s=s), group)
            else:  # look-alikes: the same technology for two services
                ti, na = rng.choice(DECISION[lang])
                pair = [
                    self.item(
                        lang,
                        ti.format(t=t, s=name),
                        na.format(t=t, s=name),
                        type="decision",
                        kind="lookalike",
                        group=f"look-dec-{lang}-{i}",
                        age_minutes=self.age(2, 40),
                    )
                    for name in (s, other)
                ]
                for it, name in zip(pair, (s, other), strict=True):
                    self.ask(lang, q["decision"].format(s=name), [it])


QUESTIONS: dict[Lang, dict[str, str]] = {
    "en": {
        "city": "Where is the office of {c}?",
        "payment": "What are the payment terms of {c}?",
        "deadline": "When is project {j} due?",
        "budget": "How much budget does project {j} have?",
        "style": "How does {p} want answers?",
        "meeting": "When does {p} like to meet?",
        "decision": "Which technology does the {s} service use?",
    },
    "de": {
        "city": "Wo ist der Sitz von {c}?",
        "payment": "Welches Zahlungsziel hat {c}?",
        "deadline": "Wann ist Projekt {j} fällig?",
        "budget": "Wie viel Budget hat Projekt {j}?",
        "style": "Wie möchte {p} Antworten haben?",
        "meeting": "Wann trifft sich {p} am liebsten?",
        "decision": "Welche Technik nutzt der Dienst {s}?",
    },
}


def generate(seed: int, scale: int = 6) -> DataSet:
    """`scale` 6: about 140 observations per language (4 x scale customers, 2 x scale projects,
    people and decisions; at most 8)."""
    g = Generator(seed)
    for lang in ("en", "de"):
        g.language(lang, scale)  # type: ignore[arg-type]
    return DataSet(g.items, g.questions)
