"""The OpenAI-compatible provider through the real `openai` SDK against a scripted Chat Completions
server, alone and in fallback chains with the real Anthropic adapter (R-8.4)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from engram.adapters.anthropic_llm import AnthropicLLM
from engram.adapters.openai_llm import OpenAICompatibleLLM
from engram.domain.llm import (
    LlmConfig,
    LlmRequest,
    LlmUnavailable,
    PromptLibrary,
    StreamInterrupted,
    SystemBlock,
    ToolSpec,
)
from engram.domain.telemetry import ChatError, ChatToolUsed
from engram.services.gateway import LlmGateway, TelemetryBuffer, Tool, ToolContext
from tests.anthropic_server import AnthropicServer, rate_limited, text
from tests.openai_server import (
    OpenAIServer,
    answer,
    broken_stream,
    error,
    filtered,
    no_choices,
    refusal,
    slow,
    tool_call,
)
from tests.openai_server import rate_limited as local_rate_limited

SONNET, HAIKU, LOCAL, QWEN = "claude-sonnet-4-6", "claude-haiku-4-5", "llama3.1:8b", "qwen2.5:7b"

CONFIG = f"""
profiles:
  cloud: {{model: {SONNET}, timeout: 5, fallback: cloud_backup}}
  cloud_backup: {{model: {HAIKU}, timeout: 5, fallback: gateway}}
  gateway: {{provider: openai, model: gpt-4.1-mini, timeout: 5, fallback: local}}
  local: {{provider: local, model: {LOCAL}, timeout: 5}}
  local_first: {{provider: local, model: {LOCAL}, timeout: 0.5, fallback: local_other}}
  local_other: {{provider: local, model: {QWEN}, timeout: 5, fallback: cloud}}
  advisor: {{model: claude-opus-4-7, timeout: 5}}
tasks: {{advisor: advisor}}
"""

PROMPTS = f"""
advisor_v1:
  default: "You advise."
chat_v1:
  default: "default instructions"
  anthropic: "anthropic instructions"
  local: "local instructions"
  {QWEN}: "qwen instructions"
"""


def build(anthropic: AnthropicServer | None, local: OpenAIServer | None, config: str = CONFIG) -> LlmGateway:
    providers: dict[str, Any] = {}
    if anthropic is not None:
        providers["anthropic"] = AnthropicLLM("sk-test", base_url=anthropic.url)
    if local is not None:
        providers["local"] = OpenAICompatibleLLM(base_url=local.url, provider="local")
    return LlmGateway(
        LlmConfig.from_yaml(config),
        PromptLibrary.from_yaml(PROMPTS),
        providers,
        realtime_wait_cap=0.3,
        background_wait_cap=0.3,
        background_retries=2,
    )


@pytest.fixture
async def gateway(anthropic: AnthropicServer, openai_api: OpenAIServer) -> AsyncIterator[LlmGateway]:
    gw = build(anthropic, openai_api)
    yield gw
    await gw.close()


def ask(message: str = "Hallo", history: int = 0) -> LlmRequest:
    past = tuple({"role": r, "content": f"{r} {i}"} for i in range(history) for r in ("user", "assistant"))
    return LlmRequest(
        system=(SystemBlock("be brief", cache=True),), history=past, turn=({"role": "user", "content": message},)
    )


def prompted(gateway: LlmGateway) -> Any:
    def request(profile: Any) -> LlmRequest:
        system = gateway.prompts.render("chat_v1", model=profile.model, provider=profile.provider)
        return LlmRequest(system=(SystemBlock(system),), turn=({"role": "user", "content": "Hi"},))

    return request


async def test_a_local_answer_and_the_request_as_the_openai_protocol_has_it(
    gateway: LlmGateway, openai_api: OpenAIServer
) -> None:
    openai_api.script(answer("Hallo von lokal", cached=40))
    reply = await gateway.complete("local", ask(history=1))
    assert reply.text == "Hallo von lokal" and reply.model == LOCAL and reply.stop_reason == "end_turn"
    assert reply.usage.input_tokens == 60 and reply.usage.cache_read_input_tokens == 40
    sent = openai_api.requests[-1]
    assert sent.path == "/v1/chat/completions" and sent.headers["x-stainless-retry-count"] == "0"
    assert sent.body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "user 0"},
        {"role": "assistant", "content": "assistant 0"},
        {"role": "user", "content": "Hallo"},
    ]
    assert sent.body["max_tokens"] == 2048 and "stream" not in sent.body


async def test_a_streamed_answer_with_its_usage_chunk(gateway: LlmGateway, openai_api: OpenAIServer) -> None:
    openai_api.script(answer("eins zwei drei vier"))
    pieces: list[str] = []

    async def sink(chunk: str) -> None:
        pieces.append(chunk)

    buffer = TelemetryBuffer()
    reply = await gateway.complete("local", ask(), on_text=sink, telemetry=buffer)
    assert "".join(pieces) == "eins zwei drei vier" and len(pieces) == 4
    assert reply.text == "eins zwei drei vier" and buffer.usage[LOCAL].output_tokens == 20  # the choices-less chunk
    assert openai_api.requests[-1].body["stream_options"] == {"include_usage": True}


async def test_streamed_tool_calls_run_and_their_results_go_back_as_tool_messages(
    gateway: LlmGateway, openai_api: OpenAIServer
) -> None:
    openai_api.script(tool_call("lookup", {"query": "Kunde Müller"}, preface="Ich schaue nach."), answer("Gefunden."))
    seen: list[str] = []

    async def lookup(arguments: Any, _ctx: ToolContext) -> str:
        seen.append(arguments["query"])
        return "Müller GmbH, Hamburg"

    spec_tool = Tool(
        ToolSpec("lookup", "look up", {"type": "object", "properties": {"query": {"type": "string"}}}), lookup
    )
    buffer = TelemetryBuffer()
    streamed: list[str] = []

    async def sink(chunk: str) -> None:
        streamed.append(chunk)

    outcome = await gateway.run_tools("local", ask(), {"lookup": spec_tool}, telemetry=buffer, on_text=sink)
    assert seen == ["Kunde Müller"] and outcome.text == "Ich schaue nach.\n\nGefunden." and outcome.iterations == 2
    first, second = openai_api.requests[-2:]
    assert first.body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "look up",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
    assistant, tool = second.body["messages"][-2:]
    assert assistant["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"query": "Kunde Müller"}'}
    assert tool == {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"], "content": "Müller GmbH, Hamburg"}
    assert [e.tool_name for e in buffer.events if isinstance(e, ChatToolUsed)] == ["lookup"]


async def test_cloud_rate_limits_back_off_then_the_chain_ends_in_the_local_model(
    gateway: LlmGateway, anthropic: AnthropicServer, openai_api: OpenAIServer
) -> None:
    anthropic.script(rate_limited(0.05), rate_limited(0.05), model=SONNET)
    anthropic.script(rate_limited(5), model=HAIKU)  # too long to wait for: straight on
    openai_api.script(answer("lokal übernommen"))
    buffer = TelemetryBuffer()
    reply = await gateway.complete("cloud", ask(), telemetry=buffer)
    assert reply.text == "lokal übernommen" and reply.profile == "local"
    assert len(anthropic.requests_for(SONNET)) == 2 and len(anthropic.requests_for(HAIKU)) == 1
    # the gateway profile (provider openai) is not configured in this gateway: skipped, no error row
    assert [e.stage for e in buffer.events if isinstance(e, ChatError)] == ["llm:cloud", "llm:cloud_backup"]


async def test_a_local_429_waits_for_its_retry_after_then_retries(
    gateway: LlmGateway, openai_api: OpenAIServer
) -> None:
    openai_api.script(local_rate_limited(0.1), answer("nach der Pause"))
    reply = await gateway.complete("local", ask())
    assert reply.text == "nach der Pause" and len(openai_api.requests) == 2
    assert gateway.cooling(LOCAL) == 0.0 or gateway.cooling(LOCAL) <= 0.1


@pytest.mark.parametrize(
    "failure",
    [error(500, "boom"), slow(1.5), no_choices(), refusal("I can't help with that."), filtered("[filtered]")],
    ids=["500", "timeout", "empty-choices", "refusal", "content-filter"],
)
async def test_local_failures_fall_back_to_the_next_profile(
    gateway: LlmGateway, anthropic: AnthropicServer, openai_api: OpenAIServer, failure: Any
) -> None:
    openai_api.script(failure, model=LOCAL)
    openai_api.script(answer("Qwen antwortet"), model=QWEN)
    buffer = TelemetryBuffer()
    reply = await gateway.complete("local_first", ask(), telemetry=buffer)
    assert reply.text == "Qwen antwortet" and reply.profile == "local_other"
    assert [e.stage for e in buffer.events if isinstance(e, ChatError)] == ["llm:local_first"]
    assert not anthropic.requests


async def test_a_cloud_refusal_that_carries_text_takes_the_content_fallback(
    gateway: LlmGateway, anthropic: AnthropicServer, openai_api: OpenAIServer
) -> None:
    anthropic.script(text("Das kann ich nicht beantworten.", stop_reason="refusal"), model=SONNET)
    anthropic.script(text("Hier ist die Antwort."), model=HAIKU)
    buffer = TelemetryBuffer()
    reply = await gateway.complete("cloud", ask(), telemetry=buffer)
    assert reply.text == "Hier ist die Antwort." and reply.profile == "cloud_backup"
    errors = [e for e in buffer.events if isinstance(e, ChatError)]
    assert [(e.stage, e.error_type) for e in errors] == [("llm:cloud", "refused")]


async def test_a_stream_cut_after_text_is_not_hidden_by_a_fallback(
    gateway: LlmGateway, openai_api: OpenAIServer
) -> None:
    openai_api.script(broken_stream("eins zwei drei vier fünf", after=2), model=LOCAL)
    pieces: list[str] = []

    async def sink(chunk: str) -> None:
        pieces.append(chunk)

    with pytest.raises(StreamInterrupted):
        await gateway.complete("local_first", ask(), on_text=sink)
    assert "".join(pieces) == "eins zwei " and not [r for r in openai_api.requests if r.model == QWEN]


async def test_prompts_resolve_per_model_and_provider_for_local_models(
    gateway: LlmGateway, anthropic: AnthropicServer, openai_api: OpenAIServer
) -> None:
    openai_api.script(error(500, "down"), model=LOCAL)
    openai_api.script(error(500, "down"), model=QWEN)
    anthropic.script(text("from the cloud"), model=SONNET)
    await gateway.complete("local_first", prompted(gateway))
    systems = [r.body["messages"][0]["content"] for r in openai_api.requests]
    assert systems == ["local instructions", "qwen instructions"]  # level 2 (provider), level 1 (model)
    assert anthropic.requests_for(SONNET)[-1].body["system"][0]["text"] == "anthropic instructions"


async def test_an_unconfigured_local_profile_is_skipped_cleanly(anthropic: AnthropicServer) -> None:
    gateway = build(anthropic, None)
    anthropic.script(text("", stop_reason="end_turn"), model=SONNET)
    anthropic.script(text("", stop_reason="end_turn"), model=HAIKU)
    buffer = TelemetryBuffer()
    try:
        with pytest.raises(LlmUnavailable) as raised:
            await gateway.complete("cloud", ask(), telemetry=buffer)
    finally:
        await gateway.close()
    outcomes = [(a.profile, a.outcome) for a in raised.value.attempts]
    assert outcomes == [
        ("cloud", "empty"),
        ("cloud_backup", "empty"),
        ("gateway", "skipped_unconfigured"),
        ("local", "skipped_unconfigured"),
    ]
    assert len([e for e in buffer.events if isinstance(e, ChatError)]) == 2  # skipping is no error


async def test_only_a_local_model_configured_serves_every_chain(openai_api: OpenAIServer) -> None:
    gateway = build(None, openai_api)
    try:
        reply = await gateway.complete("cloud", ask())
    finally:
        await gateway.close()
    assert gateway.available and reply.profile == "local" and reply.text == "Scripted local answer."
