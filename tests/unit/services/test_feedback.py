"""record-feedback on the fakes: counters, verification, duplicates, erasure, orphans (R-9)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from engram.domain.errors import Transient
from engram.domain.events import FEEDBACK_RECORDED, OBSERVATION_UPDATED, FeedbackRecorded, new_event
from engram.domain.models import FeedbackKind
from engram.domain.observation import Observation, ObservationDraft, Scope
from engram.services.feedback import FeedbackRecorder
from functions.record_feedback.main import WORKER
from tests.fakes import FakeBus, InMemoryUnitOfWork


def event(tenant: str, user: str | None, *, at: datetime | None = None, **data: Any) -> Any:
    return new_event(
        FEEDBACK_RECORDED,
        FeedbackRecorded(**data),
        tenant_id=tenant,
        source="/test",
        user_id=user,
        time=at.isoformat() if at else None,
    )


async def remember(uow: InMemoryUnitOfWork, tenant: str, *titles: str) -> list[Observation]:
    drafts = [ObservationDraft(tenant_id=tenant, user_id="alice", title=t, scope=Scope.public) for t in titles]
    async with uow.tenant(tenant) as tx:
        return [w.observation for w in await tx.observations.write_many(drafts)]


async def deliver(recorder: FeedbackRecorder, *events: Any) -> list[Any]:
    return list(await WORKER.run(recorder.handle, list(events)))


def stored(uow: InMemoryUnitOfWork, tenant: str, obs: Observation) -> Observation:
    return uow.data(tenant).observations[obs.id]


async def test_a_batch_folds_its_counters_per_observation(uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str) -> None:
    a, b = await remember(uow, tenant, "Fact A", "Fact B")
    recorder = FeedbackRecorder(uow)
    events = [
        *(event(tenant, f"u{i}", kind="retrieved", observation_id=a.id) for i in range(3)),
        event(tenant, "u1", kind="cited", observation_id=a.id),
        event(tenant, "u1", kind="rejected", observation_id=b.id),
        event(tenant, "u2", kind="retrieved", observation_ids=[a.id, b.id], query_id=uuid.uuid4(), actor="system"),
        event(tenant, "u2", kind="rated", rating=4, query_id=uuid.uuid4(), stream_origin="facts"),
    ]
    assert await deliver(recorder, *events) == [None] * len(events)
    sa, sb = stored(uow, tenant, a), stored(uow, tenant, b)
    assert (sa.relevance_count, sa.cited_count, sa.rejected_count) == (4, 1, 0)
    assert (sb.relevance_count, sb.cited_count, sb.rejected_count) == (1, 0, 1)
    assert sa.updated_at == a.updated_at and not sa.verified  # counters are no new revision
    feedback = uow.data(tenant).feedback
    assert len(feedback) == 8 and recorder.last_report.applied == 8
    assert [(f.kind, f.rating, f.observation_id) for f in feedback if f.kind is FeedbackKind.rated] == [
        (FeedbackKind.rated, 4, None)
    ]
    assert bus.events == []  # nothing the index needs to hear about


async def test_a_human_confirmation_verifies_and_announces_the_new_revision(
    uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str
) -> None:
    (obs,) = await remember(uow, tenant, "Müller pays late")
    recorder = FeedbackRecorder(uow)
    human = event(tenant, "boss", kind="confirmed", observation_id=obs.id, actor="human")
    assert await deliver(recorder, human) == [None]
    verified = stored(uow, tenant, obs)
    assert verified.verified and verified.confirmed_count == 1 and verified.updated_at > obs.updated_at
    assert recorder.last_report.verified == [obs.id]
    (announced,) = bus.events
    assert announced["type"] == OBSERVATION_UPDATED.type and announced["userid"] == "alice"
    assert announced["id"] == f"{OBSERVATION_UPDATED.type}:{obs.id}:{verified.updated_at.isoformat()}"
    again = event(tenant, "boss", kind="confirmed", observation_id=obs.id, actor="human")
    assert await deliver(recorder, again) == [None]
    assert stored(uow, tenant, obs).confirmed_count == 2 and len(bus.events) == 1  # verified already


async def test_an_agent_confirmation_counts_but_does_not_verify(
    uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str
) -> None:
    (obs,) = await remember(uow, tenant, "The Hamburg office closes at 6 pm")
    recorder = FeedbackRecorder(uow)
    assert await deliver(recorder, event(tenant, "alice", kind="confirmed", observation_id=obs.id)) == [None]
    after = stored(uow, tenant, obs)
    assert after.confirmed_count == 1 and not after.verified and after.updated_at == obs.updated_at
    assert recorder.last_report.verified == [] and bus.events == []


async def test_duplicates_are_claimed_once(uow: InMemoryUnitOfWork, tenant: str) -> None:
    (obs,) = await remember(uow, tenant, "Fact A")
    recorder = FeedbackRecorder(uow)
    cited = event(tenant, "u1", kind="cited", observation_id=obs.id)
    search = event(tenant, "u1", kind="retrieved", observation_ids=[obs.id], query_id=uuid.uuid4())
    assert await deliver(recorder, cited, cited, search) == [None] * 3  # the same event twice in one fetch
    assert (recorder.last_report.applied, recorder.last_report.duplicates) == (2, 1)
    assert await deliver(recorder, cited, search) == [None, None]  # redelivered: claimed before
    assert (recorder.last_report.applied, recorder.last_report.duplicates) == (0, 2)
    after = stored(uow, tenant, obs)
    assert (after.cited_count, after.relevance_count) == (1, 1) and len(uow.data(tenant).feedback) == 2


async def test_feedback_given_before_its_user_was_erased_is_dropped(uow: InMemoryUnitOfWork, tenant: str) -> None:
    (obs,) = await remember(uow, tenant, "Tenant-wide fact")
    async with uow.tenant(tenant) as tx:
        await tx.personal.erase("bob")
    erased_at = uow.data(tenant).erasures["bob"]
    recorder = FeedbackRecorder(uow)
    before = event(tenant, "bob", kind="cited", observation_id=obs.id, at=erased_at - timedelta(seconds=1))
    untimed = event(tenant, "bob", kind="cited", observation_id=obs.id)
    del untimed["time"]  # without a time it counts as given before
    after = event(tenant, "bob", kind="cited", observation_id=obs.id, at=erased_at + timedelta(seconds=1))
    other = event(tenant, "carol", kind="cited", observation_id=obs.id, at=erased_at - timedelta(seconds=1))
    outcomes = await deliver(recorder, before, untimed, after, other)
    # acknowledged; the two given before the erasure are also deleted from the stream
    assert [type(o).__name__ if o else None for o in outcomes] == ["Erased", "Erased", None, None]
    assert (recorder.last_report.erased, recorder.last_report.applied) == (2, 2)
    assert stored(uow, tenant, obs).cited_count == 2
    assert sorted(f.user_id or "" for f in uow.data(tenant).feedback) == ["bob", "carol"]


async def test_feedback_on_a_deleted_observation_is_acknowledged_without_effect(
    uow: InMemoryUnitOfWork, tenant: str
) -> None:
    (kept,) = await remember(uow, tenant, "Kept")
    gone = uuid.uuid4()
    recorder = FeedbackRecorder(uow)
    events = [
        event(tenant, "u", kind="cited", observation_id=gone),
        event(tenant, "u", kind="retrieved", observation_ids=[kept.id, gone]),
    ]
    assert await deliver(recorder, *events) == [None, None]
    assert (recorder.last_report.orphaned, recorder.last_report.applied) == (2, 1)
    assert [f.observation_id for f in uow.data(tenant).feedback] == [kept.id]
    assert stored(uow, tenant, kept).relevance_count == 1


async def test_a_verification_is_durable_when_the_bus_is_down(
    uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str
) -> None:
    (obs,) = await remember(uow, tenant, "Confirmed later")
    bus.fail()
    recorder = FeedbackRecorder(uow)
    confirm = event(tenant, "boss", kind="confirmed", observation_id=obs.id, actor="human")
    assert await deliver(recorder, confirm) == [None]  # acknowledged: the event waits in the outbox
    assert stored(uow, tenant, obs).verified and bus.events == []
    (waiting,) = uow.outbox_events
    assert waiting["type"] == OBSERVATION_UPDATED.type and waiting["subject"] == f"observation/{obs.id}"
    bus.heal()
    assert await uow.relay() == 1 and [e["id"] for e in bus.events] == [waiting["id"]]


async def test_a_failing_tenant_batch_is_retried_as_a_whole(uow: InMemoryUnitOfWork, tenant: str) -> None:
    (obs,) = await remember(uow, tenant, "Fact")
    recorder = FeedbackRecorder(uow)
    cited = event(tenant, "u", kind="cited", observation_id=obs.id)
    uow.down = TimeoutError("database unavailable")
    (outcome,) = await deliver(recorder, cited)
    assert isinstance(outcome, Transient) and "database unavailable" in str(outcome)
    uow.down = None
    assert await deliver(recorder, cited) == [None]  # the redelivery applies it (it was never claimed)
    assert stored(uow, tenant, obs).cited_count == 1 and len(uow.data(tenant).inbox["record-feedback"]) == 1
