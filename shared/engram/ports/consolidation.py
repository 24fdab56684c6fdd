"""Consolidation's storage ports (R-15): the versions, links and decisions of one tenant's
memory (`tx.consolidation`), and what the nightly sweep reads across tenants.

Nothing here deletes an observation: superseding sets `superseded_by` and `valid_to`,
retiring a consolidated observation (a human undo) sets `valid_to`, restoring clears both.
Every method that changes a row gives it a new revision (`updated_at`), so the change events
the service emits make the index follow.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from engram.domain.consolidation_history import ConsolidationRecord
from engram.domain.observation import Observation


class ConsolidationStore(Protocol):
    async def candidates(self, obs: Observation, *, recent: int, related: int) -> list[Observation]:
        """Current observations of `obs`'s audience and type (same owner, scope, teams), not
        `obs` itself: up to `related` that share a fact value with it, and the `recent` newest."""
        ...

    async def lock_current(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Observation]:
        """Lock `ids` for the transaction (in id order) and read those that are still current."""
        ...

    async def supersede(self, ids: Sequence[uuid.UUID], by: uuid.UUID, at: datetime) -> dict[uuid.UUID, datetime]:
        """`superseded_by = by`, `valid_to = at` on the current ones of `ids`; their new revisions."""
        ...

    async def retire(self, ids: Sequence[uuid.UUID], at: datetime) -> dict[uuid.UUID, datetime]:
        """`valid_to = at` without a successor (a consolidation a person undid)."""
        ...

    async def restore(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, datetime]:
        """Current again: `superseded_by` and `valid_to` cleared."""
        ...

    async def link(self, a: uuid.UUID, b: uuid.UUID) -> None:
        """Mark `a` and `b` as conflicting (both directions)."""
        ...

    async def unlink(self, a: uuid.UUID, b: uuid.UUID) -> None: ...

    async def record(self, record: ConsolidationRecord) -> None: ...

    async def get_record(self, record_id: uuid.UUID) -> ConsolidationRecord | None: ...

    async def records(self, ids: Sequence[uuid.UUID]) -> list[ConsolidationRecord]:
        """Every decision any of `ids` took part in, oldest first."""
        ...

    async def undo(self, record_id: uuid.UUID, *, by: str, at: datetime) -> None: ...

    async def separated(self, ids: Sequence[uuid.UUID]) -> list[frozenset[uuid.UUID]]:
        """The member sets of undone decisions touching `ids`: a person kept them apart."""
        ...

    async def lineage(self, observation_id: uuid.UUID, depth: int) -> list[Observation]:
        """The observation and everything connected to it by supersession or merge provenance,
        up to `depth` steps each way (its history)."""
        ...

    async def predecessors(self, ids: Sequence[uuid.UUID], depth: int) -> dict[uuid.UUID, list[Observation]]:
        """For each of `ids`: it and what it superseded or united, transitively (recall as of a
        time walks back from what is current now)."""
        ...

    async def low_priority(self, before: datetime, limit: int) -> list[Observation]:
        """Current low-priority observations recorded before `before` (digest candidates), oldest first."""
        ...

    async def changed_since(self, since: datetime, limit: int) -> list[Observation]:
        """Current observations created or changed since `since`, oldest first (the sweep)."""
        ...


class ConsolidationScan(Protocol):
    """Across tenants, for the nightly sweep."""

    async def tenants(self, changed_since: datetime, low_priority_before: datetime) -> list[str]:
        """Tenants with observations changed since `changed_since` or low-priority ones older
        than `low_priority_before`."""
        ...
