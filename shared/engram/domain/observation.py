"""The observation: the unit of memory (R-4.1)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cached_property
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from engram.domain.hashing import content_hash
from engram.domain.injection import MAX_TAGS
from engram.domain.secrets import may_hold_secrets, without_secrets

DEFAULT_OBSERVATION_TYPES: frozenset[str] = frozenset(
    {
        "fact",
        "decision",
        "event",
        "concept",
        "preference",
        "identity",
        "project",
        "skill",
        "mistake",
        "context",
        "note",
    }
)


class Priority(StrEnum):
    low = "low"
    normal = "normal"
    high = "high"
    critical = "critical"

    @property
    def rank(self) -> int:
        return _PRIORITY_RANK[self]


_PRIORITY_RANK = {Priority.critical: 3, Priority.high: 2, Priority.normal: 1, Priority.low: 0}


class Source(StrEnum):
    user = "user"
    agent = "agent"
    system = "system"


class Scope(StrEnum):
    private = "private"
    team = "team"
    public = "public"
    sensitive = "sensitive"


class TriggerSource(StrEnum):
    chat = "chat"
    hook = "hook"
    manual = "manual"
    consolidation = "consolidation"


TypeName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
# Blanks around a tag or key are stripped, so the patterns (which the OpenAPI documents carry)
# ask for one character that is not a blank: `\s` plus U+0085, which stripping removes and
# JSON Schema's (ECMAScript's) `\s` does not name. A key is one line: the pattern's `$`
# admits a trailing line break in JSON Schema and Python regexes, the stripping removes it.
NOT_BLANK = r"[^\s\u0085]"
Tag = Annotated[str, StringConstraints(min_length=1, max_length=64, strip_whitespace=True, pattern=NOT_BLANK)]
Key = Annotated[
    str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True, pattern=rf"^{NOT_BLANK}.*$")
]
TeamId = Annotated[str, StringConstraints(min_length=1, max_length=128)]


def default_confidence(source: Source) -> float:
    """1.0 for what a person said, 0.7 for what an agent inferred (R-4.1)."""
    return 0.7 if source is Source.agent else 1.0


class Provenance(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: uuid.UUID | None = None
    chat_message_id: uuid.UUID | None = None
    source_event_id: str | None = Field(default=None, max_length=512)


class ObservationDraft(BaseModel):
    """What a writer supplies; everything else is derived (hash, timestamps, id)."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: str = Field(min_length=1, max_length=128)
    user_id: str | None = Field(default=None, min_length=1, max_length=128)
    team_ids: list[TeamId] = Field(default_factory=list, max_length=64)
    type: TypeName = "note"
    title: str = Field(min_length=1, max_length=500)
    narrative: str = Field(default="", max_length=20_000)
    facts: list[Annotated[str, StringConstraints(max_length=2_000)]] = Field(default_factory=list, max_length=100)
    concepts: list[Annotated[str, StringConstraints(max_length=200)]] = Field(default_factory=list, max_length=100)
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    key: Key | None = None
    discovery_tokens: list[Annotated[str, StringConstraints(max_length=200)]] = Field(
        default_factory=list, max_length=100
    )
    priority: Priority = Priority.normal
    source: Source = Source.user
    verified: bool = False
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    scope: Scope = Scope.private
    trigger_source: TriggerSource = TriggerSource.manual
    provenance: Provenance = Field(default_factory=Provenance)
    valid_from: datetime | None = None
    expires_at: datetime | None = None
    # when its source said it (the event's occurrence time); None: when it is written (`said`)
    said_at: datetime | None = None
    # a consolidated observation or digest: the observations it unites (provenance, R-15.1)
    merged_from: list[uuid.UUID] = Field(default_factory=list, max_length=1_000)

    @field_validator("valid_from", "expires_at", "said_at")
    @classmethod
    def _aware(cls, at: datetime | None) -> datetime | None:
        """A time without a zone is no instant (and cannot be compared with one)."""
        if at is not None and at.tzinfo is None:
            raise ValueError("needs a time zone (e.g. 2026-03-01T12:00:00Z)")
        return at

    @field_validator("tags")
    @classmethod
    def _tags_case_insensitive(cls, tags: list[str]) -> list[str]:
        seen: dict[str, None] = {}
        for tag in tags:
            seen.setdefault(tag.casefold(), None)
        return list(seen)

    @field_validator("team_ids", "facts", "concepts", "discovery_tokens")
    @classmethod
    def _drop_blank_and_duplicates(cls, values: list[str]) -> list[str]:
        return list(dict.fromkeys(v for v in values if v.strip()))

    @model_validator(mode="after")
    def _flag_instruction_like(self) -> ObservationDraft:
        """Instruction-like content (R-16.6) is kept, flagged and trusted less; the flag is
        Engram's alone (a writer's own `flag:` tags are dropped)."""
        from engram.domain.injection import FLAGGED_CONFIDENCE, INSTRUCTION_FLAG, is_instruction_like, writers_tags

        tags = writers_tags(self.tags)
        if is_instruction_like(self.title, self.narrative, *self.facts):
            tags = [*tags[: MAX_TAGS - 1], INSTRUCTION_FLAG]
            self.confidence = min(self.confidence, FLAGGED_CONFIDENCE)
        self.tags = tags
        return self

    @model_validator(mode="after")
    def _flag_plan(self) -> ObservationDraft:
        """A statement that tells a plan of the user's (the next trip, an appointment, a birthday)
        is flagged, so the profile finds it however much was said since (`domain/plans.py`)."""
        from engram.domain.plan_topics import PLAN_FLAG, flags_plan

        if flags_plan(self.user_id, self.type, self.title, self.narrative, self.tags):
            self.tags = [*self.tags, PLAN_FLAG]
        return self

    @model_validator(mode="after")
    def _withhold_secrets(self) -> ObservationDraft:
        """What Engram derives by itself from a chat or a business event (`chat`, `hook`) and what
        an agent writes (`remember` with an agent key, MCP) keeps no credential, card number or
        token (`engram.domain.secrets`); a person's own `manual` write and a consolidation of
        stored memories are kept as written."""
        derived = self.trigger_source in (TriggerSource.chat, TriggerSource.hook)
        by_agent = self.trigger_source is TriggerSource.manual and self.source is Source.agent
        if not (derived or by_agent):
            return self
        if not may_hold_secrets(self.title, self.narrative, *self.facts, *self.concepts, *self.discovery_tokens):
            return self
        self.title = without_secrets(self.title)[:500]
        self.narrative = without_secrets(self.narrative)[:20_000]
        self.facts = [without_secrets(f)[:2_000] for f in self.facts]
        self.concepts = [without_secrets(c)[:200] for c in self.concepts]
        self.discovery_tokens = [without_secrets(t)[:200] for t in self.discovery_tokens]
        return self

    @model_validator(mode="after")
    def _scope_needs_owner(self) -> ObservationDraft:
        if self.scope is Scope.private and self.user_id is None:
            raise ValueError("a private observation needs a user_id (tenant-wide ones are public or team)")
        if self.scope is Scope.team and not self.team_ids:
            raise ValueError("a team observation needs at least one team id")
        if self.valid_from and self.expires_at and self.expires_at <= self.valid_from:
            raise ValueError("expires_at must be after valid_from")
        return self

    @cached_property
    def content_hash(self) -> str:
        """Computed once: drafts are not changed after validation. A consolidated observation's
        hash also covers its sources: it never collides with one of them, and consolidating the
        same sources again (a redelivery) finds the same row."""
        digest = content_hash(self.type, self.title, self.narrative, self.facts)
        if not self.merged_from:
            return digest
        return content_hash("consolidation", digest, "", [str(i) for i in self.merged_from])


class Observation(BaseModel):
    """A stored observation, as read back from the store."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    user_id: str | None
    team_ids: list[str]
    type: str
    title: str
    narrative: str
    facts: list[str]
    concepts: list[str]
    tags: list[str]
    key: str | None
    content_hash: str
    discovery_tokens: list[str]
    relevance_count: int
    cited_count: int = 0
    confirmed_count: int = 0
    rejected_count: int = 0
    priority: Priority
    source: Source
    verified: bool
    confidence: float
    scope: Scope
    trigger_source: TriggerSource
    provenance: Provenance
    valid_from: datetime | None
    expires_at: datetime | None
    superseded_by: uuid.UUID | None
    created_at: datetime
    updated_at: datetime
    valid_to: datetime | None = None  # no longer current since (set by consolidation, R-15.1)
    said_at: datetime | None = None  # when its source said it, if not when it was written (`said`)
    merged_from: list[uuid.UUID] = Field(default_factory=list)  # a consolidated observation's sources
    conflicts_with: list[uuid.UUID] = Field(default_factory=list)  # contradicting ones, no clear order

    @property
    def said(self) -> datetime:
        """When its source said it: the occurrence time of the event it comes from (`said_at`),
        else when it was written."""
        return self.said_at or self.created_at

    @property
    def holds_from(self) -> datetime:
        """When what it says holds from: its valid-from time (e.g. a session's date), else when it
        was said."""
        return self.valid_from or self.said

    @property
    def is_current(self) -> bool:
        """Not superseded and not retired by consolidation (whatever the time)."""
        return self.superseded_by is None and self.valid_to is None

    def is_live(self, now: datetime) -> bool:
        """Recall shows only observations that are in force: not expired, not superseded."""
        if not self.is_current:
            return False
        if self.expires_at is not None and self.expires_at <= now:
            return False
        return self.valid_from is None or self.valid_from <= now

    def valid_at(self, at: datetime) -> bool:
        """What recall "as of" `at` shows (R-15.3): recorded by then, in force then, and not yet
        superseded or retired then."""
        if self.created_at > at or (self.valid_from is not None and self.valid_from > at):
            return False
        if self.expires_at is not None and self.expires_at <= at:
            return False
        return self.valid_to is None or self.valid_to > at

    def searchable_text(self) -> str:
        """The text an index sees: title, narrative, facts, concepts, tags, discovery tokens."""
        parts = [self.title, self.narrative, *self.facts, *self.concepts, *self.tags, *self.discovery_tokens]
        return "\n".join(p for p in parts if p)


class WriteOutcome(StrEnum):
    created = "created"
    updated = "updated"
    deduplicated = "deduplicated"


@dataclass(frozen=True)
class Change:
    """What a write did to one row: enough to announce it, without loading the row."""

    id: uuid.UUID
    tenant_id: str
    user_id: str | None
    outcome: WriteOutcome
    revision: datetime


@dataclass(frozen=True)
class Written:
    """An observation as a write left it, and what the write did."""

    observation: Observation
    outcome: WriteOutcome

    @property
    def change(self) -> Change:
        o = self.observation
        return Change(o.id, o.tenant_id, o.user_id, self.outcome, o.updated_at)


@dataclass(frozen=True)
class KnownObservation:
    """What chat extraction tells the model about a memory it may reuse (its key above all)."""

    type: str
    title: str
    key: str | None


# the keys of memory units: a conversation turn's (`conversation.unit_key`) and a derived unit's
# (`memory_units.derived_key`)
UNIT_KEY_PREFIXES = ("turn:", "unit:")


def is_unit_key(key: str | None) -> bool:
    """A memory unit's key: its rows record what was said when. They are never consolidated or
    digested, not offered to the extraction model as known memories, and no extracted
    observation may take such a key (it would overwrite the unit)."""
    return bool(key) and str(key).startswith(UNIT_KEY_PREFIXES)
