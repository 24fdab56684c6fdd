"""Recall data types shared by the recall service, the memory API and chat-turn (R-7).

The recall service (retrieval issue) implements `engram.ports.Recall`; chat-turn's
multi-stream recall (chat issue) calls it once per stream with that stream's filter.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Literal

from engram.domain.observation import Observation


@dataclass(frozen=True)
class RecallQuery:
    text: str
    limit: int = 10
    types: tuple[str, ...] = ()  # only these observation types (a stream's filter); empty = all
    want_sensitive: bool = False  # sensitive only when asked explicitly AND permitted
    type_boosts: Mapping[str, float] = field(default_factory=dict)  # a stream's own boosts per type
    stream_origin: str | None = None  # set by multi-stream recall, carried on every hit
    mode: Literal["hybrid", "lexical", "vector"] = "hybrid"  # single lists for benchmarks and explanations
    query_id: uuid.UUID | None = None  # given: the result carries it (all streams of one turn share one id)
    # the kNN side's text when it differs from `text` (a stream's template expands only the BM25
    # query); None: `text`
    vector_text: str | None = None
    # what was valid then: superseded versions of that time instead of today's, no
    # observation recorded after it; None: now
    as_of: datetime | None = None
    # only memories that hold from, or without a valid-from time were said, within [start, end)
    # (a day the question names, searched alone: `decomposition.day_windows`); None: any time
    said_within: tuple[datetime, datetime] | None = None
    # the asker's time zone: "yesterday" is their calendar day (`decomposition.past_window`);
    # None: the union of that day over every zone
    zone: tzinfo | None = None


@dataclass(frozen=True)
class SearchHit:
    observation: Observation
    score: float
    lexical_rank: int | None  # 1-based rank in the BM25 list, None if not there
    vector_rank: int | None  # 1-based rank in the kNN list, None if not there
    boosts: Mapping[str, float] = field(default_factory=dict)  # name -> multiplier applied
    stream_origin: str | None = None


@dataclass(frozen=True)
class RecallResult:
    query_id: uuid.UUID
    hits: list[SearchHit]
