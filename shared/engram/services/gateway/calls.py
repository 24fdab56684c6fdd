"""What the gateway's calls take and give back: request sources, the telemetry buffer a caller
writes in its own transaction, tools and their context, and the outcome of a tool-use loop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from engram.domain.llm import Compaction, LlmReply, LlmRequest, Priority, Profile, PromptLibrary, ToolSpec, Usage
from engram.domain.telemetry import _Meta

TextSink = Callable[[str], Awaitable[None]]
# a request, or how to build it for the profile being called (prompts resolved for its model)
RequestSource = LlmRequest | Callable[[Profile], LlmRequest]


@dataclass
class TelemetryBuffer:
    """Events collected during a call; the caller writes them in its own transaction."""

    events: list[_Meta] = field(default_factory=list)
    usage: dict[str, Usage] = field(default_factory=dict)  # every successful call, per model
    llm_ms: float = 0.0  # time spent in provider calls, waits and fallbacks included
    calls: int = 0

    def emit(self, meta: _Meta) -> None:
        self.events.append(meta)

    def account(self, reply: LlmReply) -> None:
        self.usage.setdefault(reply.model, Usage()).add(reply.usage)
        self.calls += 1

    def total(self) -> Usage:
        total = Usage()
        for usage in self.usage.values():
            total.add(usage)
        return total


@dataclass(frozen=True)
class ToolContext:
    executor_model: str
    telemetry: TelemetryBuffer


ToolHandler = Callable[[Mapping[str, Any], ToolContext], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    run: ToolHandler


@dataclass
class ToolCall:
    name: str
    duration_ms: int
    success: bool
    error: str | None = None


@dataclass
class TurnOutcome:
    text: str
    model: str
    profile: str | None
    usage: Usage
    stop_reason: str | None
    compactions: list[Compaction]
    tool_calls: list[ToolCall]
    content_blocks: list[dict[str, Any]]  # what the next turn sends back (compaction + text)
    llm_ms: float
    iterations: int


class Completes(Protocol):
    """What the tool loop and the advisor call: one request through a task's fallback chain
    (`LlmGateway`), and the prompt library it renders for the model actually called."""

    @property
    def prompts(self) -> PromptLibrary: ...

    async def complete(
        self,
        task: str,
        request: RequestSource,
        *,
        priority: Priority = Priority.realtime,
        telemetry: TelemetryBuffer | None = None,
        model_override: str | None = None,
        on_text: TextSink | None = None,
        timeout: float | None = None,
    ) -> LlmReply: ...
