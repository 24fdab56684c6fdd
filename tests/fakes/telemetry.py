"""Telemetry in memory (`engram.ports.TelemetryStore`): the `ai_events` rows of the tenant.

`write` validates like `PgTelemetryStore.write` (every record first: one without a tenant or
with bad metadata rejects the call before anything is kept). The aggregates are computed from
the kept rows over the half-open window: what the real store's rollups plus raw edges add up
to (sums over no rows are None, as SQL's `sum() FILTER` gives NULL).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from engram.domain.errors import TelemetryError
from engram.domain.periods import Granularity, Window
from engram.domain.telemetry import EventFilter, Metric, TelemetryRecord, validate_metadata
from tests.fakes.data import TxState, jsonb

TURN = "chat.turn_completed"
Row = Mapping[str, Any]


def num(row: Row, key: str) -> float:
    """`engram_ai_event_num`: a JSON number, else 0 (booleans are not numbers in JSON)."""
    value = row["metadata"].get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _sum(rows: Sequence[Row], value: Callable[[Row], float], where: Callable[[Row], bool] = lambda _r: True) -> Any:
    picked = [value(r) for r in rows if where(r)]
    return sum(picked) if picked else None


def _named(name: str) -> Callable[[Row], bool]:
    return lambda r: r["event_name"] == name


def _one(_row: Row) -> float:
    return 1


def _tokens(r: Row) -> float:
    return num(r, "inputTokens") + num(r, "outputTokens")


def _metric(metric: Metric, rows: Sequence[Row]) -> Any:
    turn, one = _named(TURN), _one
    if metric is Metric.events:
        return len(rows)
    if metric is Metric.turns:
        return _sum(rows, one, turn)
    if metric is Metric.cost:
        return _sum(rows, lambda r: num(r, "costUsd"))
    if metric is Metric.tokens:
        return _sum(rows, _tokens, turn)
    if metric is Metric.errors:
        return _sum(rows, one, _named("chat.error"))
    if metric is Metric.tool_calls:
        return _sum(rows, one, _named("chat.tool_used"))
    if metric is Metric.ptl_recoveries:
        return _sum(rows, one, _named("chat.ptl_recovery"))
    read = _sum(rows, lambda r: num(r, "cacheReadInputTokens"), turn)
    total = _sum(
        rows,
        lambda r: num(r, "inputTokens") + num(r, "cacheReadInputTokens") + num(r, "cacheCreationInputTokens"),
        turn,
    )
    return read / total if read is not None and total else None


def _bucket(at: datetime, granularity: Granularity) -> datetime:
    at = at.astimezone(UTC)
    if granularity is Granularity.hour:
        return at.replace(minute=0, second=0, microsecond=0)
    return at.replace(hour=0, minute=0, second=0, microsecond=0)


class InMemoryTelemetryStore:
    def __init__(self, tx: TxState) -> None:
        self.tx = tx

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.tx.rows().telemetry

    async def write(self, records: Sequence[TelemetryRecord]) -> None:
        checked = []
        for r in records:
            if not r.tenant_id:
                raise TelemetryError(f"telemetry event {r.name!r} has no tenant")
            self.tx.own(r.tenant_id, "an ai_events row")
            checked.append((r, jsonb(validate_metadata(r.name, r.metadata))))
        data = self.tx.rows()
        for r, metadata in checked:
            self.rows.append(
                {
                    "id": data.next_id(),
                    "tenant_id": r.tenant_id,
                    "event_name": r.name,
                    "user_id": r.user_id,
                    "chat_id": r.chat_id,
                    "metadata": metadata,
                    "created_at": r.created_at or self.tx.now,
                }
            )

    def _in(self, window: Window, where: EventFilter = EventFilter()) -> list[dict[str, Any]]:
        return [
            r
            for r in self.rows
            if window.start <= r["created_at"] < window.end
            and (where.event_name is None or r["event_name"] == where.event_name)
            and (where.chat_id is None or r["chat_id"] == where.chat_id)
            and (where.user_id is None or r["user_id"] == where.user_id)
        ]

    async def totals(self, window: Window) -> Mapping[str, Any]:
        rows = self._in(window)
        turn = _named(TURN)

        def total(value: Callable[[Row], float], where: Callable[[Row], bool] = turn) -> Any:
            return _sum(rows, value, where) or 0

        return {
            "events": len(rows),
            "turns": total(_one),
            "cost_usd": total(lambda r: num(r, "costUsd"), lambda _r: True),
            "input_tokens": total(lambda r: num(r, "inputTokens")),
            "output_tokens": total(lambda r: num(r, "outputTokens")),
            "cache_read": total(lambda r: num(r, "cacheReadInputTokens")),
            "cache_creation": total(lambda r: num(r, "cacheCreationInputTokens")),
            "errors": total(_one, _named("chat.error")),
            "ptl": total(_one, _named("chat.ptl_recovery")),
            "tool_calls": total(_one, _named("chat.tool_used")),
        }

    async def events(self, window: Window, where: EventFilter, *, limit: int, offset: int) -> list[Mapping[str, Any]]:
        rows = sorted(self._in(window, where), key=lambda r: (r["created_at"], r["id"]), reverse=True)
        keys = ("id", "event_name", "user_id", "chat_id", "metadata", "created_at")
        return [{k: r[k] for k in keys} for r in rows[offset : offset + limit]]

    async def count(self, window: Window, where: EventFilter) -> int:
        return len(self._in(window, where))

    async def series(self, metric: Metric, granularity: Granularity, window: Window) -> dict[datetime, Any]:
        buckets: dict[datetime, list[dict[str, Any]]] = defaultdict(list)
        for r in self._in(window):
            buckets[_bucket(r["created_at"], granularity)].append(r)
        return {at: _metric(metric, rows) for at, rows in buckets.items()}

    async def top_tools(self, window: Window, limit: int) -> list[Mapping[str, Any]]:
        tools: dict[str, Any] = {}
        for r in self._in(window, EventFilter(event_name="chat.tool_used")):
            name = r["metadata"].get("toolName")
            if name is None:
                continue
            t = tools.setdefault(name, {"tool_name": name, "calls": 0, "duration_ms": 0, "successes": 0})
            t["calls"] += 1
            t["duration_ms"] += int(num(r, "durationMs"))
            t["successes"] += 1 if r["metadata"].get("success") is True else 0
        return sorted(tools.values(), key=lambda t: (-t["calls"], t["tool_name"]))[:limit]

    async def top_users(self, window: Window, limit: int) -> list[Mapping[str, Any]]:
        users: dict[str, Any] = {}
        for r in self._in(window):
            if r["user_id"] is None:
                continue
            u = users.setdefault(
                r["user_id"], {"user_id": r["user_id"], "cost_usd": 0.0, "turns": 0, "tokens": 0, "events": 0}
            )
            u["cost_usd"] += num(r, "costUsd")
            u["turns"] += 1 if r["event_name"] == TURN else 0
            u["tokens"] += int(_tokens(r))
            u["events"] += 1
        return sorted(users.values(), key=lambda u: (-u["cost_usd"], u["user_id"]))[:limit]
