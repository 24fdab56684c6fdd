"""The LLM gateway's pure parts (R-8.3, R-8.4): profiles, prompts, requests, replies, costs.

No I/O here. The gateway service (`engram.services.gateway`) walks a profile's fallback chain
and talks to the provider through the `engram.ports.LLM` port; the Anthropic adapter turns an
`LlmRequest` into the Messages API payload.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

import structlog
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = structlog.get_logger(__name__)


class Priority(StrEnum):
    """Chat turns are realtime; extraction and summaries are background (gated)."""

    realtime = "realtime"
    background = "background"


# ---- errors: what a provider call can end in -------------------------------------------------


class LlmError(Exception):
    """A provider call failed; subclasses say how the gateway reacts."""

    def __init__(self, message: str, *, model: str | None = None) -> None:
        super().__init__(message)
        self.model = model
        self.emitted = False  # streamed tokens had reached the caller before it failed


class RateLimited(LlmError):
    """HTTP 429: back off (honouring retry-after), then fall back."""

    def __init__(self, message: str, *, model: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, model=model)
        self.retry_after = retry_after


class Overloaded(RateLimited):
    """HTTP 529 (or 503 overloaded): treated like a rate limit."""


class PromptTooLong(LlmError):
    """HTTP 400 'prompt is too long': shrink the context and try again."""


class LlmTimeout(LlmError):
    """The per-call timeout passed: fail fast to the fallback."""


class EmptyResponse(LlmError):
    """The provider answered 200 with no usable content (a silent refusal or a glitch)."""


class ProviderError(LlmError):
    """Any other provider failure (5xx, connection, unexpected 4xx)."""

    def __init__(self, message: str, *, model: str | None = None, status: int | None = None) -> None:
        super().__init__(message, model=model)
        self.status = status


class LlmUnavailable(LlmError):
    """Every profile of the chain failed (or no provider is configured)."""

    def __init__(self, message: str, attempts: Sequence[Attempt] = ()) -> None:
        super().__init__(message)
        self.attempts = list(attempts)


class StreamInterrupted(LlmError):
    """A streamed answer failed after tokens reached the caller: no silent fallback mid-answer."""


# ---- profiles ---------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)(?::-([^}]*))?\}")


def expand(value: str, env: Mapping[str, str]) -> str:
    """`${NAME}` / `${NAME:-default}` from `env`, the whole mapping: the domain reads no process
    environment (the composition root passes the settings merged over it)."""

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = env.get(name)
        if found:
            return found
        if default is not None:
            return default
        raise ValueError(f"configuration placeholder ${{{name}}} has no value")

    return _PLACEHOLDER.sub(sub, value)


class Profile(BaseModel):
    """One expert profile (MoE): which model does a task, how long it may take, what comes next."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    provider: Literal["anthropic"] = "anthropic"
    model: str = Field(min_length=1, max_length=200)
    timeout: float = Field(default=45.0, gt=0, le=600)
    # Sent only when set: anthropic 2.x dropped the parameter from its signatures (newer models
    # choose their own sampling), so it travels in the request body for models that accept it.
    temperature: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int = Field(default=2048, ge=1, le=64_000)
    fallback: str | None = None


class ModelPrice(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float = Field(ge=0)
    cache_read: float = Field(ge=0)


class CompactionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    trigger_input_tokens: int = Field(default=150_000, ge=1_000)
    pause_after_compaction: bool = False
    instructions: str | None = None


class LlmConfig(BaseModel):
    """`config/llm.yaml`: profiles, the model price table, compaction and routing settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profiles: dict[str, Profile]
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    routing: dict[str, Any] = Field(default_factory=dict)
    tasks: dict[str, str] = Field(default_factory=dict)  # task -> profile (chat tiers, advisor, fast, ...)

    @classmethod
    def from_yaml(cls, text: str, env: Mapping[str, str] | None = None) -> LlmConfig:
        raw = yaml.safe_load(text) or {}
        if not isinstance(raw, dict):
            raise ValueError("llm config must be a mapping")
        env = env or {}
        profiles: dict[str, Any] = {}
        for name, spec in (raw.get("profiles") or {}).items():
            if not isinstance(spec, dict):
                raise ValueError(f"profile {name!r} must be a mapping")
            spec = {k: expand(v, env) if isinstance(v, str) else v for k, v in spec.items()}
            profiles[name] = {"name": name, **spec}
        raw["profiles"] = profiles
        try:
            config = cls.model_validate(raw)
        except ValidationError as exc:
            raise ValueError(f"invalid llm config: {exc.errors(include_url=False)}") from exc
        for name, profile in config.profiles.items():
            if profile.fallback is not None and profile.fallback not in config.profiles:
                raise ValueError(f"profile {name!r} falls back to unknown profile {profile.fallback!r}")
        for task, profile_name in config.tasks.items():
            if profile_name not in config.profiles:
                raise ValueError(f"task {task!r} uses unknown profile {profile_name!r}")
        return config

    def profile_for(self, task: str) -> str:
        """The profile a task uses (tasks map to profiles; a profile name maps to itself)."""
        if task in self.tasks:
            return self.tasks[task]
        if task in self.profiles:
            return task
        raise KeyError(f"no profile for task {task!r}")

    def chain(self, start: str) -> list[Profile]:
        """The profile and its fallbacks, in order; a cycle ends the chain (visited tracking)."""
        chain: list[Profile] = []
        visited: set[str] = set()
        name: str | None = start
        while name is not None:
            if name in visited:
                log.warning("llm.fallback_cycle", start=start, repeated=name)
                break
            visited.add(name)
            profile = self.profiles.get(name)
            if profile is None:
                raise KeyError(f"unknown LLM profile {name!r}")
            chain.append(profile)
            name = profile.fallback
        return chain

    def price(self, model: str) -> ModelPrice | None:
        """Exact model id first, then the longest configured prefix (dated ids: `claude-x-20260101`)."""
        if model in self.prices:
            return self.prices[model]
        best = max((m for m in self.prices if model.startswith(m)), key=len, default=None)
        return self.prices[best] if best else None

    def known_models(self) -> frozenset[str]:
        return frozenset({p.model for p in self.profiles.values()} | set(self.prices))


# ---- prompts: model id, then provider, then default ------------------------------------------


@dataclass(frozen=True)
class ResolvedPrompt:
    key: str
    text: str
    level: Literal["model", "provider", "default", "missing"]


class _SafeVars(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return ""


def _as_text(value: Any) -> str:
    """String guarantee: nested YAML (dicts, lists) is flattened, never returned as a dict."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "\n".join(_as_text(v) for v in value.values())
    if isinstance(value, list | tuple):
        return "\n".join(_as_text(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class PromptLibrary:
    """`config/prompts.yaml`: `key -> {<model id> | <provider> | default: text}`."""

    prompts: Mapping[str, Mapping[str, Any]]
    default_chain: tuple[str, ...] = ("default",)

    @classmethod
    def from_yaml(cls, text: str) -> PromptLibrary:
        raw = yaml.safe_load(text) or {}
        if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
            raise ValueError("prompts must map each key to a mapping of model/provider/default texts")
        return cls(raw)

    def resolve(self, key: str, *, model: str, provider: str) -> ResolvedPrompt:
        entry = self.prompts.get(key)
        if entry is None:
            log.warning("prompt.missing", key=key)
            return ResolvedPrompt(key, "", "missing")
        if model in entry:
            log.debug("prompt.trace", key=key, level=1, match="model", model=model)
            return ResolvedPrompt(key, _as_text(entry[model]), "model")
        if provider in entry:
            log.debug("prompt.trace", key=key, level=2, match="provider", provider=provider)
            return ResolvedPrompt(key, _as_text(entry[provider]), "provider")
        for name in self.default_chain:
            if name in entry:
                log.debug("prompt.trace", key=key, level=3, match="default")
                return ResolvedPrompt(key, _as_text(entry[name]), "default")
        return ResolvedPrompt(key, "", "missing")

    def render(self, key: str, *, model: str, provider: str, **variables: Any) -> str:
        """Resolve lazily for the model actually used, then fill `{variables}` (missing ones are empty)."""
        text = self.resolve(key, model=model, provider=provider).text
        try:
            return text.format_map(_SafeVars(variables))
        except (ValueError, IndexError):  # a stray brace in a prompt: use it as written
            return text


# ---- requests and replies --------------------------------------------------------------------


@dataclass(frozen=True)
class SystemBlock:
    text: str
    cache: bool = False  # a cache breakpoint after this block (stable prefix)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


Message = dict[str, Any]  # {"role": "user"|"assistant", "content": str | list[block]}


@dataclass(frozen=True)
class LlmRequest:
    """What a caller asks for, provider-neutral; the adapter builds the wire payload per model.

    `history` holds earlier turns (droppable on prompt-too-long), `memory` the per-turn recalled
    context (put in front of the first turn message, after the cached prefix), `turn` the
    current user message plus the tool loop's messages.
    """

    system: tuple[SystemBlock, ...] = ()
    history: tuple[Message, ...] = ()
    memory: str | None = None
    turn: tuple[Message, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: dict[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    cache_history: bool = True

    def messages(self) -> list[Message]:
        turn = [dict(m) for m in self.turn]
        if self.memory and turn:
            first = turn[0]
            content = first["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
            turn[0] = {**first, "content": [{"type": "text", "text": self.memory}, *blocks]}
        return [dict(m) for m in self.history] + turn

    def with_turn(self, *messages: Message) -> LlmRequest:
        return replace(self, turn=(*self.turn, *messages))

    def shrunk(self) -> tuple[LlmRequest, int] | None:
        """A smaller request after 'prompt too long': older history first, then the memory block.

        Returns the new request and how many messages were dropped; None if nothing is left to cut.
        """
        if self.history:
            keep = len(self.history) // 2
            rest = list(self.history[len(self.history) - keep :]) if keep else []
            while rest and rest[0].get("role") != "user":  # history must start with a user message
                rest.pop(0)
            dropped = len(self.history) - len(rest)
            return replace(self, history=tuple(rest)), dropped
        if self.memory and len(self.memory) > 200:
            return replace(self, memory=self.memory[: len(self.memory) // 2] + "\n[memory truncated]"), 0
        return None


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_creation_input_tokens += other.cache_creation_input_tokens
        self.cache_read_input_tokens += other.cache_read_input_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }


def billed_usage(usage: Mapping[str, Any]) -> Usage:
    """A response's tokens as billed. With server-side compaction the response samples twice (the
    summary, then the answer) and `usage.iterations` lists both; the top-level fields count only
    the answer's, so the sum of the iterations is what the call cost."""
    iterations = [i for i in usage.get("iterations") or [] if isinstance(i, Mapping)]
    total = Usage()
    for part in iterations or [usage]:
        total.add(
            Usage(
                input_tokens=int(part.get("input_tokens") or 0),
                output_tokens=int(part.get("output_tokens") or 0),
                cache_creation_input_tokens=int(part.get("cache_creation_input_tokens") or 0),
                cache_read_input_tokens=int(part.get("cache_read_input_tokens") or 0),
            )
        )
    return total


def cost_usd(price: ModelPrice | None, usage: Usage) -> float:
    if price is None:
        return 0.0
    total = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_creation_input_tokens * price.cache_write
        + usage.cache_read_input_tokens * price.cache_read
    ) / 1_000_000
    return round(total, 8)


@dataclass(frozen=True)
class Compaction:
    """A compaction block found in a response (R-8.3)."""

    summary_chars: int
    iteration_input_tokens: int


@dataclass
class LlmReply:
    model: str
    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: Usage
    compactions: list[Compaction] = field(default_factory=list)
    profile: str | None = None
    duration_ms: float = 0.0
    request: LlmRequest | None = None  # the request that produced it (smaller after prompt-too-long)

    @property
    def text(self) -> str:
        return "".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.content if b.get("type") == "tool_use"]

    def is_empty(self) -> bool:
        """No text, no tool call, no compaction: nothing a caller can use."""
        if self.stop_reason in ("tool_use", "pause_turn", "compaction"):
            return False
        return not self.text.strip() and not self.tool_uses


@dataclass(frozen=True)
class Attempt:
    profile: str
    model: str
    outcome: str  # ok | rate_limited | overloaded | timeout | empty | prompt_too_long | error | skipped_cooldown
    detail: str = ""
    duration_ms: float = 0.0


# ---- compaction -------------------------------------------------------------------------------


def from_last_compaction(messages: Sequence[Message]) -> list[Message]:
    """History from the last assistant message holding a compaction block (earlier turns are summarised)."""
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content")
        if messages[i].get("role") == "assistant" and isinstance(content, list):
            if any(isinstance(b, Mapping) and b.get("type") == "compaction" for b in content):
                kept = list(messages[i:])
                # the API needs a user message first: give the summary a neutral opener
                return [{"role": "user", "content": "(earlier conversation, summarised)"}, *kept]
    return list(messages)


def approx_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)
