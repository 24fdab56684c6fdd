"""Storage ports: the tenant unit of work, the stores of one tenant transaction, and what
maintenance jobs read across tenants.

The write path goes through `UnitOfWork.tenant(t)`: one transaction in which only that
tenant's rows exist, its stores (`tx.observations`, `tx.chats`, ...), the consumer's inbox
(`tx.inbox`) and `tx.emit`, which announces changes; the unit of work publishes them after the
commit, by the strategy the caller chose (`Announce`). PostgreSQL implements all of it in
`engram.adapters`; `tests/fakes` holds in-memory versions.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Any, Protocol

from cloudevents.http import CloudEvent

from engram.domain.models import AgentKey, FeedbackCounts, FeedbackRow, FeedbackTarget
from engram.domain.observation import Change, KnownObservation, Observation, ObservationDraft, Written
from engram.domain.paging import TOTAL_CAP, PageMark
from engram.domain.periods import Granularity, Window
from engram.domain.scopes import Visibility
from engram.domain.search import Vector
from engram.domain.telemetry import EventFilter, Metric, TelemetryRecord
from engram.ports.chats import ChatStore
from engram.ports.consolidation import ConsolidationStore
from engram.ports.proposals import ProposalStore

# ---- the stores of one tenant transaction ------------------------------------------------------


class ObservationStore(Protocol):
    """Observations of the transaction's tenant (R-4.1): idempotent batched writes, visible reads."""

    async def write_many(self, drafts: Sequence[ObservationDraft]) -> list[Written]:
        """Write a batch and read the rows back; aligned with `drafts` (duplicates share a row)."""
        ...

    async def write_changes(self, drafts: Sequence[ObservationDraft]) -> list[Change]:
        """Write a batch and return only what changed (the workers' fast path)."""
        ...

    async def get(self, observation_id: uuid.UUID) -> Observation | None: ...

    async def get_many(self, ids: Sequence[uuid.UUID]) -> list[Observation]: ...

    async def list_visible(
        self,
        visibility: Visibility,
        *,
        types: Sequence[str] = (),
        tags: Sequence[str] = (),
        scope: str | None = None,
        source: str | None = None,
        verified: bool | None = None,
        include_expired: bool = False,
        now: datetime,
        limit: int,
        offset: int = 0,
        after: PageMark | None = None,
        count_up_to: int = TOTAL_CAP + 1,
    ) -> tuple[list[Observation], int]:
        """A page of the visible observations, newest first (`created_at DESC, id`): `limit` of
        them from `offset` on, counted from `after` (the rows after that place) or from the
        first; and how many match in all, counted up to `count_up_to` (a count that reaches it
        stops there: `paging.counted_total`)."""
        ...

    async def expiring(
        self, visibility: Visibility, *, now: datetime, until: datetime, limit: int
    ) -> list[Observation]:
        """Visible observations in force whose `expires_at` is before `until`, soonest first."""
        ...

    async def profile(
        self, visibility: Visibility, *, types: Sequence[str], now: datetime, limit: int
    ) -> list[Observation]:
        """The caller's own live observations of `types` (never sensitive, never one they
        rejected), the highest priority first, then the newest (`Observation.said`): a profile
        that stops at `limit` keeps what the user said last, not what they said first."""
        ...

    async def plans(
        self, visibility: Visibility, *, types: Sequence[str], now: datetime, limit: int
    ) -> list[Observation]:
        """The caller's own live observations of `types` that tell a plan (`plans.PLAN_FLAG`), as
        `profile` filters them, the newest first (`Observation.said`): however much was said since."""
        ...

    async def visible(self, ids: Sequence[str], visibility: Visibility, now: datetime) -> dict[str, Observation]:
        """Those of `ids` that exist, are in force and visible, by id (recall's hydration)."""
        ...

    async def flag(self, ids: Sequence[uuid.UUID], flag: str) -> int:
        """Engram's own `flag` added to those of `ids` that lack it (rows written before the flag
        existed, `Indexer.reindex`); a derived mark, not a revision: nothing else changes. How many."""
        ...

    async def known(self, user_id: str, limit: int) -> list[KnownObservation]:
        """The user's latest non-sensitive observations not superseded (what chat extraction reuses)."""
        ...

    async def current(self, ids: Sequence[uuid.UUID]) -> list[Change]:
        """The stored revision of each existing one of `ids`, as the change that made it (to
        announce it again under the same event id): `created` while the row is as it was
        inserted, else `updated`."""
        ...

    async def live_ids(self) -> list[str]:
        """Every observation not superseded, by id (a reindex)."""
        ...

    async def delete(self, observation_id: uuid.UUID) -> None: ...

    async def verify(self, observation_id: uuid.UUID) -> Observation | None:
        """Mark verified (confidence at least 1.0, a new revision); None if it already was."""
        ...

    async def lock(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, FeedbackTarget]:
        """Lock the existing ones of `ids` until the end of the transaction, in id order."""
        ...

    async def count_feedback(self, counts: Mapping[uuid.UUID, FeedbackCounts]) -> dict[uuid.UUID, datetime]:
        """Add feedback counters (one statement, each observation once); the revisions after."""
        ...


class FeedbackStore(Protocol):
    async def add(self, rows: Sequence[FeedbackRow]) -> None: ...

    async def rejected_ids(self, user_id: str | None) -> frozenset[str]:
        """The observations this user rejected (hidden from their recall, R-7.5)."""
        ...


class ErasureStore(Protocol):
    """The tombstones of erased users (`engram.domain.erasure`): every writer asks in its transaction."""

    async def hold(self, user_ids: Sequence[str]) -> dict[str, datetime]:
        """Wait for an erasure of these users in progress to commit, keep a new one out until this
        transaction ends, and return when each was last erased (those ever erased)."""
        ...


class TelemetryStore(Protocol):
    """`ai_events` and its rollups (R-4.5, R-10); rows as plain mappings of column to value."""

    async def write(self, records: Sequence[TelemetryRecord]) -> None:
        """Append rows (validated again; one bad record rejects the call before anything is written)."""
        ...

    async def totals(self, window: Window) -> Mapping[str, Any]: ...

    async def events(
        self, window: Window, where: EventFilter, *, limit: int, offset: int
    ) -> list[Mapping[str, Any]]: ...

    async def count(self, window: Window, where: EventFilter) -> int: ...

    async def series(self, metric: Metric, granularity: Granularity, window: Window) -> dict[datetime, Any]: ...

    async def top_tools(self, window: Window, limit: int) -> list[Mapping[str, Any]]: ...

    async def top_users(self, window: Window, limit: int) -> list[Mapping[str, Any]]: ...


class EmbeddingCache(Protocol):
    """Passage vectors by (model, hash of the embedded text)."""

    async def cached(self, model: str, hashes: Sequence[str]) -> dict[str, Vector]: ...

    async def store(self, model: str, entries: Mapping[str, Vector]) -> None: ...


class Inbox(Protocol):
    """The events a consumer has applied (`processed_events`) and what each produced."""

    async def seen(self, keys: Sequence[str]) -> dict[str, list[uuid.UUID]]:
        """Those of `keys` applied already, with the observations they produced."""
        ...

    async def record(self, produced: Mapping[str, Sequence[uuid.UUID]]) -> None:
        """Note events as applied (one that is there already is left as it is)."""
        ...

    async def claim(self, keys: Sequence[str]) -> set[str]:
        """Note events as applied; the keys that were new (the others were applied before)."""
        ...


@dataclass(frozen=True)
class Erased:
    """What erasing a user's personal memory removed from the database."""

    feedback: int
    history: dict[str, int]
    observations: list[tuple[uuid.UUID, str | None]]
    embedding_cache: int = 0  # cached vectors of the user's texts
    outbox: int = 0  # the user's events not yet published


class PersonalDataStore(Protocol):
    """A user's personal memory in the tenant (R-11.3): read in export order, or erased."""

    def observations(self, user_id: str) -> AsyncIterator[Observation]: ...

    def feedback(self, user_id: str) -> AsyncIterator[Mapping[str, Any]]: ...

    def history(self, name: str, user_id: str) -> AsyncIterator[Mapping[str, Any]]:
        """`chats`, `messages`, `sessions`, `summaries` or `proposals` of the user (export order)."""
        ...

    def telemetry(self, user_id: str) -> AsyncIterator[Mapping[str, Any]]: ...

    async def erase(self, user_id: str) -> Erased: ...


class AgentKeyStore(Protocol):
    async def create(
        self,
        key_id: uuid.UUID,
        *,
        name: str,
        key_hash: str,
        user_id: str | None,
        teams: list[str],
        permissions: list[str],
    ) -> None: ...

    async def list(self, *, include_revoked: bool = False) -> list[AgentKey]: ...

    async def revoke(self, key_id: uuid.UUID) -> AgentKey | None:
        """Revoke (once: an earlier revocation stands); None if no such key in the tenant."""
        ...


# ---- the unit of work -----------------------------------------------------------------------------


class Announce(StrEnum):
    """How a transaction's `emit`ted events reach the bus after the commit.

    - `outbox`: written to the outbox in the transaction and published right after the commit;
      what fails to go out stays for the relay. Durable before the caller returns.
    - `deferred`: the same outbox rows, published in the background after the commit, so the
      caller does not wait for the bus (chat-turn answers first).
    - `redelivery`: no outbox rows; published after the commit, and a failure raises. For a
      consumer whose inbox remembers what each event produced, so a redelivered event
      announces it again (extract-observation: one statement less per batch).
    """

    outbox = "outbox"
    deferred = "deferred"
    redelivery = "redelivery"


class TenantTx(Protocol):
    """One tenant's transaction (row-level security: no other tenant's rows exist in it)."""

    @property
    def tenant_id(self) -> str: ...

    @property
    def observations(self) -> ObservationStore: ...

    @property
    def chats(self) -> ChatStore: ...

    @property
    def feedback(self) -> FeedbackStore: ...

    @property
    def telemetry(self) -> TelemetryStore: ...

    @property
    def embeddings(self) -> EmbeddingCache: ...

    @property
    def personal(self) -> PersonalDataStore: ...

    @property
    def agent_keys(self) -> AgentKeyStore: ...

    @property
    def consolidation(self) -> ConsolidationStore:
        """Versions, conflict links and consolidation decisions (R-15)."""
        ...

    @property
    def erasures(self) -> ErasureStore: ...

    @property
    def proposals(self) -> ProposalStore: ...

    @property
    def inbox(self) -> Inbox:
        """The inbox of the consumer the transaction was opened for (`consumer=`)."""
        ...

    def emit(self, events: Iterable[CloudEvent]) -> None:
        """Announce changes: published after the commit (`Announce`), never if it rolls back."""
        ...


class UnitOfWork(Protocol):
    def tenant(
        self, tenant_id: str, *, announce: Announce = Announce.outbox, consumer: str | None = None
    ) -> AbstractAsyncContextManager[TenantTx]:
        """A transaction in which only `tenant_id`'s rows exist; commits when the block ends
        without an error, then announces what was emitted."""
        ...

    async def drain(self) -> None:
        """Wait for deferred announcements still being published (shutdown)."""
        ...


# ---- across tenants (maintenance jobs) -------------------------------------------------------------


class Maintenance(Protocol):
    async def idle_sessions(self, before: datetime, limit: int) -> list[tuple[str, list[uuid.UUID]]]:
        """Active sessions untouched since `before`, the longest idle first, by tenant."""
        ...

    async def prune_inbox(self, consumer: str, before: datetime, limit: int) -> int:
        """Delete at most `limit` of a consumer's inbox entries older than `before`; how many went."""
        ...

    async def prune_embedding_cache(self, unused_since: datetime, limit: int) -> int:
        """Delete at most `limit` cached vectors unused since `unused_since`; how many went."""
        ...

    async def expire_proposals(self, now: datetime, limit: int) -> int:
        """Mark at most `limit` memory proposals past their time and undecided as expired."""
        ...


@dataclass(frozen=True)
class ExpiredDay:
    tenant_id: str
    day: date
    rows: int


class RetentionStore(Protocol):
    """Expired telemetry across tenants (R-11.1), under one lock shared by every run."""

    def exclusive(self, wait_seconds: float = 0.0) -> AbstractAsyncContextManager[bool]:
        """Hold the retention lock (trying up to `wait_seconds`); yields whether it was taken."""
        ...

    async def expired_days(self, cutoff: datetime) -> list[ExpiredDay]: ...

    def day_rows(self, tenant_id: str, start: datetime, end: datetime) -> AsyncIterator[Mapping[str, Any]]: ...

    async def delete_events(self, ids: Sequence[int]) -> int: ...


@dataclass(frozen=True)
class AgentKeyRecord:
    tenant_id: str
    user_id: str | None
    teams: frozenset[str]
    permissions: frozenset[str]


class AgentKeyDirectory(Protocol):
    async def resolve(self, key_hash: str) -> AgentKeyRecord | None:
        """The key's identity, unless it is unknown or revoked (the tenant is not known before)."""
        ...
