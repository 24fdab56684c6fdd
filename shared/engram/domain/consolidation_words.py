"""Which words of a free-text statement distinguish it (R-15.1): names, numbers and topic words.
Pure, German and English, no word lists beyond function words and change markers.

A paraphrase changes the wording and keeps what the statement is about; a look-alike keeps
the wording and swaps what it is about ("Uwe/Eva bevorzugt kurze Antworten", "Kafka for the
billing/reporting service"). So two statements are compared on their *distinguishing* words:

- **names**: words written with a capital (or identifiers: `PRJ-42`, `RabbitMQ`) that the
  compared texts never write in lower case: people, customers, projects, places, products (in
  German every noun is capitalised, so German nouns count as names too: swapping one, even for a
  synonym, is never taken for a paraphrase); adjacent names form one *name phrase* ("Dunmore
  Foods", "Frau Weber");
- **topic words**: rare words of the pool (`Pool.specific`) that a text repeats (what it names
  in its title and again in its text: "the audit service ... for audit");
- **numbers and dates**, compared by `Reading.numbers`.

Two name phrases *clash* when they share a word and neither contains the other ("Dunmore Foods"
/ "Dunmore Robotics"): two entities, not one. The *subject* of a pair is what it names in common
that is not everywhere in the pool (a person named in a sixth of the memories is a subject;
"Antworten", in most of them, is not).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from engram.domain.dates import MONTHS
from engram.domain.facts import CHANGE_MARKERS, STOPWORDS, change_marker_starts, stem

_WORD = re.compile(r"[0-9A-Za-zÀ-ÖØ-öø-ÿ][0-9A-Za-zÀ-ÖØ-öø-ÿ'’\-]*")
_SENTENCE = re.compile(r"[!?;\n]|(?<!\d)\.")  # "12. Mai" does not end a sentence
_MARKER_WORDS = frozenset(w for m in CHANGE_MARKERS for w in m.split())


@dataclass(frozen=True)
class Casing:
    """How one text writes its words (stems): with a capital, in lower case, how often, and the
    runs of adjacent capitalised words (candidate name phrases)."""

    capital: frozenset[str]
    lower: frozenset[str]
    counts: Mapping[str, int]
    runs: tuple[frozenset[str], ...]
    lead: frozenset[str] = frozenset()  # written before a change marker in its sentence ("Noah now ...")
    inside: frozenset[str] = frozenset()  # capitalised inside a sentence, or identifiers: not just a first word


def _identifier(word: str) -> bool:
    has_digit = any(c.isdigit() for c in word) and any(c.isalpha() for c in word)
    return has_digit or (any(c.isupper() for c in word[1:]) and any(c.islower() for c in word))


def _leading(text: str) -> list[tuple[int, int]]:
    """The spans from each sentence's start to the last change marker in it."""
    starts = [0] + [m.end() for m in _SENTENCE.finditer(text)]
    markers = change_marker_starts(text)
    spans = []
    for begin, end in zip(starts, [*starts[1:], len(text)], strict=True):
        inside = [m for m in markers if begin <= m < end]
        if inside:
            spans.append((begin, max(inside)))
    return spans


@lru_cache(maxsize=4096)  # pure: a consolidation compares each text with many others
def casing_of(text: str) -> Casing:
    spans = _leading(text)
    lead: set[str] = set()
    capital: set[str] = set()
    lower: set[str] = set()
    inside: set[str] = set()
    counts: dict[str, int] = {}
    runs: list[frozenset[str]] = []
    run: set[str] = set()
    last = 0
    for match in _WORD.finditer(text):
        word = match.group(0)
        folded = word.casefold().strip("'’-")
        if run and text[last : match.start()].strip(" "):  # punctuation or a line break ends a run
            runs.append(frozenset(run))
            run = set()
        initial = last == 0 or _SENTENCE.search(text, last, match.start()) is not None
        last = match.end()
        skip = len(folded) < 2 or folded in STOPWORDS or folded in _MARKER_WORDS or folded in MONTHS
        if skip or folded.replace(".", "").replace(",", "").isdigit():
            if run:
                runs.append(frozenset(run))
                run = set()
            continue
        s = stem(folded)
        counts[s] = counts.get(s, 0) + 1
        if any(begin <= match.start() < end for begin, end in spans):
            lead.add(s)
        if word[0].isupper() or _identifier(word):
            capital.add(s)
            run.add(s)
            if not initial or _identifier(word):
                inside.add(s)
        else:
            lower.add(s)
            if run:
                runs.append(frozenset(run))
                run = set()
    if run:
        runs.append(frozenset(run))
    return Casing(frozenset(capital), frozenset(lower), counts, tuple(runs), frozenset(lead), frozenset(inside))


@dataclass(frozen=True)
class Distinguishing:
    """One statement's distinguishing words, against the lower-case words of the compared pool."""

    names: frozenset[str]
    phrases: tuple[frozenset[str], ...]
    topic: frozenset[str]
    lead: frozenset[str]  # of those, what it names before saying that something changed

    @classmethod
    def of(
        cls, casing: Casing, lower: frozenset[str], specific: frozenset[str], inside: frozenset[str] | None = None
    ) -> Distinguishing:
        """`lower`: what the compared texts write in lower case; `inside`: what they capitalise
        inside a sentence (a word capitalised only as the first of a sentence is no name)."""
        names = (casing.capital - lower - casing.lower) & (casing.inside if inside is None else inside)
        phrases = tuple(dict.fromkeys(p & names for p in casing.runs if p & names))
        topic = frozenset(w for w in specific if casing.counts.get(w, 0) >= 2 and w not in names)
        return cls(names, phrases, topic, (names | topic) & casing.lead)

    @property
    def words(self) -> frozenset[str]:
        return self.names | self.topic


def clash(a: Distinguishing, b: Distinguishing) -> bool:
    """A name phrase of one shares a word with one of the other and neither contains the other."""
    return any(p & q and not (p <= q or q <= p) for p in a.phrases for q in b.phrases)


def one_sided(a: Distinguishing, b: Distinguishing) -> list[frozenset[str]]:
    """The name phrases of `a` the other does not name at all (a new value, or another entity)."""
    return [p for p in a.phrases if not p & b.names]


@dataclass(frozen=True)
class Comparison:
    """Two statements' distinguishing words side by side."""

    a: Distinguishing
    b: Distinguishing
    subject: frozenset[str]  # names or topic words both use that are not everywhere in the pool

    @classmethod
    def of(cls, a: Distinguishing, b: Distinguishing, df: Mapping[str, int], common_above: int) -> Comparison:
        shared = a.words & b.words
        return cls(a, b, frozenset(w for w in shared if df.get(w, 1) <= common_above))

    @property
    def swapped(self) -> bool:
        """Each names or is about something the other does not: a look-alike, not a paraphrase."""
        return bool(self.a.words - self.b.words) and bool(self.b.words - self.a.words)

    def rare_words_swapped(self, only_a: Iterable[str], only_b: Iterable[str]) -> bool:
        """Rare words (not names: the name rules judge those) on both sides that the other does not
        use: "tea" for "coffee" in other words. Only shared numbers or dates outweigh that."""
        names = self.a.names | self.b.names
        return bool(set(only_a) - names) and bool(set(only_b) - names)

    @property
    def same_wording_of_names(self) -> bool:
        """Nothing distinguishing is swapped and no name phrase clashes: a paraphrase may only add
        a name the other leaves out."""
        return bool(self.subject) and not self.swapped and not clash(self.a, self.b)

    @property
    def one_value_changed(self) -> bool:
        """What a statement of change about the other looks like: it names their subject before it
        says what changed ("Noah now prefers ...", "Die Deadline von Titan wurde ... verschoben"), at
        most one name phrase is replaced on each side (the value: a city, a contact person) and no
        name phrase clashes."""
        if not self.subject & (self.a.lead | self.b.lead) or clash(self.a, self.b):
            return False
        return len(one_sided(self.a, self.b)) <= 1 and len(one_sided(self.b, self.a)) <= 1
