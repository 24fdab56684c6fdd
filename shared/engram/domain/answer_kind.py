"""What kind of answer a question asks for, and whether a memory's own words hold one (recall's
`answer` support). English and German, pure, no I/O.

"On what date is my next check-up?" asks for a time. A memory that says "I finally booked the
dentist for 12 February" can answer it; "Can you turn that into a simple checklist?", however
close its words and its vector, cannot. So hybrid recall gives a conversation's utterance (a
turn or statement unit) whose own words (its title: the turn as said, not the narrative that
dates every turn unit) hold an answer of the kind asked for `ANSWER_WEIGHT` (`answer_support`),
where at most half of the candidates' utterances hold one.

Only kinds that show in their form in both languages: a time (a date, a month, a weekday, a
clock time, a relative day, a year) and a quantity (digits, number words). Names and places are
not told: German capitalises every noun, so a capital letter marks no name there.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Sequence
from enum import StrEnum

from engram.domain.memory_units import unit_ref
from engram.domain.observation import Observation

ANSWER_WEIGHT = 1.2  # a candidate whose own words hold an answer of the kind asked for
ANSWER_SHARE = 0.5  # ... if at most this share of the candidates do


class AnswerKind(StrEnum):
    time = "time"
    quantity = "quantity"


# "when" and "wann" ask for a time only as the question's first word ("What did I do when I was
# in Paris?" does not), after a few words that open a question ("and", "remind me", "weißt du")
_OPENING = r"^\s*(?:(?:and|so|also|remind me|do you know|tell me|und|weißt du|sag mir|erinner mich)[,:]?\s+)*"
_ASKS_TIME = re.compile(
    rf"(?i){_OPENING}(?:when|wann)\b"
    r"|\b(?:what|which|on what|at what) (?:date|day|time|year|month|weekday)\b"
    r"|\b(?:how long ago|since when|until when|by when)\b"
    r"|\b(?:an|seit|bis zu|zu) welche[mnr]? (?:tag|datum|zeitpunkt|uhrzeit)\b"
    r"|\b(?:welche[mnrs]?|in welchem|an welchem|um welche) (?:datum|tag|jahr|monat|wochentag|uhrzeit)\b"
    r"|\b(?:um wie viel uhr|seit wann|bis wann|ab wann|wie lange ist es her)\b"
)
_ASKS_QUANTITY = re.compile(
    r"(?i)\b(?:how (?:many|much|old|often|long|far|tall|big|heavy)|what (?:number|amount|percentage|price)"
    r"|wie (?:viele?|alt|oft|lange|weit|groß|schwer|hoch|teuer)|welche (?:nummer|zahl|anzahl|summe))\b"
)

# what a time is made of: words that are one by themselves ("may" is a verb too: only beside a
# number, in `_NUMERIC_TIME`), a relative day ("last week", "nächsten Monat"), a span ago ("two
# years ago", "vor drei Wochen") and numeric forms (dates, years, decades, clock times)
_TIME_WORDS = frozenset(
    """
    january february march april june july august september october november december
    januar jänner februar märz mai juni juli oktober dezember
    monday tuesday wednesday thursday friday saturday sunday weekend
    montag dienstag mittwoch donnerstag freitag samstag sonnabend sonntag wochenende
    yesterday today tonight tomorrow gestern heute morgen übermorgen vorgestern
    """.split()
)
_RELATIVE = frozenset(
    "last next this coming letzte letzten letztem letzter letztes nächste nächsten nächstem nächster nächstes"
    " kommende kommenden kommendem kommender kommendes diese diesen diesem dieser dieses".split()
)
_PERIODS = frozenset(
    "day week month year weekend spring summer autumn fall winter tag woche monat jahr wochenende".split()
)
_RELATIVE_TIME = re.compile(rf"(?i)\b(?:{'|'.join(sorted(_RELATIVE))}) (?:{'|'.join(sorted(_PERIODS))})\b")
_AGO = re.compile(
    r"(?i)\b(?:\d+|a|an|one|two|three|few|several|million|billion|thousand|hundred)"
    r" (?:days?|weeks?|months?|years?) ago\b"
    r"|\bvor (?:\d+|einem|einer|zwei|drei|wenigen|einigen|millionen|milliarden|tausend)"
    r" (?:tagen?|wochen?|monaten?|jahren)\b"
)
_NUMERIC_TIME = re.compile(
    r"(?i)\b\d{1,2}[./]\d{1,2}(?:[./]\d{2,4})?\b|\b(?:1\d|20)\d{2}(?:s|er)?\b|\b\d0(?:s|er)\b|\b\d{1,2}:\d{2}\b"
    r"|\b\d{1,2}\s?(?:am|pm|uhr|o'clock)\b|\b\d{1,2}(?:st|nd|rd|th)\b|\bmay\s+\d|\d\.?\s+(?:of\s+)?may\b"
)
_NUMBER_WORDS = frozenset(
    """
    one two three four five six seven eight nine ten eleven twelve fifteen twenty thirty forty fifty
    hundred thousand dozen twice
    eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf fünfzehn zwanzig dreißig vierzig
    fünfzig hundert tausend dutzend zweimal
    """.split()
)
_WORD = re.compile(r"[^\W\d_]+")
_DIGIT = re.compile(r"\d")


def asked_kind(question: str) -> AnswerKind | None:
    """The kind of answer `question` asks for, if its form says so ("How long ago ...?" a time,
    "How long ...?" a quantity)."""
    if _ASKS_TIME.search(question):
        return AnswerKind.time
    if _ASKS_QUANTITY.search(question):
        return AnswerKind.quantity
    return None


@functools.lru_cache(maxsize=16_384)  # the same memories come back question after question
def holds(text: str, kind: AnswerKind) -> bool:
    """Whether `text` holds an answer of `kind`: a time (a date, month, weekday, clock time,
    relative day or year) or a quantity (digits or a number word)."""
    digits = _DIGIT.search(text) is not None
    if kind is AnswerKind.quantity and digits:
        return True
    words = set(_WORD.findall(text.casefold()))
    if kind is AnswerKind.quantity:
        return not _NUMBER_WORDS.isdisjoint(words)
    # the cheap tests first: a word set, then the patterns only where their words or a digit are
    return (
        not _TIME_WORDS.isdisjoint(words)
        or (digits and _NUMERIC_TIME.search(text) is not None)
        or (
            not _RELATIVE.isdisjoint(words)
            and not _PERIODS.isdisjoint(words)
            and _RELATIVE_TIME.search(text) is not None
        )
        or (("ago" in words or "vor" in words) and _AGO.search(text) is not None)
    )


def answer_support(candidates: Sequence[Observation], kind: AnswerKind | None) -> dict[uuid.UUID, float]:
    """`ANSWER_WEIGHT` for each candidate that is one utterance of a conversation (a turn or a
    statement unit) and whose own words (its title: its narrative begins "On <date>, ... said")
    hold an answer of `kind`, if at most `ANSWER_SHARE` of the candidates' utterances do.

    Only utterances: a paragraph or a note holds some date or number for most questions, and
    on XQuAD's paragraphs the weight sorted them by how many they hold (recall@5 fell below the
    kNN list's, en -> de 0.976 -> 0.952). And only where few hold one: in a chat about dates
    every turn holds one, and holding one tells the answer from nothing."""
    if kind is None:
        return {}
    said = [obs for obs in candidates if (ref := unit_ref(obs)) is not None and ref.single]
    holding = [obs.id for obs in said if holds(obs.title, kind)]
    if len(holding) > ANSWER_SHARE * len(said):
        return {}
    return dict.fromkeys(holding, ANSWER_WEIGHT)
