"""Consolidation's store in memory (`engram.ports.ConsolidationStore`), as
`engram.adapters.consolidation_store.PgConsolidationStore` does it in SQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from engram.domain.consolidation_history import ConsolidationRecord
from engram.domain.observation import Observation, Priority, is_unit_key
from tests.fakes.data import ConstraintViolation, TxState


class InMemoryConsolidationStore:
    def __init__(self, tx: TxState) -> None:
        self.tx = tx

    @property
    def rows(self) -> dict[uuid.UUID, Observation]:
        return self.tx.rows().observations

    async def candidates(self, obs: Observation, *, recent: int, related: int) -> list[Observation]:
        mine = [
            o
            for o in self.rows.values()
            if (o.user_id or "") == (obs.user_id or "")
            and o.scope == obs.scope
            and o.type == obs.type
            and sorted(o.team_ids) == sorted(obs.team_ids)
            and o.is_current
            and not is_unit_key(o.key)
            and o.id != obs.id
        ]
        mine.sort(key=lambda o: o.created_at, reverse=True)
        sharing = [o for o in mine if set(o.facts) & set(obs.facts)][:related]
        chosen = {o.id: o for o in [*sharing, *mine[:recent]]}
        return sorted(chosen.values(), key=lambda o: (o.created_at, o.id.int))

    async def lock_current(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Observation]:
        return {i: self.rows[i] for i in sorted(set(ids)) if i in self.rows and self.rows[i].is_current}

    def _revise(
        self, ids: Sequence[uuid.UUID], when: Callable[[Observation], bool], **changes: Any
    ) -> dict[uuid.UUID, datetime]:
        """The UPDATE ... WHERE `when` ... RETURNING id, updated_at (a new revision each)."""
        revised: dict[uuid.UUID, datetime] = {}
        for i in dict.fromkeys(ids):
            row = self.rows.get(i)
            if row is None or not when(row):
                continue
            row = row.model_copy(update={**changes, "updated_at": self.tx.bump(row.updated_at)})
            self.rows[i] = row
            revised[i] = row.updated_at
        return revised

    async def supersede(self, ids: Sequence[uuid.UUID], by: uuid.UUID, at: datetime) -> dict[uuid.UUID, datetime]:
        return self._revise([i for i in ids if i != by], lambda o: o.is_current, superseded_by=by, valid_to=at)

    async def retire(self, ids: Sequence[uuid.UUID], at: datetime) -> dict[uuid.UUID, datetime]:
        return self._revise(ids, lambda o: o.is_current, valid_to=at)

    async def restore(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, datetime]:
        return self._revise(ids, lambda o: not o.is_current, superseded_by=None, valid_to=None)

    async def link(self, a: uuid.UUID, b: uuid.UUID) -> None:
        for one, other in ((a, b), (b, a)):
            row = self.rows.get(one)
            if row is not None and other not in row.conflicts_with:
                self.rows[one] = row.model_copy(update={"conflicts_with": [*row.conflicts_with, other]})

    async def unlink(self, a: uuid.UUID, b: uuid.UUID) -> None:
        for one, other in ((a, b), (b, a)):
            row = self.rows.get(one)
            if row is not None:
                kept = [c for c in row.conflicts_with if c != other]
                self.rows[one] = row.model_copy(update={"conflicts_with": kept})

    async def record(self, record: ConsolidationRecord) -> None:
        self.tx.own(record.tenant_id, "a consolidation")
        if record.anchor_id not in self.rows or (record.result_id and record.result_id not in self.rows):
            raise ConstraintViolation("a consolidation must name observations that exist")
        self.tx.rows().consolidations[record.id] = record

    async def get_record(self, record_id: uuid.UUID) -> ConsolidationRecord | None:
        return self.tx.rows().consolidations.get(record_id)

    async def records(self, ids: Sequence[uuid.UUID]) -> list[ConsolidationRecord]:
        wanted = set(ids)
        found = [r for r in self.tx.rows().consolidations.values() if wanted & set(r.members)]
        return sorted(found, key=lambda r: (r.created_at, r.id.int))

    async def undo(self, record_id: uuid.UUID, *, by: str, at: datetime) -> None:
        records = self.tx.rows().consolidations
        found = records.get(record_id)
        if found is not None and found.undone_at is None:
            records[record_id] = found.model_copy(update={"undone_at": at, "undone_by": by})

    async def separated(self, ids: Sequence[uuid.UUID]) -> list[frozenset[uuid.UUID]]:
        wanted = set(ids)
        return [
            frozenset(r.members)
            for r in self.tx.rows().consolidations.values()
            if r.undone_at is not None and wanted & set(r.members)
        ]

    def _edges(self, i: uuid.UUID) -> set[uuid.UUID]:
        row = self.rows.get(i)
        found: set[uuid.UUID] = set()
        if row is not None:
            if row.superseded_by is not None:
                found.add(row.superseded_by)
            found.update(row.merged_from)
        found.update(o.id for o in self.rows.values() if o.superseded_by == i)
        for r in self.tx.rows().consolidations.values():
            if i in r.members:
                found.update(r.members)
        return found

    async def lineage(self, observation_id: uuid.UUID, depth: int) -> list[Observation]:
        seen = {observation_id}
        frontier = {observation_id}
        for _ in range(depth):
            frontier = {n for i in frontier for n in self._edges(i)} - seen
            seen |= frontier
        found = [self.rows[i] for i in seen if i in self.rows]
        return sorted(found, key=lambda o: (o.created_at, o.id.int))

    async def predecessors(self, ids: Sequence[uuid.UUID], depth: int) -> dict[uuid.UUID, list[Observation]]:
        found: dict[uuid.UUID, list[Observation]] = {}
        for root in ids:
            chain: list[Observation] = []
            level = [root]
            for step in range(depth + 1):
                rows = sorted((self.rows[i] for i in level if i in self.rows), key=lambda o: o.id.int)
                chain.extend(rows)
                if step == depth:
                    break
                level = [o.id for o in self.rows.values() if o.superseded_by in set(level)]
            if chain:
                found[root] = chain
        return found

    async def low_priority(self, before: datetime, limit: int) -> list[Observation]:
        found = [
            o
            for o in self.rows.values()
            if o.priority is Priority.low
            and o.is_current
            and not is_unit_key(o.key)
            and o.created_at < before
            and "digest" not in o.tags
        ]
        found.sort(key=lambda o: (o.created_at, o.id.int))
        return found[:limit]

    async def changed_since(self, since: datetime, limit: int) -> list[Observation]:
        found = [o for o in self.rows.values() if o.is_current and not is_unit_key(o.key) and o.updated_at >= since]
        found.sort(key=lambda o: (o.updated_at, o.id.int))
        return found[:limit]
