"""Consolidation's storage on PostgreSQL (`engram.ports.ConsolidationStore`, R-15).

Queries on one connection inside a tenant transaction (row-level security). Superseding,
retiring and restoring give the rows a new revision (`updated_at`), as every other write does,
so the index follows the change events; conflict links do not (the index does not store them).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from engram.adapters.observation_rows import to_observation
from engram.adapters.postgres import Connection, Database
from engram.domain.consolidation_history import ConsolidationRecord
from engram.domain.observation import UNIT_KEY_PREFIXES, Observation

_CURRENT = "superseded_by IS NULL AND valid_to IS NULL"
# memory units are neither consolidated nor digested (`observation.is_unit_key`)
_NOT_UNIT = "NOT (coalesce(key, '') LIKE ANY (ARRAY[{}]))".format(
    ", ".join(f"'{prefix}%'" for prefix in UNIT_KEY_PREFIXES)
)
_BUMP = "updated_at = greatest(clock_timestamp(), updated_at + interval '1 microsecond')"

# the observations connected to one: what superseded it and what it superseded, the sources it
# unites, and the members of every decision it took part in (also undone ones)
_LINEAGE = """
WITH RECURSIVE walk(id, depth) AS (
  SELECT $1::uuid, 0
  UNION
  SELECT n.id, w.depth + 1 FROM walk w CROSS JOIN LATERAL (
    SELECT o.superseded_by AS id FROM observations o WHERE o.id = w.id AND o.superseded_by IS NOT NULL
    UNION ALL SELECT unnest(o.merged_from) FROM observations o WHERE o.id = w.id
    UNION ALL SELECT o.id FROM observations o WHERE o.superseded_by = w.id
    UNION ALL SELECT unnest(c.members) FROM consolidations c WHERE c.members @> ARRAY[w.id]
  ) n
  WHERE w.depth < $2
)
SELECT o.* FROM observations o WHERE o.id IN (SELECT id FROM walk) ORDER BY o.created_at, o.id
"""

_PREDECESSORS = """
WITH RECURSIVE back(root, id, depth) AS (
  SELECT r, r, 0 FROM unnest($1::uuid[]) AS r
  UNION ALL
  SELECT b.root, o.id, b.depth + 1 FROM back b JOIN observations o ON o.superseded_by = b.id
  WHERE b.depth < $2
)
SELECT b.root AS root_id, o.* FROM back b JOIN observations o ON o.id = b.id ORDER BY b.root, b.depth, o.id
"""


def _record(row: asyncpg.Record) -> ConsolidationRecord:
    return ConsolidationRecord(
        id=row["id"],
        tenant_id=row["tenant_id"],
        decision=row["decision"],
        anchor_id=row["anchor_id"],
        result_id=row["result_id"],
        source_ids=list(row["source_ids"]),
        reason=row["reason"],
        path=row["path"],
        model=row["model"],
        actor=row["actor"],
        created_at=row["created_at"],
        undone_at=row["undone_at"],
        undone_by=row["undone_by"],
    )


class PgConsolidationStore:
    def __init__(self, conn: Connection, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    async def candidates(self, obs: Observation, *, recent: int, related: int) -> list[Observation]:
        params: list[Any] = [obs.user_id or "", obs.scope.value, obs.type, sorted(obs.team_ids), obs.id]
        mine = (
            f"owner_key = $1 AND scope = $2 AND type = $3 AND {_CURRENT} AND {_NOT_UNIT} AND id <> $5"
            " AND ARRAY(SELECT unnest(team_ids) ORDER BY 1) = $4::text[]"
        )
        params.extend([list(obs.facts), related, recent])
        rows = await self.conn.fetch(
            f"(SELECT * FROM observations WHERE {mine} AND facts && $6::text[] ORDER BY created_at DESC LIMIT $7)"
            f" UNION (SELECT * FROM observations WHERE {mine} ORDER BY created_at DESC LIMIT $8)",
            *params,
        )
        return sorted((to_observation(r) for r in rows), key=lambda o: (o.created_at, o.id.int))

    async def lock_current(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Observation]:
        rows = await self.conn.fetch(
            "SELECT * FROM observations WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE", sorted(set(ids))
        )
        found = (to_observation(r) for r in rows)
        return {o.id: o for o in found if o.is_current}

    async def _revise(self, sql: str, *args: Any) -> dict[uuid.UUID, datetime]:
        return {r["id"]: r["updated_at"] for r in await self.conn.fetch(sql, *args)}

    async def supersede(self, ids: Sequence[uuid.UUID], by: uuid.UUID, at: datetime) -> dict[uuid.UUID, datetime]:
        return await self._revise(
            f"UPDATE observations SET superseded_by = $2, valid_to = $3, {_BUMP}"
            f" WHERE id = ANY($1::uuid[]) AND id <> $2 AND {_CURRENT} RETURNING id, updated_at",
            list(ids),
            by,
            at,
        )

    async def retire(self, ids: Sequence[uuid.UUID], at: datetime) -> dict[uuid.UUID, datetime]:
        return await self._revise(
            f"UPDATE observations SET valid_to = $2, {_BUMP} WHERE id = ANY($1::uuid[]) AND {_CURRENT}"
            " RETURNING id, updated_at",
            list(ids),
            at,
        )

    async def restore(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, datetime]:
        return await self._revise(
            f"UPDATE observations SET superseded_by = NULL, valid_to = NULL, {_BUMP}"
            " WHERE id = ANY($1::uuid[]) AND NOT (superseded_by IS NULL AND valid_to IS NULL)"
            " RETURNING id, updated_at",
            list(ids),
        )

    async def link(self, a: uuid.UUID, b: uuid.UUID) -> None:
        await self.conn.execute(
            "UPDATE observations o SET conflicts_with = array_append(o.conflicts_with, x.other)"
            " FROM (VALUES ($1::uuid, $2::uuid), ($2::uuid, $1::uuid)) AS x(id, other)"
            " WHERE o.id = x.id AND NOT (x.other = ANY(o.conflicts_with))",
            a,
            b,
        )

    async def unlink(self, a: uuid.UUID, b: uuid.UUID) -> None:
        await self.conn.execute(
            "UPDATE observations o SET conflicts_with = array_remove(o.conflicts_with, x.other)"
            " FROM (VALUES ($1::uuid, $2::uuid), ($2::uuid, $1::uuid)) AS x(id, other) WHERE o.id = x.id",
            a,
            b,
        )

    async def record(self, record: ConsolidationRecord) -> None:
        await self.conn.execute(
            "INSERT INTO consolidations (id, tenant_id, decision, anchor_id, result_id, source_ids, members,"
            " reason, path, model, actor, created_at)"
            " VALUES ($1, $2, $3, $4, $5, $6::uuid[], $7::uuid[], $8, $9, $10, $11, $12)",
            record.id,
            self.tenant_id,
            record.decision,
            record.anchor_id,
            record.result_id,
            record.source_ids,
            record.members,
            record.reason[:2_000],
            record.path,
            record.model,
            record.actor,
            record.created_at,
        )

    async def get_record(self, record_id: uuid.UUID) -> ConsolidationRecord | None:
        row = await self.conn.fetchrow("SELECT * FROM consolidations WHERE id = $1", record_id)
        return _record(row) if row is not None else None

    async def records(self, ids: Sequence[uuid.UUID]) -> list[ConsolidationRecord]:
        rows = await self.conn.fetch(
            "SELECT * FROM consolidations WHERE members && $1::uuid[] ORDER BY created_at, id", list(ids)
        )
        return [_record(r) for r in rows]

    async def undo(self, record_id: uuid.UUID, *, by: str, at: datetime) -> None:
        await self.conn.execute(
            "UPDATE consolidations SET undone_at = $2, undone_by = $3 WHERE id = $1 AND undone_at IS NULL",
            record_id,
            at,
            by,
        )

    async def separated(self, ids: Sequence[uuid.UUID]) -> list[frozenset[uuid.UUID]]:
        rows = await self.conn.fetch(
            "SELECT members FROM consolidations WHERE undone_at IS NOT NULL AND members && $1::uuid[]", list(ids)
        )
        return [frozenset(r["members"]) for r in rows]

    async def lineage(self, observation_id: uuid.UUID, depth: int) -> list[Observation]:
        return [to_observation(r) for r in await self.conn.fetch(_LINEAGE, observation_id, depth)]

    async def predecessors(self, ids: Sequence[uuid.UUID], depth: int) -> dict[uuid.UUID, list[Observation]]:
        found: dict[uuid.UUID, list[Observation]] = {}
        for row in await self.conn.fetch(_PREDECESSORS, list(ids), depth):
            found.setdefault(row["root_id"], []).append(to_observation(row))
        return found

    async def low_priority(self, before: datetime, limit: int) -> list[Observation]:
        rows = await self.conn.fetch(
            f"SELECT * FROM observations WHERE priority = 'low' AND {_CURRENT} AND {_NOT_UNIT} AND created_at < $1"
            " AND NOT ('digest' = ANY(tags)) ORDER BY created_at, id LIMIT $2",
            before,
            limit,
        )
        return [to_observation(r) for r in rows]

    async def changed_since(self, since: datetime, limit: int) -> list[Observation]:
        rows = await self.conn.fetch(
            f"SELECT * FROM observations WHERE {_CURRENT} AND {_NOT_UNIT} AND updated_at >= $1"
            " ORDER BY updated_at, id LIMIT $2",
            since,
            limit,
        )
        return [to_observation(r) for r in rows]


class PgConsolidationScan:
    """Across tenants, as the connecting role (like the session sweep's scan)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def tenants(self, changed_since: datetime, low_priority_before: datetime) -> list[str]:
        async with self.db.system() as conn:
            rows = await conn.fetch(
                f"SELECT DISTINCT tenant_id FROM observations WHERE {_CURRENT}"
                " AND (updated_at >= $1 OR (priority = 'low' AND created_at < $2)) ORDER BY tenant_id",
                changed_since,
                low_priority_before,
            )
        return [r["tenant_id"] for r in rows]
