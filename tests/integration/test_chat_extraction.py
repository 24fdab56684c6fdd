"""Chat extraction and session summaries in extract-observation (R-5.2, R-5.5, R-4.3).

Turns go through chat-turn's HTTP API, their events through NATS to the real worker; the LLM
is the scripted Messages API. Replies are matched by a marker in the conversation, so events
of other tests that the worker happens to process at the same time never take them.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from engram.domain.observation import is_unit_key
from tests.anthropic_server import AnthropicServer, Recorded, Reply, slow, tool_use
from tests.conftest import EXTRACTION_TEST_MODEL, eventually
from tests.fakes import FakeRecall


def marked(anthropic: AnthropicServer, marker: str, *replies: Reply) -> list[Recorded]:
    """Answer extraction requests that mention `marker` and ask for the reply's tool, in order."""
    queue = list(replies)
    seen: list[Recorded] = []
    fallback: Callable[[Recorded], Reply] = anthropic.responder

    def respond(request: Recorded) -> Reply:
        wanted = (request.body.get("tool_choice") or {}).get("name")
        if request.model == EXTRACTION_TEST_MODEL and marker in request.prompt_text() and queue:
            if queue[0].content and queue[0].content[-1].get("name") == wanted:
                seen.append(request)
                return queue.pop(0)
        return fallback(request)

    anthropic.responder = respond
    return seen


async def turn(
    chat_api: httpx.AsyncClient, headers: dict[str, str], chat_id: uuid.UUID, message: str, **kw: Any
) -> Any:
    r = await chat_api.post(f"/api/ai/chats/{chat_id}/turns", json={"message": message, **kw}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


async def observations(services: Any, tenant: str, *, units: bool = False) -> list[Any]:
    """What extraction stored, without the memory units of the chat's messages unless asked for."""
    async with services.db.tenant(tenant) as conn:
        rows = list(await conn.fetch("SELECT * FROM observations ORDER BY created_at"))
    return [r for r in rows if units or not is_unit_key(r["key"])]


async def extraction_events(services: Any, tenant: str) -> list[dict[str, Any]]:
    async with services.db.tenant(tenant) as conn:
        found = await conn.fetch(
            "SELECT metadata FROM ai_events WHERE event_name = 'memory.extraction' AND metadata->>'trigger' = 'chat'"
            " ORDER BY id"
        )
    return [r["metadata"] for r in found]


async def message_trace(services: Any, tenant: str, message_id: str) -> dict[str, Any]:
    async with services.db.tenant(tenant) as conn:
        trace = await conn.fetchval("SELECT memory_trace FROM chat_messages WHERE id = $1", uuid.UUID(message_id))
    return dict(trace)


async def recall_hits(services: Any, tenant: str, user: str, text: str, limit: int = 10) -> list[Any]:
    """The real recall of what `user` may see (chat-turn's recall in these tests is a fake)."""
    from engram.domain.recall import RecallQuery
    from engram.domain.scopes import Permission, Principal
    from engram.services.recall import RecallService

    reader = Principal(tenant_id=tenant, user_id=user, permissions=frozenset({Permission.read_observation}))
    recall = RecallService(services.uow, services.index, services.embedder, None)
    return list((await recall.search(reader, RecallQuery(text=text, limit=limit))).hits)


async def test_offline_extraction_keeps_salient_statements(
    services: Any, workers: Any, fake_recall: FakeRecall, chat_api: httpx.AsyncClient, auth: Any, tenant: str
) -> None:
    chat_id = uuid.uuid4()
    body = await turn(
        chat_api,
        auth(tenant),
        chat_id,
        "Wir haben entschieden, Müller ab Januar quartalsweise abzurechnen. Ich bevorzuge kurze Antworten. "
        "Wie ist das Wetter?",
    )
    found = await eventually(lambda: observations(services, tenant))
    assert {(o["type"], o["trigger_source"], o["user_id"], o["scope"], o["source"]) for o in found} == {
        ("decision", "chat", "alice", "private", "agent"),
        ("preference", "chat", "alice", "private", "agent"),
    }
    assert all(o["session_id"] == uuid.UUID(body["session_id"]) for o in found)
    (stats,) = await eventually(lambda: extraction_events(services, tenant))
    # counted apart: the units of what was said (the turn, two of its sentences, the answer and its passage)
    assert stats["count"] == 2 and stats["units"] == 5 and stats["model"] == "offline" and stats["status"] == "ok"
    async with services.db.tenant(tenant) as conn:
        trace = await conn.fetchval(
            "SELECT memory_trace FROM chat_messages WHERE id = $1", uuid.UUID(body["message_id"])
        )
    assert trace["extraction"] == {"status": "done", "count": 2, "dedup": 0, "model": "offline", "units": 5}


async def test_llm_extraction_in_the_conversations_language_deduplicated(
    services: Any,
    workers: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    marker = f"Kunde-{uuid.uuid4().hex[:8]}"
    extracted = {
        "language": "de",
        "observations": [
            {"type": "decision", "title": f"{marker} wird ab Januar quartalsweise abgerechnet", "tags": ["abrechnung"]},
            {"type": "preference", "title": "Alice bevorzugt kurze Antworten", "key": "preference:answer-style"},
        ],
    }
    again = {
        "observations": [
            {"type": "decision", "title": f"{marker} wird ab Januar quartalsweise abgerechnet", "tags": ["abrechnung"]},
            {
                "type": "preference",
                "title": "Alice bevorzugt Antworten mit Stichpunkten",
                "key": "preference:answer-style",
            },
        ]
    }
    seen = marked(
        anthropic,
        marker,
        tool_use("record_observations", extracted),
        tool_use("record_observations", again),
    )
    chat_id = uuid.uuid4()
    await turn(
        chat_api, auth(tenant), chat_id, f"Wir rechnen {marker} ab Januar quartalsweise ab, bitte kurz antworten."
    )
    await eventually(lambda: len(seen) == 1 and observations(services, tenant))
    await eventually(lambda: extraction_events(services, tenant))
    await turn(chat_api, auth(tenant), chat_id, f"Zu {marker}: bitte künftig in Stichpunkten.")
    await eventually(lambda: len(seen) == 2)

    async def settled() -> list[dict[str, Any]]:
        stats = await extraction_events(services, tenant)
        return stats if len(stats) == 2 else []

    first, second = await eventually(settled)
    found = await observations(services, tenant)
    assert len(found) == 2  # the same decision is stored once; the keyed preference is updated in place
    preference = next(o for o in found if o["type"] == "preference")
    assert preference["title"] == "Alice bevorzugt Antworten mit Stichpunkten"
    assert preference["key"] == "preference:answer-style" and preference["confidence"] == pytest.approx(0.7)
    assert first["count"] == 2 and first["model"] == EXTRACTION_TEST_MODEL and first["inputTokens"] > 0
    assert second["dedupHits"] == 1 and second["count"] == 1

    request = seen[0].body
    assert request["tool_choice"] == {"type": "tool", "name": "record_observations"}
    schema = request["tools"][0]["input_schema"]
    assert "decision" in schema["$defs"]["ExtractedObservation"]["properties"]["type"]["enum"]
    assert "(de)" in seen[0].prompt_text()
    assert "preference:answer-style" in seen[1].prompt_text()  # known memories go into the next prompt
    assert llm.gate.background_peak >= 1  # extraction ran at background priority


async def test_no_transaction_stays_open_while_the_model_extracts(
    services: Any,
    workers: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    marker = f"Auftrag-{uuid.uuid4().hex[:8]}"
    extracted = {"observations": [{"type": "fact", "title": f"{marker} ships on Friday"}]}
    seen = marked(anthropic, marker, slow(1.5, tool_use("record_observations", extracted)))
    await turn(chat_api, auth(tenant), uuid.uuid4(), f"{marker} wird am Freitag geliefert.")
    await eventually(lambda: len(seen) == 1)  # the model is answering now, for 1.5 s
    await asyncio.sleep(0.8)
    async with services.db.system() as conn:
        stuck = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND state LIKE 'idle in transaction%' AND now() - state_change > interval '500 milliseconds'"
        )
    assert stuck == 0  # the worker read what it needed and let go of its connection
    found = await eventually(lambda: observations(services, tenant))
    assert [o["title"] for o in found] == [f"{marker} ships on Friday"]


async def test_invalid_output_is_retried_once_with_the_reason(
    services: Any,
    workers: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    marker = f"Projekt-{uuid.uuid4().hex[:8]}"
    seen = marked(
        anthropic,
        marker,
        tool_use("record_observations", {"observations": [{"type": "gossip", "title": f"{marker} rumour"}]}),
        tool_use("record_observations", {"observations": [{"type": "project", "title": f"{marker} starts in May"}]}),
    )
    await turn(chat_api, auth(tenant), uuid.uuid4(), f"{marker} startet im Mai.")
    found = await eventually(lambda: observations(services, tenant))
    assert [o["title"] for o in found] == [f"{marker} starts in May"]
    retry = seen[1].body["messages"]
    assert retry[-1]["content"][0]["is_error"] is True
    assert "unknown observation type" in retry[-1]["content"][0]["content"]


async def test_invalid_output_twice_is_dead_lettered_with_the_reason(
    services: Any,
    workers: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    marker = f"Vorgang-{uuid.uuid4().hex[:8]}"
    bad = {"observations": [{"type": "fact", "title": ""}]}
    seen = marked(anthropic, marker, tool_use("record_observations", bad), tool_use("record_observations", bad))
    dlq = await services.bus.js.pull_subscribe("dlq.engram.extract-observation.>", stream="ENGRAM_DLQ")
    body = await turn(chat_api, auth(tenant), uuid.uuid4(), f"{marker} ist abgeschlossen.")

    async def dead_letter() -> Any:
        for m in await dlq.fetch(50, timeout=1):
            await m.ack()
            if m.headers.get("ce-tenantid") == tenant:
                return m
        return None

    letter = await eventually(dead_letter, timeout=15)
    assert "record_observations: the model's output was invalid twice" in letter.headers["Engram-Dlq-Reason"]
    assert "title" in letter.headers["Engram-Dlq-Reason"]
    assert json.loads(letter.data)["user_message"].startswith(marker)
    assert len(seen) == 2 and await observations(services, tenant) == []
    (failed,) = await eventually(lambda: extraction_events(services, tenant))
    assert failed["status"] == "failed" and "invalid twice" in failed["error"]
    # the two calls it cost are reported too, and the turn's trace says why
    assert failed["model"] == EXTRACTION_TEST_MODEL and failed["inputTokens"] > 0 and failed["durationMs"] >= 0
    trace = await message_trace(services, tenant, body["message_id"])
    assert trace["extraction"]["status"] == "failed" and "invalid twice" in trace["extraction"]["error"]
    # what the user said is memory all the same: the turn's unit, private to them
    said = [r for r in await observations(services, tenant, units=True) if r["key"].startswith("turn:")]
    assert [(r["user_id"], r["scope"]) for r in said if marker in r["narrative"]] == [("alice", "private")]
    await dlq.unsubscribe()


async def test_an_extraction_the_worker_gave_up_on_is_reported_and_traced(
    services: Any, workers: Any, fake_recall: FakeRecall, chat_api: httpx.AsyncClient, auth: Any, tenant: str
) -> None:
    from cloudevents.http import CloudEvent

    from engram.domain.events import CHAT_TURN_COMPLETED
    from functions.extract_observation.main import WORKER

    body = await turn(chat_api, auth(tenant), uuid.uuid4(), "Wir haben entschieden, quartalsweise abzurechnen.")
    await eventually(lambda: extraction_events(services, tenant))
    # what the runner calls after the last delivery of an event failed (an outage that never cleared)
    hook = WORKER.gave_up_hook(services._current())
    assert hook is not None

    def event(event_id: str) -> CloudEvent:
        return CloudEvent(
            {
                "type": CHAT_TURN_COMPLETED.type,
                "source": "/engram/chat-turn",
                "id": event_id,
                "tenantid": tenant,
                "userid": "alice",
            },
            {
                "chat_id": body["chat_id"],
                "assistant_message_id": body["message_id"],
                "user_message": "x",
                "assistant_message": "y",
            },
        )

    reason = "gave up after 8 deliveries: every profile failed for task 'extraction'"
    # this turn's extraction was stored (only announcing it failed): its trace stays "done"
    await hook(event(f"{CHAT_TURN_COMPLETED.type}:{body['message_id']}"), reason)
    rows = await extraction_events(services, tenant)
    assert rows[-1]["status"] == "partial" and "change events were not published" in rows[-1]["error"]
    assert (await message_trace(services, tenant, body["message_id"]))["extraction"]["status"] == "done"
    # a turn whose extraction never got through
    async with services.db.tenant(tenant) as conn:
        await conn.execute(
            "UPDATE chat_messages SET memory_trace = jsonb_set(memory_trace, '{extraction}', $2::jsonb) WHERE id = $1",
            uuid.UUID(body["message_id"]),
            {"status": "queued"},
        )
    await hook(event("lost-turn"), reason)
    rows = await extraction_events(services, tenant)
    assert rows[-1]["status"] == "failed" and rows[-1]["error"] == reason
    trace = await message_trace(services, tenant, body["message_id"])
    assert trace["extraction"] == {"status": "failed", "error": reason}


async def test_an_ended_session_gets_a_summary_that_is_recallable(
    services: Any,
    workers: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    marker = f"Kunde-{uuid.uuid4().hex[:8]}"
    summary = {
        "request": f"Abrechnung von {marker} klären",
        "investigated": "Bisheriges Abrechnungsmodell",
        "learned": "Quartalsweise ab Januar",
        "completed": "Entscheidung dokumentiert",
        "next_steps": "Vertrag anpassen",
        "notes": "",
    }
    seen = marked(anthropic, marker, tool_use("record_summary", summary))
    chat_id = uuid.uuid4()
    await turn(chat_api, auth(tenant), chat_id, f"Wie rechnen wir {marker} ab?")
    body = await turn(chat_api, auth(tenant), chat_id, f"Gut, {marker} also quartalsweise.", end_session=True)
    session_id = uuid.UUID(body["session_id"])

    async def stored() -> Any:
        async with services.db.tenant(tenant) as conn:
            return await conn.fetchrow("SELECT * FROM summaries WHERE session_id = $1", session_id)

    row = await eventually(stored, timeout=15)
    assert row["request"] == f"Abrechnung von {marker} klären" and row["next_steps"] == "Vertrag anpassen"
    assert row["generated_by_model"] == EXTRACTION_TEST_MODEL and row["user_id"] == "alice"
    assert seen[0].body["tool_choice"]["name"] == "record_summary"
    transcript = seen[0].prompt_text()
    assert f"Wie rechnen wir {marker} ab?" in transcript and "Scripted answer." in transcript

    async def summary_observation() -> Any:
        return [o for o in await observations(services, tenant) if o["key"] == f"session-summary:{session_id}"]

    (obs,) = await eventually(summary_observation)
    assert obs["type"] == "context" and obs["title"].startswith("Session summary: Abrechnung von")
    assert "Learned: Quartalsweise ab Januar" in obs["narrative"] and obs["scope"] == "private"
    async with services.db.tenant(tenant) as conn:  # valid from when the session started
        started = await conn.fetchval("SELECT created_at FROM sessions WHERE id = $1", session_id)
    assert obs["valid_from"] == started


async def test_a_session_whose_summary_cannot_be_made_is_failed(
    services: Any,
    workers: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    marker = f"Akte-{uuid.uuid4().hex[:8]}"
    bad = {"learned": "no request field"}  # `request` is required
    seen = marked(anthropic, marker, tool_use("record_summary", bad), tool_use("record_summary", bad))
    body = await turn(chat_api, auth(tenant), uuid.uuid4(), f"{marker}: bitte ablegen.", end_session=True)

    async def status() -> str | None:
        async with services.db.tenant(tenant) as conn:
            found = await conn.fetchval("SELECT status FROM sessions WHERE id = $1", uuid.UUID(body["session_id"]))
        return str(found) if found == "failed" else None

    assert await eventually(status, timeout=15) == "failed"
    assert len(seen) == 2


async def test_offline_summary_without_a_key(
    services: Any, workers: Any, fake_recall: FakeRecall, chat_api: httpx.AsyncClient, auth: Any, tenant: str
) -> None:
    chat_id = uuid.uuid4()
    await turn(chat_api, auth(tenant), chat_id, "Wann läuft der Wartungsvertrag mit Müller aus?")
    body = await turn(
        chat_api, auth(tenant), chat_id, "Wir haben entschieden, ihn um ein Jahr zu verlängern.", end_session=True
    )

    async def stored() -> Any:
        async with services.db.tenant(tenant) as conn:
            return await conn.fetchrow("SELECT * FROM summaries WHERE session_id = $1", uuid.UUID(body["session_id"]))

    row = await eventually(stored, timeout=15)
    assert row["generated_by_model"] == "offline"
    assert row["request"] == "Wann läuft der Wartungsvertrag mit Müller aus?"
    assert "verlängern" in row["learned"] and row["notes"] == "Offline-Zusammenfassung (ohne Sprachmodell)"


async def test_a_chat_turn_is_memory_as_said_before_its_session_ends_even_what_no_rule_keeps(
    services: Any,
    workers: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    auth: Any,
    tenant: str,
) -> None:
    """The chat path end to end (chat-turn, NATS, extract-observation, embed-index, recall):
    a fact no offline rule calls salient is stored as the user's turn unit once its turn is
    extracted, while the session goes on, and recalled for its user only; the session's end
    keeps the same unit."""
    chat_id = uuid.uuid4()
    said = "My music teacher says I'm getting better at the ukulele."
    first = await turn(chat_api, auth(tenant), chat_id, said)

    async def unit() -> Any:
        return [
            o
            for o in await observations(services, tenant, units=True)
            if (o["key"] or "").startswith("turn:") and "ukulele" in o["narrative"]
        ]

    (mine,) = await eventually(unit, timeout=15)
    async with services.db.tenant(tenant) as conn:
        status = await conn.fetchval("SELECT status FROM sessions WHERE id = $1", uuid.UUID(first["session_id"]))
    assert status == "active"  # the session has not ended
    assert (mine["user_id"], mine["scope"], mine["key"]) == (
        "alice",
        "private",
        f"turn:{chat_id}:{mine['chat_message_id']}",
    )
    assert str(mine["session_id"]) == first["session_id"]
    # the offline extractor kept nothing of it: only the units hold the fact
    assert not [o for o in await observations(services, tenant) if "ukulele" in o["title"] and not o["key"]]

    async def found(user: str) -> list[str]:
        hits = await recall_hits(services, tenant, user, "what did my music teacher say about the ukulele")
        return [str(h.observation.id) for h in hits]

    async def recalled() -> bool:
        return str(mine["id"]) in await found("alice")

    assert await eventually(recalled, timeout=15)
    assert str(mine["id"]) not in await found("bob")  # private to the chat's user

    await turn(chat_api, auth(tenant), chat_id, "Thanks, that is all for today.", end_session=True)

    async def summarised() -> Any:
        async with services.db.tenant(tenant) as conn:
            return await conn.fetchrow("SELECT * FROM summaries WHERE session_id = $1", uuid.UUID(first["session_id"]))

    assert await eventually(summarised, timeout=15)
    assert [o["id"] for o in await unit()] == [mine["id"]]  # the session's end wrote the same unit


async def test_the_sweep_ends_sessions_left_idle_and_they_get_their_summaries(
    services: Any,
    workers: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    auth: Any,
    tenant: str,
) -> None:
    from functions.retention_cron.main import sweep_sessions

    left = await turn(chat_api, auth(tenant), uuid.uuid4(), "Wir haben entschieden, den Vertrag zu verlängern.")
    recent = await turn(chat_api, auth(tenant), uuid.uuid4(), "Wie ist der Stand bei Müller?")
    just_idle = await turn(chat_api, auth(tenant), uuid.uuid4(), "Noch eine Frage zu Müller.")
    async with services.db.tenant(tenant) as conn:
        await conn.execute(
            "UPDATE sessions SET updated_at = now() - interval '2 hours' WHERE id = $1", uuid.UUID(left["session_id"])
        )
        # idle for longer than the idle time (30 min) but within the grace: a turn may still be finishing in it
        await conn.execute(
            "UPDATE sessions SET updated_at = now() - interval '32 minutes' WHERE id = $1",
            uuid.UUID(just_idle["session_id"]),
        )
    # what the CronJob's `python -m functions.retention_cron --sessions` runs (main() would also
    # configure this process's logging)
    assert await sweep_sessions() >= 1

    async def status(session_id: str) -> str:
        async with services.db.tenant(tenant) as conn:
            return str(await conn.fetchval("SELECT status FROM sessions WHERE id = $1", uuid.UUID(session_id)))

    assert await status(left["session_id"]) == "completed"
    assert await status(recent["session_id"]) == "active" and await status(just_idle["session_id"]) == "active"

    async def summary() -> Any:
        async with services.db.tenant(tenant) as conn:
            return await conn.fetchrow("SELECT * FROM summaries WHERE session_id = $1", uuid.UUID(left["session_id"]))

    row = await eventually(summary, timeout=15)
    assert "verlängern" in row["learned"] and row["generated_by_model"] == "offline"


async def test_the_session_sweep_command_prints_what_it_ended(services: Any) -> None:
    import os
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "functions.retention_cron",
        "--sessions",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "ENGRAM_LOG_LEVEL": "WARNING"},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert set(report) == {"sessions_ended"} and report["sessions_ended"] >= 0


async def test_a_sweep_run_ends_at_most_its_limit_the_longest_idle_first(
    services: Any, workers: Any, fake_recall: FakeRecall, chat_api: httpx.AsyncClient, auth: Any, tenant: str
) -> None:
    from datetime import UTC, datetime, timedelta

    from engram.services.sessions import end_idle_sessions

    older = await turn(chat_api, auth(tenant), uuid.uuid4(), "Erste Frage zu Müller.")
    newer = await turn(chat_api, auth(tenant), uuid.uuid4(), "Zweite Frage zu Müller.")
    async with services.db.tenant(tenant) as conn:  # long before any other test's sessions
        for session_id, when in (
            (older["session_id"], datetime(1999, 12, 31)),
            (newer["session_id"], datetime(2000, 1, 1)),
        ):
            await conn.execute(
                "UPDATE sessions SET updated_at = $2 WHERE id = $1", uuid.UUID(session_id), when.replace(tzinfo=UTC)
            )
    now = datetime(2000, 1, 2, tzinfo=UTC)

    async def statuses() -> list[str]:
        async with services.db.tenant(tenant) as conn:
            return [
                str(await conn.fetchval("SELECT status FROM sessions WHERE id = $1", uuid.UUID(s["session_id"])))
                for s in (older, newer)
            ]

    assert await end_idle_sessions(services.uow, services.maintenance, timedelta(minutes=30), now=now, limit=1) == 1
    assert await statuses() == ["completed", "active"]
    assert await end_idle_sessions(services.uow, services.maintenance, timedelta(minutes=30), now=now, limit=1) == 1
    assert await statuses() == ["completed", "completed"]


async def test_a_secret_said_in_a_chat_is_not_memory_but_that_it_was_said_is(
    services: Any,
    workers: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    auth: Any,
    tenant: str,
) -> None:
    """The chat path end to end (offline extractor, units, the session's summary): a password and
    a card number the user typed are in no stored memory, no index entry and no summary; the
    memory says that they were given ("[withheld]") and is recalled for the question; the chat's
    own history keeps the message as sent."""
    chat_id = uuid.uuid4()
    said = "Merk dir: unser WLAN-Passwort lautet Sonnenblume7. Bezahlt habe ich mit 4111 1111 1111 1111."
    first = await turn(chat_api, auth(tenant), chat_id, said)

    async def stored() -> list[Any]:
        rows = await observations(services, tenant, units=True)
        return rows if any("WLAN" in o["narrative"] for o in rows) and len(rows) >= 2 else []

    rows = await eventually(stored, timeout=15)
    await turn(chat_api, auth(tenant), chat_id, "Danke, das war alles.", end_session=True)

    async def summary() -> Any:
        async with services.db.tenant(tenant) as conn:
            return await conn.fetchrow("SELECT * FROM summaries WHERE session_id = $1", uuid.UUID(first["session_id"]))

    row = await eventually(summary, timeout=15)
    rows = await observations(services, tenant, units=True)

    async def terms() -> list[str]:  # the index's postings, once the units are indexed
        async with services.db.tenant(tenant) as conn:
            found = [r["term"] for r in await conn.fetch("SELECT DISTINCT term FROM search_terms")]
        return found if any(t.startswith("wlan") for t in found) else []

    indexed = await eventually(terms, timeout=15)
    async with services.db.tenant(tenant) as conn:
        history = await conn.fetchval(
            "SELECT content FROM chat_messages WHERE chat_id = $1 AND role = 'user' ORDER BY created_at LIMIT 1",
            chat_id,
        )
    everything = json.dumps([dict(r) for r in [*rows, row]], default=str).casefold() + " ".join(indexed)
    assert "sonnenblume" not in everything and "4111" not in everything
    assert any("WLAN-Passwort lautet [withheld]" in o["narrative"] for o in rows)
    assert any("[card number withheld]" in o["narrative"] for o in rows)
    assert history == said  # the chat's history is the conversation, not memory

    async def recalled() -> bool:
        hits = await recall_hits(services, tenant, "alice", "Wie lautet unser WLAN-Passwort?", limit=3)
        return any("[withheld]" in h.observation.narrative for h in hits)

    assert await eventually(recalled, timeout=15)
