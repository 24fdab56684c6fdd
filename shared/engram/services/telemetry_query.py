"""The telemetry API's queries (R-10): overview, events, time series, top tools, top users.

Every query runs in a tenant transaction (row-level security) and filters by tenant in SQL
as well. Aggregates read the hourly rollups (migration 0003) for the whole hours of the
window and the raw `ai_events` rows for its two ragged edges (less than an hour each), so
an answer is exact for the window `[now - period, now)` and its cost does not grow with the
number of events in the window. Top users, whose rollup has a row per user and hour, reads
whole days from the daily rollup first.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from engram.adapters.postgres import Connection, Database
from engram.domain.periods import Granularity, Period, Window, buckets, split, split_days
from engram.domain.scopes import Permission, Principal
from engram.services.memory import require


class Metric(StrEnum):
    """What `/timeseries` can draw."""

    events = "events"
    turns = "turns"
    cost = "cost"
    tokens = "tokens"
    errors = "errors"
    tool_calls = "tool_calls"
    ptl_recoveries = "ptl_recoveries"
    cache_hit_rate = "cache_hit_rate"


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


# ---- SQL ---------------------------------------------------------------------------------------

# $1 tenant, $2/$3 whole hours [start, end), $4..$7 the two raw edges [start, end)
_RAW_EDGES = "tenant_id = $1 AND ((created_at >= $4 AND created_at < $5) OR (created_at >= $6 AND created_at < $7))"

_HOURLY = f"""
SELECT bucket, event_name, events, cost_usd, input_tokens, output_tokens, cache_read_tokens,
       cache_creation_tokens, duration_ms, failures
FROM ai_events_hourly WHERE tenant_id = $1 AND bucket >= $2 AND bucket < $3
UNION ALL
SELECT date_trunc('hour', created_at, 'UTC'), event_name, count(*),
       sum(engram_ai_event_num(metadata, 'costUsd')),
       sum(engram_ai_event_num(metadata, 'inputTokens'))::bigint,
       sum(engram_ai_event_num(metadata, 'outputTokens'))::bigint,
       sum(engram_ai_event_num(metadata, 'cacheReadInputTokens'))::bigint,
       sum(engram_ai_event_num(metadata, 'cacheCreationInputTokens'))::bigint,
       sum(engram_ai_event_num(metadata, 'durationMs'))::bigint,
       count(*) FILTER (WHERE metadata -> 'success' = 'false'::jsonb OR metadata -> 'succeeded' = 'false'::jsonb
                          OR metadata ->> 'status' = 'failed')
FROM ai_events WHERE {_RAW_EDGES}
GROUP BY 1, 2
"""

_OVERVIEW = f"""
SELECT coalesce(sum(events), 0) AS events,
       coalesce(sum(events) FILTER (WHERE event_name = 'chat.turn_completed'), 0) AS turns,
       coalesce(sum(cost_usd), 0) AS cost_usd,
       coalesce(sum(input_tokens) FILTER (WHERE event_name = 'chat.turn_completed'), 0) AS input_tokens,
       coalesce(sum(output_tokens) FILTER (WHERE event_name = 'chat.turn_completed'), 0) AS output_tokens,
       coalesce(sum(cache_read_tokens) FILTER (WHERE event_name = 'chat.turn_completed'), 0) AS cache_read,
       coalesce(sum(cache_creation_tokens) FILTER (WHERE event_name = 'chat.turn_completed'), 0) AS cache_creation,
       coalesce(sum(events) FILTER (WHERE event_name = 'chat.error'), 0) AS errors,
       coalesce(sum(events) FILTER (WHERE event_name = 'chat.ptl_recovery'), 0) AS ptl,
       coalesce(sum(events) FILTER (WHERE event_name = 'chat.tool_used'), 0) AS tool_calls
FROM ({_HOURLY}) AS h
"""

_TURN = "event_name = 'chat.turn_completed'"
_METRIC_SQL = {
    Metric.events: "sum(events)",
    Metric.turns: f"sum(events) FILTER (WHERE {_TURN})",
    Metric.cost: "sum(cost_usd)",
    Metric.tokens: f"sum(input_tokens + output_tokens) FILTER (WHERE {_TURN})",
    Metric.errors: "sum(events) FILTER (WHERE event_name = 'chat.error')",
    Metric.tool_calls: "sum(events) FILTER (WHERE event_name = 'chat.tool_used')",
    Metric.ptl_recoveries: "sum(events) FILTER (WHERE event_name = 'chat.ptl_recovery')",
    Metric.cache_hit_rate: (
        f"sum(cache_read_tokens) FILTER (WHERE {_TURN})::double precision"
        f" / nullif(sum(input_tokens + cache_read_tokens + cache_creation_tokens) FILTER (WHERE {_TURN}), 0)"
    ),
}

_TOP_TOOLS = f"""
SELECT tool_name, sum(calls) AS calls, sum(duration_ms) AS duration_ms, sum(successes) AS successes
FROM (
  SELECT tool_name, calls, duration_ms, successes
  FROM ai_events_hourly_tools WHERE tenant_id = $1 AND bucket >= $2 AND bucket < $3
  UNION ALL
  SELECT metadata ->> 'toolName', 1, engram_ai_event_num(metadata, 'durationMs')::bigint,
         CASE WHEN metadata -> 'success' = 'true'::jsonb THEN 1 ELSE 0 END
  FROM ai_events WHERE {_RAW_EDGES} AND event_name = 'chat.tool_used' AND metadata ? 'toolName'
) AS t
GROUP BY tool_name
ORDER BY calls DESC, tool_name
LIMIT $8
"""

# $1 tenant, $2/$3 whole days, $4..$7 whole hours around them, $8..$11 raw edges, $12 limit
_TOP_USERS = """
SELECT user_id, sum(cost_usd) AS cost_usd, sum(turns) AS turns, sum(tokens) AS tokens, sum(events) AS events
FROM (
  SELECT user_id, cost_usd, turns, tokens, events
  FROM ai_events_daily_users WHERE tenant_id = $1 AND bucket >= $2 AND bucket < $3
  UNION ALL
  SELECT user_id, cost_usd, turns, tokens, events
  FROM ai_events_hourly_users
  WHERE tenant_id = $1 AND ((bucket >= $4 AND bucket < $5) OR (bucket >= $6 AND bucket < $7))
  UNION ALL
  SELECT user_id, engram_ai_event_num(metadata, 'costUsd'),
         CASE WHEN event_name = 'chat.turn_completed' THEN 1 ELSE 0 END,
         (engram_ai_event_num(metadata, 'inputTokens') + engram_ai_event_num(metadata, 'outputTokens'))::bigint,
         1
  FROM ai_events
  WHERE tenant_id = $1 AND user_id IS NOT NULL
    AND ((created_at >= $8 AND created_at < $9) OR (created_at >= $10 AND created_at < $11))
) AS u
GROUP BY user_id
ORDER BY cost_usd DESC, user_id
LIMIT $12
"""


def _window_args(tenant_id: str, window: Window) -> list[Any]:
    s = split(window)
    (a0, a1), (b0, b1) = s.edges
    return [tenant_id, s.whole_start, s.whole_end, a0, a1, b0, b1]


def _day_window_args(tenant_id: str, window: Window) -> list[Any]:
    s = split_days(window)
    (ha0, ha1), (hb0, hb1) = s.hours
    (a0, a1), (b0, b1) = s.edges
    return [tenant_id, *s.days, ha0, ha1, hb0, hb1, a0, a1, b0, b1]


@dataclass(frozen=True)
class EventFilter:
    event_name: str | None = None
    chat_id: uuid.UUID | None = None
    user_id: str | None = None


def _event_clauses(tenant_id: str, window: Window, where: EventFilter) -> tuple[list[str], list[Any]]:
    params: list[Any] = [tenant_id, window.start, window.end]
    clauses = ["tenant_id = $1", "created_at >= $2", "created_at < $3"]
    for column, value in (("event_name", where.event_name), ("chat_id", where.chat_id), ("user_id", where.user_id)):
        if value is not None:
            params.append(value)
            clauses.append(f"{column} = ${len(params)}")
    return clauses, params


class TelemetryQuery:
    def __init__(self, db: Database) -> None:
        self.db = db

    @staticmethod
    def _allow(principal: Principal) -> None:
        require(principal, Permission.view_devtools)

    async def overview(self, principal: Principal, period: Period, now: datetime) -> Overview:
        self._allow(principal)
        window = Window.last(period, now)
        async with self.db.tenant(principal.tenant_id) as conn:
            r = await conn.fetchrow(_OVERVIEW, *_window_args(principal.tenant_id, window))
        assert r is not None
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
        async with self.db.tenant(principal.tenant_id) as conn:
            total = await self._count(conn, principal.tenant_id, window, where)
            clauses, params = _event_clauses(principal.tenant_id, window, where)
            params.extend([size, (page - 1) * size])
            rows = (
                await conn.fetch(
                    "SELECT id, event_name, user_id, chat_id, metadata, created_at FROM ai_events"
                    f" WHERE {' AND '.join(clauses)}"
                    f" ORDER BY created_at DESC, id DESC LIMIT ${len(params) - 1} OFFSET ${len(params)}",
                    *params,
                )
                if (page - 1) * size < total
                else []
            )
        return EventPage(
            items=[EventRow(**dict(r.items())) for r in rows], page=page, size=size, total=total, period=period
        )

    @staticmethod
    async def _count(conn: Connection, tenant_id: str, window: Window, where: EventFilter) -> int:
        """Totals come from the rollups unless the filter names a user or a chat (those are small)."""
        if where.user_id is None and where.chat_id is None:
            params = _window_args(tenant_id, window)
            name_filter = ""
            if where.event_name is not None:
                params.append(where.event_name)
                name_filter = " WHERE event_name = $8"
            value = await conn.fetchval(f"SELECT coalesce(sum(events), 0) FROM ({_HOURLY}) AS h{name_filter}", *params)
            return int(value)
        clauses, params = _event_clauses(tenant_id, window, where)
        return int(await conn.fetchval(f"SELECT count(*) FROM ai_events WHERE {' AND '.join(clauses)}", *params))

    async def timeseries(
        self, principal: Principal, metric: Metric, period: Period, granularity: Granularity, now: datetime
    ) -> TimeSeries:
        self._allow(principal)
        window = Window.last(period, now)
        trunc = "hour" if granularity is Granularity.hour else "day"
        sql = (
            f"SELECT date_trunc('{trunc}', bucket, 'UTC') AS t, {_METRIC_SQL[metric]} AS value"
            f" FROM ({_HOURLY}) AS h GROUP BY 1"
        )
        async with self.db.tenant(principal.tenant_id) as conn:
            rows = await conn.fetch(sql, *_window_args(principal.tenant_id, window))
        found = {r["t"]: r["value"] for r in rows}
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
        async with self.db.tenant(principal.tenant_id) as conn:
            rows = await conn.fetch(_TOP_TOOLS, *_window_args(principal.tenant_id, window), limit)
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
        async with self.db.tenant(principal.tenant_id) as conn:
            rows = await conn.fetch(_TOP_USERS, *_day_window_args(principal.tenant_id, window), limit)
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
