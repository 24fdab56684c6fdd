"""The in-memory unit of work keeps the promises of `engram.ports.UnitOfWork` that tests rely on."""

from __future__ import annotations

import uuid

import pytest

from engram.domain.errors import TelemetryError, TenantRequired
from engram.domain.events import OBSERVATION_CREATED, change_events, observation_changed
from engram.domain.observation import ObservationDraft
from engram.domain.telemetry import TelemetryRecord, record
from engram.ports import Announce
from tests.fakes import BusDown, FakeBus, InMemoryUnitOfWork


def draft(tenant: str, title: str = "Invoices go out quarterly", **kw: object) -> ObservationDraft:
    return ObservationDraft(tenant_id=tenant, user_id="alice", title=title, **kw)  # type: ignore[arg-type]


def created(tenant: str) -> object:
    return observation_changed(
        OBSERVATION_CREATED, uuid.uuid4(), "2026-01-01T00:00:00+00:00", tenant_id=tenant, source="/t", user_id=None
    )


async def test_a_block_that_raises_leaves_nothing_and_announces_nothing(tenant: str) -> None:
    bus = FakeBus()
    uow = InMemoryUnitOfWork(bus)
    with pytest.raises(ZeroDivisionError):
        async with uow.tenant(tenant) as tx:
            written = await tx.observations.write_many([draft(tenant)])
            tx.emit(change_events([w.change for w in written], "/t"))
            assert await tx.observations.get(written[0].observation.id) is not None  # its own writes: seen
            _ = 1 / 0
    assert uow.data(tenant).observations == {} and bus.stored == [] and uow.outbox == []
    assert (uow.commits, uow.rollbacks) == (0, 1)
    async with uow.tenant(tenant) as tx:
        assert await tx.observations.live_ids() == []


async def test_outbox_events_are_durable_when_publishing_fails(tenant: str) -> None:
    bus = FakeBus()
    uow = InMemoryUnitOfWork(bus)
    bus.fail(times=1)
    event = created(tenant)
    async with uow.tenant(tenant) as tx:
        tx.emit([event])
    assert bus.stored == [] and [e["id"] for e in uow.outbox_events] == [event["id"]]  # left for the relay
    assert await uow.relay() == 1
    assert [e["id"] for e in bus.events] == [event["id"]] and uow.outbox == []


async def test_deferred_events_go_out_after_the_block_returns(tenant: str) -> None:
    bus = FakeBus()
    uow = InMemoryUnitOfWork(bus)
    async with uow.tenant(tenant, announce=Announce.deferred) as tx:
        tx.emit([created(tenant)])
    assert bus.stored == [] and len(uow.outbox) == 1  # committed and staged, not published yet
    await uow.drain()
    assert len(bus.events) == 1 and uow.outbox == []
    bus.fail()
    async with uow.tenant(tenant, announce=Announce.deferred) as tx:
        tx.emit([created(tenant)])
    await uow.drain()  # a failure is logged, the event stays
    assert len(bus.events) == 1 and len(uow.outbox) == 1


async def test_redelivery_raises_a_publish_failure_after_the_commit(tenant: str) -> None:
    bus = FakeBus()
    uow = InMemoryUnitOfWork(bus)
    bus.fail()
    with pytest.raises(BusDown):
        async with uow.tenant(tenant, announce=Announce.redelivery) as tx:
            await tx.observations.write_many([draft(tenant)])
            tx.emit([created(tenant)])
    assert len(uow.data(tenant).observations) == 1  # committed before the publish
    assert uow.outbox == [] and bus.stored == []


async def test_a_transaction_is_over_after_its_block(tenant: str) -> None:
    uow = InMemoryUnitOfWork(FakeBus())
    async with uow.tenant(tenant) as tx:
        store = tx.observations
        with pytest.raises(RuntimeError, match="no inbox"):
            _ = tx.inbox
    with pytest.raises(RuntimeError, match="transaction is over"):
        await store.live_ids()
    with pytest.raises(TenantRequired):
        async with uow.tenant(" "):
            pass


async def test_one_task_cannot_nest_transactions_of_one_tenant(tenant: str, other_tenant: str) -> None:
    uow = InMemoryUnitOfWork(FakeBus())
    async with uow.tenant(tenant) as tx:
        await tx.observations.write_many([draft(tenant)])
        async with uow.tenant(other_tenant) as other:  # another tenant: its own rows only
            assert await other.observations.live_ids() == []
        with pytest.raises(RuntimeError, match="already open"):
            async with uow.tenant(tenant):
                pass


async def test_without_a_bus_a_block_that_emits_rolls_back(tenant: str) -> None:
    uow = InMemoryUnitOfWork(None)
    with pytest.raises(RuntimeError, match="no bus"):
        async with uow.tenant(tenant) as tx:
            await tx.observations.write_many([draft(tenant)])
            tx.emit([created(tenant)])
    assert uow.data(tenant).observations == {}


async def test_chat_ids_are_unique_across_tenants(tenant: str, other_tenant: str) -> None:
    uow = InMemoryUnitOfWork(FakeBus())
    chat_id = uuid.uuid4()
    async with uow.tenant(tenant) as tx:
        assert await tx.chats.create_chat(chat_id, "alice", "first") is not None
    async with uow.tenant(other_tenant) as tx:
        assert await tx.chats.create_chat(chat_id, "bob", "taken") is None
        assert await tx.chats.lock_chat(chat_id) is None  # not leaked either


async def test_telemetry_is_validated_before_anything_is_written(tenant: str) -> None:
    uow = InMemoryUnitOfWork(FakeBus())
    ok = record(tenant, "chat.tool_used", {"tool_name": "search_memory", "duration_ms": 3, "success": True})
    async with uow.tenant(tenant) as tx:
        with pytest.raises(TelemetryError, match="no tenant"):
            await tx.telemetry.write([ok, TelemetryRecord("", "chat.tool_used", ok.metadata)])
        with pytest.raises(TelemetryError, match="malformed"):
            await tx.telemetry.write([ok, TelemetryRecord(tenant, "chat.tool_used", {"toolName": "x"})])
        await tx.telemetry.write([ok])
    rows = uow.data(tenant).telemetry
    assert [(r["event_name"], r["metadata"]["toolName"]) for r in rows] == [("chat.tool_used", "search_memory")]
