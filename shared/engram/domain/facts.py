"""What consolidation reads out of an observation (R-15.1): `k=v` facts per entity, the words
of its text, the values it names (numbers, dates, names) and whether it says something changed.
Pure, German and English.

- A fact `customer_id=1001` or `city: Stuttgart` is a (key, value) pair; keys are folded
  (`Customer ID` -> `customer_id`), values normalised (case, spaces, thousands separators).
- Identity keys say *which* entity an observation is about: strong ones are ids and numbers
  (`*_id`, `*_number`, `*_nr`, `kundennummer`, ...), weak ones are names (`name`, `*_name`).
  Every other key is an attribute of that entity (`city`, `contact`, `deadline`, ...).
- Anchors are the values a text names: numbers (with units and dates folded to digits), and
  names (capitalised words inside a sentence, identifiers with digits or inner capitals). Two
  texts that name different values are not the same statement, however close their vectors.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

from engram.domain.dates import mentioned_dates
from engram.domain.hashing import normalise_text
from engram.domain.observation import Observation

_FACT_EQ = re.compile(r"^\s*([^=\n]{1,80}?)\s*=\s*(.+?)\s*$", re.S)
_FACT_COLON = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]{1,40})\s*:\s+(.+?)\s*$", re.S)
_KEY_JUNK = re.compile(r"[^0-9a-zäöüß]+")
_STRONG_SUFFIXES = ("_id", "_number", "_nr", "_no", "_nummer", "_code", "_key")
_STRONG_KEYS = frozenset({"id", "number", "nummer", "kundennummer", "projektnummer", "auftragsnummer", "iban"})
_WEAK_KEYS = frozenset({"name", "customer", "kunde", "project", "projekt", "person", "company", "firma"})

_WORD = re.compile(r"[0-9A-Za-zÀ-ÖØ-öø-ÿ][0-9A-Za-zÀ-ÖØ-öø-ÿ'’\-]*")
_NUMBER = re.compile(r"\d+(?:[.,'’]\d+)*")
_SENTENCE_END = re.compile(r"[.!?:;\n]\s*$")

STOPWORDS: frozenset[str] = frozenset(
    """
    a an the and or but of to in on at by for with from as is are was were be been being it its this that
    these those there here he she they them his her their our we us you your i me my mine not no yes do does
    did has have had will would shall should can could may might must than then so such about into over
    after before also just very too more most much many any some all each every which who whom whose what
    when where why how again per via up down out off only own same other
    der die das den dem des ein eine einer eines einem einen und oder aber von zu zum zur im in am an auf
    bei mit für aus als ist sind war waren sein wird werden wurde wurden hat haben hatte es er sie wir ihr
    ich du mich mir uns euch ihm ihn ihnen dies diese dieser dieses jene nicht kein keine ja nein so auch
    sehr noch nur schon dass daß wie wo was wer wann warum über unter nach vor seit bis um durch gegen ohne
    man sich sein seine ihre unser unsere euer dann denn weil wenn ob doch mal hier dort da alle jede jeder
    """.split()
)

# words that say a statement replaces an earlier one (an ordered update, R-15.1)
CHANGE_MARKERS: tuple[str, ...] = (
    "now",
    "no longer",
    "not anymore",
    "any more",
    "anymore",
    "changed",
    "changes to",
    "moved",
    "postponed",
    "rescheduled",
    "replaced",
    "replaces",
    "switched",
    "instead",
    "from now on",
    "as of today",
    "updated",
    "new contact",
    "has left",
    "took over",
    "cancelled",
    "canceled",
    "called off",
    "sold",
    "traded in",
    "jetzt",
    "nun",
    "nicht mehr",
    "geändert",
    "verschoben",
    "verlegt",
    "ersetzt",
    "gewechselt",
    "stattdessen",
    "ab sofort",
    "ab jetzt",
    "neuer ansprechpartner",
    "neue ansprechpartnerin",
    "übernommen",
    "umgezogen",
    "aktualisiert",
    "storniert",
    "abgesagt",
    "verkauft",
    "umgeplant",
    # a change someone had to make ("I had to reschedule the dentist", "den Termin verlegen musste")
    "had to reschedule",
    "had to move",
    "verlegen musste",
    "verlegen müssen",
    "verschieben musste",
    "verschieben müssen",
)
_MARKER = re.compile(r"(?<![\wäöüß])(" + "|".join(re.escape(m) for m in CHANGE_MARKERS) + r")(?![\wäöüß])", re.I)
_MARKER_WORDS = frozenset(w for m in CHANGE_MARKERS for w in m.split())


def fold_key(key: str) -> str:
    """`Customer ID` -> `customer_id`, `Kunden-Nr.` -> `kunden_nr`."""
    folded = unicodedata.normalize("NFKC", key).casefold().strip()
    return _KEY_JUNK.sub("_", folded).strip("_")


def fold_value(value: str) -> str:
    """Case, spaces and trailing punctuation folded; `50.000` and `50,000` -> `50000`."""
    text = normalise_text(value).rstrip(".;,")
    return re.sub(r"(?<=\d)[.,'’](?=\d{3}\b)", "", text)


def parse_fact(fact: str) -> tuple[str, str] | None:
    """`k=v` (any key) or `key: value` (an identifier-like key); None for a free statement."""
    match = _FACT_EQ.match(fact) or _FACT_COLON.match(fact)
    if match is None:
        return None
    key, value = fold_key(match.group(1)), fold_value(match.group(2))
    if not key or not value or len(key) > 60:
        return None
    return key, value


def identity_strength(key: str) -> int:
    """2: an id or number (which entity, for sure); 1: a name; 0: an attribute."""
    if key in _STRONG_KEYS or key.endswith(_STRONG_SUFFIXES):
        return 2
    if key in _WEAK_KEYS or key.endswith("_name"):
        return 1
    return 0


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def content_words(text: str) -> dict[str, str]:
    """Folded words without stop words and change markers, crudely stemmed (English and German
    plural and verb endings), for comparing what two texts say: stem -> the word as written."""
    found: dict[str, str] = {}
    for word in words(text):
        w = word.casefold().strip("'’-")
        if len(w) < 2 or w in STOPWORDS or w in _MARKER_WORDS:
            continue
        found.setdefault(stem(w), word)
    return found


def content_tokens(text: str) -> frozenset[str]:
    return frozenset(content_words(text))


def stem(word: str) -> str:
    """A crude English and German stem (plural and verb endings) of a folded word."""
    if word.isdigit() or len(word) <= 4:
        return word
    for suffix in ("ungen", "ung", "en", "es", "er", "ed", "s", "e", "n"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def number_anchors(text: str) -> frozenset[str]:
    """Numbers and full dates a text names, folded (`50.000` = `50000`, `3. Juni 2023` = `2023-06-03`)."""
    found = {fold_value(n) for n in _NUMBER.findall(text)}
    found.update(d.isoformat() for d in mentioned_dates(text))
    return frozenset(found)


def name_anchors(text: str) -> frozenset[str]:
    """Names a text uses: identifiers (letters with digits or inner capitals: `PRJ-42`, `iPhone`),
    and in English text capitalised words that do not start a sentence. (German capitalises
    every noun, so there only identifiers count; its names are compared by `minimal_pair`.)"""
    found: set[str] = set()
    english = _looks_english(text)
    for match in _WORD.finditer(text):
        w = match.group(0)
        if any(c.isdigit() for c in w) and any(c.isalpha() for c in w):
            found.add(w.casefold())
        elif any(c.isupper() for c in w[1:]) and any(c.islower() for c in w):
            found.add(w.casefold())
        elif english and w[0].isupper() and w.casefold() not in STOPWORDS:
            before = text[: match.start()]
            if before.strip() and not _SENTENCE_END.search(before):
                found.add(w.casefold())
    return frozenset(found)


def _looks_english(text: str) -> bool:
    from engram.domain.language import detect_language

    return detect_language(text) == "en"


def change_marker_starts(text: str) -> list[int]:
    """Where the change markers of a text start."""
    return [m.start() for m in _MARKER.finditer(text)]


def says_changed(text: str) -> bool:
    """Whether the text states that something changed ("moved to", "ab sofort", "nicht mehr")."""
    return _MARKER.search(text) is not None


@dataclass(frozen=True)
class Facts:
    """An observation's `k=v` facts: identity keys (which entity) and attributes (what about it)."""

    values: Mapping[str, frozenset[str]]

    @classmethod
    def of(cls, facts: Iterable[str]) -> Facts:
        found: dict[str, set[str]] = {}
        for fact in facts:
            parsed = parse_fact(fact)
            if parsed is not None:
                found.setdefault(parsed[0], set()).add(parsed[1])
        return cls({k: frozenset(v) for k, v in found.items()})

    def identity(self, strength: int) -> dict[str, frozenset[str]]:
        return {k: v for k, v in self.values.items() if identity_strength(k) == strength}

    def attributes(self, *, names_too: bool) -> dict[str, frozenset[str]]:
        """The attribute facts; names count as attributes when strong ids decided the entity."""
        limit = 1 if names_too else 0
        return {k: v for k, v in self.values.items() if identity_strength(k) <= limit}


@dataclass(frozen=True)
class Reading:
    """Everything consolidation compares, read once per observation."""

    observation: Observation

    @cached_property
    def text(self) -> str:
        o = self.observation
        return "\n".join(p for p in (o.title, o.narrative, *o.facts) if p)

    @cached_property
    def facts(self) -> Facts:
        return Facts.of(self.observation.facts)

    @cached_property
    def surface(self) -> dict[str, str]:
        return content_words(self.text)

    @cached_property
    def tokens(self) -> frozenset[str]:
        return frozenset(self.surface)

    @cached_property
    def numbers(self) -> frozenset[str]:
        return number_anchors(self.text)

    @cached_property
    def names(self) -> frozenset[str]:
        return name_anchors(self.text)

    @cached_property
    def changed(self) -> bool:
        o = self.observation
        return says_changed(f"{o.title}\n{o.narrative}")

    @cached_property
    def normalised(self) -> str:
        """The text without case, spaces and punctuation: cosmetic differences vanish."""
        return " ".join(w.casefold() for w in words(self.text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def minimal_pair(a: frozenset[str], b: frozenset[str]) -> bool:
    """Two texts that say the same except for one or two words on each side ("Alice/Bob prefers
    short answers", "PostgreSQL for billing/reporting", "kurze/ausführliche Antworten"): a
    different value in the same sentence, so not a duplicate, whatever their vectors say."""
    only_a, only_b = a - b, b - a
    shared = a & b
    return bool(only_a or only_b) and len(shared) >= 2 and len(only_a) <= 2 and len(only_b) <= 2


CHECKED_WORDS = 2  # content words of a check an earlier statement must share to be corrected
_CHECK = re.compile(r"(?<!\w)(still|anymore|any more|noch|mehr|bleibt es|weiterhin|nach wie vor)(?!\w)", re.IGNORECASE)
_NO = re.compile(r"\W*(no|nope|not anymore|not any more|not really|nein|nö|nicht mehr)(?!\w)", re.IGNORECASE)


def is_check(question: str) -> bool:
    """Whether the question checks what was said before ("still", "noch", "bleibt es bei")."""
    return _CHECK.search(question) is not None


def corrected_check(question: str, reply: str) -> frozenset[str]:
    """The content words of a check the reply says no to ("Is your sister
    still living in Porto?" - "No, she moved to Leeds.", "Wohnt Ihre Schwester noch in
    Freiburg?" - "Nicht mehr, jetzt Bremen."): what the person said before and corrects now. Empty
    when the question checks nothing (no "still", "noch", "bleibt es bei") or the reply neither says no nor that
    something changed."""
    if not is_check(question) or not (_NO.match(reply) or says_changed(reply)):
        return frozenset()
    return content_tokens(question)
