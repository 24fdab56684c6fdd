"""Provider-neutral requests and replies: system blocks, tools, messages, token usage, compaction
records and the attempts a call made; the adapter turns them into its wire format."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


class Priority(StrEnum):
    """Chat turns are realtime; extraction and summaries are background (gated)."""

    realtime = "realtime"
    background = "background"


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
    outcome: str  # ok | rate_limited | overloaded | timeout | empty | refused | prompt_too_long | error |
    # skipped_cooldown | skipped_unconfigured
    detail: str = ""
    duration_ms: float = 0.0


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
