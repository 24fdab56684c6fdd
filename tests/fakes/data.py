"""What the in-memory unit of work keeps per tenant (its "tables"), and one transaction's view of it.

A transaction works on a deep copy of its tenant's `TenantData`; the unit of work keeps the
copy only when the block ends without an error. The stores reach the copy through
`TxState.rows()`, which refuses once the transaction is over (like a released connection).
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from engram.domain.consolidation_history import ConsolidationRecord
from engram.domain.models import Chat, ChatMessage, FeedbackKind, Session, Summary
from engram.domain.observation import Observation
from engram.domain.proposals import Proposal
from engram.domain.search import Vector

MICROSECOND = timedelta(microseconds=1)


class ConstraintViolation(Exception):
    """What PostgreSQL would refuse: a foreign key, a check, row-level security."""


def jsonb(value: Any) -> Any:
    """A value as a `jsonb` column gives it back (JSON only; a set or a datetime raises, as it does
    when the real adapter encodes it)."""
    return None if value is None else json.loads(json.dumps(value))


def real(value: float) -> float:
    """A float stored in a `real` column (single precision) and read back."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


@dataclass
class MessageRow:
    """A `chat_messages` row (mutable: the extraction status is written into its trace later)."""

    id: uuid.UUID
    chat_id: uuid.UUID
    session_id: uuid.UUID | None
    user_id: str | None
    role: str
    content: str
    created_at: datetime
    model: str | None = None
    duration_ms: int | None = None
    memory_trace: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    content_blocks: list[dict[str, Any]] | None = None

    def message(self, tenant_id: str) -> ChatMessage:
        return ChatMessage(
            id=self.id,
            tenant_id=tenant_id,
            chat_id=self.chat_id,
            session_id=self.session_id,
            role=self.role,
            content=self.content,
            model=self.model,
            duration_ms=self.duration_ms,
            memory_trace=jsonb(self.memory_trace),
            created_at=self.created_at,
        )

    def as_row(self, tenant_id: str) -> dict[str, Any]:
        return {
            "tenant_id": tenant_id,
            **{k: jsonb(v) if isinstance(v, dict | list) else v for k, v in vars(self).items()},
        }


@dataclass
class FeedbackRecord:
    """An `observation_feedback` row."""

    id: int
    observation_id: uuid.UUID | None
    user_id: str | None
    kind: FeedbackKind
    rating: int | None
    query_id: uuid.UUID | None
    stream_origin: str | None
    created_at: datetime


@dataclass
class TenantData:
    """One tenant's rows. Observations, chats, sessions and summaries are frozen models (replaced,
    never changed in place); the rest are plain rows."""

    observations: dict[uuid.UUID, Observation] = field(default_factory=dict)
    feedback: list[FeedbackRecord] = field(default_factory=list)
    erasures: dict[str, datetime] = field(default_factory=dict)
    chats: dict[uuid.UUID, Chat] = field(default_factory=dict)
    sessions: dict[uuid.UUID, Session] = field(default_factory=dict)
    messages: dict[uuid.UUID, MessageRow] = field(default_factory=dict)
    summaries: dict[uuid.UUID, Summary] = field(default_factory=dict)  # by session id
    telemetry: list[dict[str, Any]] = field(default_factory=list)
    embeddings: dict[tuple[str, str], Vector] = field(default_factory=dict)  # (model, text hash)
    inbox: dict[str, dict[str, list[uuid.UUID]]] = field(default_factory=dict)  # consumer -> key -> produced
    agent_keys: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)
    consolidations: dict[uuid.UUID, ConsolidationRecord] = field(default_factory=dict)
    proposals: dict[uuid.UUID, Proposal] = field(default_factory=dict)
    serial: int = 0  # bigint identity columns (feedback, telemetry)

    def next_id(self) -> int:
        self.serial += 1
        return self.serial


def observations_deleted(data: TenantData, gone: set[uuid.UUID]) -> None:
    """What deleting observations does to the rows that refer to them: `superseded_by` is set to
    NULL (ON DELETE SET NULL), conflict links go (the trigger), decisions anchored on them go
    (ON DELETE CASCADE)."""
    for o in list(data.observations.values()):
        changes: dict[str, Any] = {}
        if o.superseded_by in gone:
            changes["superseded_by"] = None
        if gone & set(o.conflicts_with):
            changes["conflicts_with"] = [c for c in o.conflicts_with if c not in gone]
        if changes:
            data.observations[o.id] = o.model_copy(update=changes)
    data.consolidations = {
        i: r for i, r in data.consolidations.items() if r.anchor_id not in gone and r.result_id not in gone
    }


@dataclass
class TxState:
    """One transaction: its tenant, its working copy, when it began (`now()`), the clock
    (`clock_timestamp()`) and whether it is still open."""

    tenant_id: str
    data: TenantData
    now: datetime
    clock: Callable[[], datetime]
    chat_taken: Callable[[uuid.UUID], bool]  # a chat id used by another tenant (ids are global)
    open: bool = True

    def rows(self) -> TenantData:
        if not self.open:
            raise RuntimeError("this transaction is over: its stores cannot be used any more")
        return self.data

    def bump(self, previous: datetime) -> datetime:
        """`greatest(clock_timestamp(), updated_at + interval '1 microsecond')`: a new revision."""
        return max(self.clock(), previous + MICROSECOND)

    def own(self, tenant_id: str, what: str) -> None:
        """Row-level security's check on a written row."""
        if tenant_id != self.tenant_id:
            raise ConstraintViolation(
                f"{what} of tenant {tenant_id!r} violates row-level security in a transaction of {self.tenant_id!r}"
            )
