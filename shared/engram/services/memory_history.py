"""History and human undo of consolidation (R-15.3), for the memory API.

- `history(principal, id)`: the observation's chain of versions (what it superseded, what
  superseded it, the sources it unites) and every decision about them: who (the consolidation
  function, the sweep, a person), when, why, by rules or by which model, and whether a person
  undid it. Only what the caller may see is shown; the chain never leaves one audience anyway.
- `unmerge(principal, id)`: a person undoes the latest consolidation of that observation (or a
  given one): a merge's or digest's sources become current again and the consolidated
  observation is retired (`valid_to`); an update's older observation comes back; a conflict
  link goes. The decision is marked undone, so consolidation never joins them again. The
  changes go out through the outbox: the index takes the sources back.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel

from engram.domain.consolidation_history import ConsolidationRecord
from engram.domain.errors import Conflict, Forbidden, NotFound
from engram.domain.observation import Change, Observation, WriteOutcome
from engram.domain.scopes import Permission, Principal, Visibility, require
from engram.domain.telemetry import MemoryConsolidation, record
from engram.ports import TenantTx, UnitOfWork
from engram.services.consolidation import restored_events

HISTORY_DEPTH = 8


class Version(BaseModel):
    """One observation of a chain as the history shows it."""

    observation: Observation
    status: Literal["current", "superseded", "retired", "expired"]


class History(BaseModel):
    observation_id: uuid.UUID
    versions: list[Version]
    decisions: list[ConsolidationRecord]


class Unmerged(BaseModel):
    consolidation: ConsolidationRecord
    restored: list[uuid.UUID]
    retired: list[uuid.UUID]
    unlinked: list[uuid.UUID]


def status_of(obs: Observation, now: datetime) -> Literal["current", "superseded", "retired", "expired"]:
    if obs.superseded_by is not None:
        return "superseded"
    if obs.valid_to is not None:
        return "retired"
    if obs.expires_at is not None and obs.expires_at <= now:
        return "expired"
    return "current"


@dataclass
class _Undo:
    restored: list[uuid.UUID] = field(default_factory=list)
    retired: list[uuid.UUID] = field(default_factory=list)
    unlinked: list[uuid.UUID] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)


class MemoryHistory:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow

    async def _visible(self, tx: TenantTx, principal: Principal, observation_id: uuid.UUID) -> Observation:
        obs = await tx.observations.get(observation_id)
        visibility = Visibility.for_principal(principal, want_sensitive=True)
        if obs is None or not visibility.allows(obs):
            raise NotFound(f"observation {observation_id} not found")
        return obs

    async def history(self, principal: Principal, observation_id: uuid.UUID) -> History:
        require(principal, Permission.read_observation)
        now = datetime.now(UTC)
        visibility = Visibility.for_principal(principal, want_sensitive=True)
        async with self.uow.tenant(principal.tenant_id) as tx:
            await self._visible(tx, principal, observation_id)
            chain = [o for o in await tx.consolidation.lineage(observation_id, HISTORY_DEPTH) if visibility.allows(o)]
            records = await tx.consolidation.records([o.id for o in chain])
        shown = {o.id for o in chain}
        return History(
            observation_id=observation_id,
            versions=[Version(observation=o, status=status_of(o, now)) for o in chain],
            decisions=[r for r in records if set(r.members) <= shown],
        )

    async def unmerge(
        self, principal: Principal, observation_id: uuid.UUID, consolidation_id: uuid.UUID | None = None
    ) -> Unmerged:
        require(principal, Permission.update_observation)
        if not principal.is_human:
            raise Forbidden("undoing a consolidation is a human decision; agent keys cannot")
        started = time.perf_counter()
        now = datetime.now(UTC)
        visibility = Visibility.for_principal(principal, want_sensitive=True)
        async with self.uow.tenant(principal.tenant_id) as tx:
            obs = await self._visible(tx, principal, observation_id)
            decision = await self._decision(tx, observation_id, consolidation_id)
            members = await tx.observations.get_many(decision.members)
            if any(not visibility.allows(m) for m in members):
                raise NotFound(f"observation {observation_id} not found")
            undo = await self._undo(tx, decision, now)
            await tx.consolidation.undo(decision.id, by=principal.user_id or "unknown", at=now)
            tx.emit(restored_events(undo.changes))
            await tx.telemetry.write(
                [
                    record(
                        tx.tenant_id,
                        "memory.consolidation",
                        MemoryConsolidation(
                            decision="unmerge",
                            cluster_size=len(decision.members),
                            path="human",
                            trigger="human",
                            duration_ms=int((time.perf_counter() - started) * 1000),
                        ),
                        user_id=principal.user_id or obs.user_id,
                    )
                ]
            )
            undone = await tx.consolidation.get_record(decision.id)
        assert undone is not None
        return Unmerged(consolidation=undone, restored=undo.restored, retired=undo.retired, unlinked=undo.unlinked)

    async def _decision(
        self, tx: TenantTx, observation_id: uuid.UUID, consolidation_id: uuid.UUID | None
    ) -> ConsolidationRecord:
        """The given decision about this observation, else the latest one not undone (one that
        made it, then one that superseded or linked it)."""
        records = [r for r in await tx.consolidation.records([observation_id]) if observation_id in r.members]
        if consolidation_id is not None:
            chosen = [r for r in records if r.id == consolidation_id]
            if not chosen:
                raise NotFound(f"consolidation {consolidation_id} is not about observation {observation_id}")
            if chosen[0].undone_at is not None:
                raise Conflict(f"consolidation {consolidation_id} was undone already")
            return chosen[0]
        pending = [r for r in records if r.undone_at is None]
        made = [r for r in pending if r.result_id == observation_id and r.decision in ("duplicate", "digest")]
        ranked = made or pending
        if not ranked:
            raise Conflict(f"observation {observation_id} has no consolidation to undo")
        return max(ranked, key=lambda r: (r.created_at, r.id.int))

    async def _undo(self, tx: TenantTx, decision: ConsolidationRecord, now: datetime) -> _Undo:
        undo = _Undo()
        if decision.decision == "conflict":
            a, b = decision.source_ids
            await tx.consolidation.unlink(a, b)
            undo.unlinked = [a, b]
            return undo
        assert decision.result_id is not None
        locked = await tx.consolidation.lock_current([decision.result_id, *decision.source_ids])
        result = await tx.observations.get(decision.result_id)
        if result is None or (decision.result_id not in locked and result.superseded_by is not None):
            raise Conflict("this consolidation was consolidated again later: undo the later one first")
        sources = [s for s in await tx.observations.get_many(decision.source_ids) if s.superseded_by == result.id]
        restored = await tx.consolidation.restore([s.id for s in sources])
        undo.restored = sorted(restored, key=lambda i: i.int)
        owners = {s.id: s.user_id for s in sources}
        undo.changes.extend(Change(i, tx.tenant_id, owners[i], WriteOutcome.updated, r) for i, r in restored.items())
        # a consolidated observation this decision made goes; a newer one that superseded stays
        if decision.decision in ("duplicate", "digest") or set(result.merged_from) & set(decision.source_ids):
            retired = await tx.consolidation.retire([result.id], now)
            undo.retired = list(retired)
            undo.changes.extend(
                Change(i, tx.tenant_id, result.user_id, WriteOutcome.updated, r) for i, r in retired.items()
            )
        return undo
