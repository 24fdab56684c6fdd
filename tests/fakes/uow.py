"""The tenant unit of work in memory (`engram.ports.UnitOfWork`), as `PgUnitOfWork` behaves.

- `tenant(t)` works on a deep copy of the tenant's rows and keeps it only when the block ends
  without an error: a block that raises leaves nothing behind (a rollback) and announces
  nothing. The stores refuse to be used after the block (a released connection).
- Transactions of one tenant take turns (one lock per tenant): stricter than PostgreSQL's row
  locks, so `lock`/`lock_chat` have nothing left to do. A block that opens a second
  transaction of the same tenant in the same task would wait for itself: that raises.
- What the block `emit`s reaches the bus after the commit, by `Announce`:
  `outbox`: staged (encoded) in `outbox` at the commit, published right after; what fails to
  go out stays in `outbox` for `relay()`. `deferred`: the same, published in a background
  task (`drain()` waits for it). `redelivery`: no outbox; published after the commit, and a
  failure raises from the block's exit (the rows stay committed).
- `clock` is `clock_timestamp()`; a transaction's `now()` is the clock when it began.
- `down`: an error every `tenant()` raises while it is set (the database is unavailable).
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

import structlog
from cloudevents.http import CloudEvent

from engram.adapters.nats_binding import from_nats, to_nats_binary
from engram.domain.errors import TenantRequired
from engram.domain.events import subject_for
from engram.domain.observation import Observation
from engram.ports import Announce, EventBus, RawMessage
from tests.fakes.chats import InMemoryChatStore
from tests.fakes.consolidation import InMemoryConsolidationStore
from tests.fakes.data import TenantData, TxState
from tests.fakes.observations import InMemoryObservationStore
from tests.fakes.proposals import InMemoryProposalStore
from tests.fakes.stores import (
    InMemoryAgentKeyStore,
    InMemoryEmbeddingCache,
    InMemoryErasureStore,
    InMemoryFeedbackStore,
    InMemoryInbox,
    InMemoryPersonalDataStore,
)
from tests.fakes.telemetry import InMemoryTelemetryStore

log = structlog.get_logger(__name__)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class OutboxEntry:
    tenant_id: str
    message: RawMessage

    @property
    def event(self) -> CloudEvent:
        return from_nats(self.message.headers, self.message.body)


class InMemoryTenantTx:
    def __init__(self, state: TxState, consumer: str | None) -> None:
        self.state = state
        self._consumer = consumer
        self.emitted: list[CloudEvent] = []

    @property
    def tenant_id(self) -> str:
        return self.state.tenant_id

    @cached_property
    def observations(self) -> InMemoryObservationStore:
        return InMemoryObservationStore(self.state)

    @cached_property
    def chats(self) -> InMemoryChatStore:
        return InMemoryChatStore(self.state)

    @cached_property
    def feedback(self) -> InMemoryFeedbackStore:
        return InMemoryFeedbackStore(self.state)

    @cached_property
    def telemetry(self) -> InMemoryTelemetryStore:
        return InMemoryTelemetryStore(self.state)

    @cached_property
    def embeddings(self) -> InMemoryEmbeddingCache:
        return InMemoryEmbeddingCache(self.state)

    @cached_property
    def personal(self) -> InMemoryPersonalDataStore:
        return InMemoryPersonalDataStore(self.state)

    @cached_property
    def agent_keys(self) -> InMemoryAgentKeyStore:
        return InMemoryAgentKeyStore(self.state)

    @cached_property
    def consolidation(self) -> InMemoryConsolidationStore:
        return InMemoryConsolidationStore(self.state)

    @cached_property
    def erasures(self) -> InMemoryErasureStore:
        return InMemoryErasureStore(self.state)

    @cached_property
    def proposals(self) -> InMemoryProposalStore:
        return InMemoryProposalStore(self.state)

    @cached_property
    def inbox(self) -> InMemoryInbox:
        if self._consumer is None:
            raise RuntimeError("this transaction has no inbox: open it with uow.tenant(t, consumer=...)")
        return InMemoryInbox(self.state, self._consumer)

    def emit(self, events: Iterable[CloudEvent]) -> None:
        self.emitted.extend(events)


class InMemoryUnitOfWork:
    def __init__(self, bus: EventBus | None = None, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.bus = bus
        self.clock = clock
        self.tenants: dict[str, TenantData] = {}
        self.outbox: list[OutboxEntry] = []
        self.commits = 0
        self.rollbacks = 0
        self.down: BaseException | None = None  # raised by `tenant()` while set: the database is unavailable
        self._locks: dict[str, asyncio.Lock] = {}
        self._holders: dict[str, asyncio.Task[Any] | None] = {}
        self._deferred: set[asyncio.Task[Any]] = set()

    # ---- UnitOfWork ----------------------------------------------------------------------------

    @asynccontextmanager
    async def tenant(
        self, tenant_id: str, *, announce: Announce = Announce.outbox, consumer: str | None = None
    ) -> AsyncIterator[InMemoryTenantTx]:
        if not tenant_id or not tenant_id.strip():
            raise TenantRequired("a tenant transaction needs a tenant id")
        if self.down is not None:
            raise self.down
        task = asyncio.current_task()
        if tenant_id in self._holders and self._holders[tenant_id] is task:
            raise RuntimeError(f"a transaction of tenant {tenant_id!r} is already open in this task")
        async with self._locks.setdefault(tenant_id, asyncio.Lock()):
            self._holders[tenant_id] = task
            state = TxState(
                tenant_id,
                copy.deepcopy(self.tenants.get(tenant_id) or TenantData()),
                self.clock(),
                self.clock,
                lambda chat_id: self._chat_taken(chat_id, tenant_id),
            )
            tx = InMemoryTenantTx(state, consumer)
            try:
                yield tx
                if tx.emitted and self.bus is None:
                    raise RuntimeError("this unit of work has no bus: it cannot announce events")
                staged = [self._encode(tenant_id, e) for e in tx.emitted] if announce is not Announce.redelivery else []
            except BaseException:
                self.rollbacks += 1
                raise
            finally:
                state.open = False
                del self._holders[tenant_id]
            self.tenants[tenant_id] = state.data  # the commit
            self.commits += 1
            self.outbox.extend(staged)
        if not tx.emitted:
            return
        assert self.bus is not None
        if announce is Announce.redelivery:
            await self.bus.publish_many(tx.emitted)  # a failure reaches the caller: its event is redelivered
        elif announce is Announce.deferred:
            task = asyncio.create_task(self._publish(staged))
            self._deferred.add(task)
            task.add_done_callback(self._deferred.discard)
        else:
            await self._publish(staged)

    async def drain(self) -> None:
        await asyncio.gather(*self._deferred, return_exceptions=True)

    # ---- the outbox --------------------------------------------------------------------------------

    @staticmethod
    def _encode(tenant_id: str, event: CloudEvent) -> OutboxEntry:
        headers, body = to_nats_binary(event)
        return OutboxEntry(tenant_id, RawMessage(subject_for(event), headers, body, str(event["id"])))

    async def _publish(self, staged: list[OutboxEntry]) -> int:
        """Publish staged events; what went out leaves the outbox, failures stay for the relay."""
        if not staged:
            return 0
        assert self.bus is not None
        results = await self.bus.publish_raw_many([e.message for e in staged])
        done = [e for e, r in zip(staged, results, strict=True) if not isinstance(r, BaseException)]
        if len(done) < len(staged):
            log.warning("outbox.publish_failed", failed=len(staged) - len(done), left_for_relay=True)
        for entry in done:
            self.outbox.remove(entry)
        return len(done)

    async def relay(self) -> int:
        """What the outbox relay does: publish what is left in the outbox."""
        return await self._publish(list(self.outbox))

    @property
    def outbox_events(self) -> list[CloudEvent]:
        return [e.event for e in self.outbox]

    # ---- for tests: the committed rows, and changes no port offers ----------------------------------

    def data(self, tenant_id: str) -> TenantData:
        """The tenant's committed rows (read them; change them through a transaction)."""
        return self.tenants.setdefault(tenant_id, TenantData())

    def seed(self, *observations: Observation) -> None:
        """Store observations as they are (a test's scene), each in its tenant."""
        for o in observations:
            self.data(o.tenant_id).observations[o.id] = o

    def alter(self, tenant_id: str, observation_id: uuid.UUID, **changes: Any) -> Observation:
        """A direct UPDATE of one observation (what an integration test does in SQL), e.g.
        `superseded_by`."""
        rows = self.data(tenant_id).observations
        rows[observation_id] = rows[observation_id].model_copy(update=changes)
        return rows[observation_id]

    def _chat_taken(self, chat_id: uuid.UUID, tenant_id: str) -> bool:
        return any(chat_id in data.chats for t, data in self.tenants.items() if t != tenant_id)
