"""The telemetry API's queries (R-10): overview, events, time series, top tools, top users.

Every query runs in a tenant transaction (row-level security) through `tx.telemetry`, whose
aggregates are exact for the window `[now - period, now)` at a cost that does not grow with
the number of events in it (`engram.adapters.telemetry_store`). This module checks the
permission and shapes the answers.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from engram.domain.periods import Granularity, Period, Window, buckets
from engram.domain.scopes import Permission, Principal, require
from engram.domain.telemetry import EventFilter, Metric
from engram.ports import UnitOfWork

# ---- response models ---------------------------------------------------------------------------


class Tokens(BaseModel):
    input: int
    output: int
    cache_read: int
    cache_creation: int
    total: int


class Overview(BaseModel):
    period: Period
    start: datetime
    end: datetime
    events: int
    turns: int
    cost_usd: float
    tokens: Tokens
    errors: int
    cache_hit_rate: float | None  # cache reads / all prompt tokens of chat turns; None without turns
    ptl_count: int
    tool_calls: int


class EventRow(BaseModel):
    id: int
    event_name: str
    user_id: str | None
    chat_id: uuid.UUID | None
    metadata: dict[str, Any]
    created_at: datetime


class EventPage(BaseModel):
    items: list[EventRow]
    page: int
    size: int
    total: int
    period: Period


class Point(BaseModel):
    t: datetime
    value: float | None


class TimeSeries(BaseModel):
    metric: Metric
    period: Period
    granularity: Granularity
    start: datetime
    end: datetime
    points: list[Point]


class ToolStats(BaseModel):
    tool_name: str
    calls: int
    avg_duration_ms: float
    success_rate: float


class UserStats(BaseModel):
    user_id: str
    cost_usd: float
    turns: int
    tokens: int
    events: int


class TopTools(BaseModel):
    period: Period
    items: list[ToolStats]


class TopUsers(BaseModel):
    period: Period
    items: list[UserStats]


class TelemetryQuery:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow

    @staticmethod
    def _allow(principal: Principal) -> None:
        require(principal, Permission.view_devtools)

    async def overview(self, principal: Principal, period: Period, now: datetime) -> Overview:
        self._allow(principal)
        window = Window.last(period, now)
        async with self.uow.tenant(principal.tenant_id) as tx:
            r = await tx.telemetry.totals(window)
        prompt = r["input_tokens"] + r["cache_read"] + r["cache_creation"]
        return Overview(
            period=period,
            start=window.start,
            end=window.end,
            events=r["events"],
            turns=r["turns"],
            cost_usd=round(float(r["cost_usd"]), 6),
            tokens=Tokens(
                input=r["input_tokens"],
                output=r["output_tokens"],
                cache_read=r["cache_read"],
                cache_creation=r["cache_creation"],
                total=r["input_tokens"] + r["output_tokens"] + r["cache_read"] + r["cache_creation"],
            ),
            errors=r["errors"],
            cache_hit_rate=round(r["cache_read"] / prompt, 6) if prompt else None,
            ptl_count=r["ptl"],
            tool_calls=r["tool_calls"],
        )

    async def events(
        self,
        principal: Principal,
        period: Period,
        now: datetime,
        *,
        where: EventFilter,
        page: int,
        size: int,
    ) -> EventPage:
        self._allow(principal)
        window = Window.last(period, now)
        offset = (page - 1) * size
        async with self.uow.tenant(principal.tenant_id) as tx:
            total = await tx.telemetry.count(window, where)
            rows = await tx.telemetry.events(window, where, limit=size, offset=offset) if offset < total else []
        return EventPage(items=[EventRow(**r) for r in rows], page=page, size=size, total=total, period=period)

    async def timeseries(
        self, principal: Principal, metric: Metric, period: Period, granularity: Granularity, now: datetime
    ) -> TimeSeries:
        self._allow(principal)
        window = Window.last(period, now)
        async with self.uow.tenant(principal.tenant_id) as tx:
            found = await tx.telemetry.series(metric, granularity, window)
        empty: float | None = None if metric is Metric.cache_hit_rate else 0.0
        points = []
        for t in buckets(window, granularity):
            value = found.get(t)
            points.append(Point(t=t, value=float(value) if value is not None else empty))
        return TimeSeries(
            metric=metric, period=period, granularity=granularity, start=window.start, end=window.end, points=points
        )

    async def top_tools(self, principal: Principal, period: Period, now: datetime, limit: int) -> TopTools:
        self._allow(principal)
        window = Window.last(period, now)
        async with self.uow.tenant(principal.tenant_id) as tx:
            rows = await tx.telemetry.top_tools(window, limit)
        return TopTools(
            period=period,
            items=[
                ToolStats(
                    tool_name=r["tool_name"],
                    calls=r["calls"],
                    avg_duration_ms=round(r["duration_ms"] / r["calls"], 3),
                    success_rate=round(r["successes"] / r["calls"], 6),
                )
                for r in rows
                if r["calls"]
            ],
        )

    async def top_users(self, principal: Principal, period: Period, now: datetime, limit: int) -> TopUsers:
        self._allow(principal)
        window = Window.last(period, now)
        async with self.uow.tenant(principal.tenant_id) as tx:
            rows = await tx.telemetry.top_users(window, limit)
        return TopUsers(
            period=period,
            items=[
                UserStats(
                    user_id=r["user_id"],
                    cost_usd=round(float(r["cost_usd"]), 6),
                    turns=r["turns"],
                    tokens=r["tokens"],
                    events=r["events"],
                )
                for r in rows
            ],
        )
