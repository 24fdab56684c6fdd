"""chat-turn over HTTP: real PostgreSQL and NATS, the real anthropic SDK against the scripted
Messages API, and a hand-written fake of the recall port (the real recall service is built on
another branch; the tests marked `real_recall` in the report repeat these against it).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from engram.adapters.observations import PgObservationStore
from engram.domain.observation import ObservationDraft, Priority, Scope
from tests.anthropic_server import (
    AnthropicServer,
    broken_stream,
    compaction,
    error,
    prompt_too_long,
    text,
    tool_use,
)
from tests.conftest import EXTRACTION_TEST_MODEL, FAST_TEST_MODEL, eventually
from tests.fakes import FakeRecall, observation

SONNET, HAIKU, OPUS = "claude-sonnet-4-6", "claude-haiku-4-5", "claude-opus-4-7"
SENSITIVE = "view:SensitiveAiMemory"


def turns_path(chat_id: uuid.UUID) -> str:
    return f"/api/ai/chats/{chat_id}/turns"


async def say(
    chat_api: httpx.AsyncClient, headers: dict[str, str], chat_id: uuid.UUID, message: str, **body: Any
) -> httpx.Response:
    return await chat_api.post(turns_path(chat_id), json={"message": message, **body}, headers=headers)


async def rows(services: Any, tenant: str, sql: str, *args: Any) -> list[Any]:
    async with services.db.tenant(tenant) as conn:
        return list(await conn.fetch(sql, *args))


async def events(services: Any, tenant: str, name: str) -> list[dict[str, Any]]:
    found = await rows(services, tenant, "SELECT metadata FROM ai_events WHERE event_name = $1 ORDER BY id", name)
    return [r["metadata"] for r in found]


def chat_requests(anthropic: AnthropicServer) -> list[Any]:
    """Requests of the chat models (not routing or extraction)."""
    return [r for r in anthropic.requests if r.model in (SONNET, HAIKU, OPUS)]


def billing_memory(recall: FakeRecall, tenant: str) -> None:
    recall.add(
        observation(tenant, "Müller Maschinenbau is billed quarterly from January", type="decision", tags=["billing"]),
        observation(tenant, "Müller Maschinenbau ordered 40 pumps in May", type="event"),
        observation(tenant, "Invoice R-7001 for Müller Maschinenbau was cancelled as a duplicate", type="fact"),
    )


async def test_a_turn_answers_with_memory_and_persists_everything(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    billing_memory(fake_recall, tenant)
    anthropic.script(
        text(
            "Müller Maschinenbau is billed quarterly from January (from memory).",
            usage={
                "input_tokens": 1_000,
                "output_tokens": 200,
                "cache_read_input_tokens": 3_000,
                "cache_creation_input_tokens": 500,
            },
        ),
        model=SONNET,
    )
    js = services.bus.js
    sub = await js.pull_subscribe("engram.chat.*.*.turn.completed", stream="ENGRAM")
    chat_id = uuid.uuid4()
    message = "Tell me about Müller Maschinenbau: how are they billed and what did they order recently?"
    r = await say(chat_api, auth(tenant), chat_id, message)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"].startswith("Müller Maschinenbau is billed quarterly")
    assert body["model"] == SONNET and body["tier"] == "default" and body["offline"] is False
    assert body["query_id"] and body["chat_id"] == str(chat_id)
    trace = body["memory_trace"]
    assert trace["intent"] == "FACT_WHAT" and trace["intent_source"] == "keyword"
    assert {o["title"] for o in trace["observations"]} >= {"Müller Maschinenbau is billed quarterly from January"}
    assert all(o["stream"] in ("facts", "tech", "biography") for o in trace["observations"])
    usage = body["usage"]
    assert usage["input_tokens"] == 1_000 and usage["cache_read_input_tokens"] == 3_000
    expected_cost = (1_000 * 3 + 200 * 15 + 500 * 3.75 + 3_000 * 0.3) / 1_000_000
    assert usage["cost_usd"] == pytest.approx(expected_cost)
    assert "llm" in r.headers["server-timing"]

    (sent,) = chat_requests(anthropic)
    current = sent.body["messages"][-1]["content"]
    assert "<memory intent=fact_what>" in current[0]["text"] and "billed quarterly" in current[0]["text"]
    assert "cache_control" not in current[0] and current[-1]["text"] == message
    assert all(block.get("cache_control") for block in sent.body["system"])
    assert {t["name"] for t in sent.body["tools"]} == {"search_memory", "consult_advisor"}
    assert sent.body["tools"][-1]["cache_control"] == {"type": "ephemeral"}

    chat = (await rows(services, tenant, "SELECT * FROM chats WHERE id = $1", chat_id))[0]
    assert chat["kind"] == "ai" and chat["user_id"] == "alice"
    messages = await rows(
        services, tenant, "SELECT * FROM chat_messages WHERE chat_id = $1 ORDER BY created_at", chat_id
    )
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["duration_ms"] >= 0 and messages[1]["memory_trace"]["observations"]
    assert trace["extraction"] == {"status": "queued"}  # the worker reports back into the stored trace
    assert messages[1]["memory_trace"]["extraction"]["status"] in ("queued", "done")
    session = (await rows(services, tenant, "SELECT * FROM sessions WHERE chat_id = $1", chat_id))[0]
    assert session["status"] == "active" and session["user_prompt"] == message

    (completed,) = await events(services, tenant, "chat.turn_completed")
    assert completed["model"] == SONNET and completed["tier"] == "default"
    assert completed["inputTokens"] == 1_000 and completed["outputTokens"] == 200
    assert completed["cacheReadInputTokens"] == 3_000 and completed["cacheCreationInputTokens"] == 500
    assert completed["costUsd"] == pytest.approx(expected_cost) and completed["durationMs"] >= 0
    assert completed["ragHits"] == len(trace["observations"]) > 0
    (routed,) = await events(services, tenant, "chat.model_auto_routed")
    assert routed == {"selectedModel": SONNET, "tier": "default", "reason": "no complex signal", "confidence": 0.5}

    published = []
    while not published:
        msgs = await sub.fetch(50, timeout=5)
        for m in msgs:
            await m.ack()
            if m.headers.get("ce-tenantid") == tenant:
                published.append(m)
    data = json.loads(published[0].data)
    assert published[0].headers["ce-type"] == "io.engram.chat.turn.completed.v1"
    assert data["chat_id"] == str(chat_id) and data["assistant_message_id"] == body["message_id"]
    assert data["user_message"] == message and data["language"] == "en"
    await sub.unsubscribe()


async def test_routing_sends_complex_german_prompts_to_the_smart_model(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    anthropic.script(text("Die Architektur sollte modular bleiben."), model=OPUS)
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "Welche Risiken hat unsere Architektur?")
    assert r.status_code == 200, r.text
    assert r.json()["tier"] == "complex" and r.json()["model"] == OPUS
    (sent,) = chat_requests(anthropic)
    assert sent.model == OPUS and "consult_advisor" not in {t["name"] for t in sent.body["tools"]}
    (routed,) = await events(services, tenant, "chat.model_auto_routed")
    assert routed["tier"] == "complex" and routed["selectedModel"] == OPUS and "architektur" in routed["reason"]


async def test_a_model_override_and_bad_input_get_clear_answers(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    anthropic.script(text("Haiku here."), model=HAIKU)
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "Hallo", model=HAIKU)
    assert r.status_code == 200 and r.json()["model"] == HAIKU and r.json()["tier"] == "override"
    unknown = await say(chat_api, auth(tenant), uuid.uuid4(), "Hallo", model="gpt-omega")
    assert unknown.status_code == 422 and unknown.json()["field"] == "body.model"
    assert unknown.headers["content-type"].startswith("application/problem+json")
    empty = await chat_api.post(turns_path(uuid.uuid4()), json={"message": ""}, headers=auth(tenant))
    assert empty.status_code == 422 and empty.json()["field"] == "body.message"
    extra = await chat_api.post(turns_path(uuid.uuid4()), json={"message": "x", "colour": 1}, headers=auth(tenant))
    assert extra.status_code == 422 and extra.json()["field"] == "body.colour"
    not_a_uuid = await chat_api.post("/api/ai/chats/abc/turns", json={"message": "x"}, headers=auth(tenant))
    assert not_a_uuid.status_code == 422 and not_a_uuid.json()["field"] == "path.chat_id"
    anonymous = await chat_api.post(turns_path(uuid.uuid4()), json={"message": "x"})
    assert anonymous.status_code == 401


async def test_the_users_time_zone_is_their_today(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    """The model is told the user's today: Kiritimati (UTC+14) and Pago Pago (UTC-11) are 25 hours
    apart, so their days differ at any moment. A turn that names no zone is in the zone the user
    named last, in any chat, and another user's zone is theirs. A zone that is no IANA name is
    refused by field."""

    async def today_told(user: str, chat_id: uuid.UUID, zone: str | None = None) -> str:
        anthropic.script(text("Noted."), model=SONNET)
        r = await say(chat_api, auth(tenant, user), chat_id, "Hallo", **({"time_zone": zone} if zone else {}))
        assert r.status_code == 200, r.text
        return " ".join(block["text"] for block in chat_requests(anthropic)[-1].body["system"])

    def today(zone: str) -> str:
        day = datetime.now(ZoneInfo(zone)).date()
        return f"Today is {day:%A}, {day.isoformat()}."

    pago_pago, kiritimati = uuid.uuid4(), uuid.uuid4()
    assert today("Pacific/Pago_Pago") in await today_told("alice", pago_pago, "Pacific/Pago_Pago")
    assert today("Pacific/Pago_Pago") in await today_told("alice", uuid.uuid4())  # a new chat: the zone named
    assert today("Pacific/Kiritimati") in await today_told("alice", kiritimati, "Pacific/Kiritimati")
    # named last: Kiritimati, in the chat that named Pago Pago before it and in a new one
    assert today("Pacific/Kiritimati") in await today_told("alice", pago_pago)
    assert today("Pacific/Kiritimati") in await today_told("alice", uuid.uuid4())
    assert today("Pacific/Pago_Pago") in await today_told("bob", uuid.uuid4(), "Pacific/Pago_Pago")
    assert today("Pacific/Pago_Pago") in await today_told("bob", uuid.uuid4())
    assert today("Pacific/Kiritimati") in await today_told("alice", uuid.uuid4())
    zones = await rows(services, tenant, "SELECT id, time_zone FROM chats WHERE time_zone IS NOT NULL")
    assert {(r["id"], r["time_zone"]) for r in zones} >= {
        (pago_pago, "Pacific/Pago_Pago"),
        (kiritimati, "Pacific/Kiritimati"),
    }
    assert len(zones) == 3  # kept once where it changed: alice's two, bob's one
    wrong = await say(chat_api, auth(tenant), uuid.uuid4(), "Hallo", time_zone="Berlin")
    assert wrong.status_code == 422 and wrong.json()["field"] == "body.time_zone"
    assert "IANA name" in wrong.json()["detail"]


async def test_chats_belong_to_their_user_and_must_be_ai_chats(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    auth: Any,
    tenant: str,
    other_tenant: str,
) -> None:
    chat_id = uuid.uuid4()
    assert (await say(chat_api, auth(tenant), chat_id, "Hallo")).status_code == 200
    recalled = len(fake_recall.queries)
    assert recalled > 0
    assert (await say(chat_api, auth(tenant, "bob"), chat_id, "Hallo")).status_code == 404
    assert (await say(chat_api, auth(other_tenant), chat_id, "Hallo")).status_code == 404
    # recall starts only once the chat is known to be the caller's: a refused turn recalled nothing
    assert len(fake_recall.queries) == recalled
    user_chat = uuid.uuid4()
    async with services.db.tenant(tenant) as conn:
        await conn.execute(
            "INSERT INTO chats (id, tenant_id, user_id, kind) VALUES ($1, $2, 'alice', 'user')", user_chat, tenant
        )
    r = await say(chat_api, auth(tenant), user_chat, "Hallo")
    assert r.status_code == 422 and r.json()["field"] == "chat_id"
    assert len(fake_recall.queries) == recalled


async def test_recall_runs_beside_the_preparation_and_stops_when_the_turn_fails(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    auth: Any,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    from engram.domain.scopes import Permission, Principal
    from engram.services.chat import TurnRequest
    from engram.services.chat.prepare import TurnPreparation

    billing_memory(fake_recall, tenant)
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "Was ist mit Müller Maschinenbau?")
    assert r.status_code == 200, r.text
    timings = r.json()["timings"]
    # "recall" is what the turn waited for after preparing; the recall itself began earlier
    assert 0 <= timings["recall"] <= timings["recall_total"] + 1

    # a preparation that fails after the chat check: the recall it started is cancelled, not left
    fake_recall.slow_streams = {"facts", "tech", "biography"}  # would wait an hour
    tasks: list[asyncio.Task[Any]] = []
    recall = services.chat.multistream.recall

    async def watched(*args: Any, **kwargs: Any) -> Any:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        return await recall(*args, **kwargs)

    async def broken(self: TurnPreparation, *_: Any) -> Any:
        await asyncio.sleep(0.05)  # the recall is under way
        raise RuntimeError("the database went away")

    monkeypatch.setattr(services.chat.multistream, "recall", watched)
    monkeypatch.setattr(TurnPreparation, "_stable_memory", broken)
    principal = Principal(tenant_id=tenant, user_id="alice", permissions=frozenset({Permission.read_observation}))
    with pytest.raises(RuntimeError, match="went away"):
        await services.chat.begin(principal, uuid.uuid4(), TurnRequest(message="Was ist mit Müller Maschinenbau?"))
    assert len(tasks) == 1 and tasks[0].cancelled()


async def test_the_next_turn_continues_the_session_from_the_compaction_block(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    chat_id = uuid.uuid4()
    summary = "The user asked about Müller's billing; quarterly from January."
    anthropic.script(
        compaction(summary, "Quarterly, from January."), text("The next invoice is due in April."), model=SONNET
    )
    first = await say(chat_api, auth(tenant), chat_id, "How do we bill Müller Maschinenbau, and since when exactly?")
    second = await say(chat_api, auth(tenant), chat_id, "And when is the next invoice for Müller Maschinenbau due?")
    assert first.status_code == second.status_code == 200
    assert first.json()["session_id"] == second.json()["session_id"]
    _, later = chat_requests(anthropic)
    history = later.body["messages"]
    assert history[1]["role"] == "assistant" and history[1]["content"][0]["type"] == "compaction"
    assert history[1]["content"][0]["content"] == summary
    assert history[-1]["content"].startswith("And when is the next invoice")  # no memory: plain text
    assert "context_management" in later.body
    (fired,) = await events(services, tenant, "chat.compaction_fired")
    assert fired == {"summaryChars": len(summary), "iterationInputTokens": 151_000, "model": SONNET}
    session = (
        await rows(
            services,
            tenant,
            "SELECT metadata, status, updated_at, created_at FROM sessions WHERE chat_id = $1",
            chat_id,
        )
    )[0]
    assert session["metadata"]["turns"] == 2 and session["metadata"]["last_model"] == SONNET
    assert session["status"] == "active" and session["updated_at"] > session["created_at"]
    chat = (await rows(services, tenant, "SELECT updated_at, created_at FROM chats WHERE id = $1", chat_id))[0]
    assert chat["updated_at"] > chat["created_at"]  # the turn touched the chat too


async def test_tokens_stream_as_server_sent_events(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    anthropic.script(text("Guten Tag, Müller wird quartalsweise abgerechnet."), model=SONNET)
    chat_id = uuid.uuid4()
    r = await chat_api.post(
        turns_path(chat_id),
        json={"message": "Wie rechnen wir mit der Firma Müller Maschinenbau in Stuttgart eigentlich ab?"},
        headers={**auth(tenant), "Accept": "text/event-stream"},
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    frames = [f for f in r.text.split("\n\n") if f.strip()]
    names = [f.split("\n")[0].removeprefix("event: ") for f in frames]
    assert names[0] == "start" and names[-1] == "done" and names.count("token") > 3
    tokens = "".join(json.loads(f.split("\n")[1].removeprefix("data: "))["text"] for f in frames if "event: token" in f)
    done = json.loads(frames[-1].split("\n")[1].removeprefix("data: "))
    assert tokens == done["answer"] == "Guten Tag, Müller wird quartalsweise abgerechnet."
    assert chat_requests(anthropic)[0].body["stream"] is True
    stored = await rows(
        services, tenant, "SELECT content FROM chat_messages WHERE chat_id = $1 AND role = 'assistant'", chat_id
    )
    assert stored[0]["content"] == tokens


async def test_a_stream_that_breaks_mid_answer_ends_with_an_error_event(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    anthropic.script(broken_stream("Das ist eine lange Antwort, die mittendrin abbricht.", after=3), model=SONNET)
    chat_id = uuid.uuid4()
    r = await chat_api.post(
        turns_path(chat_id),
        json={"message": "Erzähl mir bitte ausführlich alles über die Abrechnung von Müller Maschinenbau."},
        headers={**auth(tenant), "Accept": "text/event-stream"},
    )
    frames = [f for f in r.text.split("\n\n") if f.strip()]
    names = [f.split("\n")[0].removeprefix("event: ") for f in frames]
    assert names[0] == "start" and names.count("token") == 3 and names[-1] == "error"
    assert json.loads(frames[-1].split("\n")[1].removeprefix("data: "))["status"] == 502
    assert len(anthropic.requests_for(HAIKU)) == 0  # no silent fallback after tokens were shown
    stages = [e["stage"] for e in await events(services, tenant, "chat.error")]
    assert "llm.stream" in stages
    stored = await rows(services, tenant, "SELECT count(*) AS n FROM chat_messages WHERE chat_id = $1", chat_id)
    assert stored[0]["n"] == 0


@pytest.mark.parametrize("permissions", [[], [SENSITIVE]], ids=["without-permission", "with-permission"])
async def test_a_sensitive_memory_never_reaches_a_standard_prompt(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    token: Any,
    tenant: str,
    permissions: list[str],
) -> None:
    fake_recall.honest = False  # a faulty recall that returns sensitive hits anyway
    fake_recall.add(
        observation(tenant, "Salary of Bob Schneider is 95000 EUR", type="fact", scope=Scope.sensitive, user_id="hr"),
        observation(tenant, "Bob Schneider leads the sales team", type="fact"),
        observation(tenant, "Bob Schneider private review notes", type="note", scope=Scope.private, user_id="carol"),
    )
    async with services.db.tenant(tenant) as conn:  # the stable block comes from PostgreSQL, not from recall
        await PgObservationStore(conn).write_many(
            [
                ObservationDraft(
                    tenant_id=tenant, user_id="alice", type="preference", title="Alice likes short answers"
                ),
                ObservationDraft(
                    tenant_id=tenant,
                    user_id="alice",
                    type="preference",
                    title="Alice's therapy is on Tuesdays",
                    scope=Scope.sensitive,
                    priority=Priority.critical,
                ),
                ObservationDraft(  # a colleague's public preference is not Alice's profile
                    tenant_id=tenant,
                    user_id="bob",
                    type="preference",
                    title="Bob wants long answers",
                    scope=Scope.public,
                ),
            ]
        )
    base = ["read:AiObservation", "create:AiObservation"]
    headers = {"Authorization": f"Bearer {token(tenant, 'alice', permissions=base + permissions)}"}
    r = await say(chat_api, headers, uuid.uuid4(), "What do you know about Bob Schneider and his salary, and about me?")
    assert r.status_code == 200, r.text
    (sent,) = chat_requests(anthropic)
    prompt = sent.prompt_text()
    assert "Bob Schneider leads the sales team" in prompt and "Alice likes short answers" in prompt
    assert "95000" not in prompt and "therapy" not in prompt and "review notes" not in prompt
    assert "Bob wants long answers" not in prompt
    assert fake_recall.queries and fake_recall.asked_for_sensitive() == []
    titles = {o["title"] for o in r.json()["memory_trace"]["observations"]}
    assert "Salary of Bob Schneider is 95000 EUR" not in titles


async def test_a_failing_stream_still_yields_an_answer(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    billing_memory(fake_recall, tenant)
    fake_recall.fail_streams = {"risk"}
    anthropic.script(text("Yes, quarterly billing fits Müller Maschinenbau."), model=SONNET)
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "Should we keep billing Müller Maschinenbau quarterly?")
    assert r.status_code == 200, r.text
    trace = r.json()["memory_trace"]
    assert trace["intent"] == "DECISION"
    assert "index unavailable" in trace["streams"]["risk"]["error"]
    assert trace["streams"]["facts"]["error"] is None and trace["streams"]["facts"]["hits"] > 0
    assert r.json()["answer"] == "Yes, quarterly billing fits Müller Maschinenbau."
    errors = await events(services, tenant, "chat.error")
    assert [e["stage"] for e in errors] == ["recall:risk"] and errors[0]["errorType"] == "stream_failed"


async def test_intent_slow_path_asks_the_fast_model_and_parses_it_tolerantly(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    anthropic.script(text("CODING[/S]"), model=FAST_TEST_MODEL)
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "Müller Maschinenbau Pumpensteuerung Firmware Update")
    assert r.status_code == 200
    trace = r.json()["memory_trace"]
    assert trace["intent"] == "CODING" and trace["intent_source"] == "llm"
    assert set(trace["streams"]) == {"tech", "facts", "risk"}
    assert "Pumpensteuerung" in anthropic.requests_for(FAST_TEST_MODEL)[0].prompt_text()


async def test_over_long_streams_are_compressed_with_a_fallback_to_the_original(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    long_text = "Müller Maschinenbau pump order details " * 40
    for i in range(8):
        fake_recall.add(observation(tenant, f"Müller Maschinenbau order {i}", type="fact", narrative=long_text))
    anthropic.script(text("- Müller ordered pumps eight times (condensed)."), model=FAST_TEST_MODEL)
    anthropic.script(text("Eight orders."), model=SONNET)
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "What is the order history of Müller Maschinenbau?")
    trace = r.json()["memory_trace"]
    assert trace["streams"]["facts"]["compressed"] is True
    memory = chat_requests(anthropic)[0].body["messages"][-1]["content"][0]["text"]
    assert "(condensed)" in memory

    anthropic.script(error(500, "api_error", "compression down"), model=FAST_TEST_MODEL)
    anthropic.script(error(500, "api_error", "backup down too"), model=HAIKU)
    anthropic.script(text("Eight orders again."), model=SONNET)
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "What is the order history of Müller Maschinenbau?")
    assert r.status_code == 200 and r.json()["memory_trace"]["streams"]["facts"]["compressed"] is False
    memory = chat_requests(anthropic)[-1].body["messages"][-1]["content"][0]["text"]
    assert "Müller Maschinenbau order" in memory  # the original entries


async def test_search_memory_tool_is_traced(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    fake_recall.add(observation(tenant, "Schmidt Logistik AG is based in Hamburg", type="fact"))
    anthropic.script(
        tool_use("search_memory", {"query": "Schmidt Logistik Hamburg"}), text("Schmidt is in Hamburg."), model=SONNET
    )
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "Hallo, wo sitzt eigentlich unser Kunde aus dem Norden?")
    assert r.status_code == 200, r.text
    trace = r.json()["memory_trace"]
    assert trace["tool_calls"][0]["name"] == "search_memory" and trace["tool_calls"][0]["success"]
    assert trace["tool_hits"][0]["title"] == "Schmidt Logistik AG is based in Hamburg"
    result = chat_requests(anthropic)[1].body["messages"][-1]["content"][0]
    assert "Hamburg" in result["content"]
    (used,) = await events(services, tenant, "chat.tool_used")
    assert used["toolName"] == "search_memory" and used["success"] is True and used["durationMs"] >= 0


async def test_every_r8_telemetry_event_is_written_with_its_fields(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    billing_memory(fake_recall, tenant)
    fake_recall.fail_streams = {"risk"}
    chat_id = uuid.uuid4()
    assert (await say(chat_api, auth(tenant), chat_id, "Hallo")).status_code == 200  # history for the recovery
    anthropic.script(
        prompt_too_long(),
        tool_use(
            "consult_advisor", {"question": "Quarterly or monthly billing for Müller?", "reason": "risk trade-off"}
        ),
        compaction("Billing discussion so far.", "Stay quarterly."),
        model=SONNET,
    )
    anthropic.script(text("Quarterly keeps cash flow predictable."), model=OPUS)
    r = await say(
        chat_api, auth(tenant), chat_id, "Should we bill Müller Maschinenbau monthly instead of quarterly now?"
    )
    assert r.status_code == 200, r.text
    names = {r["event_name"] for r in await rows(services, tenant, "SELECT DISTINCT event_name FROM ai_events")}
    assert names >= {
        "chat.turn_completed",
        "chat.tool_used",
        "chat.error",
        "chat.ptl_recovery",
        "chat.compaction_fired",
        "chat.model_auto_routed",
        "chat.advisor_auto_triggered",
    }
    (ptl,) = await events(services, tenant, "chat.ptl_recovery")
    assert ptl == {"model": SONNET, "droppedMessages": 2, "succeeded": True}
    (advisor,) = await events(services, tenant, "chat.advisor_auto_triggered")
    assert advisor["trigger"] == "risk trade-off" and advisor["executorModel"] == SONNET
    assert advisor["advisorModel"] == OPUS and advisor["durationMs"] >= 0
    (tool,) = await events(services, tenant, "chat.tool_used")
    assert tool["toolName"] == "consult_advisor" and tool["success"] is True
    error_stages = {e["stage"] for e in await events(services, tenant, "chat.error")}
    assert "recall:risk" in error_stages
    completed = (await events(services, tenant, "chat.turn_completed"))[-1]
    assert set(completed) >= {
        "model",
        "tier",
        "inputTokens",
        "outputTokens",
        "cacheCreationInputTokens",
        "cacheReadInputTokens",
        "costUsd",
        "durationMs",
        "ragHits",
    }
    assert completed["costUsd"] > 0  # the advisor's Opus tokens are priced too


async def test_when_every_model_fails_the_turn_answers_offline_and_says_so(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    billing_memory(fake_recall, tenant)
    anthropic.responder = lambda req: (
        text("FACT_WHAT") if req.model == FAST_TEST_MODEL else error(500, "api_error", "provider down")
    )
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "What do we know about Müller Maschinenbau billing?")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["offline"] is True and body["offline_reason"] == "llm_unavailable" and body["model"] == "offline"
    assert body["answer"].startswith("[Offline mode: the language model is unavailable")
    assert "billed quarterly" in body["answer"]
    stages = [e["stage"] for e in await events(services, tenant, "chat.error")]
    assert "llm" in stages and "llm:chat_default" in stages and "llm:chat_backup" in stages
    (completed,) = await events(services, tenant, "chat.turn_completed")
    assert completed["offline"] is True


async def test_without_an_api_key_the_answer_is_marked_offline(
    services: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    assert services.gateway is not None and not services.gateway.available  # the test stack has no key
    billing_memory(fake_recall, tenant)
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "Was wissen wir über die Abrechnung von Müller Maschinenbau?")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["offline"] is True and body["offline_reason"] == "no_api_key" and body["model"] == "offline"
    assert body["answer"].startswith("[Offline-Modus: kein Sprachmodell konfiguriert")
    assert "Müller Maschinenbau is billed quarterly from January" in body["answer"]
    # this turn called no model; a chat extraction left over from an earlier test (the session's
    # extract-observation worker, with that test's extraction model) may still arrive
    assert [r for r in anthropic.requests if r.body.get("model") != EXTRACTION_TEST_MODEL] == []
    (completed,) = await events(services, tenant, "chat.turn_completed")
    assert completed["offline"] is True and completed["ragHits"] >= 1 and completed["costUsd"] == 0


async def test_without_a_recall_service_chat_turn_refuses_clearly(
    services: Any, chat_api: httpx.AsyncClient, auth: Any, tenant: str
) -> None:
    saved, services.recall = services.recall, None
    try:
        r = await say(chat_api, auth(tenant), uuid.uuid4(), "Hallo")
    finally:
        services.recall = saved
    assert r.status_code == 503
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "recall is not configured" in r.json()["detail"]


async def test_without_read_permission_the_turn_runs_without_memory(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    token: Any,
    tenant: str,
) -> None:
    billing_memory(fake_recall, tenant)
    headers = {"Authorization": f"Bearer {token(tenant, 'alice', permissions=[])}"}
    r = await say(chat_api, headers, uuid.uuid4(), "What do we know about Müller Maschinenbau billing?")
    assert r.status_code == 200
    assert fake_recall.queries == [] and "billed quarterly" not in chat_requests(anthropic)[0].prompt_text()
    assert r.json()["memory_trace"]["memory"].startswith("not permitted")


async def test_ending_a_session_publishes_it_and_the_next_turn_opens_a_new_one(
    services: Any, llm: Any, fake_recall: FakeRecall, chat_api: httpx.AsyncClient, auth: Any, tenant: str
) -> None:
    js = services.bus.js
    sub = await js.pull_subscribe("engram.chat.*.*.session.ended", stream="ENGRAM")
    chat_id = uuid.uuid4()
    first = (await say(chat_api, auth(tenant), chat_id, "Hallo", end_session=True)).json()
    assert first["session_ended"] is True
    second = (await say(chat_api, auth(tenant), chat_id, "Hallo again")).json()
    assert second["session_id"] != first["session_id"]
    ended = await chat_api.post(f"/api/ai/chats/{chat_id}/session/end", headers=auth(tenant))
    assert ended.json() == {"session_id": second["session_id"], "ended": True}
    again = await chat_api.post(f"/api/ai/chats/{chat_id}/session/end", headers=auth(tenant))
    assert again.json() == {"session_id": None, "ended": False}
    statuses = await rows(services, tenant, "SELECT status FROM sessions WHERE chat_id = $1", chat_id)
    assert [s["status"] for s in statuses] == ["completed", "completed"]

    async def published() -> set[str]:
        seen = set()
        for m in await sub.fetch(50, timeout=2):
            await m.ack()
            if m.headers.get("ce-tenantid") == tenant:
                seen.add(json.loads(m.data)["session_id"])
        return seen

    found: set[str] = set()

    async def both() -> bool:
        found.update(await published())
        return found >= {first["session_id"], second["session_id"]}

    await eventually(both, timeout=10)
    await sub.unsubscribe()


async def test_an_idle_session_ends_at_the_next_turn(
    services: Any, llm: Any, fake_recall: FakeRecall, chat_api: httpx.AsyncClient, auth: Any, tenant: str
) -> None:
    chat_id = uuid.uuid4()
    first = (await say(chat_api, auth(tenant), chat_id, "Hallo")).json()
    async with services.db.tenant(tenant) as conn:
        await conn.execute("UPDATE sessions SET updated_at = now() - interval '2 hours' WHERE chat_id = $1", chat_id)
    second = (await say(chat_api, auth(tenant), chat_id, "Hallo, ich bin wieder da")).json()
    assert second["session_id"] != first["session_id"]
    status = await rows(services, tenant, "SELECT status FROM sessions WHERE id = $1", uuid.UUID(first["session_id"]))
    assert status[0]["status"] == "completed"


async def test_concurrent_first_turns_share_one_chat_and_session(
    services: Any, llm: Any, fake_recall: FakeRecall, chat_api: httpx.AsyncClient, auth: Any, tenant: str
) -> None:
    import asyncio

    chat_id = uuid.uuid4()
    replies = await asyncio.gather(*(say(chat_api, auth(tenant), chat_id, f"Hallo Nummer {i}") for i in range(4)))
    assert [r.status_code for r in replies] == [200] * 4
    assert len({r.json()["session_id"] for r in replies}) == 1
    # an existing chat without an active session: the chat row's lock lets only one turn open it
    assert (await chat_api.post(f"/api/ai/chats/{chat_id}/session/end", headers=auth(tenant))).json()["ended"]
    replies = await asyncio.gather(*(say(chat_api, auth(tenant), chat_id, f"Wieder da {i}") for i in range(4)))
    assert len({r.json()["session_id"] for r in replies}) == 1
    sessions = await rows(services, tenant, "SELECT count(*) AS n FROM sessions WHERE chat_id = $1", chat_id)
    messages = await rows(services, tenant, "SELECT count(*) AS n FROM chat_messages WHERE chat_id = $1", chat_id)
    assert sessions[0]["n"] == 2 and messages[0]["n"] == 16


async def test_a_slow_stream_times_out_and_an_unclear_intent_falls_back(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    billing_memory(fake_recall, tenant)
    fake_recall.slow_streams = {"tech"}
    engine = services.chat.multistream.engine
    services.chat.multistream.engine = engine.model_copy(update={"stream_timeout_seconds": 0.2})
    anthropic.script(text("Hmm, schwer zu sagen."), model=FAST_TEST_MODEL)  # no label: FACT_WHAT
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "Müller Maschinenbau Abrechnung Übersicht bitte")
    assert r.status_code == 200, r.text
    trace = r.json()["memory_trace"]
    assert trace["intent"] == "FACT_WHAT" and trace["intent_source"] == "fallback"
    assert trace["streams"]["tech"]["error"] == "timed out after 0.2s"
    assert trace["streams"]["facts"]["hits"] > 0


async def test_a_message_that_asks_what_the_assistant_said_gets_its_earlier_answers(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    """The intent's streams leave the assistant's answers' passages out (`addressee`); a message
    that asks what the assistant said also gets the `answers` stream, its own section of the
    memory block. A message about the topic that does not ask the assistant does not."""
    tip = "Assistant: Keep fresh herbs upright in a glass of water, loosely covered, in the fridge."
    fake_recall.add(
        observation(tenant, tip, type="passage", priority=Priority.low),
        observation(tenant, "I grow basil and parsley on the balcony", type="fact"),
    )
    anthropic.script(text("In a glass of water."), model=SONNET)
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "What was your tip for keeping fresh herbs?")
    assert r.status_code == 200, r.text
    trace = r.json()["memory_trace"]
    assert trace["streams"]["answers"]["hits"] == 1
    assert {(o["title"], o["stream"]) for o in trace["observations"]} >= {(tip, "answers")}
    memory = chat_requests(anthropic)[0].body["messages"][-1]["content"][0]["text"]
    assert "## What you answered earlier (stream: answers)" in memory and "glass of water" in memory
    (passages,) = [q for _, q in fake_recall.queries if q.stream_origin == "answers"]
    assert passages.types == ("passage",) and passages.want_sensitive is False

    anthropic.script(text("Basil likes sun."), model=SONNET)
    r = await say(chat_api, auth(tenant), uuid.uuid4(), "How do I keep fresh herbs on the balcony?")
    assert r.status_code == 200, r.text
    assert "answers" not in r.json()["memory_trace"]["streams"]
