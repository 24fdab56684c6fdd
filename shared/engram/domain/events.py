"""Event types (R-3): versioned reverse-DNS names, pydantic data models, JSON Schemas, subjects.

Engram's own events are registered here. Domain events from CRM, orders and invoicing keep
their producer's type; they travel on `engram.ingest.<tenant>.<user>.<type>` and their data is
mapped by the YAML rules in `engram.domain.rules`. Subjects: `engram.domain.subjects`.
"""

from __future__ import annotations

import builtins
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cloudevents.http import CloudEvent
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engram.domain.errors import InvalidEvent
from engram.domain.injection import MAX_TAGS
from engram.domain.models import FeedbackKind
from engram.domain.observation import Change, Key, Priority, Scope, Tag, TeamId, TypeName, WriteOutcome
from engram.domain.subjects import ENGRAM_SUBJECTS, subject_of

EXTENSION_NAME = re.compile(r"^[a-z][a-z0-9]{0,19}$")
TYPE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,254}$")
REQUIRED_EXTENSIONS = ("tenantid",)
KNOWN_EXTENSIONS = ("tenantid", "userid", "correlationid", "causationid", "traceparent", "tracestate")
CORE_ATTRIBUTES = frozenset({"id", "source", "specversion", "type", "datacontenttype", "dataschema", "subject", "time"})
SCHEMA_BASE = "urn:engram:schema:"
SOURCE_PREFIX = "/engram/"


def check_extension_names(attributes: dict[str, Any]) -> None:
    for name in attributes:
        if name in CORE_ATTRIBUTES or name == "data":
            continue
        if not EXTENSION_NAME.match(name):
            raise InvalidEvent(f"extension attribute {name!r} must match {EXTENSION_NAME.pattern}")


# ---- data models of Engram's own events -------------------------------------------------------


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ObservationMarked(_Data):
    """A user clicked "merken" on a statement (R-5.3)."""

    text: str = Field(min_length=1, max_length=20_000)
    title: str | None = Field(default=None, max_length=500)
    type: TypeName = "note"
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    scope: Scope = Scope.private
    team_ids: list[TeamId] = Field(default_factory=list, max_length=64)
    priority: Priority = Priority.normal
    key: Key | None = None
    chat_id: uuid.UUID | None = None
    chat_message_id: uuid.UUID | None = None
    session_id: uuid.UUID | None = None


class ObservationChanged(_Data):
    """An observation was created, updated or deleted: the index follows PostgreSQL (R-6.3)."""

    observation_id: uuid.UUID
    revision: str = Field(description="updated_at of the row when the event was written")


class ChatTurnCompleted(_Data):
    chat_id: uuid.UUID
    session_id: uuid.UUID | None = None
    user_message_id: uuid.UUID | None = None
    assistant_message_id: uuid.UUID | None = None
    user_message: str = Field(max_length=200_000)
    assistant_message: str = Field(max_length=200_000)
    model: str | None = None
    language: str | None = None
    session_ended: bool = False
    may_store_sensitive: bool = Field(
        default=False,
        description="the user held 'view:SensitiveAiMemory' at the turn: extraction may keep sensitive items",
    )
    team_ids: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="the user's teams at the turn: extraction may propose team-wide items for them",
    )


MAX_RETRIEVED_IDS = 100  # a search returns at most 100 hits


class FeedbackRecorded(_Data):
    """Feedback on an observation (retrieved, cited, confirmed, rejected) or a rating of a query (R-9.1).

    The user is the event's `userid` extension. `actor` says who gave it: only a human's
    confirmation verifies an observation (R-12.1), so the default is the one that verifies nothing.
    Recall reports the hits of one search as one `retrieved` event with `observation_ids`.
    """

    kind: FeedbackKind
    observation_id: uuid.UUID | None = None
    observation_ids: list[uuid.UUID] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_RETRIEVED_IDS,
        description="'retrieved' only, instead of observation_id: every hit of one search in one event",
    )
    rating: int | None = Field(default=None, ge=1, le=5)
    query_id: uuid.UUID | None = None
    stream_origin: str | None = Field(default=None, max_length=64)
    actor: Literal["human", "agent", "system"] = Field(
        default="agent", description="who gave the feedback; only 'human' confirmations set verified"
    )

    @model_validator(mode="after")
    def _shape_fits_kind(self) -> FeedbackRecorded:
        if self.observation_ids is not None:
            if self.kind is not FeedbackKind.retrieved:
                raise ValueError("'observation_ids' belongs to kind 'retrieved' only")
            if self.observation_id is not None:
                raise ValueError("give 'observation_id' or 'observation_ids', not both")
            if len(set(self.observation_ids)) != len(self.observation_ids):
                raise ValueError("'observation_ids' repeats an observation")
        if self.kind is FeedbackKind.rated:
            if self.rating is None or self.query_id is None:
                raise ValueError("a rating needs 'rating' (1..5) and 'query_id'")
        else:
            if self.observation_id is None and self.observation_ids is None:
                raise ValueError(f"'{self.kind.value}' feedback needs 'observation_id'")
            if self.rating is not None:
                raise ValueError("'rating' belongs to kind 'rated' only")
        return self


class ChatApprovalDecision(_Data):
    """The chat's user approved or rejected a memory proposal (source document 000's
    `chat.approval_decision`); approving stored `observation_id`."""

    chat_id: uuid.UUID
    proposal_id: uuid.UUID
    decision: Literal["approved", "rejected"]
    reason: Literal["sensitive", "team", "low_confidence"]
    observation_type: str = Field(max_length=64)
    observation_id: uuid.UUID | None = None


class SessionEnded(_Data):
    session_id: uuid.UUID
    chat_id: uuid.UUID | None = None


@dataclass(frozen=True)
class EventType:
    type: str
    data_model: builtins.type[BaseModel]

    @property
    def subject(self) -> str:
        """The wildcard subject of every event of this type, whatever its tenant and user."""
        family, rest = ENGRAM_SUBJECTS[self.type]
        return f"engram.{family}.*.*.{'*' if rest == '{actor}' else rest}"

    @property
    def dataschema(self) -> str:
        return f"{SCHEMA_BASE}{self.type}"

    def json_schema(self) -> dict[str, Any]:
        schema = self.data_model.model_json_schema()
        schema["$id"] = self.dataschema
        schema["title"] = self.type
        return schema


OBSERVATION_MARKED = EventType("io.engram.observation.marked.v1", ObservationMarked)
OBSERVATION_CREATED = EventType("io.engram.observation.created.v1", ObservationChanged)
OBSERVATION_UPDATED = EventType("io.engram.observation.updated.v1", ObservationChanged)
OBSERVATION_DELETED = EventType("io.engram.observation.deleted.v1", ObservationChanged)
CHAT_TURN_COMPLETED = EventType("io.engram.chat.turn.completed.v1", ChatTurnCompleted)
SESSION_ENDED = EventType("io.engram.session.ended.v1", SessionEnded)
FEEDBACK_RECORDED = EventType("io.engram.feedback.recorded.v1", FeedbackRecorded)
CHAT_APPROVAL_DECISION = EventType("io.engram.chat.approval_decision.v1", ChatApprovalDecision)

REGISTRY: dict[str, EventType] = {
    t.type: t
    for t in (
        OBSERVATION_MARKED,
        OBSERVATION_CREATED,
        OBSERVATION_UPDATED,
        OBSERVATION_DELETED,
        CHAT_TURN_COMPLETED,
        SESSION_ENDED,
        FEEDBACK_RECORDED,
        CHAT_APPROVAL_DECISION,
    )
}


def is_engram_type(event_type: str) -> bool:
    return event_type.startswith("io.engram.")


def subject_for(event: CloudEvent) -> str:
    """The subject an event travels on: its family, tenant, user and type (`engram.domain.subjects`)."""
    return subject_of(str(event["type"]), event.get("tenantid"), event.get("userid"), event.get_data())


def parse_data(event_type: str, data: Any) -> BaseModel:
    known = REGISTRY.get(event_type)
    if known is None:
        raise InvalidEvent(f"no data model for {event_type!r}")
    from pydantic import ValidationError

    try:
        return known.data_model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'data'}: {e['msg']}" for e in exc.errors())
        raise InvalidEvent(f"invalid data for {event_type}: {problems}") from exc


def new_event(
    event_type: EventType | str,
    data: BaseModel | dict[str, Any] | None,
    *,
    tenant_id: str,
    source: str,
    user_id: str | None = None,
    subject: str | None = None,
    event_id: str | None = None,
    correlation_id: str | None = None,
    time: str | None = None,
) -> CloudEvent:
    """A CloudEvent 1.0 with Engram's extensions; `event_id` makes re-publishing idempotent."""
    from datetime import UTC, datetime

    type_name = event_type.type if isinstance(event_type, EventType) else event_type
    attributes: dict[str, Any] = {
        "id": event_id or str(uuid.uuid4()),
        "source": source,
        "type": type_name,
        "specversion": "1.0",
        "time": time or datetime.now(UTC).isoformat(),
        "datacontenttype": "application/json",
        "tenantid": tenant_id,
    }
    known = REGISTRY.get(type_name)
    if known is not None:
        attributes["dataschema"] = known.dataschema
    if user_id:
        attributes["userid"] = user_id
    if subject:
        attributes["subject"] = subject
    if correlation_id:
        attributes["correlationid"] = correlation_id
    payload = data.model_dump(mode="json") if isinstance(data, BaseModel) else data
    return CloudEvent(attributes, payload)


def observation_changed(
    event_type: EventType, observation_id: uuid.UUID, revision: str, *, tenant_id: str, source: str, user_id: str | None
) -> CloudEvent:
    """observation.created/updated/deleted for the indexer. Its id makes re-publishing idempotent:
    one event per revision, and one deletion per observation."""
    event_id = f"{event_type.type}:{observation_id}"
    if event_type is not OBSERVATION_DELETED:
        event_id += f":{revision}"
    return new_event(
        event_type,
        ObservationChanged(observation_id=observation_id, revision=revision),
        tenant_id=tenant_id,
        source=source,
        user_id=user_id,
        subject=f"observation/{observation_id}",
        event_id=event_id,
    )


def change_events(changes: Sequence[Change], source: str) -> list[CloudEvent]:
    """observation.created / .updated for what a write changed; ids are deterministic per revision."""
    events: list[CloudEvent] = []
    seen: set[uuid.UUID] = set()
    for c in changes:
        if c.outcome is WriteOutcome.deduplicated or c.id in seen:
            continue
        seen.add(c.id)
        revision = c.revision.isoformat()
        etype = OBSERVATION_CREATED if c.outcome is WriteOutcome.created else OBSERVATION_UPDATED
        events.append(
            observation_changed(etype, c.id, revision, tenant_id=c.tenant_id, source=source, user_id=c.user_id)
        )
    return events
