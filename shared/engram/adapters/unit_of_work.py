"""The tenant unit of work on PostgreSQL (`engram.ports.UnitOfWork`).

`PgUnitOfWork.tenant(t)` opens `Database.tenant(t)` (role `engram_app`, `engram.tenant_id` set:
row-level security hides every other tenant), exposes the stores on that one connection, and
collects what the block `emit`s. At the end of the block it stages the events in the outbox
(unless the caller chose `Announce.redelivery`), commits, gives the connection back, and only
then publishes: now (`outbox`), in the background (`deferred`), or straight to the bus with a
failure raised to the caller (`redelivery`). A block that raises rolls back and announces
nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from functools import cached_property
from typing import Any

import structlog
from cloudevents.http import CloudEvent

from engram.adapters import outbox
from engram.adapters.chats import PgChatStore
from engram.adapters.consolidation_store import PgConsolidationStore
from engram.adapters.observations import PgObservationStore
from engram.adapters.personal_data_store import PgPersonalDataStore
from engram.adapters.postgres import Connection, Database
from engram.adapters.proposal_store import PgProposalStore
from engram.adapters.telemetry_store import PgTelemetryStore
from engram.adapters.tenant_stores import (
    PgAgentKeyStore,
    PgEmbeddingCache,
    PgErasureStore,
    PgFeedbackStore,
    PgInbox,
)
from engram.instrumentation.tracing import span, stamp
from engram.ports import Announce, EventBus, TenantTx

log = structlog.get_logger(__name__)


class PgTenantTx:
    """One tenant transaction's stores, created on first use (most blocks touch one or two)."""

    def __init__(self, conn: Connection, tenant_id: str, consumer: str | None) -> None:
        self.connection = conn
        self._tenant_id = tenant_id
        self._consumer = consumer
        self.emitted: list[CloudEvent] = []

    @property
    def tenant_id(self) -> str:
        return self._tenant_id

    @cached_property
    def observations(self) -> PgObservationStore:
        return PgObservationStore(self.connection)

    @cached_property
    def chats(self) -> PgChatStore:
        return PgChatStore(self.connection, self._tenant_id)

    @cached_property
    def feedback(self) -> PgFeedbackStore:
        return PgFeedbackStore(self.connection, self._tenant_id)

    @cached_property
    def telemetry(self) -> PgTelemetryStore:
        return PgTelemetryStore(self.connection, self._tenant_id)

    @cached_property
    def embeddings(self) -> PgEmbeddingCache:
        return PgEmbeddingCache(self.connection, self._tenant_id)

    @cached_property
    def personal(self) -> PgPersonalDataStore:
        return PgPersonalDataStore(self.connection, self._tenant_id)

    @cached_property
    def agent_keys(self) -> PgAgentKeyStore:
        return PgAgentKeyStore(self.connection, self._tenant_id)

    @cached_property
    def consolidation(self) -> PgConsolidationStore:
        return PgConsolidationStore(self.connection, self._tenant_id)

    @cached_property
    def erasures(self) -> PgErasureStore:
        return PgErasureStore(self.connection, self._tenant_id)

    @cached_property
    def proposals(self) -> PgProposalStore:
        return PgProposalStore(self.connection, self._tenant_id)

    @cached_property
    def inbox(self) -> PgInbox:
        if self._consumer is None:
            raise RuntimeError("this transaction has no inbox: open it with uow.tenant(t, consumer=...)")
        return PgInbox(self.connection, self._tenant_id, self._consumer)

    def emit(self, events: Iterable[CloudEvent]) -> None:
        """Collect `events` for the announcement; each carries the current trace and correlation id
        on (`stamp`), so the outbox row and the relay's late publish keep them."""
        self.emitted.extend(stamp(e) for e in events)


def connection_of(tx: TenantTx) -> Connection:
    """The connection of a `PgUnitOfWork` transaction (for adapters on the same database)."""
    if not isinstance(tx, PgTenantTx):
        raise TypeError(f"{type(tx).__name__} is not a PostgreSQL transaction of this database")
    return tx.connection


class PgUnitOfWork:
    """`bus` None: for a process that only writes rows (the command line issuing a key); a block
    that emits events then fails."""

    def __init__(self, db: Database, bus: EventBus | None) -> None:
        self.db = db
        self._bus = bus
        self._deferred: set[asyncio.Task[Any]] = set()

    @asynccontextmanager
    async def tenant(
        self, tenant_id: str, *, announce: Announce = Announce.outbox, consumer: str | None = None
    ) -> AsyncIterator[PgTenantTx]:
        # the transaction as a span: what the stores read and write, the outbox rows, the commit
        with span("db.transaction", db__system__name="postgresql", engram__consumer=consumer):
            async with self.db.tenant(tenant_id) as conn:
                tx = PgTenantTx(conn, tenant_id, consumer)
                yield tx
                if tx.emitted:
                    _ = self.bus  # no bus, no announcement: roll back rather than lose the events
                staged = (
                    await outbox.stage(conn, tenant_id, tx.emitted)
                    if tx.emitted and announce is not Announce.redelivery
                    else []
                )
        if not tx.emitted:
            return
        if announce is Announce.redelivery:
            await self.bus.publish_many(tx.emitted)  # a failure reaches the caller: its event is redelivered
        elif announce is Announce.deferred:
            self._publish_soon(staged)
        else:
            await outbox.publish(self.db, self.bus, staged)

    @property
    def bus(self) -> EventBus:
        if self._bus is None:
            raise RuntimeError("this unit of work has no bus: it cannot announce events")
        return self._bus

    def _publish_soon(self, staged: list[outbox.Pending]) -> None:
        """Publish after the caller has gone on: the events are durable in the outbox already
        (the relay publishes them if this process dies first)."""

        async def publish() -> None:
            try:
                await outbox.publish(self.db, self.bus, staged)
            except Exception as exc:  # left for the relay
                log.warning("outbox.publish_deferred", error=str(exc))

        task = asyncio.create_task(publish())
        self._deferred.add(task)
        task.add_done_callback(self._deferred.discard)

    async def drain(self) -> None:
        await asyncio.gather(*self._deferred, return_exceptions=True)
