"""The other records of R-4: feedback, sessions, summaries, chats, chat messages, telemetry."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class FeedbackKind(StrEnum):
    retrieved = "retrieved"
    cited = "cited"
    confirmed = "confirmed"
    rejected = "rejected"
    rated = "rated"


class ObservationFeedback(BaseModel):
    model_config = ConfigDict(frozen=True)

    tenant_id: str
    observation_id: uuid.UUID | None
    user_id: str | None
    kind: FeedbackKind
    rating: int | None = Field(default=None, ge=1, le=5)
    query_id: uuid.UUID | None = None
    stream_origin: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class FeedbackRow:
    """One `observation_feedback` row to write (the tenant comes from the transaction)."""

    observation_id: uuid.UUID | None
    user_id: str | None
    kind: FeedbackKind
    rating: int | None = None
    query_id: uuid.UUID | None = None
    stream_origin: str | None = None


@dataclass
class FeedbackCounts:
    """What a batch of feedback adds to one observation's counters; `verify` sets `verified`."""

    retrieved: int = 0
    cited: int = 0
    confirmed: int = 0
    rejected: int = 0
    verify: bool = False


@dataclass(frozen=True)
class FeedbackTarget:
    """An observation feedback is about, as locked for the update: its owner and whether verified."""

    user_id: str | None
    verified: bool


class SessionStatus(StrEnum):
    active = "active"
    completed = "completed"
    failed = "failed"


class Session(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    user_id: str | None
    chat_id: uuid.UUID | None
    user_prompt: str
    status: SessionStatus
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime


class Summary(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    session_id: uuid.UUID
    user_id: str | None
    request: str
    investigated: str
    learned: str
    completed: str
    next_steps: str
    notes: str
    generated_by_model: str
    created_at: datetime


class ChatKind(StrEnum):
    ai = "ai"
    user = "user"


class Chat(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    user_id: str | None
    kind: ChatKind
    title: str | None = None
    time_zone: str | None = None  # the IANA zone a turn of the chat named last (`zones`)
    time_zone_at: datetime | None = None  # when
    created_at: datetime
    updated_at: datetime


class ChatMessage(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    chat_id: uuid.UUID
    session_id: uuid.UUID | None
    role: str
    content: str
    model: str | None = None
    duration_ms: int | None = None
    memory_trace: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime


class AiEvent(BaseModel):
    """One append-only telemetry row (R-4.5); `metadata` is validated by the event's own model."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    event_name: str
    metadata: dict[str, Any]
    user_id: str | None = None
    chat_id: uuid.UUID | None = None
    created_at: datetime | None = None


class AgentKey(BaseModel):
    """An agent key as listed (never its secret: only its hash is stored, R-12.1)."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    name: str
    user_id: str | None
    teams: list[str]
    permissions: list[str]
    created_at: datetime
    revoked_at: datetime | None = None
