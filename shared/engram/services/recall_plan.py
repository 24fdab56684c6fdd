"""Planning recall queries (R-7.1, R-7.4): validation, candidate pools, and sharing one search
between the streams of a chat turn.

A chat turn asks several streams at once; streams that search the same text with the same
visibility share one BM25 and one kNN statement over the union of their types
(`shared_list`), and each keeps its own types' entries. `RecallService` runs the plans.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from engram.domain.addressee import asks_assistant
from engram.domain.decomposition import day_windows, decompose, fuse_parts
from engram.domain.errors import Unprocessable
from engram.domain.memory_units import PASSAGE_TYPE, collapse, turn_of, unit_refs
from engram.domain.ranking import Fused, lexical_weight, rrf_fuse
from engram.domain.recall import RecallQuery, RecallResult, SearchHit
from engram.domain.scopes import Visibility
from engram.domain.search import Ranked, SearchFilter, Vector

MAX_QUERY_CHARS = 2_000
MAX_LIMIT = 100
# Candidates per list: at least this many, and twice the hits asked for. Fusion works on each
# list's head; deep ranks (the kNN list above all, whose cosine scores sit in a narrow band)
# mostly add noise to RRF. LoCoMo dev, hybrid: limit 5 recall@5 0.704 with 10 candidates, 0.695
# with 12, 0.678 with 20; limit 8 recall@8 0.757 with 16, 0.760 with 20 (nDCG@10 0.602 / 0.596).
CANDIDATES = 10
MAX_SHARED = 200  # the longest list one shared search of several streams asks for
SHARED_SLACK = 2  # a shared search asks for this many times the sum of the streams' pools
_ALLOWED_CONTROLS = {"\t", "\n", "\r"}


def validate_query_text(text: str, field: str = "q") -> str:
    """A recall query: 1..2000 characters of text, no control characters. Returns it trimmed."""
    if not isinstance(text, str) or not text.strip():
        raise Unprocessable(field, "the query is empty")
    if len(text) > MAX_QUERY_CHARS:
        raise Unprocessable(field, f"the query has {len(text)} characters; at most {MAX_QUERY_CHARS} are allowed")
    bad = next((ch for ch in text if unicodedata.category(ch) == "Cc" and ch not in _ALLOWED_CONTROLS), None)
    if bad is not None:
        raise Unprocessable(field, f"the query contains the control character U+{ord(bad):04X}")
    return " ".join(text.split())


@dataclass
class Plan:
    """One valid query of a `search_many` call and what the searches found for it."""

    query: RecallQuery
    text: str  # BM25
    vector_text: str  # kNN
    visibility: Visibility
    where: SearchFilter
    pool: int
    lexical: list[Ranked] = field(default_factory=list)
    vector: list[Ranked] = field(default_factory=list)
    fused: list[Fused] = field(default_factory=list)
    vectors: dict[str, Vector] = field(default_factory=dict)  # of the statement units among `fused`

    def fuse(self) -> None:
        """RRF of the two lists, the BM25 list weighed by how much of the query its best match
        covers (`ranking.lexical_weight`; a list without coverage weighs fully)."""
        weight = lexical_weight(self.lexical[0].coverage) if self.lexical and self.vector else 1.0
        self.fused = rrf_fuse([r.id for r in self.lexical], [r.id for r in self.vector], lexical_weight=weight)[
            : self.pool
        ]

    @property
    def wants_lexical(self) -> bool:
        return self.query.mode in ("hybrid", "lexical")

    @property
    def wants_vector(self) -> bool:
        return self.query.mode in ("hybrid", "vector")


def shared_limit(plans: Sequence[Plan]) -> int:
    """How long a list one search shared by several plans asks for: twice the sum of their pools.
    A plan's types can be a minority among the best entries of the union (vectors cluster by
    type); with just the sum, 9 of 10 chat turns of the chat bench needed a second kNN search."""
    return min(MAX_SHARED, SHARED_SLACK * sum(p.pool for p in plans))


def groups(plans: Sequence[Plan], side: Literal["text", "vector_text"]) -> list[list[Plan]]:
    """Plans that search the same text (BM25: `text`, kNN: `vector_text`) with the same
    visibility at the same instant, leaving out the same types, in the same window (streams of
    one turn; a recall "as of" a time, or within a day, searches alone)."""
    groups: dict[tuple[Any, ...], list[Plan]] = {}
    for plan in plans:
        key = (getattr(plan, side), plan.visibility, plan.where.now, tuple(plan.where.except_types), plan.where.within)
        groups.setdefault(key, []).append(plan)
    return list(groups.values())


async def shared_list(
    group: list[Plan],
    text: str,
    search: Callable[[Visibility, str, SearchFilter, int], Awaitable[list[Ranked]]],
) -> list[list[Ranked]]:
    """One ranked list per plan of a group, from one search where possible.

    The group searches once over the union of its plans' types for `shared_limit` entries;
    each plan keeps the entries of its own types, in order, up to its pool. A list score does
    not depend on the type filter, so this is the plan's own list unless the shared list was
    cut before the plan had its pool: then (and for entries without a type) the plan searches
    on its own. Three streams of a chat turn cost one statement instead of three.
    """
    first = group[0]
    if len(group) == 1:
        return [await search(first.visibility, text, first.where, first.pool)]
    union: tuple[str, ...] = ()
    if all(p.query.types for p in group):
        union = tuple(dict.fromkeys(t for p in group for t in p.query.types))
    limit = shared_limit(group)
    where = dataclasses.replace(first.where, types=union)  # the group's instant, exclusions and window
    shared = await search(first.visibility, text, where, limit)
    complete = len(shared) < limit  # nothing was cut: every matching entry is in the list
    lists = []
    for plan in group:
        types = set(plan.query.types)
        own = [r for r in shared if not types or r.type in types][: plan.pool]
        if any(r.type is None for r in shared) or (len(own) < plan.pool and not complete):
            own = await search(plan.visibility, text, plan.where, plan.pool)
        lists.append(own)
    return lists


def with_parts(queries: Sequence[RecallQuery], now: datetime | None = None) -> tuple[list[RecallQuery], list[int]]:
    """The queries followed by the parts of those that name two things (`decomposition`), those
    that name a day within that day alone (`decomposition.day_windows`: LoCoMo dev, 12 of the 13
    questions naming a date or month whose evidence the lists missed had it on that day; a day
    before `now`, "yesterday", counts from the query's instant), and for each the index of the
    query it belongs to. A question to the assistant (`addressee`) is also searched among the
    assistant's passages alone: in the whole lists the user's own units on the topic take most
    places (assistant_chats advice questions, recall@1 up in three seeds of three;
    bench/RESULTS.md part 18). A query that names its types is not searched among the passages
    (a chat turn has a stream of them: `multistream.ANSWERS`). A query with a kNN text of its
    own (a stream's template that expands the message) is searched as it is; a chat stream's
    query whose templates are the message itself is the message, and gets its parts and days as
    a plain query does."""
    expanded, owners = list(queries), list(range(len(queries)))
    for i, query in enumerate(queries):
        if query.vector_text not in (None, query.text) or not isinstance(query.text, str):
            continue
        for part in decompose(query.text):
            expanded.append(dataclasses.replace(query, text=part, vector_text=None, query_id=None))
            owners.append(i)
        asked = query.as_of or now  # "yesterday" is the day before the recall's instant, in the asker's zone
        for window in day_windows(query.text, asked, query.zone) if query.said_within is None else ():
            expanded.append(dataclasses.replace(query, said_within=window, query_id=None))
            owners.append(i)
        if not query.types and asks_assistant(query.text):
            expanded.append(dataclasses.replace(query, types=(PASSAGE_TYPE,), query_id=None))
            owners.append(i)
    return expanded, owners


def merge_parts(
    queries: Sequence[RecallQuery], owners: Sequence[int], results: Sequence[RecallResult | Exception]
) -> list[RecallResult | Exception]:
    """Each query's result, fused by RRF with its parts' results (the question's list first);
    a part that failed is left out, the question's own failure is its result. A fused hit's
    `parts` boost is its fused score over its own, so the boosts still explain the score."""
    merged: list[RecallResult | Exception] = list(results[: len(queries)])
    for i, own in enumerate(merged):
        parts = [r for r, o in zip(results[len(queries) :], owners[len(queries) :], strict=True) if o == i]
        lists = [r.hits for r in parts if isinstance(r, RecallResult)]
        if isinstance(own, Exception) or not lists:
            continue
        fused = fuse_parts(own.hits, lists, key=lambda h: turn_of(h.observation))
        hits = [
            dataclasses.replace(h, score=score, boosts={**h.boosts, "parts": round(score / h.score, 6)})
            if h.score > 0
            else h
            for h, score in fused[: queries[i].limit]
        ]
        merged[i] = RecallResult(query_id=own.query_id, hits=hits)
    return merged


def as_turns(hits: Sequence[SearchHit]) -> list[SearchHit]:
    """Hits on units as hits on turns (`memory_units.collapse`), best first."""
    turns: list[SearchHit] = []
    refs = unit_refs([h.observation for h in hits])
    for hit, score, added in collapse([(h, h.score, ref) for h, ref in zip(hits, refs, strict=True)]):
        if score == hit.score or hit.score <= 0:
            turns.append(hit)
            continue
        # a turn unit standing in for its better statement: `unit` is that statement's score over
        # its own, so the named boosts still multiply up to the score
        best = score / added.get("support", 1.0)
        unit = {"unit": round(best / hit.score, 6)} if best != hit.score else {}
        turns.append(dataclasses.replace(hit, score=score, boosts={**hit.boosts, **unit, **added}))
    return turns


def instant(query: RecallQuery, now: datetime) -> datetime:
    """When the recall looks at memory: now, or the `as_of` time. Memory is known up to now, so a
    later `as_of` answers as now (documented on the field; refusing it was a constraint no
    OpenAPI document can state, and the fuzzer's valid cases were refused)."""
    if query.as_of is None:
        return now
    if query.as_of.tzinfo is None:
        raise Unprocessable("as_of", "as_of needs a time zone (e.g. 2026-03-01T12:00:00Z)")
    return min(query.as_of, now)
