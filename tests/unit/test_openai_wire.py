"""The OpenAI-compatible adapter's request and reply shapes, without a server."""

from __future__ import annotations

import time

import pytest

from engram.adapters.openai_llm import StreamedReply, build_params, reply_of, usage_of
from engram.domain.llm import LlmRequest, ProviderError, SystemBlock, ToolSpec


def test_blocks_become_chat_completions_messages() -> None:
    request = LlmRequest(
        system=(SystemBlock("one", cache=True), SystemBlock("two")),
        history=(
            {"role": "user", "content": "earlier"},
            {
                "role": "assistant",
                "content": [{"type": "compaction", "content": "summary"}, {"type": "text", "text": "ok"}],
            },
        ),
        turn=(
            {"role": "user", "content": "now"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "bad", "is_error": True}],
            },
        ),
        tools=(ToolSpec("f", "does f", {"type": "object"}),),
        tool_choice={"type": "tool", "name": "f"},
    )
    params = build_params(request, model="m", temperature=0.1, max_tokens=100)
    assert params["messages"] == [
        {"role": "system", "content": "one\n\ntwo"},
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "[Summary of the earlier conversation]\nsummary\n\nok"},
        {"role": "user", "content": "now"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ERROR: bad"},
    ]
    assert params["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert params["temperature"] == 0.1 and params["max_tokens"] == 100
    none = build_params(
        LlmRequest(turn=({"role": "user", "content": "x"},), tools=request.tools, tool_choice={"type": "none"}),
        model="m",
        temperature=None,
        max_tokens=5,
    )
    assert none["tool_choice"] == "none" and "temperature" not in none


def test_replies_refusals_and_usage() -> None:
    started = time.perf_counter()
    refused = reply_of(
        {"choices": [{"message": {"content": None, "refusal": "no"}, "finish_reason": "stop"}]}, "m", started
    )
    assert refused.stop_reason == "refusal" and refused.text == "no"
    with pytest.raises(ProviderError, match="no choices"):
        reply_of({"choices": []}, "m", started)
    with pytest.raises(ProviderError, match="not JSON"):
        reply_of(
            {"choices": [{"message": {"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{"}}]}}]},
            "m",
            started,
        )
    assert usage_of(
        {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}
    ).as_dict() == {
        "input_tokens": 6,
        "output_tokens": 2,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
    }
    cut = StreamedReply("m")
    cut.add({"choices": [{"delta": {"content": "half"}}]})
    with pytest.raises(ProviderError, match="before the answer was complete"):
        cut.reply(started)
