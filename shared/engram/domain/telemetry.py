"""Typed telemetry (R-4.5, R-8, R-10): every event name has a model; unknown names are rejected.

Metadata is stored with the camelCase field names the source documents use
(`selectedModel`, `summaryChars`, ...); Python code uses snake_case.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel


class TelemetryError(ValueError):
    """An unknown event name or malformed metadata: rejected in code, never stored."""


class _Meta(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


NonNeg = Field(ge=0)


class ChatTurnCompleted(_Meta):
    model: str
    tier: str | None = None
    input_tokens: int = NonNeg
    output_tokens: int = NonNeg
    cache_creation_input_tokens: int = NonNeg
    cache_read_input_tokens: int = NonNeg
    cost_usd: float = NonNeg
    duration_ms: int = NonNeg
    rag_hits: int = NonNeg
    offline: bool = False


class ChatToolUsed(_Meta):
    tool_name: str
    duration_ms: int = NonNeg
    success: bool
    error: str | None = None


class ChatError(_Meta):
    stage: str
    error_type: str
    message: str = Field(max_length=2_000)
    model: str | None = None


class ChatPtlRecovery(_Meta):
    model: str
    dropped_messages: int = NonNeg
    succeeded: bool


class ChatApprovalDecision(_Meta):
    action: str
    decision: Literal["approved", "rejected"]
    tool_name: str | None = None


class MemoryExtraction(_Meta):
    trigger: Literal["chat", "hook", "manual", "consolidation"]
    count: int = NonNeg
    dedup_hits: int = NonNeg
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: int = NonNeg
    status: Literal["ok", "partial", "failed", "skipped"]
    error: str | None = Field(default=None, max_length=2_000)


class MemoryCacheBreak(_Meta):
    reason: str
    model: str | None = None
    expected_cached_tokens: int | None = None


class ChatCompactionFired(_Meta):
    summary_chars: int = NonNeg
    iteration_input_tokens: int = NonNeg
    model: str | None = None


class ChatModelAutoRouted(_Meta):
    selected_model: str
    tier: Literal["trivial", "default", "complex", "override"]
    reason: str
    confidence: float = Field(ge=0, le=1)


class ChatAdvisorAutoTriggered(_Meta):
    trigger: str
    executor_model: str
    duration_ms: int = NonNeg
    advisor_model: str | None = None  # the model that answered (None when none could)
    succeeded: bool = True


TELEMETRY_EVENTS: dict[str, type[_Meta]] = {
    "chat.turn_completed": ChatTurnCompleted,
    "chat.tool_used": ChatToolUsed,
    "chat.error": ChatError,
    "chat.ptl_recovery": ChatPtlRecovery,
    "chat.approval_decision": ChatApprovalDecision,
    "memory.extraction": MemoryExtraction,
    "memory.cache_break": MemoryCacheBreak,
    "chat.compaction_fired": ChatCompactionFired,
    "chat.model_auto_routed": ChatModelAutoRouted,
    "chat.advisor_auto_triggered": ChatAdvisorAutoTriggered,
}

_NAMES = {model: name for name, model in TELEMETRY_EVENTS.items()}


def event_name(meta: _Meta) -> str:
    return _NAMES[type(meta)]


def validate_metadata(name: str, metadata: dict[str, Any] | _Meta) -> dict[str, Any]:
    """The stored form of an event's metadata; raises TelemetryError for anything else."""
    model = TELEMETRY_EVENTS.get(name)
    if model is None:
        raise TelemetryError(f"unknown telemetry event {name!r}; known: {sorted(TELEMETRY_EVENTS)}")
    if isinstance(metadata, _Meta):
        if not isinstance(metadata, model):
            raise TelemetryError(f"{type(metadata).__name__} is not the model of {name!r}")
        return metadata.dump()
    try:
        return model.model_validate(metadata).dump()
    except ValidationError as exc:
        raise TelemetryError(f"malformed {name!r} metadata: {exc.errors(include_url=False)}") from exc
