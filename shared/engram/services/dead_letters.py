"""Dead letters counted in telemetry for every worker (R-3.4, R-17.1).

The worker runtime calls `DeadLetters.record` for each event it dead-letters, whatever the
worker: refused as poison at its first delivery, or given up after `max_deliver`. Each
becomes an `event.dead_lettered` row of the event's tenant (`/api/ai/telemetry/events?
eventName=event.dead_lettered`). Best effort: the dead letter in the stream is the record
that counts; a telemetry row that cannot be written (the database is down) is logged.
"""

from __future__ import annotations

import structlog

from engram.domain.deliveries import EventMeta
from engram.domain.telemetry import EventDeadLettered, record
from engram.ports import UnitOfWork

log = structlog.get_logger(__name__)


class DeadLetters:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow

    async def record(
        self, tenant: str, consumer: str, meta: EventMeta, reason: str, *, deliveries: int, poison: bool
    ) -> None:
        row = record(
            tenant,
            "event.dead_lettered",
            EventDeadLettered(
                consumer=consumer,
                event_type=meta.type[:200],
                event_id=meta.id[:200],
                reason=reason[:2_000],
                deliveries=deliveries,
                poison=poison,
            ),
            user_id=meta.user_id,
        )
        try:
            async with self.uow.tenant(tenant) as tx:
                await tx.telemetry.write([row])
        except Exception as exc:
            log.warning("dead_letters.not_counted", consumer=consumer, tenant=tenant, error=str(exc))
