"""extract-observation on the fakes: rules, marks, poison, idempotency and redelivery (R-5)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cloudevents.http import CloudEvent

from engram.bootstrap import build_gateway, load_rules
from engram.domain.errors import InvalidEvent, Transient
from engram.domain.events import (
    CHAT_TURN_COMPLETED,
    OBSERVATION_CREATED,
    OBSERVATION_MARKED,
    OBSERVATION_UPDATED,
    SESSION_ENDED,
    ChatTurnCompleted,
    SessionEnded,
    new_event,
)
from engram.domain.observation import is_unit_key
from engram.ports import NewMessage
from engram.services.chat_extraction import ChatExtractor
from engram.services.extraction import Extraction
from functions.extract_observation.main import WORKER
from tests.fakes import FakeBus, InMemoryUnitOfWork

INBOX = "extract-observation"


@pytest.fixture
def extraction(uow: InMemoryUnitOfWork, settings: Any) -> Extraction:
    types = settings.engram_observation_types
    chat = ChatExtractor(uow, build_gateway(settings), types)
    return Extraction(uow, load_rules(settings), types, chat_extractor=chat)


def customer_event(tenant: str, event_id: str, **data: Any) -> CloudEvent:
    payload = {"customer_id": "1001", "name": "Müller Maschinenbau GmbH", "city": "Stuttgart", **data}
    return new_event(
        "com.example.crm.customer.created.v1",
        payload,
        tenant_id=tenant,
        source="/crm",
        event_id=event_id,
        time="2026-05-04T10:00:00+00:00",
    )


async def deliver(extraction: Extraction, *events: CloudEvent) -> list[Any]:
    """One fetch through the worker's declaration (decoding, rejected hook), an outcome per event."""
    return list(await WORKER.run(extraction.handle, list(events), extraction.rejected))


def reports(uow: InMemoryUnitOfWork, tenant: str) -> list[dict[str, Any]]:
    return [r["metadata"] for r in uow.data(tenant).telemetry if r["event_name"] == "memory.extraction"]


async def test_a_rule_turns_a_domain_event_into_one_announced_observation(
    extraction: Extraction, uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str
) -> None:
    assert await deliver(extraction, customer_event(tenant, "evt-1")) == [None]
    (obs,) = uow.data(tenant).observations.values()
    assert obs.title == "Customer Müller Maschinenbau GmbH was created" and obs.key == "customer:1001"
    assert (obs.trigger_source, obs.source, obs.user_id, obs.scope) == ("hook", "system", None, "public")
    assert obs.provenance.source_event_id == "evt-1" and "Stuttgart" in obs.narrative
    (event,) = bus.events
    assert event["type"] == OBSERVATION_CREATED.type and event["subject"] == f"observation/{obs.id}"
    assert event.get_data() == {"observation_id": str(obs.id), "revision": obs.updated_at.isoformat()}
    (report,) = reports(uow, tenant)
    assert (report["trigger"], report["count"], report["dedupHits"], report["status"]) == ("hook", 1, 0, "ok")
    assert uow.data(tenant).inbox[INBOX] == {"/crm\x1fevt-1": [obs.id]}


async def test_a_keyed_rule_updates_the_observation_in_place(
    extraction: Extraction, uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str
) -> None:
    await deliver(extraction, customer_event(tenant, "c-1", city="Stuttgart"))
    (first,) = uow.data(tenant).observations.values()
    await deliver(extraction, customer_event(tenant, "c-2", city="Berlin"))
    (obs,) = uow.data(tenant).observations.values()
    assert obs.id == first.id and "Berlin" in obs.narrative
    assert obs.created_at == first.created_at and obs.updated_at > first.updated_at
    assert [e["type"] for e in bus.events] == [OBSERVATION_CREATED.type, OBSERVATION_UPDATED.type]
    assert bus.events[1]["id"] == f"{OBSERVATION_UPDATED.type}:{obs.id}:{obs.updated_at.isoformat()}"
    assert [r["count"] for r in reports(uow, tenant)] == [1, 1]


async def test_the_same_event_twice_and_redelivered_gives_one_observation_and_one_announcement(
    extraction: Extraction, uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str
) -> None:
    event = customer_event(tenant, "evt-1")
    assert await deliver(extraction, event, event) == [None, None]  # re-published within one fetch
    assert await deliver(extraction, event) == [None]  # redelivered: the worker died before its ack
    assert len(uow.data(tenant).observations) == 1
    assert [(r["count"], r["dedupHits"]) for r in reports(uow, tenant)] == [(1, 1), (0, 1)]
    # announced again with the same event id (in case the first went missing): JetStream keeps one
    assert bus.attempts == 2 and len(bus.events) == 1 and bus.events[0]["type"] == OBSERVATION_CREATED.type


async def test_redelivery_after_a_failed_publish_announces_what_was_stored(
    extraction: Extraction, uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str
) -> None:
    event = customer_event(tenant, "evt-1")
    bus.fail(times=1)
    (outcome,) = await deliver(extraction, event)
    assert isinstance(outcome, Transient)  # redelivered with backoff
    (obs,) = uow.data(tenant).observations.values()  # committed before the publish
    assert bus.events == [] and uow.outbox == []  # no outbox rows for this consumer
    assert await deliver(extraction, event) == [None]
    assert [(e["type"], e["subject"]) for e in bus.events] == [(OBSERVATION_CREATED.type, f"observation/{obs.id}")]
    assert len(uow.data(tenant).observations) == 1


async def test_giving_up_reports_partial_when_stored_and_failed_when_not(
    extraction: Extraction, uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str
) -> None:
    stored = customer_event(tenant, "evt-stored")
    bus.fail()
    await deliver(extraction, stored)
    await extraction.gave_up(WORKER.delivery(stored), "no ack from JetStream")
    partial = reports(uow, tenant)[-1]
    assert partial["status"] == "partial" and "change events were not published" in partial["error"]
    never = customer_event(tenant, "evt-never", customer_id="2002")
    await extraction.gave_up(WORKER.delivery(never), "database unavailable")
    failed = reports(uow, tenant)[-1]
    assert (failed["status"], failed["error"], failed["count"]) == ("failed", "database unavailable", 0)
    assert len(uow.data(tenant).observations) == 1


async def test_unknown_types_are_acknowledged_and_counted(
    extraction: Extraction, uow: InMemoryUnitOfWork, bus: FakeBus, tenant: str
) -> None:
    events = [new_event("com.example.nothing.v1", {"x": i}, tenant_id=tenant, source="/x") for i in range(2)]
    assert await deliver(extraction, *events) == [None, None]
    (report,) = reports(uow, tenant)
    assert report["status"] == "skipped" and report["error"] == "2 event(s) of types without a rule"
    assert uow.data(tenant).observations == {} and bus.events == []


async def test_a_poison_event_is_dead_lettered_alone(
    extraction: Extraction, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    bad = customer_event(tenant, "bad-1", name=None)  # the rule needs data.name
    good = customer_event(tenant, "good-1", customer_id="2002", name="Schmidt AG")
    no_tenant = customer_event(tenant, "anon")
    del no_tenant["tenantid"]
    marked_badly = new_event(OBSERVATION_MARKED, {"title": "no text"}, tenant_id=tenant, source="/t", user_id="u")
    outcomes = await deliver(extraction, bad, good, no_tenant, marked_badly)
    assert isinstance(outcomes[0], InvalidEvent) and "data.name" in str(outcomes[0]) and outcomes[1] is None
    assert isinstance(outcomes[2], InvalidEvent) and isinstance(outcomes[3], InvalidEvent)
    assert [o.title for o in uow.data(tenant).observations.values()] == ["Customer Schmidt AG was created"]
    by_status = {(r["status"], r["trigger"]): r for r in reports(uow, tenant)}
    assert by_status[("ok", "hook")]["count"] == 1
    assert "data.name" in by_status[("failed", "hook")]["error"]
    assert sum(r["status"] == "failed" for r in reports(uow, tenant)) == 2  # the one without a tenant: nowhere


async def test_a_marked_statement_becomes_a_verified_user_observation(
    extraction: Extraction, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    text = "Wir stellen ab Januar auf quartalsweise Abrechnung um."
    marked = new_event(
        OBSERVATION_MARKED, {"text": text, "type": "decision"}, tenant_id=tenant, source="/t", user_id="alice"
    )
    unknown = new_event(
        OBSERVATION_MARKED, {"text": text, "type": "recipe"}, tenant_id=tenant, source="/t", user_id="alice"
    )
    outcomes = await deliver(extraction, marked, unknown)
    assert outcomes[0] is None and isinstance(outcomes[1], InvalidEvent) and "recipe" in str(outcomes[1])
    (obs,) = uow.data(tenant).observations.values()
    assert (obs.verified, obs.source, obs.trigger_source, obs.user_id, obs.scope) == (
        True,
        "user",
        "manual",
        "alice",
        "private",
    )
    assert obs.type == "decision" and obs.title == text and obs.confidence == 1.0
    assert {(r["trigger"], r["status"]) for r in reports(uow, tenant)} == {("manual", "ok"), ("hook", "failed")}


async def chat_turn(uow: InMemoryUnitOfWork, tenant: str, user_text: str) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """A stored turn (chat, session, both messages) as chat-turn leaves it: extraction queued."""
    chat_id, user_msg, answer = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    async with uow.tenant(tenant) as tx:
        await tx.chats.create_chat(chat_id, "alice", "a chat")
        session = await tx.chats.create_session("alice", chat_id, user_text, {"turns": 0})
        await tx.chats.record_turn(
            chat_id,
            session.id,
            "alice",
            [
                NewMessage(user_msg, "user", user_text),
                NewMessage(answer, "assistant", "Noted.", memory_trace={"extraction": {"status": "queued"}}),
            ],
            tx.state.now,
        )
    return chat_id, session.id, answer


async def turn_event(uow: InMemoryUnitOfWork, tenant: str, said: str) -> tuple[CloudEvent, ChatTurnCompleted]:
    """A stored turn (`chat_turn`) and the `chat.turn.completed` event chat-turn publishes for it,
    with its data (the user's message id, which the turn's units cite, and the session)."""
    chat_id, session_id, answer = await chat_turn(uow, tenant, said)
    user_msg = next(m.id for m in uow.data(tenant).messages.values() if m.role == "user" and m.session_id == session_id)
    completed = ChatTurnCompleted(
        chat_id=chat_id,
        session_id=session_id,
        user_message_id=user_msg,
        assistant_message_id=answer,
        user_message=said,
        assistant_message="Noted.",
    )
    event = new_event(CHAT_TURN_COMPLETED, completed, tenant_id=tenant, source="/engram/chat-turn", user_id="alice")
    return event, completed


async def test_a_chat_turn_is_extracted_offline_and_its_trace_says_done(
    extraction: Extraction, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    said = "The deadline for the Müller contract is 2026-06-30. How are you?"
    chat_id, session_id, answer = await chat_turn(uow, tenant, said)
    turn = ChatTurnCompleted(
        chat_id=chat_id,
        session_id=session_id,
        assistant_message_id=answer,
        user_message=said,
        assistant_message="Noted.",
    )
    event = new_event(CHAT_TURN_COMPLETED, turn, tenant_id=tenant, source="/engram/chat-turn", user_id="alice")
    assert await deliver(extraction, event) == [None]
    assert await deliver(extraction, event) == [None]  # redelivered: nothing extracted twice
    (obs,) = uow.data(tenant).observations.values()
    assert (obs.type, obs.user_id, obs.trigger_source) == ("event", "alice", "chat")
    assert obs.title == "The deadline for the Müller contract is 2026-06-30."
    trace = uow.data(tenant).messages[answer].memory_trace
    assert trace["extraction"] == {"status": "done", "count": 1, "dedup": 0, "model": "offline"}


async def test_offline_a_change_of_the_users_profile_joins_the_profile(
    extraction: Extraction, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    """The offline rules read the user's stable memory: a later "moved my swimming" is a change
    of "I go swimming every Friday morning", so it is identity as well, whatever its wording."""
    for said in ("I go swimming every Friday morning.", "I moved my swimming to Monday mornings."):
        event, _ = await turn_event(uow, tenant, said)
        assert await deliver(extraction, event) == [None]
    kept = {o.title: o.type for o in uow.data(tenant).observations.values() if o.trigger_source == "chat" and not o.key}
    assert kept == {
        "I go swimming every Friday morning.": "identity",
        "I moved my swimming to Monday mornings.": "identity",
    }


async def test_an_ended_session_gets_an_offline_summary_and_a_recallable_observation(
    extraction: Extraction, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    chat_id, session_id, _ = await chat_turn(uow, tenant, "Wann läuft der Wartungsvertrag mit Müller aus?")
    ended = SessionEnded(session_id=session_id, chat_id=chat_id)
    event = new_event(SESSION_ENDED, ended, tenant_id=tenant, source="/engram/chat-turn", user_id="alice")
    missing = new_event(SESSION_ENDED, SessionEnded(session_id=uuid.uuid4()), tenant_id=tenant, source="/t")
    outcomes = await deliver(extraction, event, missing)
    assert outcomes[0] is None and isinstance(outcomes[1], InvalidEvent) and "does not exist" in str(outcomes[1])
    data = uow.data(tenant)
    summary = data.summaries[session_id]
    assert summary.generated_by_model == "offline" and summary.request.startswith("Wann läuft der Wartungsvertrag")
    assert data.sessions[session_id].status == "completed"  # ended by the summary when still active
    (obs,) = [o for o in data.observations.values() if not is_unit_key(o.key)]
    assert obs.type == "context" and obs.key == f"session-summary:{session_id}" and obs.user_id == "alice"


async def test_an_ended_sessions_messages_become_the_users_memory_units(
    uow: InMemoryUnitOfWork, settings: Any, tenant: str
) -> None:
    """What the user said is memory even when no extraction rule or model picked it: the session's
    turns as units (the answer low priority), private to the chat's user, citing their messages."""
    said = "My music teacher says I'm improving. I'd like to grow vegetables on my balcony, how?"
    chat_id, session_id, answer = await chat_turn(uow, tenant, said)
    event = new_event(
        SESSION_ENDED,
        SessionEnded(session_id=session_id, chat_id=chat_id),
        tenant_id=tenant,
        source="/engram/chat-turn",
        user_id="alice",
    )
    types = settings.engram_observation_types
    gateway = build_gateway(settings)
    rules = load_rules(settings)
    extraction = Extraction(uow, rules, types, chat_extractor=ChatExtractor(uow, gateway, types))
    assert await deliver(extraction, event) == [None]
    assert await deliver(extraction, event) == [None]  # redelivered: nothing written twice
    data = uow.data(tenant)
    units = [o for o in data.observations.values() if is_unit_key(o.key)]
    turns = {o.provenance.chat_message_id: o for o in units if o.key and o.key.startswith("turn:")}
    user_msg = next(m.id for m in data.messages.values() if m.role == "user")
    assert set(turns) == {user_msg, answer}
    mine, reply = turns[user_msg], turns[answer]
    assert "music teacher" in mine.narrative and mine.priority == "normal" and reply.priority == "low"
    assert {(o.user_id, o.scope, o.trigger_source) for o in units} == {("alice", "private", "chat")}
    assert mine.provenance.session_id == session_id and mine.provenance.source_event_id == f"{chat_id}#{user_msg}"
    statements = [o for o in units if o.key and o.key.startswith("unit:statement:")]
    # each sentence is a unit of its own, the question too (facts are told inside requests)
    statement, question = sorted(statements, key=lambda o: o.key or "")
    assert all(o.provenance.chat_message_id == user_msg for o in statements)
    assert "music teacher" in statement.title and "grow vegetables" in question.title
    assert "grow vegetables" in mine.narrative

    off = Extraction(uow, rules, types, chat_extractor=ChatExtractor(uow, gateway, types, chat_units=False))
    other_chat, other_session, _ = await chat_turn(uow, tenant, "I moved to Hamburg last spring.")
    ended = SessionEnded(session_id=other_session, chat_id=other_chat)
    assert await deliver(off, new_event(SESSION_ENDED, ended, tenant_id=tenant, source="/t", user_id="alice")) == [None]
    assert not [
        o for o in data.observations.values() if o.provenance.session_id == other_session and is_unit_key(o.key)
    ]


async def completed_turn(
    uow: InMemoryUnitOfWork,
    tenant: str,
    extraction: Extraction,
    session: Any,
    said: str,
    answer_text: str,
    at: datetime,
) -> tuple[uuid.UUID, uuid.UUID]:
    """One more turn of `session` as chat-turn stores it (extraction queued), and its
    `chat.turn.completed` event delivered: the user's and the answer's message ids."""
    user_msg, answer = uuid.uuid4(), uuid.uuid4()
    async with uow.tenant(tenant) as tx:
        await tx.chats.record_turn(
            session.chat_id,
            session.id,
            "alice",
            [
                NewMessage(user_msg, "user", said),
                NewMessage(answer, "assistant", answer_text, memory_trace={"extraction": {"status": "queued"}}),
            ],
            at,
        )
    completed = ChatTurnCompleted(
        chat_id=session.chat_id,
        session_id=session.id,
        user_message_id=user_msg,
        assistant_message_id=answer,
        user_message=said,
        assistant_message=answer_text,
    )
    event = new_event(CHAT_TURN_COMPLETED, completed, tenant_id=tenant, source="/engram/chat-turn", user_id="alice")
    assert await deliver(extraction, event) == [None]
    return user_msg, answer


async def test_a_completed_turn_is_memory_at_once_and_the_sessions_end_rewrites_nothing(
    uow: InMemoryUnitOfWork, settings: Any, tenant: str
) -> None:
    """What the user said is a memory unit as soon as its turn is extracted, not when the session
    ends (after 30 idle minutes): a fact said in one chat is recalled in the next. A later turn
    changes the context of the turns before it; the session's end writes the same units again
    and changes none of them (no new revision, so nothing is embedded twice)."""
    types = settings.engram_observation_types
    gateway, rules = build_gateway(settings), load_rules(settings)
    extraction = Extraction(uow, rules, types, chat_extractor=ChatExtractor(uow, gateway, types))
    chat_id = uuid.uuid4()
    async with uow.tenant(tenant) as tx:
        await tx.chats.create_chat(chat_id, "alice", "a chat")
        session = await tx.chats.create_session("alice", chat_id, "ukulele", {"turns": 0})
        start = tx.state.now

    async def turn(n: int, said: str, answer_text: str) -> tuple[uuid.UUID, uuid.UUID]:
        return await completed_turn(uow, tenant, extraction, session, said, answer_text, start + timedelta(minutes=n))

    def units() -> dict[uuid.UUID | None, Any]:
        return {
            o.provenance.chat_message_id: o
            for o in uow.data(tenant).observations.values()
            if o.key and o.key.startswith("turn:") and o.provenance.session_id == session.id
        }

    first, first_answer = await turn(1, "My music teacher says I'm getting better at the ukulele.", "Well done! " * 30)
    assert set(units()) == {first, first_answer}  # before the session ends
    mine = units()[first]
    assert "ukulele" in mine.narrative and (mine.user_id, mine.scope) == ("alice", "private")
    trace = uow.data(tenant).messages[first_answer].memory_trace["extraction"]
    assert (
        trace["status"] == "done" and trace["units"] == 2
    )  # the turn and the answer (one sentence is no statement of its own)
    assert [r["units"] for r in reports(uow, tenant)] == [2]
    assert not any("beginner" in token for token in mine.discovery_tokens)

    second, second_answer = await turn(2, "Which songs suit a beginner?", "Try these songs first. " * 20)
    after_second = units()
    assert set(after_second) == {first, first_answer, second, second_answer}
    assert any("beginner" in token for token in after_second[first].discovery_tokens)  # its context grew
    revisions = {m: o.updated_at for m, o in after_second.items()}

    ended = SessionEnded(session_id=session.id, chat_id=chat_id)
    event = new_event(SESSION_ENDED, ended, tenant_id=tenant, source="/engram/chat-turn", user_id="alice")
    assert await deliver(extraction, event) == [None]
    assert {m: o.updated_at for m, o in units().items()} == revisions  # the same units, none rewritten
    assert reports(uow, tenant)[-1]["units"] == 0

    quiet = Extraction(uow, rules, types, chat_extractor=ChatExtractor(uow, gateway, types, chat_units=False))
    event, other = await turn_event(uow, tenant, "I moved to Hamburg last spring.")
    assert await deliver(quiet, event) == [None]
    stored = uow.data(tenant).observations.values()
    assert not [o for o in stored if o.provenance.session_id == other.session_id and is_unit_key(o.key)]


class ScriptedGateway:
    """A model gateway that is configured (`available`) and answers `complete` from a script:
    an exception is raised, a dict is the `record_observations` tool's input."""

    available = True

    def __init__(self, settings: Any, *script: Exception | dict[str, Any]) -> None:
        self.prompts = build_gateway(settings).prompts
        self.script = list(script)
        self.calls = 0

    async def complete(self, task: str, build: Any, priority: Any = None) -> Any:
        from engram.domain.llm import LlmReply, Usage

        self.calls += 1
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        use = {"type": "tool_use", "id": f"call-{self.calls}", "name": "record_observations", "input": step}
        return LlmReply(model="scripted", content=[use], stop_reason="tool_use", usage=Usage(input_tokens=10))


async def test_a_turns_units_are_kept_while_the_model_is_down_or_its_output_is_invalid(
    uow: InMemoryUnitOfWork, settings: Any, tenant: str
) -> None:
    """What the user said depends on no model: when extraction fails (the model is down and the
    event is retried, or its output is invalid twice and the event is dead-lettered), the turn's
    memory units are written all the same and announced; the extraction that finally succeeds
    writes them again unchanged (no new revision, no second announcement)."""
    types = settings.engram_observation_types
    said = "By the way, I switched jobs: I work for Brandt Logistik now."
    event, completed = await turn_event(uow, tenant, said)
    user_msg = completed.user_message_id
    invalid = {"observations": [{"type": "fact", "title": ""}]}
    works = {"observations": [{"type": "fact", "title": "Alice works for Brandt Logistik"}]}
    gateway = ScriptedGateway(
        settings, Transient("every profile failed for task 'extraction'"), invalid, invalid, works
    )
    extraction = Extraction(uow, load_rules(settings), types, chat_extractor=ChatExtractor(uow, gateway, types))  # type: ignore[arg-type]

    def stored() -> dict[str, Any]:
        return {o.key or str(o.id): o for o in uow.data(tenant).observations.values()}

    def announced() -> list[str]:
        return [m.headers.get("ce-type", "") for m in uow.bus.stored]  # type: ignore[attr-defined]

    # the model is down: the event is retried, and the user's turn is memory already
    [outcome] = await deliver(extraction, event)
    assert isinstance(outcome, Transient)
    units = {k: o for k, o in stored().items() if is_unit_key(k)}
    (turn,) = [o for k, o in units.items() if k.startswith("turn:") and o.provenance.chat_message_id == user_msg]
    assert "Brandt Logistik" in turn.narrative and (turn.user_id, turn.scope) == ("alice", "private")
    assert not [k for k in stored() if not is_unit_key(k)]  # nothing extracted
    first = len(announced())
    assert first >= len(units) > 0
    revisions = {k: o.updated_at for k, o in units.items()}

    # redelivered: the model answers invalid output twice, the event is dead-lettered; the units stay
    [outcome] = await deliver(extraction, event)
    assert isinstance(outcome, InvalidEvent) and "invalid twice" in str(outcome)
    assert {k: o.updated_at for k, o in stored().items() if is_unit_key(k)} == revisions
    assert len(announced()) == first  # unchanged units announce nothing

    # the dead letter replayed after the fix: extraction succeeds, the units are the same revisions
    [outcome] = await deliver(extraction, event)
    assert outcome is None and gateway.calls == 4
    assert "Alice works for Brandt Logistik" in [o.title for k, o in stored().items() if not is_unit_key(k)]
    assert {k: o.updated_at for k, o in stored().items() if is_unit_key(k)} == revisions

    # the user is erased while the model is called: their units are not written on the failure
    said = "My new address is Hafenstrasse 3."
    event, completed = await turn_event(uow, tenant, said)
    user_msg = completed.user_message_id

    class ErasedMeanwhile(ScriptedGateway):
        async def complete(self, task: str, build: Any, priority: Any = None) -> Any:
            uow.data(tenant).erasures["alice"] = datetime.now(UTC) + timedelta(minutes=1)
            return await super().complete(task, build, priority)

    before = set(stored())
    erasing = ChatExtractor(uow, ErasedMeanwhile(settings, Transient("down")), types)  # type: ignore[arg-type]
    [outcome] = await deliver(Extraction(uow, load_rules(settings), types, chat_extractor=erasing), event)
    assert isinstance(outcome, Transient) and set(stored()) == before


async def test_the_model_sees_the_question_a_short_reply_answers(
    uow: InMemoryUnitOfWork, settings: Any, tenant: str
) -> None:
    """'A grey Ford Focus.' is a fact only with the question the assistant ended its previous
    answer with; the turn the event carries holds only the reply and the answer after it, so the
    extraction reads the session and shows the model that question."""
    from engram.domain.llm import Profile

    types = settings.engram_observation_types
    prompts: list[str] = []

    class Capturing(ScriptedGateway):
        async def complete(self, task: str, build: Any, priority: Any = None) -> Any:
            request = build(Profile(name="p", model="m"))
            prompts.append(request.turn[0]["content"])
            return await super().complete(task, build, priority)

    found = {"observations": [{"type": "identity", "title": "The user drives a grey Ford Focus"}]}
    gateway = Capturing(settings, found, found)
    extractor = ChatExtractor(uow, gateway, types)  # type: ignore[arg-type]
    extraction = Extraction(uow, load_rules(settings), types, chat_extractor=extractor)
    chat_id = uuid.uuid4()
    async with uow.tenant(tenant) as tx:
        await tx.chats.create_chat(chat_id, "alice", "a chat")
        session = await tx.chats.create_session("alice", chat_id, "a plan", {"turns": 0})
        start = tx.state.now
    said = [
        ("Plan my week, please.", "Here is a plan for your week. Which car do you drive?"),
        ("A grey Ford Focus. Can you make it shorter?", "Sure, a shorter plan."),
    ]
    for n, (user_text, answer_text) in enumerate(said):
        await completed_turn(uow, tenant, extraction, session, user_text, answer_text, start + timedelta(minutes=n))
    first, second = prompts
    assert "<previous_question>(none)</previous_question>" in first  # the session's first message
    assert "<previous_question>Which car do you drive?</previous_question>" in second
    assert "<user>A grey Ford Focus. Can you make it shorter?</user>" in second
    assert "The user drives a grey Ford Focus" in [o.title for o in uow.data(tenant).observations.values()]
