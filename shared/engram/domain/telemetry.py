"""Typed telemetry (R-4.5, R-8, R-10): every event name has a model; unknown names are rejected.

Metadata is stored with the camelCase field names the source documents use
(`selectedModel`, `summaryChars`, ...); Python code uses snake_case.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from engram.domain.errors import TelemetryError
from engram.domain.redaction import redact


class _Meta(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


NonNeg = Field(ge=0)


class ChatTurnMetrics(_Meta):
    """`chat.turn_completed`: what one turn cost (not the `chat.turn.completed` CloudEvent)."""

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
    # memory units written or changed (a chat's turns as said, `conversation.chat_units`); not in
    # `count`, which is what extraction (rules, the model, the offline extractor) chose to keep
    units: int = Field(default=0, ge=0)
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: int = NonNeg
    status: Literal["ok", "partial", "failed", "skipped"]
    error: str | None = Field(default=None, max_length=2_000)


class MemoryConsolidation(_Meta):
    """`memory.consolidation`: one decision of the consolidation function, the sweep or a person
    (R-15): what it decided about how many observations, by rules or by which model, at what cost."""

    decision: Literal["duplicate", "update", "conflict", "digest", "unrelated", "unmerge"]
    cluster_size: int = NonNeg
    path: Literal["rules", "llm", "human"]
    trigger: Literal["event", "sweep", "human"]
    model: str | None = None
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    duration_ms: int = NonNeg
    status: Literal["ok", "failed", "skipped"] = "ok"
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


class EventDeadLettered(_Meta):
    """`event.dead_lettered`: a worker sent an event to its dead-letter subject (R-3.4, R-17.1)."""

    consumer: str
    event_type: str
    event_id: str
    reason: str = Field(max_length=2_000)
    deliveries: int = NonNeg
    poison: bool  # refused at once (its data); false: gave up after its last delivery failed


TELEMETRY_EVENTS: dict[str, type[_Meta]] = {
    "chat.turn_completed": ChatTurnMetrics,
    "chat.tool_used": ChatToolUsed,
    "chat.error": ChatError,
    "chat.ptl_recovery": ChatPtlRecovery,
    "chat.approval_decision": ChatApprovalDecision,
    "memory.extraction": MemoryExtraction,
    "memory.consolidation": MemoryConsolidation,
    "memory.cache_break": MemoryCacheBreak,
    "chat.compaction_fired": ChatCompactionFired,
    "chat.model_auto_routed": ChatModelAutoRouted,
    "chat.advisor_auto_triggered": ChatAdvisorAutoTriggered,
    "event.dead_lettered": EventDeadLettered,
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


@dataclass(frozen=True)
class TelemetryRecord:
    """One `ai_events` row to be written (`TelemetryStore.write`), validated when built."""

    tenant_id: str
    name: str
    metadata: dict[str, Any]
    user_id: str | None = None
    chat_id: uuid.UUID | None = None
    created_at: datetime | None = None


def record(
    tenant_id: str,
    name: str,
    metadata: Any,
    *,
    user_id: str | None = None,
    chat_id: uuid.UUID | None = None,
) -> TelemetryRecord:
    """Validate now (raises TelemetryError), write later with `TelemetryStore.write`; secrets in
    the metadata (an error's text quoting a key, a URL with a password) are scrubbed first."""
    return TelemetryRecord(tenant_id, name, redact(validate_metadata(name, metadata), bodies=False), user_id, chat_id)


def records_of(
    tenant_id: str, metas: list[_Meta], *, user_id: str | None = None, chat_id: uuid.UUID | None = None
) -> list[TelemetryRecord]:
    """Typed events of one user and chat as rows."""
    return [record(tenant_id, event_name(m), m, user_id=user_id, chat_id=chat_id) for m in metas]


# ---- what the telemetry API asks for (R-10) ------------------------------------------------------


class Metric(StrEnum):
    """What `/timeseries` can draw."""

    events = "events"
    turns = "turns"
    cost = "cost"
    tokens = "tokens"
    errors = "errors"
    tool_calls = "tool_calls"
    ptl_recoveries = "ptl_recoveries"
    cache_hit_rate = "cache_hit_rate"


@dataclass(frozen=True)
class EventFilter:
    event_name: str | None = None
    chat_id: uuid.UUID | None = None
    user_id: str | None = None
