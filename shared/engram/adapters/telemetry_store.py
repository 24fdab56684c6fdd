"""Telemetry on PostgreSQL (`engram.ports.TelemetryStore`, R-4.5, R-10): `ai_events` and its rollups.

Writes append typed rows (the rollup triggers of migration 0003 fold each statement's rows at
once). Aggregates read the hourly rollups for the whole hours of a window and the raw rows
for its two ragged edges (less than an hour each), so an answer is exact for the window and
its cost does not grow with the number of events in it. Top users, whose rollup has a row
per user and hour, reads whole days from the daily rollup first. Every query also filters
by tenant in SQL, on top of row-level security.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from engram.adapters.postgres import Connection
from engram.domain.errors import TelemetryError
from engram.domain.periods import Granularity, Window, split, split_days
from engram.domain.telemetry import EventFilter, Metric, TelemetryRecord, validate_metadata

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
-- rounded: a float sum depends on the order its rows arrive in, so equal costs could come back
-- in either order from one call to the next (the dashboard and the API disagreed on a tie)
ORDER BY round(sum(cost_usd)::numeric, 9) DESC, user_id
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


def _event_clauses(tenant_id: str, window: Window, where: EventFilter) -> tuple[list[str], list[Any]]:
    params: list[Any] = [tenant_id, window.start, window.end]
    clauses = ["tenant_id = $1", "created_at >= $2", "created_at < $3"]
    for column, value in (("event_name", where.event_name), ("chat_id", where.chat_id), ("user_id", where.user_id)):
        if value is not None:
            params.append(value)
            clauses.append(f"{column} = ${len(params)}")
    return clauses, params


class PgTelemetryStore:
    def __init__(self, conn: Connection, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    async def write(self, records: Sequence[TelemetryRecord]) -> None:
        if not records:
            return
        rows = []
        for r in records:
            if not r.tenant_id:
                raise TelemetryError(f"telemetry event {r.name!r} has no tenant")
            rows.append(
                (r.tenant_id, r.name, r.user_id, r.chat_id, validate_metadata(r.name, r.metadata), r.created_at)
            )
        # one statement per call: the rollup trigger folds the whole batch at once
        await self.conn.execute(
            "INSERT INTO ai_events (tenant_id, event_name, user_id, chat_id, metadata, created_at)"
            " SELECT t, n, u, c, m, coalesce(at, now())"
            " FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::jsonb[], $6::timestamptz[])"
            " AS x(t, n, u, c, m, at)",
            *(list(column) for column in zip(*rows, strict=True)),
        )

    async def totals(self, window: Window) -> Mapping[str, Any]:
        row = await self.conn.fetchrow(_OVERVIEW, *_window_args(self.tenant_id, window))
        assert row is not None  # an aggregate has one row
        return dict(row.items())

    async def events(self, window: Window, where: EventFilter, *, limit: int, offset: int) -> list[Mapping[str, Any]]:
        clauses, params = _event_clauses(self.tenant_id, window, where)
        params.extend([limit, offset])
        rows = await self.conn.fetch(
            "SELECT id, event_name, user_id, chat_id, metadata, created_at FROM ai_events"
            f" WHERE {' AND '.join(clauses)}"
            f" ORDER BY created_at DESC, id DESC LIMIT ${len(params) - 1} OFFSET ${len(params)}",
            *params,
        )
        return [dict(r.items()) for r in rows]

    async def count(self, window: Window, where: EventFilter) -> int:
        """From the rollups unless the filter names a user or a chat (those are small)."""
        if where.user_id is None and where.chat_id is None:
            params = _window_args(self.tenant_id, window)
            name_filter = ""
            if where.event_name is not None:
                params.append(where.event_name)
                name_filter = " WHERE event_name = $8"
            sql = f"SELECT coalesce(sum(events), 0) FROM ({_HOURLY}) AS h{name_filter}"
            return int(await self.conn.fetchval(sql, *params))
        clauses, params = _event_clauses(self.tenant_id, window, where)
        return int(await self.conn.fetchval(f"SELECT count(*) FROM ai_events WHERE {' AND '.join(clauses)}", *params))

    async def series(self, metric: Metric, granularity: Granularity, window: Window) -> dict[datetime, Any]:
        trunc = "hour" if granularity is Granularity.hour else "day"
        sql = (
            f"SELECT date_trunc('{trunc}', bucket, 'UTC') AS t, {_METRIC_SQL[metric]} AS value"
            f" FROM ({_HOURLY}) AS h GROUP BY 1"
        )
        rows = await self.conn.fetch(sql, *_window_args(self.tenant_id, window))
        return {r["t"]: r["value"] for r in rows}

    async def top_tools(self, window: Window, limit: int) -> list[Mapping[str, Any]]:
        rows = await self.conn.fetch(_TOP_TOOLS, *_window_args(self.tenant_id, window), limit)
        return [dict(r.items()) for r in rows]

    async def top_users(self, window: Window, limit: int) -> list[Mapping[str, Any]]:
        rows = await self.conn.fetch(_TOP_USERS, *_day_window_args(self.tenant_id, window), limit)
        return [dict(r.items()) for r in rows]
