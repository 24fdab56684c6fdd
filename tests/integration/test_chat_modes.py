"""The chat turn's modes end to end on the local stack (issue 20): a strategy's synthesis profile
(CODING -> tech_expert) and INTERVIEW mode (German and English), over HTTP with PostgreSQL, NATS
and the scripted Anthropic API."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from tests.anthropic_server import AnthropicServer, Recorded, Reply, text, tool_use
from tests.conftest import FAST_TEST_MODEL, installed
from tests.fakes import FakeRecall
from tests.integration.test_chat_extraction import observations, turn
from tests.openai_server import OpenAIServer, tool_call
from tests.openai_server import answer as local_answer

SONNET = "claude-sonnet-4-6"


def capture(anthropic: AnthropicServer, *fields: dict[str, Any]) -> list[Recorded]:
    """Answer the interview's `record_fields` calls with these fields, in order."""
    queue = list(fields)
    seen: list[Recorded] = []
    fallback: Callable[[Recorded], Reply] = anthropic.responder

    def respond(request: Recorded) -> Reply:
        if (request.body.get("tool_choice") or {}).get("name") == "record_fields" and queue:
            seen.append(request)
            return tool_use("record_fields", queue.pop(0))
        return fallback(request)

    anthropic.responder = respond
    return seen


def chat_models(anthropic: AnthropicServer) -> list[Recorded]:
    return [r for r in anthropic.requests if r.model == SONNET]


async def test_coding_turns_are_answered_by_the_tech_expert_profile(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    anthropic.script(text("Use re.fullmatch."), model=SONNET)
    body = await turn(chat_api, auth(tenant), uuid.uuid4(), "Wie prüfe ich mit einer regex in Python eine PLZ?")
    trace = body["memory_trace"]
    assert trace["intent"] == "CODING" and trace["profile"] == "tech_expert"
    (sent,) = chat_models(anthropic)
    assert sent.body["max_tokens"] == 4096  # tech_expert's, not chat_default's 2048
    anthropic.script(text("Quarterly."), model=SONNET)
    other = await turn(chat_api, auth(tenant), uuid.uuid4(), "Was ist mit Müller Maschinenbau?")
    assert other["memory_trace"]["intent"] == "FACT_WHAT" and other["memory_trace"]["profile"] == "chat_default"
    assert chat_models(anthropic)[-1].body["max_tokens"] == 2048


async def test_an_english_interview_asks_for_what_is_missing_then_stores_the_project(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    seen = capture(anthropic, {"name": "Apollo", "customer": "Contoso"}, {"deadline": "March 31"})
    chat_id = uuid.uuid4()
    first = await turn(chat_api, auth(tenant), chat_id, "New project Apollo for our customer Contoso.")
    assert first["answer"] == (
        "I'm recording this as a project. So far: name: Apollo; customer: Contoso. Still missing: deadline. "
        "Could you tell me?"
    )
    assert first["offline"] is False and first["memory_trace"]["interview"]["status"] == "asking"
    assert not chat_models(anthropic) and await observations(services, tenant) == []  # no answer synthesis
    assert "New project Apollo" in seen[0].prompt_text() and seen[0].model == FAST_TEST_MODEL
    second = await turn(chat_api, auth(tenant), chat_id, "The deadline is March 31.")
    assert second["answer"] == "Saved: project – name: Apollo; customer: Contoso; deadline: March 31."
    interview = second["memory_trace"]["interview"]
    assert interview["status"] == "captured" and interview["observation_id"]
    assert '"customer": "Contoso"' in seen[1].body["messages"][0]["content"]  # what was known went along
    (stored,) = await observations(services, tenant)
    assert (
        stored["type"] == "project"
        and stored["title"] == "project: Apollo"
        and str(stored["id"]) == interview["observation_id"]
    )
    assert list(stored["facts"]) == ["name: Apollo", "customer: Contoso", "deadline: March 31"]
    assert stored["verified"] is True and stored["scope"] == "private" and stored["source"] == "user"
    # the interview is over: a question is answered as usual
    anthropic.script(text("Apollo is due on March 31 (from memory)."), model=SONNET)
    third = await turn(chat_api, auth(tenant), chat_id, "When is Apollo due?")
    assert third["answer"].startswith("Apollo is due") and "interview" not in third["memory_trace"]


async def test_a_german_interview_captures_an_appointment_in_one_message(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    capture(anthropic, {"title": "Besprechung mit Müller", "date": "Freitag, 10 Uhr", "participants": "Alice, Bob"})
    body = await turn(
        chat_api,
        auth(tenant),
        uuid.uuid4(),
        "Neuer Termin: Besprechung mit Müller am Freitag um 10 Uhr, Alice und Bob.",
    )
    assert body["answer"] == (
        "Gespeichert: Termin – Anlass: Besprechung mit Müller; Datum und Uhrzeit: Freitag, 10 Uhr; "
        "Teilnehmer: Alice, Bob."
    )
    assert body["memory_trace"]["extraction"] == {"status": "skipped", "reason": "interview"}
    (stored,) = await observations(services, tenant)
    assert stored["type"] == "event" and stored["title"] == "Termin: Besprechung mit Müller"
    assert "interview" in list(stored["tags"])


async def test_questions_and_unrelated_statements_are_no_interview(
    services: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    seen = capture(anthropic, {"name": "Hermes"}, {})
    anthropic.script(text("Projekt Hermes ist für Acme."), model=SONNET)
    asked = await turn(chat_api, auth(tenant), uuid.uuid4(), "Welches Projekt hat Acme?")
    assert "interview" not in asked["memory_trace"] and not seen
    chat_id = uuid.uuid4()
    started = await turn(chat_api, auth(tenant), chat_id, "Wir haben ein neues Projekt Hermes.")
    assert started["memory_trace"]["interview"]["missing"] == ["customer", "deadline"]
    assert "Mir fehlt noch: Kunde, Termin" in started["answer"]
    anthropic.script(text("Gern, hier ist ein Witz."), model=SONNET)
    moved_on = await turn(chat_api, auth(tenant), chat_id, "Erzähl mir lieber einen Witz.")
    assert moved_on["answer"] == "Gern, hier ist ein Witz."  # nothing for the interview: it ends
    assert moved_on["memory_trace"]["interview"]["status"] == "abandoned"
    async with services.db.tenant(tenant) as conn:
        metadata = await conn.fetchval("SELECT metadata FROM sessions WHERE chat_id = $1", chat_id)
    assert metadata["interview"] is None and await observations(services, tenant) == []


# ---- the same flows with only a local model (the OpenAI-compatible provider) configured ----------


@pytest.fixture
async def local_model(services: Any, openai_api: OpenAIServer) -> AsyncIterator[Any]:
    """The services with no Anthropic key and a local model server (`ENGRAM_LOCAL_LLM_BASE_URL`):
    every chain is skipped down to its `local` profile."""
    from engram.bootstrap import Overrides, build_gateway

    settings = services.base.settings.model_copy(
        update={"anthropic_api_key": None, "engram_local_llm_base_url": openai_api.url}
    )
    gateway = build_gateway(settings)
    async for _built in installed(services, Overrides(recall=services.recall, gateway=gateway), settings):
        yield gateway
    await gateway.close(drain_seconds=10)


async def test_with_only_a_local_model_turns_stream_and_interviews_run_on_it(
    services: Any,
    local_model: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    openai_api: OpenAIServer,
    auth: Any,
    tenant: str,
) -> None:
    def respond(request: Any) -> Any:
        tool = ((request.body.get("tool_choice") or {}).get("function") or {}).get("name")
        if tool == "record_fields":
            return tool_call("record_fields", {"name": "Zeus", "customer": "Initech", "deadline": "Q3"})
        return local_answer("Lokale Antwort aus dem Gedächtnis.")

    openai_api.responder = respond
    async with chat_api.stream(
        "POST",
        f"/api/ai/chats/{uuid.uuid4()}/turns",
        json={"message": "Was ist mit Müller Maschinenbau?"},
        headers={**auth(tenant), "Accept": "text/event-stream"},
    ) as r:
        raw = "".join([chunk async for chunk in r.aiter_text()])
    assert r.status_code == 200 and "event: token" in raw and "event: done" in raw
    done = json.loads(raw.split("event: done\ndata: ")[1].split("\n")[0])
    assert done["answer"] == "Lokale Antwort aus dem Gedächtnis." and done["model"] == "llama3.1:8b"
    assert done["offline"] is False
    sent = [r for r in openai_api.requests if r.body.get("stream")][-1]
    assert (
        sent.body["messages"][0]["role"] == "system"
        and "Call a function with JSON" in sent.body["messages"][0]["content"]
    )  # the `local` provider's prompt (level 2)
    assert {t["function"]["name"] for t in sent.body["tools"]} >= {"search_memory"}

    body = await turn(chat_api, auth(tenant), uuid.uuid4(), "Neues Projekt Zeus für Initech, fällig in Q3.")
    assert body["answer"].startswith("Gespeichert: Projekt") and body["model"] == "llama3.1:8b"
    (stored,) = await observations(services, tenant)
    assert stored["title"] == "Projekt: Zeus"
