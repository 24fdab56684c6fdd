"""A chat turn's request, its answer, and what is carried from preparing it to answering it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engram.domain.llm import Message
from engram.domain.models import Chat, Session
from engram.domain.observation import Observation
from engram.domain.routing import RoutingDecision
from engram.domain.scopes import Principal
from engram.domain.zones import TimeZoneName
from engram.ports import Recall
from engram.services.gateway import TelemetryBuffer
from engram.services.multistream import MultiStreamResult
from engram.services.proposals import ProposalView

TextSink = Callable[[str], Awaitable[None]]
OfflineReason = Literal["no_api_key", "llm_unavailable"]


class TurnFailed(RuntimeError):
    """The model failed after the answer had started streaming (HTTP 502 / SSE error event)."""


class TurnRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=20_000, description="the user's message")
    model: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$",
        description="a configured model id or profile name instead of auto selection",
    )
    end_session: bool = Field(default=False, description="close the session after this turn (it gets a summary)")
    title: str | None = Field(default=None, max_length=200, description="title of a new chat")
    time_zone: TimeZoneName | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="the user's IANA time zone (their today, the day a plan told as 'tomorrow' means), "
        "kept for the user's later calls; when absent, the one they named last, else ENGRAM_TIME_ZONE",
        examples=["Europe/Berlin"],
    )


class TurnUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    cost_usd: float
    llm_calls: int


class TurnResponse(BaseModel):
    chat_id: uuid.UUID
    session_id: uuid.UUID
    user_message_id: uuid.UUID
    message_id: uuid.UUID
    answer: str
    model: str
    tier: str
    offline: bool
    offline_reason: OfflineReason | None = None
    query_id: uuid.UUID | None
    memory_trace: dict[str, Any]
    usage: TurnUsage
    duration_ms: int
    session_ended: bool
    timings: dict[str, float] = Field(default_factory=dict, description="milliseconds per stage")
    proposals: list[ProposalView] = Field(
        default_factory=list, description="the chat's memory proposals waiting for your decision"
    )


@dataclass
class PreparedTurn:
    principal: Principal
    body: TurnRequest
    chat: Chat
    session: Session
    previous_session: Session | None  # ended now because it was idle: it gets a summary
    history: list[Message]
    stable: list[Observation]
    stable_hash: str
    zone: tzinfo  # the user's time zone: the request's, else the one they named last, else the deployment's
    decision: RoutingDecision
    recall: Recall | None
    started: float
    timings: dict[str, float] = field(default_factory=dict)
    buffer: TelemetryBuffer = field(default_factory=TelemetryBuffer)  # the turn's telemetry, from the start
    recalling: asyncio.Task[MultiStreamResult] | None = None  # the recall, started once the chat was checked
    synthesis_profile: str | None = None  # the intent's strategy profile, once recall has told the intent

    @property
    def profile(self) -> str:
        """The profile (task) that answers: the strategy's `llm_profile`, else the routing tier's."""
        return self.synthesis_profile or self.decision.profile

    @property
    def user_id(self) -> str:
        assert self.principal.user_id is not None  # `begin` refuses a turn without a user
        return self.principal.user_id
