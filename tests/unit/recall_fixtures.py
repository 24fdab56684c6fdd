"""Helpers of the recall scoring tests: a draft as the store returns it, and one hybrid plan
scored over candidates found at given ranks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from bench import chat_units
from engram.domain.observation import Observation, ObservationDraft
from engram.domain.ranking import rrf_fuse
from engram.domain.recall import RecallQuery, SearchHit
from engram.domain.scopes import Visibility
from engram.domain.search import SearchFilter
from engram.services.recall_plan import Plan
from engram.services.recall_scoring import scored_hits


def stored(draft: ObservationDraft, at: datetime) -> Observation:
    """A draft as the store returns it (what recall hydrates), written at `at`."""
    return chat_units.stored(draft, at)


def scored(
    question: str,
    candidates: Sequence[Observation],
    lexical: Sequence[Observation],
    vector: Sequence[Observation],
    now: datetime,
    limit: int = 5,
) -> list[SearchHit]:
    """Hybrid scoring of `candidates` found at these ranks of the BM25 and kNN lists (no lists
    kept on the plan: no floors, the order is the boosted fused score)."""
    plan = Plan(
        RecallQuery(text=question, limit=limit, mode="hybrid"),
        question,
        question,
        Visibility(tenant_id="t", user_id="u", teams=frozenset(), include_sensitive=False),
        SearchFilter(now=now),
        pool=20,
    )
    plan.lexical = []
    plan.fused = rrf_fuse([str(o.id) for o in lexical], [str(o.id) for o in vector])
    return scored_hits(plan, {str(o.id): o for o in candidates}, now)
