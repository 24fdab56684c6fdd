"""The observation store in memory (`engram.ports.ObservationStore`), as `PgObservationStore` in SQL.

Visibility is `Visibility.allows` (what `visibility_sql` mirrors); "in force" is
`Observation.is_live` (what `live_sql` says: not superseded, not expired, valid from before
now). Deleting an observation removes its feedback rows (ON DELETE CASCADE), clears
`superseded_by` pointing at it (ON DELETE SET NULL), its conflict links and the decisions
anchored on it (`observations_deleted`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime

from engram.domain.models import FeedbackCounts, FeedbackKind, FeedbackTarget
from engram.domain.observation import (
    Change,
    KnownObservation,
    Observation,
    ObservationDraft,
    Priority,
    Scope,
    WriteOutcome,
    Written,
    is_unit_key,
)
from engram.domain.paging import TOTAL_CAP, PageMark
from engram.domain.plan_topics import PLAN_FLAG
from engram.domain.scopes import Visibility
from tests.fakes.data import TxState, observations_deleted, real
from tests.fakes.observation_writes import ObservationWrites


def _newest_first(found: list[Observation]) -> None:
    """ORDER BY created_at DESC, id (uuids compare like PostgreSQL's): two stable sorts."""
    found.sort(key=lambda o: o.id.int)
    found.sort(key=lambda o: o.created_at, reverse=True)


def _made_by(o: Observation) -> WriteOutcome:
    return WriteOutcome.created if o.updated_at == o.created_at else WriteOutcome.updated


class InMemoryObservationStore:
    def __init__(self, tx: TxState) -> None:
        self.tx = tx

    @property
    def rows(self) -> dict[uuid.UUID, Observation]:
        return self.tx.rows().observations

    # ---- writes -------------------------------------------------------------------------------

    async def write_many(self, drafts: Sequence[ObservationDraft]) -> list[Written]:
        outcomes = ObservationWrites(self.tx).write(drafts)
        return [Written(self.rows[i], outcome) for i, outcome in outcomes]

    async def write_changes(self, drafts: Sequence[ObservationDraft]) -> list[Change]:
        outcomes = ObservationWrites(self.tx).write(drafts)
        return [
            Change(i, d.tenant_id, d.user_id, outcome, self.rows[i].updated_at)
            for (i, outcome), d in zip(outcomes, drafts, strict=True)
        ]

    async def delete(self, observation_id: uuid.UUID) -> None:
        data = self.tx.rows()
        if data.observations.pop(observation_id, None) is None:
            return
        data.feedback = [f for f in data.feedback if f.observation_id != observation_id]
        observations_deleted(data, {observation_id})

    async def verify(self, observation_id: uuid.UUID) -> Observation | None:
        row = self.rows.get(observation_id)
        if row is None or row.verified:
            return None
        verified = row.model_copy(
            update={
                "verified": True,
                "confidence": max(row.confidence, real(1.0)),
                "updated_at": self.tx.bump(row.updated_at),
            }
        )
        self.rows[observation_id] = verified
        return verified

    async def flag(self, ids: Sequence[uuid.UUID], flag: str) -> int:
        flagged = [i for i in dict.fromkeys(ids) if i in self.rows and flag not in self.rows[i].tags]
        for i in flagged:
            self.rows[i] = self.rows[i].model_copy(update={"tags": [*self.rows[i].tags, flag]})
        return len(flagged)

    async def lock(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, FeedbackTarget]:
        # the transaction holds its tenant's rows alone (see InMemoryUnitOfWork): nothing to wait for
        return {i: FeedbackTarget(self.rows[i].user_id, self.rows[i].verified) for i in sorted(ids) if i in self.rows}

    async def count_feedback(self, counts: Mapping[uuid.UUID, FeedbackCounts]) -> dict[uuid.UUID, datetime]:
        revisions: dict[uuid.UUID, datetime] = {}
        for i in sorted(counts):
            row = self.rows.get(i)
            if row is None:
                continue
            c = counts[i]
            bump = c.verify and not row.verified
            row = row.model_copy(
                update={
                    "relevance_count": row.relevance_count + c.retrieved,
                    "cited_count": row.cited_count + c.cited,
                    "confirmed_count": row.confirmed_count + c.confirmed,
                    "rejected_count": row.rejected_count + c.rejected,
                    "verified": row.verified or c.verify,
                    "updated_at": self.tx.bump(row.updated_at) if bump else row.updated_at,
                }
            )
            self.rows[i] = row
            revisions[i] = row.updated_at
        return revisions

    # ---- reads --------------------------------------------------------------------------------

    async def get(self, observation_id: uuid.UUID) -> Observation | None:
        return self.rows.get(observation_id)

    async def get_many(self, ids: Sequence[uuid.UUID]) -> list[Observation]:
        return [self.rows[i] for i in dict.fromkeys(ids) if i in self.rows]

    async def current(self, ids: Sequence[uuid.UUID]) -> list[Change]:
        # as the change that made the revision: an insert sets both timestamps, later writes bump one
        return [Change(o.id, o.tenant_id, o.user_id, _made_by(o), o.updated_at) for o in await self.get_many(ids)]

    async def live_ids(self) -> list[str]:
        return [str(o.id) for o in sorted(self.rows.values(), key=lambda o: o.id.int) if o.is_current]

    async def known(self, user_id: str, limit: int) -> list[KnownObservation]:
        # as the SQL: not superseded and not sensitive (expiry is not looked at)
        mine = [
            o
            for o in self.rows.values()
            if o.user_id == user_id and o.is_current and o.scope != "sensitive" and not is_unit_key(o.key)
        ]
        mine.sort(key=lambda o: o.updated_at, reverse=True)
        return [KnownObservation(o.type, o.title, o.key) for o in mine[:limit]]

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
        wanted_tags = {t.casefold() for t in tags}
        found = [
            o
            for o in self.rows.values()
            if visibility.allows(o)
            and (not types or o.type in types)
            and wanted_tags <= set(o.tags)
            and (not scope or o.scope == scope)
            and (not source or o.source == source)
            and (verified is None or o.verified == verified)
            and (include_expired or o.is_live(now))  # without expired ones, superseded ones go too
        ]
        _newest_first(found)
        total = min(len(found), count_up_to)
        if after is not None:
            found = [
                o
                for o in found
                if o.created_at < after.created_at or (o.created_at == after.created_at and o.id.int > after.id.int)
            ]
        return found[offset : offset + limit], total

    async def expiring(
        self, visibility: Visibility, *, now: datetime, until: datetime, limit: int
    ) -> list[Observation]:
        found = [
            o
            for o in self.rows.values()
            if visibility.allows(o) and o.is_live(now) and o.expires_at is not None and o.expires_at <= until
        ]
        found.sort(key=lambda o: (o.expires_at, o.id.int))
        return found[:limit]

    async def profile(
        self, visibility: Visibility, *, types: Sequence[str], now: datetime, limit: int
    ) -> list[Observation]:
        if visibility.user_id is None:
            return []  # `user_id = NULL` matches nothing
        rejected = {
            f.observation_id
            for f in self.tx.rows().feedback
            if f.user_id == visibility.user_id and f.kind is FeedbackKind.rejected
        }
        found = [
            o
            for o in self.rows.values()
            if o.user_id == visibility.user_id
            and visibility.allows(o)
            and o.scope is not Scope.sensitive
            and o.id not in rejected
            and o.type in types
            and o.is_live(now)
        ]
        found.sort(key=lambda o: (Priority(o.priority).rank, o.said, o.id.int), reverse=True)
        return found[:limit]

    async def plans(
        self, visibility: Visibility, *, types: Sequence[str], now: datetime, limit: int
    ) -> list[Observation]:
        found = [
            o for o in await self.profile(visibility, types=types, now=now, limit=len(self.rows)) if PLAN_FLAG in o.tags
        ]
        found.sort(key=lambda o: (o.said, o.id.int), reverse=True)
        return found[:limit]

    async def visible(self, ids: Sequence[str], visibility: Visibility, now: datetime) -> dict[str, Observation]:
        found: dict[str, Observation] = {}
        for i in ids:
            o = self.rows.get(uuid.UUID(i))
            if o is not None and visibility.allows(o) and o.is_live(now):
                found[str(o.id)] = o
        return found
