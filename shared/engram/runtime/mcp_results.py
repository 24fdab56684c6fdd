"""What the MCP server's tools answer (`engram.runtime.mcp_server`): structured results, each a
pydantic model so the tool's output schema tells a model what every field means."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from engram.domain.observation import Observation, Priority, Scope
from engram.domain.recall_text import needs_mark


class MemoryView(BaseModel):
    """An observation as a tool shows it: what a model needs to use it and to judge how far to trust it."""

    id: uuid.UUID
    type: str
    title: str
    narrative: str
    facts: list[str]
    tags: list[str]
    scope: Scope
    team_ids: list[str]
    user_id: str | None = Field(description="its owner; null: tenant-wide")
    source: str = Field(description="user (a person stored it), agent, or system (a business system)")
    verified: bool
    unverified: bool = Field(description="shown as '(unverified)': inferred by an agent, not confirmed by a person")
    confidence: float
    priority: Priority
    key: str | None
    valid_from: datetime | None
    expires_at: datetime | None
    said_at: datetime | None = Field(description="when it was said, if not when it was stored (created_at)")
    created_at: datetime

    @classmethod
    def of(cls, obs: Observation) -> MemoryView:
        return cls(
            **obs.model_dump(include=set(cls.model_fields) - {"unverified", "source"}),
            source=obs.source.value,
            unverified=needs_mark(obs),
        )


class Remembered(BaseModel):
    outcome: Literal["created", "updated", "deduplicated"]
    observation: MemoryView


class Accepted(BaseModel):
    id: str = Field(description="the event's id")
    status: Literal["accepted"] = "accepted"


class Hit(BaseModel):
    observation: MemoryView
    score: float
    lexical_rank: int | None = Field(description="rank in the keyword list (1 = best), null if not there")
    vector_rank: int | None = Field(description="rank in the meaning list (1 = best), null if not there")


class Found(BaseModel):
    query_id: uuid.UUID
    hits: list[Hit]


class Forgotten(BaseModel):
    id: uuid.UUID
    title: str
    status: Literal["deleted"] = "deleted"


class Expiring(BaseModel):
    within: str
    items: list[MemoryView]
