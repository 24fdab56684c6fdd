"""The gateway's pure parts: profiles, prompts, prices, content whitelist, compaction, requests."""

from __future__ import annotations

import pytest

from engram.adapters.anthropic_llm import (
    COMPACTION_BETA,
    _reply_from_json,
    build_params,
    find_compactions,
    sanitize_assistant_content,
)
from engram.bootstrap import load_llm_config
from engram.domain.llm import (
    CompactionConfig,
    LlmConfig,
    LlmRequest,
    PromptLibrary,
    SystemBlock,
    ToolSpec,
    Usage,
    billed_usage,
    cost_usd,
    expand,
    from_last_compaction,
)
from engram.settings import Settings

PROFILES = """
profiles:
  a: {model: m-a, fallback: b}
  b: {model: m-b, fallback: c}
  c: {model: m-c, fallback: a}
  solo: {model: m-solo}
tasks: {chat: a}
prices:
  claude-sonnet-4-6: {input: 3, output: 15, cache_write: 3.75, cache_read: 0.3}
"""


def test_fallback_chain_is_cycle_safe() -> None:
    config = LlmConfig.from_yaml(PROFILES)
    assert [p.name for p in config.chain("a")] == ["a", "b", "c"]
    assert [p.name for p in config.chain("c")] == ["c", "a", "b"]
    assert [p.name for p in config.chain("solo")] == ["solo"]
    assert config.profile_for("chat") == "a"


def test_config_rejects_unknown_fallbacks_and_tasks() -> None:
    with pytest.raises(ValueError, match="unknown profile 'nope'"):
        LlmConfig.from_yaml("profiles:\n  a: {model: x, fallback: nope}\n")
    with pytest.raises(ValueError, match="task 'chat' uses unknown profile"):
        LlmConfig.from_yaml("profiles:\n  a: {model: x}\ntasks: {chat: b}\n")
    with pytest.raises(ValueError, match="invalid llm config"):
        LlmConfig.from_yaml("profiles:\n  a: {model: x, timeout: -1}\n")


def test_placeholders_come_from_settings_then_defaults() -> None:
    assert expand("${ANTHROPIC_AUTO_OPUS_MODEL}", {"ANTHROPIC_AUTO_OPUS_MODEL": "opus-x"}) == "opus-x"
    assert expand("${ENGRAM_UNSET_FOR_TEST:-haiku}", {}) == "haiku"
    with pytest.raises(ValueError, match="has no value"):
        expand("${ENGRAM_UNSET_FOR_TEST}", {})


def test_shipped_llm_config_uses_the_configured_models() -> None:
    settings = Settings(anthropic_auto_opus_model="opus-test", anthropic_advisor_model="advisor-test")
    config = load_llm_config(settings)
    assert config.profiles["chat_smart"].model == "opus-test"
    assert config.profiles["advisor"].model == "advisor-test"
    assert [p.name for p in config.chain("chat_smart")] == [
        "chat_smart",
        "chat_default",
        "chat_backup",
        "chat_openai",
        "local",
    ]
    # every shipped chain ends in the local model (skipped where none is configured)
    assert all(config.chain(config.profile_for(task))[-1].name == "local" for task in config.tasks)
    local = Settings(engram_local_llm_model="qwen2.5:7b", engram_local_llm_timeout=300)
    assert load_llm_config(local).profiles["local"].model_dump(include={"provider", "model", "timeout"}) == {
        "provider": "local",
        "model": "qwen2.5:7b",
        "timeout": 300.0,
    }
    assert config.price("claude-sonnet-4-6-20260101") == config.prices["claude-sonnet-4-6"]  # dated id: prefix


def test_placeholders_without_a_setting_come_from_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_FAST_MODEL", "fast-from-env")
    monkeypatch.setenv("ANTHROPIC_ADVISOR_MODEL", "advisor-from-env")
    config = load_llm_config(Settings(anthropic_advisor_model="advisor-setting"))
    assert config.profiles["fast"].model == "fast-from-env"
    assert config.profiles["advisor"].model == "advisor-setting"  # the setting wins
    monkeypatch.delenv("ENGRAM_FAST_MODEL")
    assert load_llm_config(Settings()).profiles["fast"].model == "claude-haiku-4-5"


def test_cost_from_the_price_table() -> None:
    config = LlmConfig.from_yaml(PROFILES)
    usage = Usage(
        input_tokens=1_000_000, output_tokens=100_000, cache_creation_input_tokens=0, cache_read_input_tokens=2_000_000
    )
    assert cost_usd(config.price("claude-sonnet-4-6"), usage) == pytest.approx(3 + 1.5 + 0.6)
    assert cost_usd(config.price("unknown-model"), usage) == 0.0


PROMPTS = """
greet:
  default: "Hello {name}, default"
  anthropic: "Hello {name}, provider"
  claude-opus-4-7: "Hello {name}, model"
nested:
  default:
    part1: "first"
    part2: ["second", "third"]
"""


def test_prompts_resolve_model_then_provider_then_default() -> None:
    prompts = PromptLibrary.from_yaml(PROMPTS)
    assert prompts.resolve("greet", model="claude-opus-4-7", provider="anthropic").level == "model"
    assert prompts.resolve("greet", model="claude-sonnet-4-6", provider="anthropic").level == "provider"
    assert prompts.resolve("greet", model="claude-sonnet-4-6", provider="ollama").level == "default"
    assert prompts.render("greet", model="x", provider="y", name="Ada") == "Hello Ada, default"
    assert prompts.render("greet", model="x", provider="y") == "Hello , default"  # missing variable: empty
    assert prompts.resolve("missing", model="x", provider="y").text == ""
    # string guarantee: nested YAML becomes text, never a dict
    assert prompts.render("nested", model="x", provider="y") == "first\nsecond\nthird"


def test_sanitize_keeps_whitelisted_blocks_and_request_fields_only() -> None:
    blocks = [
        {"type": "text", "text": "Hi", "citations": None, "parsed_output": {"x": 1}},
        {"type": "text", "text": "   "},
        {"type": "tool_use", "id": "t1", "name": "consult_advisor", "input": {"q": 1}, "caller": {"type": "direct"}},
        {"type": "compaction", "content": "summary", "encrypted_content": "e", "signature": None},
        {"type": "mystery_block", "data": 1},
        {"type": "thinking", "thinking": "...", "signature": "sig"},
    ]
    assert sanitize_assistant_content(blocks) == [
        {"type": "text", "text": "Hi"},
        {"type": "tool_use", "id": "t1", "name": "consult_advisor", "input": {"q": 1}},
        {"type": "compaction", "content": "summary", "encrypted_content": "e"},
        {"type": "thinking", "thinking": "...", "signature": "sig"},
    ]


def test_a_reply_carries_whitelisted_blocks_and_reads_as_answered() -> None:
    """The adapter whitelists a reply's blocks; blank text blocks stay (the text reads exactly as
    answered) until the blocks are sent back, and compactions are read from the raw blocks."""
    data = {
        "model": "m",
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 7, "output_tokens": 3},
        "content": [
            {"type": "compaction", "content": "summary", "encrypted_content": "e", "extra": 1},
            {"type": "text", "text": "Hi", "parsed_output": {"x": 1}},
            {"type": "text", "text": "  "},
            {"type": "mystery_block", "data": 1},
            {"type": "text", "text": "there"},
        ],
    }
    reply = _reply_from_json(data, "m", 0.0)
    assert reply.text == "Hi  there"
    assert reply.content == [
        {"type": "compaction", "content": "summary", "encrypted_content": "e"},
        {"type": "text", "text": "Hi"},
        {"type": "text", "text": "  "},
        {"type": "text", "text": "there"},
    ]
    assert [(c.summary_chars, c.iteration_input_tokens) for c in reply.compactions] == [(7, 7)]
    assert sanitize_assistant_content(reply.content) == [reply.content[0], reply.content[1], reply.content[3]]


def test_compaction_is_found_with_the_iteration_tokens() -> None:
    content = [{"type": "compaction", "content": "x" * 42}, {"type": "text", "text": "answer"}]
    usage = {"input_tokens": 900, "iterations": [{"type": "compaction", "input_tokens": 160_000}]}
    found = find_compactions(content, usage)
    assert [(c.summary_chars, c.iteration_input_tokens) for c in found] == [(42, 160_000)]
    assert find_compactions([{"type": "text", "text": "no"}], usage) == []
    assert find_compactions([{"type": "compaction", "content": None}], {"input_tokens": 5})[0].summary_chars == 0


def test_history_starts_at_the_last_compaction() -> None:
    messages = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": [{"type": "text", "text": "two"}]},
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": [{"type": "compaction", "content": "s"}, {"type": "text", "text": "four"}]},
        {"role": "user", "content": "five"},
        {"role": "assistant", "content": "six"},
    ]
    kept = from_last_compaction(messages)
    assert kept[0]["role"] == "user" and kept[1] == messages[3] and kept[2:] == messages[4:]
    assert from_last_compaction(messages[:3]) == messages[:3]


def test_prompt_too_long_shrinks_history_first_then_memory() -> None:
    history = tuple({"role": role, "content": f"m{i}"} for i, role in enumerate(["user", "assistant"] * 4))
    request = LlmRequest(history=history, memory="x" * 1_000, turn=({"role": "user", "content": "now"},))
    smaller, dropped = request.shrunk() or (request, 0)
    assert dropped == 4 and smaller.history[0]["role"] == "user" and len(smaller.history) == 4
    step = smaller
    while step.history:
        shrunk = step.shrunk()
        assert shrunk is not None
        step = shrunk[0]
    memory_cut = step.shrunk()
    assert memory_cut is not None and memory_cut[1] == 0 and len(memory_cut[0].memory or "") < 1_000
    tiny = LlmRequest(turn=({"role": "user", "content": "now"},))
    assert tiny.shrunk() is None


def _request() -> LlmRequest:
    return LlmRequest(
        system=(SystemBlock("instructions", cache=True), SystemBlock("profile", cache=True)),
        history=(
            {"role": "user", "content": "earlier"},
            {
                "role": "assistant",
                "content": [{"type": "compaction", "content": "summary"}, {"type": "text", "text": "ok"}],
            },
        ),
        memory="<memory>facts</memory>",
        turn=({"role": "user", "content": "now"},),
        tools=(ToolSpec("a", "A", {"type": "object"}), ToolSpec("b", "B", {"type": "object"})),
    )


def test_request_caches_the_stable_prefix_and_patches_compaction_for_supported_models() -> None:
    params = build_params(
        _request(),
        model="claude-sonnet-4-6",
        temperature=None,
        max_tokens=1024,
        betas=[COMPACTION_BETA, "other-beta"],
        compaction_models={"claude-sonnet-4-6"},
        compaction=CompactionConfig(trigger_input_tokens=100_000),
    )
    assert params["betas"] == [COMPACTION_BETA, "other-beta"]
    assert params["context_management"] == {
        "edits": [
            {
                "type": "compact_20260112",
                "trigger": {"type": "input_tokens", "value": 100_000},
                "pause_after_compaction": False,
            }
        ]
    }
    assert [("cache_control" in t) for t in params["tools"]] == [False, True]
    assert all("cache_control" in b for b in params["system"])
    assert "cache_control" in params["messages"][1]["content"][-1]  # the last history message
    assert params["messages"][1]["content"][0]["type"] == "compaction"
    current = params["messages"][2]["content"]
    assert current[0]["text"] == "<memory>facts</memory>" and "cache_control" not in current[0]  # after the breakpoints
    assert "temperature" not in params and "extra_body" not in params


def test_no_compaction_for_unsupported_models() -> None:
    params = build_params(
        _request(),
        model="claude-haiku-4-5",
        temperature=0.2,
        max_tokens=1024,
        betas=[COMPACTION_BETA, "other-beta"],
        compaction_models={"claude-sonnet-4-6"},
        compaction=CompactionConfig(),
    )
    assert "context_management" not in params
    assert params["betas"] == ["other-beta"]
    # a compaction block from an earlier turn becomes plain text for a model without the beta
    assert params["messages"][1]["content"][0] == {
        "type": "text",
        "text": "[Summary of the earlier conversation]\nsummary",
    }
    assert params["extra_body"] == {"temperature": 0.2}


def test_compaction_models_come_from_a_comma_separated_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTION_SUPPORTED_MODELS", "claude-opus-4-7, claude-sonnet-4-6,")
    assert Settings().compaction_supported_models == frozenset({"claude-opus-4-7", "claude-sonnet-4-6"})
    monkeypatch.delenv("COMPACTION_SUPPORTED_MODELS")
    assert "claude-sonnet-4-6" in Settings().compaction_supported_models


def test_building_the_gateway_does_not_import_the_sdk() -> None:
    """The SDK takes about a second to import: functions that never call a model must not pay for it."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from pydantic import SecretStr\n"
        "from engram.bootstrap import build_gateway\n"
        "from engram.settings import Settings\n"
        "settings = Settings(anthropic_api_key=SecretStr('sk-test'), engram_local_llm_base_url='http://127.0.0.1:9/v1')\n"
        "gateway = build_gateway(settings)\n"
        "assert gateway.available and sorted(gateway.providers) == ['anthropic', 'local']\n"
        "print('anthropic' in sys.modules, 'openai' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False False"


def test_with_no_provider_configured_the_gateway_is_offline() -> None:
    from engram.bootstrap import build_gateway

    gateway = build_gateway(Settings(anthropic_api_key=None))
    assert not gateway.available and gateway.providers == {}
    only_local = build_gateway(Settings(anthropic_api_key=None, engram_openai_base_url="http://127.0.0.1:9/v1"))
    assert sorted(only_local.providers) == ["openai"]
    assert only_local.provider_for(only_local.profile("chat_default")) is None  # anthropic: skipped


def test_observation_types_come_from_a_comma_separated_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_OBSERVATION_TYPES", "fact, decision,note")
    assert Settings().engram_observation_types == frozenset({"fact", "decision", "note"})


def test_billed_usage_sums_the_compaction_iterations() -> None:
    plain = {"input_tokens": 120, "output_tokens": 30, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 7}
    assert billed_usage(plain).as_dict() == plain
    compacted = plain | {
        "input_tokens": 2_400,
        "iterations": [
            {"type": "compaction", "input_tokens": 180_000, "output_tokens": 3_500},
            {"type": "message", "input_tokens": 2_400, "output_tokens": 30, "cache_read_input_tokens": 7},
        ],
    }
    # the top-level fields count the answer's sampling only; the summary's is billed as well
    assert billed_usage(compacted).as_dict() == {
        "input_tokens": 182_400,
        "output_tokens": 3_530,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 7,
    }
    assert billed_usage({}).as_dict() == Usage().as_dict()
