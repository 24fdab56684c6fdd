"""Ranking rules of recall (R-7.1): reciprocal rank fusion, then boosts. Pure, no I/O."""

from __future__ import annotations

import functools
import math
import re
import uuid
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import TypeVar

from engram.domain.language import Language, language_of
from engram.domain.observation import Observation, Priority

RRF_K = 60
BM25_K1 = 1.2
BM25_B = 0.75

PRIORITY_BOOST: Mapping[Priority, float] = {
    Priority.critical: 2.0,  # "critical first": enough to lift a relevant critical hit to the top
    Priority.high: 1.25,
    Priority.normal: 1.0,
    Priority.low: 0.85,
}
DATE_WEIGHT = 1.0  # a memory of a day the query names counts double
DATE_SLACK_DAYS = 1  # time zones: "3 June" may be stored as the 2nd or the 4th in UTC
TAG_WEIGHT = 0.1  # a memory tagged with a name the query says (a person, a customer) gets +10 %
SESSION_WEIGHT = 0.15  # the candidates of the strongest session get at most +15 %
RECENCY_HALF_LIFE_DAYS = 30.0
RECENCY_WEIGHT = 0.15  # a brand-new observation gets at most +15 %
VERIFIED_BOOST = 1.1
MEMORY_LANGUAGE_CHARS = 300
# The BM25 list counts fully in the fusion once its best match stands for this share of the
# query's weight (`lexical_weight`); below, its share of the RRF score falls in proportion.
LEXICAL_FULL_COVERAGE = 0.3
# A list's first hit ranks no lower than 2nd in the fused list, its second no lower than 4th
# (`with_leg_floors`): the fusion's top 2 and top 4 hold the head of each list. (3, 5) until
# part 17 of bench/RESULTS.md: (2, 4) gave recall@1 +0.01-0.05 on assistant_chats, the same
# recall@5 within 0.004, LoCoMo and XQuAD unchanged.
LEG_FLOORS = (2, 4)


@dataclass(frozen=True)
class Fused:
    """One candidate after fusion: its ranks in each list (1-based) and its RRF score."""

    id: str
    rrf: float
    lexical_rank: int | None
    vector_rank: int | None


def rrf_fuse(lexical: Sequence[str], vector: Sequence[str], k: int = RRF_K, lexical_weight: float = 1.0) -> list[Fused]:
    """score(d) = sum over lists of weight / (k + rank(d)), the kNN list's weight 1; ties broken
    by the better single rank."""
    lex = {doc: i + 1 for i, doc in enumerate(dict.fromkeys(lexical))}
    vec = {doc: i + 1 for i, doc in enumerate(dict.fromkeys(vector))}
    fused = []
    for doc in dict.fromkeys([*lex, *vec]):
        lr, vr = lex.get(doc), vec.get(doc)
        score = (lexical_weight / (k + lr) if lr else 0.0) + (1.0 / (k + vr) if vr else 0.0)
        fused.append(Fused(doc, score, lr, vr))
    fused.sort(key=lambda f: (-f.rrf, min(f.lexical_rank or 10**9, f.vector_rank or 10**9)))
    return fused


K = TypeVar("K", bound=Hashable)


def with_leg_floors(order: Sequence[K], legs: Sequence[Sequence[K]], floors: Sequence[int] = LEG_FLOORS) -> list[K]:
    """`order` (the fused ranking, best first) with each list's r-th entry at position
    `floors[r - 1]` or better: where RRF put it lower, it moves up to that place and what it
    passes moves down one. Entries of a list that are not in `order` are skipped (a list's
    first entry is its first one in `order`); `order` (distinct items) otherwise keeps its
    sequence. Two entries held to one floor take it and the place above it, the better fused first.

    RRF lets anything both lists found outrank a list's first hit that the other list missed:
    1/(60+1) is less than 1/(60+8) + 1/(60+15). A paragraph that only the kNN list ranks first
    (a question in other words than the text) or only BM25 ranks first (a rare name the model
    does not know) fell to 6th-10th, so the fusion lost to its own best list (XQuAD en->en and
    de->de recall@5; assistant_chats, where the kNN list is far better than BM25). With the
    floors, recall@2 of the fusion is never below recall@1 of either list, and recall@4 never
    below either list's recall@2, whatever RRF makes of the rest (bench/RESULTS.md).
    """
    out = list(order)
    position = {item: i for i, item in enumerate(out)}
    due: dict[K, int] = {}  # an entry held to a floor: the floor (1-based)
    for leg in legs:
        present = [item for item in dict.fromkeys(leg) if item in position]
        for rank, item in enumerate(present[: len(floors)]):
            due[item] = min(due.get(item, floors[rank]), floors[rank])
    placed: list[K] = []
    rest = list(out)
    while rest:
        p = len(placed) + 1  # the position filled now
        pending = sorted((due[item], position[item]) for item in rest if item in due)
        # earliest floor first, and only when waiting one more place would miss a floor
        urgent = any(p + j >= floor for j, (floor, _) in enumerate(pending))
        item = out[pending[0][1]] if urgent else rest[0]
        rest.remove(item)
        placed.append(item)
    return placed


def lexical_weight(coverage: float | None, full: float = LEXICAL_FULL_COVERAGE) -> float:
    """The BM25 list's weight in the fusion, from its best match's `coverage`: the share of the
    query's weight (the idf of each of its words, a word no memory has at the highest idf)
    that the match's BM25 score stands for (`Ranked.coverage`). None (an index that cannot
    tell) leaves plain RRF.

    A question in other words than the memory ("Which instrument am I learning?" over "I
    started cello lessons") finds few of its words in any memory; the BM25 list then ranks
    whatever shares the remaining generic ones (an assistant's prose on the topic), and RRF let
    those outrank the kNN list's first hit: on assistant_chats hybrid recall@10 was 0.843
    with the kNN list alone at 0.916. There the median coverage is 0.23, on LoCoMo 0.92 (its
    questions reuse the turns' words, and BM25 is the better list: 0.746 vs 0.618). Full weight
    from 0.3 leaves 97 % of LoCoMo's questions untouched (measured in bench/RESULTS.md).
    """
    if coverage is None:
        return 1.0
    return min(1.0, max(0.0, coverage / full))


_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The words of `text`, case-folded, in order (runs of letters, digits and underscores)."""
    return _WORD.findall(text.casefold())


def query_words(text: str) -> list[str]:
    """The distinct words of a query, case-folded, in order (what `lexical_weight`'s query
    weight sums over; each is stemmed by the index)."""
    return list(dict.fromkeys(words(text)))


def cross_language_factor(
    f: Fused, query_language: Language | None, memory_language: Language | None, k: int = RRF_K
) -> float:
    """The share of a fused score that counts: all of it, or only the kNN part when the query and
    the memory are in different languages (both known, see `language.language_of`).

    BM25 can match a German question to an English memory only on the words both languages
    share: names, numbers, "in". Those matches are as likely on the neighbours of the right
    memory as on it, and RRF lets a candidate found by both lists outrank the vector list's
    first hit, so the fusion fell below the kNN list alone (XQuAD de->en recall@1 0.605 vs
    0.832). Across languages the kNN list (a multilingual model) is the evidence, and the
    fusion becomes that list; within a language, and when a language is unknown, RRF is
    unchanged. A memory found only by BM25 across languages gets 0 (it stays behind the rest).
    """
    if f.lexical_rank is None or f.rrf <= 0 or query_language is None or memory_language is None:
        return 1.0
    if query_language == memory_language:
        return 1.0
    vector_part = 1.0 / (k + f.vector_rank) if f.vector_rank else 0.0
    return vector_part / f.rrf


def memory_language(obs: Observation) -> Language | None:
    """The language of a memory's own text: the start of its title and narrative (enough function
    words to tell German from English, ~10 us; not cached across searches, since a cache shared
    by tenants would be a timing signal)."""
    n = MEMORY_LANGUAGE_CHARS
    return language_of(f"{obs.title[:n]}\n{obs.narrative[:n]}"[:n])


def support_session(obs: Observation) -> uuid.UUID | None:
    """The session an observation lends support to and takes it from (`session_support`): its
    own, unless it is low priority. An assistant's turn is low priority (`conversation.
    turn_units`): its prose repeats the topic's words in every session on the topic, so it
    lifted those sessions, itself with them, above the one sentence in another session where
    the user said the fact asked for (assistant_chats hybrid recall@10 0.852 -> 0.884, LoCoMo,
    which has no assistant, unchanged; bench/RESULTS.md). A search over such chats now gets no
    session support at all (`recall_scoring.scored_hits`)."""
    return None if obs.priority is Priority.low else obs.provenance.session_id


def session_support(candidates: Sequence[tuple[str, float, object | None]]) -> dict[str, float]:
    """A multiplier per candidate from the other candidates of its session (topic locality).

    `candidates` are (id, fused score, session) of one search. A session's weight is the sum of
    its candidates' fused scores, relative to the strongest session's; each candidate gets
    1 + SESSION_WEIGHT x its session's weight, so a memory said in the same conversation as
    other good matches rises a little. Candidates without a session get 1.0. Measured on LoCoMo
    dev (turn units, one session per conversation session): recall@10 0.767 -> 0.778.
    """
    mass: dict[object, float] = {}
    for _, score, session in candidates:
        if session is not None:
            mass[session] = mass.get(session, 0.0) + score
    top = max(mass.values(), default=0.0)
    return {
        doc: 1.0 + SESSION_WEIGHT * mass[session] / top if session is not None and top > 0 else 1.0
        for doc, _, session in candidates
    }


def date_support(when: datetime, dates: Sequence[date]) -> float:
    """1 + DATE_WEIGHT if `when` (an observation's time) is on a day the query names, else 1.0.
    Measured on LoCoMo dev: the 43 questions that name a date, recall@10 0.82 -> 0.88."""
    day = when.date()
    return 1.0 + DATE_WEIGHT if any(abs((day - d).days) <= DATE_SLACK_DAYS for d in dates) else 1.0


def padded_words(text: str) -> str:
    """`text` case-folded, as words separated by single spaces, with a space at both ends."""
    return " " + " ".join(words(text)) + " "


def tag_support(tags: Sequence[str], query_words: str) -> float:
    """1 + TAG_WEIGHT if the query (`padded_words` of it) says one of the memory's tags as whole
    words ("Melanie" in "What did Melanie paint?", "müller gmbh" in "Rechnung der Müller GmbH").
    Measured on LoCoMo dev (the speaker is a turn unit's tag): recall@10 +0.007, better on
    each of the five conversations."""
    for tag in tags:
        words = _tag_words(tag)
        if words and words in query_words:
            return 1.0 + TAG_WEIGHT
    return 1.0


@functools.lru_cache(maxsize=4096)
def _tag_words(tag: str) -> str:
    """`padded_words` of a tag, "" if it has no words; tags repeat across candidates and calls."""
    words = padded_words(tag)
    return words if words.strip() else ""


def bm25_idf(doc_count: int, doc_freq: int) -> float:
    """Lucene's BM25 IDF: never negative, so very common terms still count a little."""
    return math.log(1.0 + (doc_count - doc_freq + 0.5) / (doc_freq + 0.5))


def bm25_impact(tf: float, doc_length: float, avg_length: float, k1: float = BM25_K1, b: float = BM25_B) -> float:
    """The document side of BM25: saturated, length-normalised term frequency."""
    norm = 1.0 - b + b * (doc_length / avg_length if avg_length > 0 else 1.0)
    return tf * (k1 + 1.0) / (tf + k1 * norm)


def boosts(obs: Observation, now: datetime, type_boosts: Mapping[str, float] | None = None) -> dict[str, float]:
    """Multipliers applied to the fused score; each is named so a search can explain itself."""
    age_days = max(0.0, (now - obs.holds_from).total_seconds() / 86400.0)
    applied = {
        "priority": PRIORITY_BOOST[obs.priority],
        "recency": 1.0 + RECENCY_WEIGHT * 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS),
        "relevance": 1.0 + 0.05 * math.log1p(max(0, obs.relevance_count)),
        "verified": VERIFIED_BOOST if obs.verified else 1.0,
        "feedback": (1.0 + 0.1 * math.log1p(max(0, obs.cited_count)) + 0.15 * math.log1p(max(0, obs.confirmed_count)))
        / (1.0 + 0.3 * math.log1p(max(0, obs.rejected_count))),
    }
    if type_boosts and obs.type in type_boosts:
        applied["type"] = float(type_boosts[obs.type])
    return {name: round(value, 6) for name, value in applied.items()}


def boosted(score: float, applied: Mapping[str, float]) -> float:
    for value in applied.values():
        score *= value
    return score
