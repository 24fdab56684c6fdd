"""Transactional outbox on PostgreSQL: events are written with the rows they describe and
published after the commit (the unit of work's `Announce.outbox` and `Announce.deferred`).

`stage` stores a transaction's events in `outbox`; after the commit `publish` sends them and
deletes what went out. If the process dies in between, the relay (running in every worker and
API process, and as `engram outbox relay` on its own for clusters where every function is
scaled to zero) publishes leftovers; `Nats-Msg-Id` makes a double publish harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog
from cloudevents.http import CloudEvent

from engram.adapters.nats_binding import to_nats_binary
from engram.adapters.postgres import Connection, Database
from engram.domain.bus_access import subject_regex
from engram.domain.events import subject_for
from engram.instrumentation import metrics
from engram.ports import EventBus, RawMessage

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Pending:
    id: int
    event_id: str
    subject: str
    headers: dict[str, str]
    body: bytes

    @property
    def message(self) -> RawMessage:
        return RawMessage(self.subject, self.headers, self.body, self.event_id)


async def stage(conn: Connection, tenant_id: str, events: Sequence[CloudEvent]) -> list[Pending]:
    """Store events in the outbox inside the caller's transaction."""
    if not events:
        return []
    encoded = []
    for event in events:
        headers, body = to_nats_binary(event)
        encoded.append((event["id"], subject_for(event), headers, body))
    rows = await conn.fetch(
        "INSERT INTO outbox (tenant_id, event_id, subject, headers, body)"
        " SELECT $1, e, s, h, b FROM unnest($2::text[], $3::text[], $4::jsonb[], $5::bytea[]) AS x(e, s, h, b)"
        " RETURNING id, event_id, subject, headers, body",
        tenant_id,
        [e[0] for e in encoded],
        [e[1] for e in encoded],
        [e[2] for e in encoded],
        [e[3] for e in encoded],
    )
    return [Pending(r["id"], r["event_id"], r["subject"], r["headers"], r["body"]) for r in rows]


async def publish(db: Database, bus: EventBus, pending: Sequence[Pending]) -> int:
    """Publish after commit; delete what went out. Failures stay for the relay."""
    if not pending:
        return 0
    results = await bus.publish_raw_many([p.message for p in pending])
    done = [p.id for p, r in zip(pending, results, strict=True) if not isinstance(r, BaseException)]
    failed = len(pending) - len(done)
    if failed:
        log.warning("outbox.publish_failed", failed=failed, left_for_relay=True)
    if done:  # one statement on its own: no transaction block, no reset of the connection
        await db.system_statement("DELETE FROM outbox WHERE id = ANY($1::bigint[])", done)
    return len(done)


async def relay_once(
    db: Database,
    bus: EventBus,
    *,
    older_than_seconds: float = 5.0,
    limit: int = 500,
    subjects: Sequence[str] = (">",),
) -> int:
    """Publish events an interrupted writer left behind, of the `subjects` (NATS patterns) this
    process's bus user may publish; the others are left to a process that may."""
    patterns = [subject_regex(s) for s in subjects]
    async with db.system() as conn:
        rows = await conn.fetch(
            "SELECT id, event_id, subject, headers, body FROM outbox"
            " WHERE created_at < now() - make_interval(secs => $1) AND subject ~ ANY($3::text[])"
            " ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED",
            older_than_seconds,
            limit,
            patterns,
        )
        pending = [Pending(r["id"], r["event_id"], r["subject"], r["headers"], r["body"]) for r in rows]
        if not pending:
            return 0
        results = await bus.publish_raw_many([p.message for p in pending])
        done = [p.id for p, r in zip(pending, results, strict=True) if not isinstance(r, BaseException)]
        await conn.execute("DELETE FROM outbox WHERE id = ANY($1::bigint[])", done)
    if done:
        metrics.OUTBOX_RELAYED.inc(len(done))
        log.info("outbox.relayed", count=len(done))
    return len(done)


async def backlog(db: Database) -> tuple[int, float]:
    """Events waiting in the outbox (all tenants) and the age of the oldest, in seconds."""
    async with db.system() as conn:
        row = await conn.fetchrow(
            "SELECT count(*) AS events, coalesce(extract(epoch FROM now() - min(created_at)), 0) AS oldest FROM outbox"
        )
    return (int(row["events"]), float(row["oldest"])) if row is not None else (0, 0.0)


async def relay_forever(
    db: Database, bus: EventBus, *, interval: float = 5.0, subjects: Sequence[str] = (">",)
) -> None:
    await relay_until(asyncio.Event(), db, bus, interval=interval, subjects=subjects)


async def relay_until(
    stop: asyncio.Event,
    db: Database,
    bus: EventBus,
    *,
    interval: float = 5.0,
    older_than_seconds: float = 5.0,
    limit: int = 500,
    subjects: Sequence[str] = (">",),
    relayed: Callable[[int], None] | None = None,
) -> int:
    """Relay until `stop` is set (a full batch goes on at once, else every `interval` seconds),
    refreshing the outbox backlog gauges; a relay round in progress is finished first. A failing
    round (database or bus away) is logged and tried again at the next interval. The number of events relayed."""
    total = 0
    while not stop.is_set():
        n = 0
        try:
            n = await relay_once(db, bus, older_than_seconds=older_than_seconds, limit=limit, subjects=subjects)
        except Exception as exc:
            log.warning("outbox.relay_failed", error=str(exc) or type(exc).__name__)
        total += n
        with contextlib.suppress(Exception):
            metrics.outbox_backlog(*await backlog(db))
        if n and relayed is not None:
            relayed(n)
        if n < limit:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
    return total
