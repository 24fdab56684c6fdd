"""telemetry-query (R-10): the telemetry API and its dashboard page.

Thin: parse and validate the query, call `engram.services.telemetry_query`, shape the
response. Every data route needs `view:FE_DevTools` (403 problem+json otherwise) and answers
only for the caller's tenant. The dashboard page is a static shell (HTML, JS, CSS and a
vendored Chart.js): it holds no data and fetches everything from the gated routes with the
caller's token, so it needs no network beyond this function.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

from fastapi import Query
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from engram.domain.errors import Unprocessable
from engram.domain.periods import Granularity, Period
from engram.domain.telemetry import TELEMETRY_EVENTS, EventFilter, Metric
from engram.runtime.http import CurrentPrincipal, ServicesDep, function_app
from engram.services.telemetry_query import EventPage, Overview, TimeSeries, TopTools, TopUsers

PREFIX = "/api/ai/telemetry"
STATIC = Path(__file__).parent / "static"
# the page loads only its own files and talks only to this origin
DASHBOARD_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


app = function_app(
    "Engram telemetry API",
    "Overview, events, time series, top tools and top users of a tenant's AI telemetry.",
    name="telemetry-query",
    relay_outbox=False,
)

PeriodQuery = Annotated[Period, Query(description="how far back from now")]
LimitQuery = Annotated[int, Query(ge=1, le=100)]


def _now() -> datetime:
    return datetime.now(UTC)


@app.get(f"{PREFIX}/overview", response_model=Overview, tags=["telemetry"])
async def overview(principal: CurrentPrincipal, services: ServicesDep, period: PeriodQuery = Period.day) -> Overview:
    return await services.telemetry_query.overview(principal, period, _now())


@app.get(f"{PREFIX}/events", response_model=EventPage, tags=["telemetry"])
async def events(
    principal: CurrentPrincipal,
    services: ServicesDep,
    period: PeriodQuery = Period.day,
    event_name: Annotated[
        str | None, Query(alias="eventName", max_length=64, json_schema_extra={"enum": sorted(TELEMETRY_EVENTS)})
    ] = None,
    chat_id: Annotated[uuid.UUID | None, Query(alias="chatId")] = None,
    user_id: Annotated[str | None, Query(alias="userId", min_length=1, max_length=128)] = None,
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
    size: Annotated[int, Query(ge=1, le=200)] = 50,
) -> EventPage:
    if event_name is not None and event_name not in TELEMETRY_EVENTS:
        raise Unprocessable(
            "query.eventName", f"unknown event name {event_name!r}; allowed: {', '.join(sorted(TELEMETRY_EVENTS))}"
        )
    return await services.telemetry_query.events(
        principal,
        period,
        _now(),
        where=EventFilter(event_name=event_name, chat_id=chat_id, user_id=user_id),
        page=page,
        size=size,
    )


@app.get(f"{PREFIX}/timeseries", response_model=TimeSeries, tags=["telemetry"])
async def timeseries(
    principal: CurrentPrincipal,
    services: ServicesDep,
    metric: Metric = Metric.turns,
    period: PeriodQuery = Period.day,
    granularity: Granularity = Granularity.hour,
) -> TimeSeries:
    return await services.telemetry_query.timeseries(principal, metric, period, granularity, _now())


@app.get(f"{PREFIX}/top-tools", response_model=TopTools, tags=["telemetry"])
async def top_tools(
    principal: CurrentPrincipal, services: ServicesDep, period: PeriodQuery = Period.day, limit: LimitQuery = 10
) -> TopTools:
    return await services.telemetry_query.top_tools(principal, period, _now(), limit)


@app.get(f"{PREFIX}/top-users", response_model=TopUsers, tags=["telemetry"])
async def top_users(
    principal: CurrentPrincipal, services: ServicesDep, period: PeriodQuery = Period.day, limit: LimitQuery = 10
) -> TopUsers:
    return await services.telemetry_query.top_users(principal, period, _now(), limit)


# ---- the dashboard page --------------------------------------------------------------------------


@app.get(f"{PREFIX}/dashboard", include_in_schema=False)
async def dashboard() -> FileResponse:
    return FileResponse(
        STATIC / "dashboard.html",
        media_type="text/html; charset=utf-8",
        headers={"Content-Security-Policy": DASHBOARD_CSP, "Cache-Control": "no-cache"},
    )


@app.get(f"{PREFIX}/dashboard/", include_in_schema=False)
async def dashboard_slash() -> RedirectResponse:
    return RedirectResponse(f"{PREFIX}/dashboard", status_code=308)


app.mount(f"{PREFIX}/dashboard/assets", StaticFiles(directory=STATIC / "assets"), name="dashboard-assets")
