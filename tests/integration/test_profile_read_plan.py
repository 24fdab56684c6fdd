"""The profile read of every chat turn (`PgObservationStore.profile`) reads the caller's own rows
of the asked types, whatever the planner's statistics say about the tenant.

With statistics taken before the tenant grew (it is then estimated at one row), the read as one
`type = ANY(...)` statement walked the tenant's whole (tenant_id, created_at) index: a 20,000-row
tenant took 14.8-23.9 ms where the caller's rows take 0.7-1.8 (bench/RESULTS.md), and it grows
with the tenant. Here the statistics are taken, inside the test's transaction, of a database
holding another tenant's 20,000 rows and none of this one's; the transaction is rolled back, so
they never leave it. The statement as one `type = ANY(...)` read all of the tenant's 4,030 rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from engram.adapters.observations import PgObservationStore
from engram.domain.scopes import Visibility

NOW = datetime(2026, 12, 7, tzinfo=UTC)
OTHERS = 4_000  # other users' rows, and the caller's of other types
MINE = 30


class Rollback(Exception):
    pass


class Explaining:
    """Stands in for the store's connection: runs its statement under EXPLAIN ANALYZE."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.plan: dict[str, Any] = {}

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        found = await self.conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args)
        self.plan = (json.loads(found) if isinstance(found, str) else found)[0]
        return []


def rows_read(node: dict[str, Any], relation: str) -> float:
    """Rows the plan's scans of `relation` returned (after their index conditions), over all loops."""
    own = 0.0
    if node.get("Relation Name") == relation:
        own = (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
    return own + sum(rows_read(child, relation) for child in node.get("Plans", []))


async def insert(conn: Any, tenant: str, user: str, kind: str, count: int) -> None:
    await conn.execute(
        "INSERT INTO observations (id, tenant_id, user_id, type, title, content_hash, source, scope, trigger_source)"
        " SELECT gen_random_uuid(), $1, $2, $3, 'note ' || g, md5($1 || $2 || $3 || g), 'user', 'private', 'manual'"
        " FROM generate_series(1, $4) g",
        tenant,
        user,
        kind,
        count,
    )


async def test_the_profile_reads_the_callers_rows_of_its_types(db: Any, tenant: str) -> None:
    visibility = Visibility(tenant_id=tenant, user_id="alice", teams=frozenset(), include_sensitive=False)
    found: list[Any] = []
    explaining: Explaining | None = None
    try:
        async with db.system() as conn:
            await insert(conn, f"{tenant}-before", "bob", "note", 20_000)  # the database the statistics saw
            await conn.execute("ANALYZE observations")  # before the tenant had rows
            await insert(conn, tenant, "bob", "note", OTHERS // 2)
            await insert(conn, tenant, "alice", "note", OTHERS // 2)
            await insert(conn, tenant, "alice", "preference", MINE // 2)
            await insert(conn, tenant, "alice", "identity", MINE // 2)
            await conn.execute(
                "SELECT set_config('role', 'engram_app', true), set_config('engram.tenant_id', $1, true)", tenant
            )
            types = ["preference", "identity"]
            found = await PgObservationStore(conn).profile(visibility, types=types, now=NOW, limit=20)
            explaining = Explaining(conn)
            await PgObservationStore(explaining).profile(visibility, types=types, now=NOW, limit=20)
            raise Rollback
    except Rollback:
        pass
    assert len(found) == 20 and {o.type for o in found} == {"preference", "identity"}
    assert [o.id for o in found] == sorted((o.id for o in found), reverse=True)  # said at once: newest id first
    assert explaining is not None
    # the caller's rows of the two types, not the tenant's 4,030
    assert rows_read(explaining.plan["Plan"], "observations") <= MINE
