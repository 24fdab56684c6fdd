"""memory-api (R-1.3): remember, list, mark, and domain CloudEvents over HTTP.

Thin: parse the request, call a service from `engram`, shape the response. Errors become
problem+json through `engram.runtime.http`.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Literal

from cloudevents.exceptions import GenericException as CloudEventError
from cloudevents.http import from_http
from fastapi import Query, Request, Response, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from engram.domain.errors import ArchiveError
from engram.domain.observation import Observation, Scope, Source
from engram.domain.paging import MARK_PATTERN, TOTAL_CAP
from engram.domain.scopes import Permission
from engram.runtime.http import CurrentPrincipal, ServicesDep, document, function_app, warm_embedder
from engram.runtime.problems import problem
from engram.services.feedback import FeedbackRequest
from engram.services.memory import MarkRequest, RememberRequest
from engram.services.personal_data import Erasure
from functions.memory_api.agent_keys import router as agent_keys_router
from functions.memory_api.history import router as history_router
from functions.memory_api.openapi import describe
from functions.memory_api.retrieval import router as retrieval_router

app = function_app(
    "Engram memory API",
    "Remember, recall, search, verify, mark, feedback, delete and export memories.",
    name="memory-api",
    warm=warm_embedder,  # recall and search embed their query: load the model before the first one
)
app.include_router(retrieval_router)  # fixed paths (recall, search, expiring) before /{observation_id}
app.include_router(history_router)  # /{observation_id}/history and /unmerge (R-15.3)
document(app, describe)  # what the routes accept that the models cannot say
app.include_router(agent_keys_router)


class RememberResponse(BaseModel):
    outcome: Literal["created", "updated", "deduplicated"]
    observation: Observation


class ObservationPage(BaseModel):
    items: list[Observation]
    page: int
    size: int
    total: int = Field(description=f"matching memories: exact up to {TOTAL_CAP:,}, beyond that a lower bound")
    total_exact: bool = Field(description=f"false when more than {TOTAL_CAP:,} match and `total` stops there")
    next: str | None = Field(
        description="pass as `after` for the page that follows (a range read, however deep); null on the last page"
    )


class Accepted(BaseModel):
    id: str
    status: Literal["accepted"] = "accepted"
    duplicate: bool = False


@app.post(
    "/api/ai/memory",
    response_model=RememberResponse,
    tags=["memory"],
    responses={201: {"model": RememberResponse, "description": "stored (200: updated or deduplicated)"}},
)
async def remember(
    body: RememberRequest, principal: CurrentPrincipal, services: ServicesDep, response: Response
) -> RememberResponse:
    written = await services.memory.remember(principal, body)
    response.status_code = status.HTTP_201_CREATED if written.outcome == "created" else status.HTTP_200_OK
    return RememberResponse(outcome=written.outcome.value, observation=written.observation)


@app.get("/api/ai/memory", response_model=ObservationPage, tags=["memory"])
async def list_memory(
    principal: CurrentPrincipal,
    services: ServicesDep,
    type: Annotated[list[str] | None, Query(max_length=20)] = None,
    tag: Annotated[list[str] | None, Query(max_length=20)] = None,
    scope: Scope | None = None,
    source: Source | None = None,
    verified: bool | None = None,
    include_expired: bool = False,
    sensitive: bool = False,
    page: Annotated[int, Query(ge=1, le=100_000, description="counted from `after` when it is given")] = 1,
    size: Annotated[int, Query(ge=1, le=200)] = 50,
    after: Annotated[
        str | None,
        Query(pattern=MARK_PATTERN, description="the `next` of a page: list the memories after its last one"),
    ] = None,
) -> ObservationPage:
    result = await services.memory.list(
        principal,
        types=type or (),
        tags=tag or (),
        scope=scope,
        source=source.value if source else None,
        verified=verified,
        include_expired=include_expired,
        include_sensitive=sensitive,
        page=page,
        size=size,
        after=after,
    )
    return ObservationPage(
        items=result.items,
        page=result.page,
        size=result.size,
        total=result.total,
        total_exact=result.total_exact,
        next=result.next,
    )


@app.delete("/api/ai/memory", response_model=Erasure, tags=["personal data"])
async def erase_memory(
    principal: CurrentPrincipal,
    services: ServicesDep,
    user: Annotated[str, Query(min_length=1, max_length=128, description="whose personal memory to erase")],
) -> Erasure:
    """Erase a user's personal memory: owned observations, feedback, and their index entries (R-11.3)."""
    try:
        return await services.personal_data.erase(principal, user)
    except ArchiveError as exc:
        return problem(  # type: ignore[return-value]
            503,
            f"the database part is erased, the telemetry archive not yet: {exc}; ask for the erasure again",
            title="Archive Unavailable",
        )


# fixed paths before `/api/ai/memory/{observation_id}`
@app.get("/api/ai/memory/export", tags=["personal data"], response_class=StreamingResponse)
async def export_memory(
    principal: CurrentPrincipal,
    services: ServicesDep,
    user: Annotated[str | None, Query(min_length=1, max_length=128, description="default: the caller")] = None,
) -> StreamingResponse:
    """A user's personal memory as JSON Lines: header, observations, feedback, chats, telemetry (also the
    archived days), and a trailer with counts."""
    target = services.personal_data.target(principal, user, Permission.read_observation)
    filename = "engram-memory-" + re.sub(r"[^A-Za-z0-9._-]", "_", target)[:80] + ".jsonl"
    try:
        lines = await services.personal_data.export(principal.tenant_id, target)
    except ArchiveError as exc:
        return problem(  # type: ignore[return-value]
            503,
            f"the telemetry archive cannot be read, so the export would be incomplete: {exc}; try again later",
            title="Archive Unavailable",
        )
    return StreamingResponse(
        lines,
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "no-store"},
    )


@app.post("/api/ai/memory/feedback", response_model=Accepted, status_code=202, tags=["memory"])
async def feedback(body: FeedbackRequest, principal: CurrentPrincipal, services: ServicesDep) -> Accepted:
    """retrieved / cited / confirmed / rejected on an observation, or a 1..5 rating of a query (R-9.1)."""
    event_id = await services.feedback.submit(principal, body)
    return Accepted(id=event_id)


@app.get("/api/ai/memory/{observation_id}", response_model=Observation, tags=["memory"])
async def get_memory(observation_id: uuid.UUID, principal: CurrentPrincipal, services: ServicesDep) -> Observation:
    return await services.memory.get(principal, observation_id)


@app.post("/api/ai/memory/mark", response_model=Accepted, status_code=202, tags=["memory"])
async def mark(body: MarkRequest, principal: CurrentPrincipal, services: ServicesDep) -> Accepted:
    event_id = await services.memory.mark(principal, body)
    return Accepted(id=event_id)


@app.post("/api/ai/events", response_model=Accepted, status_code=202, tags=["events"])
async def domain_event(request: Request, principal: CurrentPrincipal, services: ServicesDep) -> Any:
    """A domain CloudEvent over HTTP, binary (`ce-*` headers) or structured mode."""
    body = await request.body()
    if not body:
        return problem(422, "the request has no body", field="body")
    try:
        event = from_http(dict(request.headers), body)
    except CloudEventError as exc:
        return problem(422, f"not a valid CloudEvent: {exc}", field="body")
    except (ValueError, TypeError) as exc:
        return problem(422, f"not a valid CloudEvent: {exc}", field="body")
    published = await services.ingest.accept(principal, event)
    return Accepted(id=published.event_id, duplicate=published.duplicate)
