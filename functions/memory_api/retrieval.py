"""memory-api routes for recall, profile, search, verify, expiring and delete (R-1.3, R-7, R-11.2).

Included before `GET /api/ai/memory/{observation_id}` so the fixed paths are not taken for ids.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from engram.bootstrap import recall_service
from engram.domain.observation import Observation
from engram.domain.periods import WITHIN_PATTERN, parse_within
from engram.domain.recall import RecallQuery
from engram.domain.recall_text import DEFAULT_TOKEN_BUDGET, render_recall_text
from engram.domain.scopes import require_sensitive
from engram.domain.zones import TimeZoneName
from engram.ports import Recall
from engram.runtime.http import CurrentPrincipal, ServicesDep
from engram.services.profile import stable_block
from engram.services.recall_plan import MAX_LIMIT, MAX_QUERY_CHARS, validate_query_text
from functions.memory_api.openapi import QUERY_PATTERN

router = APIRouter(prefix="/api/ai/memory", tags=["recall"])


async def _recall(services: ServicesDep) -> Recall:
    """The recall service: 503 problem+json on a build without one, never an AttributeError."""
    return recall_service(services)


RecallDep = Annotated[Recall, Depends(_recall)]


TimeZone = Annotated[
    TimeZoneName | None,  # an unknown one is a 422 naming `query.time_zone`
    Query(
        min_length=1,
        max_length=64,
        description="the user's IANA time zone, e.g. Europe/Berlin (the days shown, the plans ahead); "
        "when absent, the one the user named last in a chat turn, else the deployment's ENGRAM_TIME_ZONE",
    ),
]


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2_000)
    limit: int = Field(default=10, ge=1, le=MAX_LIMIT)
    types: list[str] = Field(default_factory=list, max_length=20)
    sensitive: bool = False
    mode: Literal["hybrid", "lexical", "vector"] = "hybrid"
    type_boosts: dict[str, float] = Field(default_factory=dict, max_length=20)
    as_of: datetime | None = Field(
        default=None,
        description="what was valid then (superseded versions included); a later time than now answers as now",
    )
    time_zone: TimeZoneName | None = Field(
        default=None,
        description="the user's IANA time zone, for days the query names ('yesterday'); default: the one"
        " they named last in a chat, else the deployment's",
    )


class Explanation(BaseModel):
    lexical_rank: int | None
    vector_rank: int | None
    fused: float = Field(description="reciprocal rank fusion score before boosts (k = 60)")
    boosts: dict[str, float]


class ScoredObservation(BaseModel):
    observation: Observation
    score: float
    explanation: Explanation


class SearchResponse(BaseModel):
    query_id: uuid.UUID
    hits: list[ScoredObservation]


class ExpiringResponse(BaseModel):
    within: str
    items: list[Observation]


@router.get("/recall", response_class=PlainTextResponse, responses={200: {"content": {"text/plain": {}}}})
async def recall(
    principal: CurrentPrincipal,
    recall: RecallDep,
    services: ServicesDep,
    q: Annotated[
        str,
        Query(
            description="what to recall: visible text, no control characters",
            min_length=1,
            max_length=MAX_QUERY_CHARS,
            json_schema_extra={"pattern": QUERY_PATTERN},
        ),
    ],
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 10,
    type: Annotated[list[str] | None, Query(max_length=20)] = None,
    sensitive: bool = False,
    budget: Annotated[int, Query(ge=50, le=32_000, description="token budget")] = DEFAULT_TOKEN_BUDGET,
    as_of: Annotated[
        datetime | None,
        Query(description="what was valid then, e.g. 2026-03-01T00:00:00Z; a later time than now answers as now"),
    ] = None,
    time_zone: TimeZone = None,
) -> PlainTextResponse:
    """Plain text for an LLM's context: priority then recency, "(unverified)" marks, tags, a token budget."""
    text = validate_query_text(q, "query.q")
    require_sensitive(principal, sensitive, "sensitive recall")
    zone = await services.memory.zone_of(principal, time_zone)
    result = await recall.search(
        principal,
        RecallQuery(text=text, limit=limit, types=tuple(type or ()), want_sensitive=sensitive, as_of=as_of, zone=zone),
    )
    body = render_recall_text(result.hits, token_budget=budget, zone=zone)
    return PlainTextResponse(body, headers={"X-Engram-Query-Id": str(result.query_id)})


@router.get("/profile", response_class=PlainTextResponse, responses={200: {"content": {"text/plain": {}}}})
async def profile(principal: CurrentPrincipal, services: ServicesDep, time_zone: TimeZone = None) -> PlainTextResponse:
    """The caller's profile as plain text for an LLM's system prompt: their own preferences and
    identity (family, work, home, routines), newest first with dates, and their plans ahead,
    never sensitive; the chat's stable memory block. Empty for a caller without a user or
    without a profile."""
    zone = await services.memory.zone_of(principal, time_zone)
    found = await services.memory.profile(principal, zone)
    return PlainTextResponse(stable_block(found, zone), headers={"X-Engram-Profile-Entries": str(len(found))})


@router.post("/search", response_model=SearchResponse)
async def search(
    body: SearchRequest, principal: CurrentPrincipal, recall: RecallDep, services: ServicesDep
) -> SearchResponse:
    """Scores with a per-hit explanation: lexical rank, vector rank, fused score, boosts."""
    text = validate_query_text(body.query, "body.query")
    require_sensitive(principal, body.sensitive, "sensitive recall")
    zone = await services.memory.search_zone(principal, body.time_zone, text)
    result = await recall.search(
        principal,
        RecallQuery(
            text=text,
            limit=body.limit,
            types=tuple(body.types),
            want_sensitive=body.sensitive,
            type_boosts=body.type_boosts,
            mode=body.mode,
            as_of=body.as_of,
            zone=zone,
        ),
    )
    hits = []
    for hit in result.hits:
        factor = 1.0
        for value in hit.boosts.values():
            factor *= value
        hits.append(
            ScoredObservation(
                observation=hit.observation,
                score=hit.score,
                explanation=Explanation(
                    lexical_rank=hit.lexical_rank,
                    vector_rank=hit.vector_rank,
                    fused=hit.score / factor if factor else 0.0,
                    boosts=dict(hit.boosts),
                ),
            )
        )
    return SearchResponse(query_id=result.query_id, hits=hits)


@router.get("/expiring", response_model=ExpiringResponse)
async def expiring(
    principal: CurrentPrincipal,
    services: ServicesDep,
    within: Annotated[str, Query(max_length=16, pattern=WITHIN_PATTERN)] = "7d",
    sensitive: bool = False,
) -> ExpiringResponse:
    """Observations still in force whose `expires_at` falls within the window (R-11.2)."""
    items = await services.curation.expiring(principal, parse_within(within), include_sensitive=sensitive)
    return ExpiringResponse(within=within, items=items)


@router.post("/{observation_id}/verify", response_model=Observation)
async def verify(observation_id: uuid.UUID, principal: CurrentPrincipal, services: ServicesDep) -> Observation:
    """A human confirms an observation (agent keys get 403)."""
    return await services.curation.verify(principal, observation_id)


@router.delete("/{observation_id}", status_code=204, response_class=Response)
async def delete(observation_id: uuid.UUID, principal: CurrentPrincipal, services: ServicesDep) -> Response:
    """Delete the row and its index entries (pgvector at once, other indexes via observation.deleted)."""
    await services.curation.delete(principal, observation_id)
    return Response(status_code=204)
