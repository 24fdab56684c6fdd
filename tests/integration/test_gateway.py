"""The LLM gateway through the real anthropic SDK against the scripted Messages API (R-8.2-R-8.4)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from engram.adapters.anthropic_llm import COMPACTION_BETA, AnthropicLLM
from engram.domain.llm import (
    LlmConfig,
    LlmRequest,
    LlmUnavailable,
    Priority,
    PromptLibrary,
    SystemBlock,
    ToolSpec,
)
from engram.domain.telemetry import (
    ChatAdvisorAutoTriggered,
    ChatCompactionFired,
    ChatError,
    ChatPtlRecovery,
    ChatToolUsed,
)
from engram.services.gateway import LlmGateway, TelemetryBuffer, Tool, ToolContext
from tests.anthropic_server import (
    AnthropicServer,
    compaction,
    empty,
    error,
    overloaded,
    prompt_too_long,
    rate_limited,
    slow,
    text,
    tool_use,
)

SONNET, HAIKU, OPUS = "claude-sonnet-4-6", "claude-haiku-4-5", "claude-opus-4-7"

CONFIG = f"""
profiles:
  primary: {{model: {SONNET}, timeout: 5, fallback: backup}}
  backup: {{model: {HAIKU}, timeout: 5}}
  advisor: {{model: {OPUS}, timeout: 5}}
  quick: {{model: {SONNET}, timeout: 0.4, fallback: backup}}
  loop_a: {{model: m-a, fallback: loop_b}}
  loop_b: {{model: m-b, fallback: loop_a}}
tasks: {{advisor: advisor}}
"""

PROMPTS = f"""
advisor_v1:
  default: "You advise."
task_v1:
  default: "generic instructions for {{thing}}"
  {SONNET}: "sonnet instructions for {{thing}}"
"""


@pytest.fixture
async def gateway(anthropic: AnthropicServer) -> AsyncIterator[LlmGateway]:
    llm = AnthropicLLM("sk-test", base_url=anthropic.url, betas=[COMPACTION_BETA], compaction_models={SONNET, OPUS})
    gw = LlmGateway(
        LlmConfig.from_yaml(CONFIG),
        PromptLibrary.from_yaml(PROMPTS),
        llm,
        background_limit=2,
        realtime_wait_cap=0.2,
        background_wait_cap=0.2,
        background_retries=2,
    )
    yield gw
    await gw.close()


def ask(text_: str = "Hallo", history: int = 0) -> LlmRequest:
    past = tuple({"role": r, "content": f"{r} {i}"} for i in range(history) for r in ("user", "assistant"))
    return LlmRequest(
        system=(SystemBlock("be brief", cache=True),), history=past, turn=({"role": "user", "content": text_},)
    )


def of(buffer: TelemetryBuffer, kind: type[Any]) -> list[Any]:
    return [e for e in buffer.events if isinstance(e, kind)]


async def test_a_plain_answer_with_usage_and_the_request_as_sent(
    gateway: LlmGateway, anthropic: AnthropicServer
) -> None:
    anthropic.script(text("Hallo zurück", usage={"cache_read_input_tokens": 900, "cache_creation_input_tokens": 40}))
    buffer = TelemetryBuffer()
    reply = await gateway.complete("primary", ask(history=1), telemetry=buffer)
    assert reply.text == "Hallo zurück" and reply.model == SONNET and reply.profile == "primary"
    assert reply.usage.cache_read_input_tokens == 900 and buffer.usage[SONNET].cache_creation_input_tokens == 40
    sent = anthropic.requests[-1]
    assert sent.path.startswith("/v1/messages") and sent.headers["authorization"] == "Bearer sk-test"
    assert sent.headers["x-stainless-retry-count"] == "0"
    assert sent.betas == [COMPACTION_BETA] and "context_management" in sent.body
    assert sent.body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert sent.body["messages"][1]["content"][-1]["cache_control"] == {"type": "ephemeral"}  # end of history


async def test_429_backs_off_once_then_falls_back(gateway: LlmGateway, anthropic: AnthropicServer) -> None:
    anthropic.script(rate_limited(0.05), rate_limited(0.05), model=SONNET)
    anthropic.script(text("from the backup"), model=HAIKU)
    buffer = TelemetryBuffer()
    reply = await gateway.complete("primary", ask(), telemetry=buffer)
    assert reply.text == "from the backup" and reply.model == HAIKU
    assert len(anthropic.requests_for(SONNET)) == 2  # one wait of retry-after, then the fallback
    assert len(anthropic.requests_for(HAIKU)) == 1
    errors = of(buffer, ChatError)
    assert [(e.error_type, e.model) for e in errors] == [("rate_limited", SONNET)]


async def test_no_retry_storm_while_a_model_cools_down(gateway: LlmGateway, anthropic: AnthropicServer) -> None:
    anthropic.script(rate_limited(30), model=SONNET)  # too long to wait on the chat path
    anthropic.responder = lambda req: text(f"answered by {req.model}")
    first = await gateway.complete("primary", ask())
    assert first.model == HAIKU
    replies = await asyncio.gather(*(gateway.complete("primary", ask()) for _ in range(8)))
    assert {r.model for r in replies} == {HAIKU}
    assert len(anthropic.requests_for(SONNET)) == 1  # the cooling model is skipped, not hammered
    assert len(anthropic.requests_for(HAIKU)) == 9
    assert gateway.cooling(SONNET) > 20


async def test_a_timeout_fails_fast_to_the_fallback(gateway: LlmGateway, anthropic: AnthropicServer) -> None:
    anthropic.script(slow(3.0, text("too late")), model=SONNET)
    anthropic.script(text("quick backup"), model=HAIKU)
    buffer = TelemetryBuffer()
    started = time.perf_counter()
    reply = await gateway.complete("quick", ask(), telemetry=buffer)
    assert reply.text == "quick backup"
    assert time.perf_counter() - started < 2.0
    assert len(anthropic.requests_for(SONNET)) == 1  # no retry on the chat path
    assert of(buffer, ChatError)[0].error_type == "timeout"


async def test_overload_and_server_errors_fall_back_without_sdk_retries(
    gateway: LlmGateway, anthropic: AnthropicServer
) -> None:
    anthropic.script(overloaded(), error(500, "api_error", "boom"), model=SONNET)
    anthropic.script(text("one"), text("two"), model=HAIKU)
    buffer = TelemetryBuffer()
    assert (await gateway.complete("primary", ask(), telemetry=buffer)).text == "one"
    gateway._cooldown.clear()  # the 529 put the model in cool-down; the next call should reach it again
    assert (await gateway.complete("primary", ask(), telemetry=buffer)).text == "two"
    assert len(anthropic.requests_for(SONNET)) == 2  # exactly one request per failure: max_retries=0
    assert [e.error_type for e in of(buffer, ChatError)] == ["overloaded", "error"]


async def test_an_empty_answer_counts_as_a_failure(gateway: LlmGateway, anthropic: AnthropicServer) -> None:
    anthropic.script(empty(), model=SONNET)
    anthropic.script(text("something"), model=HAIKU)
    buffer = TelemetryBuffer()
    assert (await gateway.complete("primary", ask(), telemetry=buffer)).text == "something"
    assert of(buffer, ChatError)[0].error_type == "empty"


async def test_prompt_too_long_recovers_by_dropping_old_history(
    gateway: LlmGateway, anthropic: AnthropicServer
) -> None:
    anthropic.script(prompt_too_long(), text("recovered"), model=SONNET)
    buffer = TelemetryBuffer()
    reply = await gateway.complete("primary", ask(history=4), telemetry=buffer)
    assert reply.text == "recovered" and reply.model == SONNET
    first, second = anthropic.requests_for(SONNET)
    assert len(first.body["messages"]) == 9 and len(second.body["messages"]) == 5
    assert second.body["messages"][0]["role"] == "user"
    (recovery,) = of(buffer, ChatPtlRecovery)
    assert recovery.succeeded and recovery.dropped_messages == 4 and recovery.model == SONNET
    assert reply.request is not None and len(reply.request.history) == 4


async def test_prompt_too_long_without_anything_to_cut_is_reported(
    gateway: LlmGateway, anthropic: AnthropicServer
) -> None:
    anthropic.script(prompt_too_long(), model=SONNET)
    anthropic.script(text("backup has a bigger window"), model=HAIKU)
    buffer = TelemetryBuffer()
    reply = await gateway.complete("primary", ask(), telemetry=buffer)
    assert reply.model == HAIKU
    (recovery,) = of(buffer, ChatPtlRecovery)
    assert not recovery.succeeded and recovery.dropped_messages == 0


async def test_a_cyclic_chain_ends(gateway: LlmGateway, anthropic: AnthropicServer) -> None:
    anthropic.responder = lambda _req: error(500, "api_error", "down")
    with pytest.raises(LlmUnavailable, match=r"loop_a.*loop_b") as caught:
        await gateway.complete("loop_a", ask())
    assert len(anthropic.requests) == 2 and len(caught.value.attempts) == 2


async def test_prompts_are_resolved_for_the_model_actually_called(
    gateway: LlmGateway, anthropic: AnthropicServer
) -> None:
    anthropic.script(error(500, "api_error", "down"), model=SONNET)
    anthropic.script(text("ok"), model=HAIKU)
    await gateway.prompt("primary", "task_v1", {"thing": "invoices"})
    sonnet, haiku = anthropic.requests_for(SONNET)[0], anthropic.requests_for(HAIKU)[0]
    assert sonnet.body["messages"][0]["content"] == "sonnet instructions for invoices"
    assert haiku.body["messages"][0]["content"] == "generic instructions for invoices"


async def test_the_advisor_round_trip(gateway: LlmGateway, anthropic: AnthropicServer) -> None:
    anthropic.script(
        tool_use("consult_advisor", {"question": "Monolith or services for billing?", "reason": "architecture"}),
        text("Keep the monolith for now, as the advisor suggests."),
        model=SONNET,
    )
    anthropic.script(text("Keep the monolith; split later along the invoicing boundary."), model=OPUS)
    buffer = TelemetryBuffer()
    outcome = await gateway.run_tools(
        "primary",
        ask("Should billing become its own service?"),
        {"consult_advisor": gateway.advisor_tool()},
        telemetry=buffer,
    )
    assert outcome.text.startswith("Keep the monolith for now") and outcome.iterations == 2
    (advisor_request,) = anthropic.requests_for(OPUS)
    assert "Monolith or services for billing?" in advisor_request.prompt_text()
    second = anthropic.requests_for(SONNET)[1].body["messages"]
    assert second[-2]["content"][0]["type"] == "tool_use"
    result = second[-1]["content"][0]
    assert result["type"] == "tool_result" and "invoicing boundary" in result["content"]
    assert anthropic.requests_for(SONNET)[0].body["tools"][-1]["name"] == "consult_advisor"
    (advised,) = of(buffer, ChatAdvisorAutoTriggered)
    assert advised.trigger == "architecture" and advised.executor_model == SONNET and advised.advisor_model == OPUS
    assert advised.duration_ms >= 0 and advised.succeeded
    (used,) = of(buffer, ChatToolUsed)
    assert used.tool_name == "consult_advisor" and used.success
    assert set(buffer.usage) == {SONNET, OPUS}  # the advisor's tokens are counted too


async def test_an_advisor_that_cannot_answer_is_reported_and_the_executor_goes_on(
    gateway: LlmGateway, anthropic: AnthropicServer
) -> None:
    anthropic.script(
        tool_use("consult_advisor", {"question": "Monolith or services?", "reason": "architecture"}),
        text("Without the advisor: keep the monolith."),
        model=SONNET,
    )
    anthropic.script(error(500, "api_error", "internal error"), model=OPUS)  # the advisor has no fallback
    buffer = TelemetryBuffer()
    outcome = await gateway.run_tools(
        "primary",
        ask("Should billing become its own service?"),
        {"consult_advisor": gateway.advisor_tool()},
        telemetry=buffer,
    )
    assert outcome.text == "Without the advisor: keep the monolith."
    (advised,) = of(buffer, ChatAdvisorAutoTriggered)
    assert advised.succeeded is False and advised.advisor_model is None and advised.executor_model == SONNET
    (used,) = of(buffer, ChatToolUsed)
    assert used.tool_name == "consult_advisor" and not used.success
    result = anthropic.requests_for(SONNET)[1].body["messages"][-1]["content"][0]
    assert result["is_error"] is True


async def test_a_fallback_in_the_middle_of_a_tool_loop_gets_its_own_prompts_and_every_round(
    gateway: LlmGateway, anthropic: AnthropicServer
) -> None:
    async def lookup(_args: Any, _ctx: ToolContext) -> str:
        return "Müller: quarterly since January"

    tool = Tool(ToolSpec("lookup", "Look up", {"type": "object"}), lookup)

    def request(profile: Any) -> LlmRequest:  # prompts resolved per model, as chat-turn's are
        return LlmRequest(
            system=(SystemBlock(f"instructions for {profile.model}", cache=True),),
            turn=({"role": "user", "content": "How is Müller billed?"},),
        )

    anthropic.script(tool_use("lookup", {}), error(500, "api_error", "internal error"), model=SONNET)
    anthropic.script(text("Quarterly, since January."), model=HAIKU)
    outcome = await gateway.run_tools("primary", request, {"lookup": tool}, telemetry=TelemetryBuffer())
    assert outcome.text == "Quarterly, since January." and outcome.model == HAIKU
    (sent,) = anthropic.requests_for(HAIKU)
    assert sent.body["system"][0]["text"] == f"instructions for {HAIKU}"  # not Sonnet's
    messages = sent.body["messages"]
    assert messages[-2]["content"][0]["type"] == "tool_use" and messages[-1]["content"][0]["type"] == "tool_result"
    assert "quarterly since January" in messages[-1]["content"][0]["content"]


async def test_a_failing_or_unknown_tool_is_reported_to_the_model(
    gateway: LlmGateway, anthropic: AnthropicServer
) -> None:
    async def broken(_args: Any, _ctx: ToolContext) -> str:
        raise RuntimeError("index offline")

    tool = Tool(ToolSpec("lookup", "Look up", {"type": "object"}), broken)
    anthropic.script(tool_use("lookup", {}), tool_use("nope", {}), text("Sorry, I could not look it up."), model=SONNET)
    buffer = TelemetryBuffer()
    outcome = await gateway.run_tools("primary", ask(), {"lookup": tool}, telemetry=buffer)
    assert outcome.text == "Sorry, I could not look it up."
    results = [r.body["messages"][-1]["content"][0] for r in anthropic.requests_for(SONNET)[1:]]
    assert all(r["is_error"] for r in results)
    assert "index offline" in results[0]["content"] and "unknown tool" in results[1]["content"]
    assert [(u.tool_name, u.success) for u in of(buffer, ChatToolUsed)] == [("lookup", False), ("nope", False)]


async def test_compaction_is_requested_only_for_supported_models_and_detected(
    gateway: LlmGateway, anthropic: AnthropicServer
) -> None:
    anthropic.script(compaction("Earlier: billing questions about Müller.", "Here you go."), model=SONNET)
    buffer = TelemetryBuffer()
    outcome = await gateway.run_tools("primary", ask(history=2), {}, telemetry=buffer)
    (fired,) = of(buffer, ChatCompactionFired)
    assert fired.summary_chars == len("Earlier: billing questions about Müller.")
    assert fired.iteration_input_tokens == 151_000 and fired.model == SONNET
    # billed: the summary's sampling and the answer's, not only the answer's top-level fields
    billed = buffer.usage[SONNET]
    assert (billed.input_tokens, billed.output_tokens) == (151_000 + 2_400, 800 + 30)
    assert outcome.content_blocks[0] == {
        "type": "compaction",
        "content": "Earlier: billing questions about Müller.",
        "encrypted_content": "opaque-state",
    }
    sent = anthropic.requests_for(SONNET)[0]
    assert COMPACTION_BETA in sent.betas and sent.body["context_management"]["edits"][0]["type"] == "compact_20260112"

    anthropic.script(text("plain"), model=HAIKU)
    await gateway.complete("backup", ask())
    unsupported = anthropic.requests_for(HAIKU)[0]
    assert COMPACTION_BETA not in unsupported.betas and "context_management" not in unsupported.body


async def test_a_model_that_refuses_the_compaction_request_is_asked_again_without_it(
    gateway: LlmGateway, anthropic: AnthropicServer
) -> None:
    """The supported-model list is configuration; when the API refuses `context_management` for
    a model on it, the call is repeated without it (no fall-over to another model) and the model
    is asked without it from then on."""
    refused = "context_management: compact_20260112 is not supported for this model"
    anthropic.script(error(400, "invalid_request_error", refused), text("Quarterly."), text("Still."), model=OPUS)
    buffer = TelemetryBuffer()
    first = await gateway.run_tools("advisor", ask(history=2), {}, telemetry=buffer)
    assert first.text == "Quarterly." and first.model == OPUS and not of(buffer, ChatError)
    again = await gateway.run_tools("advisor", ask(history=2), {}, telemetry=TelemetryBuffer())
    assert again.text == "Still."
    sent = anthropic.requests_for(OPUS)
    assert ["context_management" in r.body for r in sent] == [True, False, False]
    assert COMPACTION_BETA not in sent[1].betas and COMPACTION_BETA not in sent[2].betas
    # for a while: then the model is asked with it again (one odd refusal does not last)
    gateway.llm.compaction_refused[OPUS] = 0.0
    anthropic.script(text("With it again."), model=OPUS)
    await gateway.run_tools("advisor", ask(history=2), {}, telemetry=TelemetryBuffer())
    assert "context_management" in anthropic.requests_for(OPUS)[-1].body
    # SONNET still gets it: only the model that refused is asked without it
    anthropic.script(text("ok"), model=SONNET)
    await gateway.complete("primary", ask())
    assert "context_management" in anthropic.requests_for(SONNET)[-1].body
    # an ordinary 400 is not taken for a refusal of compaction
    anthropic.script(error(400, "invalid_request_error", "messages: roles must alternate"), model=SONNET)
    anthropic.script(text("backup"), model=HAIKU)
    await gateway.complete("primary", ask())
    assert "context_management" in anthropic.requests_for(SONNET)[-1].body


async def test_streaming_tokens_and_a_fallback_before_the_first_token(
    gateway: LlmGateway, anthropic: AnthropicServer
) -> None:
    anthropic.script(rate_limited(30), model=SONNET)
    anthropic.script(text("Guten Tag, wie kann ich helfen?"), model=HAIKU)
    tokens: list[str] = []

    async def sink(chunk: str) -> None:
        tokens.append(chunk)

    reply = await gateway.complete("primary", ask(), on_text=sink)
    assert len(tokens) > 1 and "".join(tokens) == "Guten Tag, wie kann ich helfen?" == reply.text
    assert anthropic.requests_for(HAIKU)[0].body["stream"] is True


async def test_background_calls_are_gated_and_never_delay_a_chat_call(
    gateway: LlmGateway, anthropic: AnthropicServer
) -> None:
    anthropic.responder = lambda req: slow(0.6, text("slow")) if req.model == HAIKU else text("fast chat answer")
    background = [
        asyncio.create_task(gateway.complete("backup", ask(), priority=Priority.background)) for _ in range(5)
    ]
    await asyncio.sleep(0.15)
    started = time.perf_counter()
    chat = await gateway.complete("primary", ask())
    chat_seconds = time.perf_counter() - started
    assert chat.text == "fast chat answer"
    assert chat_seconds < 0.5  # not queued behind the background calls
    assert gateway.gate.background_waiting == 3  # two run, three wait for a slot
    await asyncio.gather(*background)
    assert gateway.gate.background_peak == 2
    starts = sorted(r.started for r in anthropic.requests_for(HAIKU))
    assert len([t for t in starts if t < starts[0] + 0.5]) == 2  # the server saw two at a time


async def test_a_streamed_tool_round_trip(gateway: LlmGateway, anthropic: AnthropicServer) -> None:
    anthropic.script(
        tool_use("consult_advisor", {"question": "Which billing cycle?"}, preface="Let me ask the advisor."),
        text("Quarterly it is."),
        model=SONNET,
    )
    anthropic.script(text("Quarterly."), model=OPUS)
    tokens: list[str] = []

    async def sink(chunk: str) -> None:
        tokens.append(chunk)

    outcome = await gateway.run_tools(
        "primary", ask(), {"consult_advisor": gateway.advisor_tool()}, telemetry=TelemetryBuffer(), on_text=sink
    )
    assert "".join(tokens) == "Let me ask the advisor.\n\nQuarterly it is." == outcome.text
    second = anthropic.requests_for(SONNET)[1].body["messages"]
    assert second[-2]["content"][1]["input"] == {"question": "Which billing cycle?"}
    assert second[-1]["content"][0]["content"] == "Quarterly."
