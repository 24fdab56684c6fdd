"""Query decomposition (R-7.1): a question that names two things becomes two searches. Pure.

"What are my employer and where my sister lives?" matches two memories, each on half of its
words; one search ranks the memories that share words with both halves (often neither fact)
above each fact. Recall searches the question and each part and fuses the lists with RRF, so
each fact can rank first in its own list. Offline and deterministic, German and English:

- two names joined by "and"/"und"/"&"/"or"/"oder" ("Did Jon and Gina both dance?"): one
  question per name ("Did Jon dance?", "Did Gina dance?"; "both"/"beide" dropped);
- two clauses or phrases joined by ", and" / "and also" / "und auch" / "as well as" /
  "sowie" / "or" / "oder", or "and"/"und" before a question word: the part before it (with a
  lead-in like "Remind me of two things:" kept) and the part after it, each with the
  question's lead-in;
- "both X and Y", "sowohl X als auch Y"; a plain "X and Y" / "X or Y" only between two phrases
  that start with a determiner ("my employer and my dentist", "Which is older, my car or my
  bike?"), never inside one ("black and white", "Melanie and her kids").

A question without such a join gives no parts (one search, as before). At most `MAX_PARTS`
parts; parts shorter than `MIN_PART_WORDS` words are dropped.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Hashable, Sequence
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from typing import TypeVar

from engram.domain.dates import MONTH_PATTERN, MONTHS, mentioned_spans, past_span
from engram.domain.ranking import DATE_SLACK_DAYS, RRF_K

T = TypeVar("T")
MAX_PARTS = 3
MIN_PART_WORDS = 2

_QUESTION_WORDS = (
    "what|when|where|who|whom|whose|which|why|how|"
    "was|wann|wo|wohin|woher|wer|wen|wem|wessen|welche|welcher|welches|welchen|warum|wieso|weshalb|wie"
)
_NAME = r"[A-ZÄÖÜ][\wäöüß'’-]+"
# two names joined, e.g. "Caroline and Melanie", "Jon und Gina", "Tim & John's"
# (not part of a longer name: "C. S. Lewis or John Greene")
_NAME_PAIR = re.compile(
    rf"(?<!\.\s)(?<![A-ZÄÖÜ][\wäöüß]\s)\b(?P<a>{_NAME})\s+(?:and|und|&|or|oder)\s+(?P<b>{_NAME})\b(?!\s+[A-ZÄÖÜ])"
)
_BETWEEN = re.compile(r"\b(between|zwischen)\s+((the|der|die|das|dem|den)\s+)?$", re.IGNORECASE)
# a capitalised word after these is a noun, not a name (German capitalises every noun: "für Maß
# und Gewicht"), or the pair is part of a longer name ("Conference on Weights and Measures")
_NOT_BEFORE_A_NAME = frozenset(
    "the a an of on for to from in at by with der die das dem den des ein eine einer einem einen "
    "für von vom zu zum zur über auf an am im in bei mit nach aus".split()
)
_BOTH = re.compile(r"\b(both|beide|beiden|jeweils)\b\s*", re.IGNORECASE)
_STRONG_JOIN = re.compile(
    r"\s*(?:,\s*(?:and|und|or|oder)(?:\s+(?:also|auch))?|\s(?:and|und)\s+(?:also|auch)|"
    r"\sas well as|\ssowie)\s+",
    re.IGNORECASE,
)
_CLAUSE_JOIN = re.compile(rf"\s+(?:and|und|or|oder)\s+(?=(?:{_QUESTION_WORDS})\b)", re.IGNORECASE)
_PLAIN_JOIN = re.compile(r"\s+(?:and|und|or|oder)\s+", re.IGNORECASE)
_BOTH_AND = re.compile(r"\b(?:both|sowohl)\s+(?P<a>.+?)\s+(?:and|als auch)\s+(?P<b>.+)", re.IGNORECASE)
_SEGMENT = re.compile(r"(?<=[:.!?])\s+")
_WORD = re.compile(r"\w+")
_DETERMINERS = frozenset(
    "my your his her its our their the a an this that "
    "mein meine meinen meinem meiner dein deine sein seine ihr ihre unser unsere euer eure "
    "der die das den dem des ein eine einen einem einer".split()
)
_CAPITALISED_WORDS = frozenset(
    "i ich what when where who which why how was wann wo wer welche welcher welches wie warum did do does "
    "is are can could would will remind tell give erinner erinnere sag gib kannst hast hat".split()
)


def decompose(question: str) -> list[str]:
    """The parts of a question that names two things (see the module docstring), or [] for one."""
    text = " ".join(question.split())
    segments = _SEGMENT.split(text)
    for segment in segments:  # the sentence with the join; a lead-in ("Remind me of two things:") adds nothing
        for rule in (_names, _both_and, _joined):
            parts = [p.strip() for p in rule(segment)]
            parts = [p for p in parts if len(_WORD.findall(p)) >= MIN_PART_WORDS and p != text]
            if len(parts) >= 2:
                return list(dict.fromkeys(parts))[:MAX_PARTS]
    return []


def _names(body: str) -> list[str]:
    for match in _NAME_PAIR.finditer(body):
        a, b = match.group("a"), match.group("b")
        if a.casefold() in _CAPITALISED_WORDS or b.casefold() in _CAPITALISED_WORDS or a.endswith("-"):
            continue  # "Start- und Landebahn": one compound
        if _BETWEEN.search(body[: match.start()]):  # "between John and Tim": one relation
            continue
        before = body[: match.start()].split()[-1:]
        if before and (before[0][:1].isupper() or before[0].casefold() in _NOT_BEFORE_A_NAME):
            continue
        rest = _BOTH.sub("", body[: match.start()] + "{}" + body[match.end() :])
        return [" ".join(rest.format(name).split()) for name in (a, b)]
    return []


def _both_and(body: str) -> list[str]:
    match = _BOTH_AND.search(body)
    if not match:
        return []
    head = body[: match.start()]
    return [f"{head}{match.group('a')}", f"{head}{match.group('b')}"]


def _joined(body: str) -> list[str]:
    for pattern in (_STRONG_JOIN, _CLAUSE_JOIN, _PLAIN_JOIN):
        pieces = [p.strip(" ,") for p in pattern.split(body) if p.strip(" ,")]
        if len(pieces) < 2 or any(len(_WORD.findall(p)) < MIN_PART_WORDS for p in pieces):
            continue
        if pattern is _PLAIN_JOIN and not all(_two_phrases(a, b) for a, b in itertools.pairwise(pieces)):
            continue
        conjunctions = {w.casefold() for j in pattern.findall(body) for w in _WORD.findall(j)}
        if pattern is not _CLAUSE_JOIN and conjunctions & {"and", "und"} and _listed(pieces[0]):
            continue
        return pieces
    return []


def _two_phrases(left: str, right: str) -> bool:
    """A plain "and" joins two things only between two phrases with a determiner each ("my
    employer and my allergy", "the language I'm learning and the date of ..."), not inside one
    ("black and white bowl", "Melanie and her kids", "marketing and analytics tools")."""
    after = [w.casefold() for w in _WORD.findall(right)][:1]
    return bool(after) and after[0] in _DETERMINERS and any(w.casefold() in _DETERMINERS for w in _WORD.findall(left))


def _listed(left: str) -> bool:
    """ "a crust, chocolate ganache, and raspberries": the ", and" ends a list of short items
    (one thing described), unlike "der Tag, an dem ich klettere, und die Zutat"."""
    if "," not in left:
        return False
    return len(_WORD.findall(left.rsplit(",", 1)[1])) <= 3


def fuse_parts(
    question: Sequence[T], parts: Sequence[Sequence[T]], key: Callable[[T], Hashable], k: int = RRF_K
) -> list[tuple[T, float]]:
    """The hit lists of a question and its parts as one list: reciprocal rank fusion, each list
    weighing the same, the question's item kept for each key. (Weighing the question's list as
    much as all parts together cost the two-fact questions of bench.assistant_chats 0.05
    recall@10 in English and left XQuAD's hybrid recall as it was: see bench/RESULTS.md.)"""
    scores: dict[Hashable, float] = {}
    items: dict[Hashable, T] = {}
    for ranked in (question, *parts):
        for rank, item in enumerate(ranked, 1):
            ident = key(item)
            items.setdefault(ident, item)
            scores[ident] = scores.get(ident, 0.0) + 1.0 / (k + rank)
    order = sorted(scores, key=lambda i: -scores[i])
    return [(items[i], scores[i]) for i in order]


# a month and year a question names: "in January 2022", "im Juli 2023", "May, 2023"
_MONTH_YEAR = re.compile(rf"\b({MONTH_PATTERN})\.?,?\s+((?:19|20)\d\d)\b", re.IGNORECASE)
MAX_WINDOWS = 2  # a question's days searched on their own


def day_windows(text: str, now: datetime | None = None, zone: tzinfo | None = None) -> list[tuple[datetime, datetime]]:
    """The times a question names as windows [start, end) in UTC: each full date, or range of
    days ending at one ("between August 11 and August 15 2023"), with `DATE_SLACK_DAYS` either
    side (time zones), else each month and year as the whole month,
    else a span before `now` it names (`past_window`: "What did I tell you yesterday?", "letzte
    Woche"); at most `MAX_WINDOWS`. "What did Nate make on 9 November, 2022?" asks for a memory
    of that day whose words need not match the question's: recall also searches the day alone
    (`recall_plan.with_parts`), where the date support (`ranking.date_support`) can only lift
    what the whole lists already hold."""
    slack = timedelta(days=DATE_SLACK_DAYS)
    days = [(first - slack, last + slack + timedelta(days=1)) for first, last in mentioned_spans(text)]
    if not days:
        for found in _MONTH_YEAR.finditer(text):
            month, year = MONTHS[found.group(1).lower()], int(found.group(2))
            days.append((date(year, month, 1), date(year + month // 12, month % 12 + 1, 1)))
    windows = dict.fromkeys((datetime.combine(a, time(), UTC), datetime.combine(b, time(), UTC)) for a, b in days)
    if not windows and now is not None and (span := past_window(text, now, zone)) is not None:
        windows[span] = None
    return list(windows)[:MAX_WINDOWS]


# the UTC offsets people live at, UTC-12 to UTC+14 in quarter hours (`past_window` without a zone)
_OFFSETS = tuple(timedelta(minutes=15 * q) for q in range(-48, 57))


def past_window(text: str, now: datetime, zone: tzinfo | None = None) -> tuple[datetime, datetime] | None:
    """The instants [start, end) of the days before `now` a question names (`dates.past_span`):
    the asker's calendar days in `zone`. One day ("yesterday", "vor drei Tagen") is that day,
    exactly. Longer spans ("last week", "letzten Monat") are taken loosely, `DATE_SLACK_DAYS`
    either side, but never into today: what was said today is in none. Without a zone, the union
    of those days over every UTC offset (-12 to +14 h): it ends before now, but takes in the
    hours of today (UTC) that are still yesterday somewhere."""
    at = now.astimezone(UTC)
    if zone is not None:
        today = at.astimezone(zone).date()
        span = past_span(text, today)
        return None if span is None else _local_days(span, today, zone)
    # the offsets fall on two or three local days: the text is read once per day, not per offset
    spans: dict[date, tuple[date, date]] = {}
    for today in {(at + offset).date() for offset in _OFFSETS}:
        if (span := past_span(text, today)) is None:
            return None  # names no span (the same on every day)
        spans[today] = span
    found = [_local_days(spans[(at + o).date()], (at + o).date(), timezone(o)) for o in _OFFSETS]
    return min(a for a, _ in found), max(b for _, b in found)


def _local_days(span: tuple[date, date], today: date, zone: tzinfo) -> tuple[datetime, datetime]:
    """`past_window` for one zone: the span's first local midnight to the one after its last."""
    slack = timedelta(days=DATE_SLACK_DAYS if span[0] != span[1] else 0)
    after = min(span[1] + slack + timedelta(days=1), today)  # never into today: it is not before now
    start = datetime.combine(span[0] - slack, time(), zone).astimezone(UTC)
    return start, datetime.combine(after, time(), zone).astimezone(UTC)
