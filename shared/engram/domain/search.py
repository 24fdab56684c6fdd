"""What a search index stores and returns (R-6.2). Pure data; adapters translate it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engram.domain import session_summary
from engram.domain.injection import writers_tags
from engram.domain.language import detect_language, search_config
from engram.domain.memory_units import embedded_by_title, embedded_narrative
from engram.domain.observation import Observation

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]
else:
    # Annotations are not evaluated at run time (PEP 563), so numpy (~0.1 s to import) loads
    # only where vectors are made: the embedders and the indexer, not in every function.
    Vector = Any


@dataclass(frozen=True)
class IndexDocument:
    """One observation as an index sees it: filter fields, weighted text, embedding."""

    observation_id: uuid.UUID
    tenant_id: str
    user_id: str | None
    team_ids: Sequence[str]
    scope: str
    type: str
    valid_from: datetime | None
    expires_at: datetime | None
    revision: datetime
    title: str  # weighted fully (the observation's headline, concepts, tags, keywords)
    body: str  # weighted lower (narrative and facts)
    language: str
    embedding: Vector = field(repr=False)
    # when a memory without a valid-from time was said (`Observation.said`), None when it has one:
    # a day window (`SearchFilter.within`) holds a memory by its valid-from time, else by this
    said_at: datetime | None = None

    @property
    def id(self) -> str:
        return str(self.observation_id)


def headline_text(obs: Observation) -> str:
    """Weighted fully by BM25: the title, concepts and tags."""
    return "\n".join(p for p in [obs.title, *obs.concepts, *writers_tags(obs.tags)] if p)


def body_text(obs: Observation) -> str:
    """Weighted lower by BM25: narrative (`searched_narrative`), facts and discovery tokens
    (search keywords, context)."""
    return "\n".join(p for p in [searched_narrative(obs), *obs.facts, *obs.discovery_tokens] if p)


def searched_narrative(obs: Observation) -> str | None:
    """The narrative as searched: a session summary's without its layout (`session_summary.searched`)."""
    if obs.narrative and session_summary.is_summary(obs):
        return session_summary.searched(obs.narrative)
    return obs.narrative


def passage_text(obs: Observation) -> str:
    """What gets embedded: the observation's meaning (title, narrative, facts, concepts, tags).

    Discovery tokens are keywords and context for lexical search only: embedding them would
    pull the vector away from what the observation itself says (for a conversation turn, its
    neighbouring turns are found by BM25 while the vector stays on the turn; the two lists then
    complement each other instead of repeating each other). An assistant's turn unit is embedded
    by its title, the answer's opening (`memory_units.embedded_by_title`); a person's turn unit by
    at most the first `EMBEDDED_TURN_CHARS` characters of its narrative (`memory_units.embedded_narrative`).
    A session summary is embedded with its sections' labels: without them its vector ranked it
    higher among a question's candidates, where it seldom says the answer (bench/RESULTS.md, part 31).
    """
    if embedded_by_title(obs):  # an assistant's answer: its opening (`memory_units.embedded_by_title`)
        return "\n".join(p for p in (obs.title, *writers_tags(obs.tags)) if p)
    parts = [obs.title, embedded_narrative(obs), *obs.facts, *obs.concepts, *writers_tags(obs.tags)]
    return "\n".join(p for p in parts if p)


def text_hash(model: str, text: str) -> str:
    """The embedding cache's key of a passage (`embedding_cache.text_hash`)."""
    import hashlib

    return hashlib.sha256(f"{model}\x1f{text}".encode()).hexdigest()


def index_document(obs: Observation, embedding: Vector) -> IndexDocument:
    title, body = headline_text(obs), body_text(obs)
    return IndexDocument(
        observation_id=obs.id,
        tenant_id=obs.tenant_id,
        user_id=obs.user_id,
        team_ids=list(obs.team_ids),
        scope=obs.scope.value,
        type=obs.type,
        valid_from=obs.valid_from,
        expires_at=obs.expires_at,
        revision=obs.updated_at,
        title=title,
        body=body,
        language=search_config(detect_language(f"{title}\n{body}")),
        embedding=embedding,
        said_at=None if obs.valid_from else obs.said,
    )


@dataclass(frozen=True)
class Ranked:
    """One entry of a ranked list from an index: the observation id and the list's own score."""

    id: str
    score: float
    type: str | None = None  # the observation type, when the index returns it (shared candidate lists)
    # BM25 lists: the score over the query's weight (`ranking.lexical_weight`), None if unknown
    coverage: float | None = None


@dataclass(frozen=True)
class SearchFilter:
    """Everything a search filters on besides visibility: the types it keeps (all if empty), the
    types it leaves out, the instant of the search, and the window [start, end) the memories'
    valid-from time, else when they were said (`IndexDocument.said_at`), must fall in (None: any)."""

    now: datetime
    types: Sequence[str] = ()
    except_types: Sequence[str] = ()
    within: tuple[datetime, datetime] | None = None


@dataclass(frozen=True)
class SearchPlan:
    """What an index learned about a tenant at the start of a transaction's searches."""

    docs: int  # indexed documents of the tenant
    exact: bool  # exact kNN scan instead of the approximate (HNSW) index
    bm25_docs: int  # BM25's N: the documents its statistics count (not an assistant's passages, migration 0017)
