"""chat-turn on the fakes, assembled by `bootstrap.build` (no PostgreSQL, NATS or model): an offline
answer from recalled memory, what a turn stores and announces, sessions (R-8, R-4.3, R-4.4)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram.bootstrap import Overrides, Services, build
from engram.domain.errors import Forbidden, NotFound
from engram.domain.events import CHAT_TURN_COMPLETED, SESSION_ENDED
from engram.domain.models import FeedbackKind, FeedbackRow, SessionStatus
from engram.domain.observation import ObservationDraft, Priority, Scope
from engram.domain.scopes import Permission, Principal
from engram.services.chat import TurnRequest, TurnResponse
from engram.services.profile import STABLE_LIMIT
from tests.fakes import FakeBus, FakeEmbedder, FakeRecall, FakeSearchIndex, InMemoryUnitOfWork, observation
from tests.fakes.data import jsonb

READ = frozenset({Permission.read_observation.value})


@pytest.fixture
def recall() -> FakeRecall:
    return FakeRecall()


@pytest.fixture
async def built(uow: InMemoryUnitOfWork, bus: FakeBus, recall: FakeRecall, settings: Any) -> AsyncIterator[Services]:
    overrides = Overrides(uow=uow, bus=bus, index=FakeSearchIndex(), embedder=FakeEmbedder(), recall=recall)
    services = await build(settings, overrides)
    assert services.db is None and services.maintenance is None  # nothing reached for PostgreSQL
    yield services
    await services.close()


def alice(tenant: str, **kw: Any) -> Principal:
    kw.setdefault("permissions", READ)
    return Principal(tenant_id=tenant, user_id=kw.pop("user_id", "alice"), **kw)


async def say(services: Services, principal: Principal, chat_id: uuid.UUID, message: str, **kw: Any) -> TurnResponse:
    return await services.chat.turn(principal, chat_id, TurnRequest(message=message, **kw))


async def test_an_offline_turn_answers_from_memory_and_stores_everything(
    built: Services, uow: InMemoryUnitOfWork, bus: FakeBus, recall: FakeRecall, tenant: str
) -> None:
    recall.add(
        observation(tenant, "Müller Maschinenbau is billed quarterly from January", type="decision"),
        observation(tenant, "Another tenant's secret about Müller Maschinenbau", scope=Scope.private, user_id="bob"),
    )
    chat_id = uuid.uuid4()
    message = "How is Müller Maschinenbau billed?"
    r = await say(built, alice(tenant), chat_id, message)
    assert (r.offline, r.offline_reason, r.model) == (True, "no_api_key", "offline")
    assert r.answer.startswith("[Offline mode") and "billed quarterly from January" in r.answer
    assert "secret" not in r.answer and recall.queries  # recalled with alice's visibility
    trace = r.memory_trace
    assert {o["title"] for o in trace["observations"]} == {"Müller Maschinenbau is billed quarterly from January"}
    assert trace["offline"] is True and trace["extraction"] == {"status": "queued"}

    data = uow.data(tenant)
    chat = data.chats[chat_id]
    assert (chat.kind, chat.user_id, chat.title) == ("ai", "alice", message)
    session = data.sessions[r.session_id]
    assert session.status is SessionStatus.active and session.metadata["turns"] == 1
    stored = sorted(data.messages.values(), key=lambda m: m.created_at)
    assert [(m.role, m.content, m.session_id) for m in stored] == [
        ("user", message, r.session_id),
        ("assistant", r.answer, r.session_id),
    ]
    assert stored[1].id == r.message_id and stored[1].memory_trace == jsonb(trace) and stored[1].model == "offline"
    telemetry = {row["event_name"]: row["metadata"] for row in data.telemetry}
    assert set(telemetry) == {"chat.model_auto_routed", "chat.turn_completed"}
    assert telemetry["chat.turn_completed"]["offline"] is True and telemetry["chat.turn_completed"]["ragHits"] == 1

    # committed with the turn, published after it in the background (the answer did not wait)
    assert [e["type"] for e in uow.outbox_events] == [CHAT_TURN_COMPLETED.type] and bus.stored == []
    await uow.drain()
    (event,) = bus.events
    assert event["id"] == f"{CHAT_TURN_COMPLETED.type}:{r.message_id}" and event["userid"] == "alice"
    data_ = event.get_data()
    assert data_["assistant_message_id"] == str(r.message_id) and data_["user_message"] == message
    assert data_["session_id"] == str(r.session_id) and uow.outbox == []


async def test_a_turn_answers_while_the_bus_is_down_and_its_event_waits(
    built: Services, uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str
) -> None:
    bus.fail()
    r = await say(built, alice(tenant), uuid.uuid4(), "Hello there, what do you know?")
    await uow.drain()
    assert r.message_id in uow.data(tenant).messages and bus.stored == []
    (waiting,) = uow.outbox_events
    bus.heal()
    assert await uow.relay() == 1 and [e["id"] for e in bus.events] == [waiting["id"]]


async def test_a_turn_in_another_users_chat_is_not_found(
    built: Services, uow: InMemoryUnitOfWork, tenant: str, other_tenant: str
) -> None:
    chat_id = uuid.uuid4()
    await say(built, alice(tenant), chat_id, "My first message")
    before = (len(uow.data(tenant).sessions), len(uow.data(tenant).messages), len(uow.outbox))
    with pytest.raises(NotFound):
        await say(built, alice(tenant, user_id="bob"), chat_id, "Let me read along")
    with pytest.raises(NotFound):  # the id is taken in another tenant: not leaked, just not found
        await say(built, alice(other_tenant), chat_id, "Hallo")
    assert (len(uow.data(tenant).sessions), len(uow.data(tenant).messages), len(uow.outbox)) == before
    assert uow.data(other_tenant).chats == {}
    with pytest.raises(Forbidden):
        await say(built, alice(tenant, user_id=None), chat_id, "An agent without a user")


async def test_an_idle_session_ends_and_the_next_turn_starts_a_new_one(
    built: Services, uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str
) -> None:
    chat_id = uuid.uuid4()
    two_hours_ago = datetime.now(UTC) - timedelta(hours=2)
    uow.clock = lambda: two_hours_ago
    first = await say(built, alice(tenant), chat_id, "Remember that we bill quarterly.")
    uow.clock = lambda: datetime.now(UTC)
    second = await say(built, alice(tenant), chat_id, "And what about the next invoice?")
    assert second.session_id != first.session_id
    sessions = uow.data(tenant).sessions
    assert sessions[first.session_id].status is SessionStatus.completed
    assert sessions[second.session_id].status is SessionStatus.active
    assert sessions[second.session_id].metadata["turns"] == 1
    await uow.drain()
    (ended,) = bus.of_type(SESSION_ENDED.type)
    assert ended["id"] == f"{SESSION_ENDED.type}:{first.session_id}"
    assert ended.get_data() == {"session_id": str(first.session_id), "chat_id": str(chat_id)}
    assert len(bus.of_type(CHAT_TURN_COMPLETED.type)) == 2


async def test_a_turn_can_end_its_session(built: Services, uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str) -> None:
    chat_id = uuid.uuid4()
    first = await say(built, alice(tenant), chat_id, "Same session, two turns.")
    last = await say(built, alice(tenant), chat_id, "That's all, thanks.", end_session=True)
    assert last.session_id == first.session_id and last.session_ended
    session = uow.data(tenant).sessions[first.session_id]
    assert session.status is SessionStatus.completed and session.metadata["turns"] == 2
    assert await built.chat.end_session(alice(tenant), chat_id) is None  # nothing active any more
    await uow.drain()
    assert [e.get_data()["session_id"] for e in bus.of_type(SESSION_ENDED.type)] == [str(first.session_id)]
    assert bus.of_type(CHAT_TURN_COMPLETED.type)[-1].get_data()["session_ended"] is True


async def test_the_stable_memory_is_the_users_own_profile(
    built: Services, uow: InMemoryUnitOfWork, recall: FakeRecall, tenant: str
) -> None:
    def mine(title: str, **kw: Any) -> ObservationDraft:
        kw.setdefault("user_id", "alice")
        return ObservationDraft(tenant_id=tenant, type=kw.pop("type", "preference"), title=title, **kw)

    uow.clock = lambda: datetime.now(UTC) - timedelta(days=1)  # the profile is older than the turn
    async with uow.tenant(tenant) as tx:
        written = await tx.observations.write_many(
            [
                mine("Alice is the head of billing", type="identity"),
                mine("Prefers answers as bullet points", priority=Priority.high),
                mine("Prefers to be called Dr. Alice", scope=Scope.sensitive),
                mine("Prefers German", scope=Scope.public),
                mine("Bob prefers long answers", user_id="bob", scope=Scope.public),
                mine("Alice's fact, not a preference", type="fact"),
            ]
        )
        ids = {w.observation.title: w.observation.id for w in written}
        await tx.feedback.add([FeedbackRow(ids["Prefers German"], "alice", FeedbackKind.rejected)])
    uow.clock = lambda: datetime.now(UTC)
    r = await say(built, alice(tenant, permissions=READ | {Permission.view_sensitive.value}), uuid.uuid4(), "Hi!")
    assert r.memory_trace["stable_memory"] == [
        str(ids["Prefers answers as bullet points"]),  # the highest priority first, then the newest
        str(ids["Alice is the head of billing"]),
    ]
    without_read = await say(built, alice(tenant, permissions=frozenset()), uuid.uuid4(), "Hi again!")
    assert without_read.memory_trace["stable_memory"] == [] and without_read.query_id is None
    assert without_read.memory_trace["memory"] == "not permitted (read:AiObservation)"


async def test_the_stable_memory_keeps_what_the_user_said_last_within_its_budget(
    built: Services, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    """A profile that stops at its limit keeps the newest facts, and holds no more than its
    block's budget shows the model (the trace names what was sent)."""
    start = datetime.now(UTC) - timedelta(days=60)
    for day in range(STABLE_LIMIT + 5):
        uow.clock = lambda day=day: start + timedelta(days=day)
        async with uow.tenant(tenant) as tx:
            await tx.observations.write_many(
                [ObservationDraft(tenant_id=tenant, user_id="alice", type="identity", title=f"Fact of day {day}")]
            )
    uow.clock = lambda: datetime.now(UTC)
    r = await say(built, alice(tenant), uuid.uuid4(), "Hi!")
    titles = [uow.data(tenant).observations[uuid.UUID(i)].title for i in r.memory_trace["stable_memory"]]
    assert titles[0] == f"Fact of day {STABLE_LIMIT + 4}" and "Fact of day 0" not in titles
    assert len(titles) == STABLE_LIMIT  # short entries: all fit

    for n in range(4):  # four newer entries with long narratives
        uow.clock = lambda n=n: start + timedelta(days=40 + n)
        async with uow.tenant(tenant) as tx:
            draft = ObservationDraft(
                tenant_id=tenant, user_id="alice", type="identity", title=f"Long {n}", narrative="details " * 100
            )
            await tx.observations.write_many([draft])
    uow.clock = lambda: datetime.now(UTC)
    r = await say(built, alice(tenant), uuid.uuid4(), "Hi again!")
    sent = [uow.data(tenant).observations[uuid.UUID(i)].title for i in r.memory_trace["stable_memory"]]
    assert sent[:4] == ["Long 3", "Long 2", "Long 1", "Long 0"] and len(sent) < STABLE_LIMIT  # they take the room
