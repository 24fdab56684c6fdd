"""Migration 0012: the tenants already over the exact-scan threshold get their own HNSW graph,
under the name the pgvector adapter looks for, and running the migration again changes nothing."""

from __future__ import annotations

from typing import Any

from engram.adapters.migrations import MIGRATIONS_DIR
from engram.adapters.pgvector_index import PgVectorIndex, graph_name

DIMS = 64
FILL = """
WITH o AS (
  INSERT INTO observations (id, tenant_id, user_id, type, title, content_hash, source, scope, trigger_source)
  SELECT gen_random_uuid(), $1, 'alice', 'note', 'note ' || i, md5($1 || i), 'user', 'public', 'manual'
  FROM generate_series(1, $2::integer) AS i
  RETURNING id, tenant_id, user_id, scope, type
)
INSERT INTO search_documents (observation_id, tenant_id, user_id, scope, type, revision, doc_length, language,
                              dims, embedding)
SELECT o.id, o.tenant_id, o.user_id, o.scope, o.type, now(), 2, 'english', 64,
       ARRAY(SELECT random() FROM generate_series(1, 64) WHERE o.id IS NOT NULL)::real[]::vector
FROM o
"""


async def graphs_of(db: Any, *tenants: str) -> dict[str, bool]:
    async with db.system() as conn:
        rows = await conn.fetch(
            "SELECT t, (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(n)) AS valid"
            " FROM unnest($1::text[], $2::text[]) AS x(t, n)",
            list(tenants),
            [graph_name(t, DIMS) for t in tenants],
        )
    return {r["t"]: r["valid"] for r in rows if r["valid"] is not None}


async def test_migration_gives_large_tenants_their_graph(db: Any, tenant: str, other_tenant: str) -> None:
    async with db.system() as conn:
        await conn.execute(FILL, tenant, 5_000)
        await conn.execute(FILL, other_tenant, 300)
    sql = (MIGRATIONS_DIR / "0012_tenant_graphs.sql").read_text()
    try:
        for _ in range(2):  # idempotent
            async with db.system() as conn:
                await conn.execute(sql)
            assert await graphs_of(db, tenant, other_tenant) == {tenant: True}
        async with db.tenant(tenant) as conn:
            plan = await PgVectorIndex(db, DIMS).prepare(conn, tenant, 10)
        assert (plan.docs, plan.exact) == (5_000, False)
        async with db.tenant(other_tenant) as conn:
            assert (await PgVectorIndex(db, DIMS).prepare(conn, other_tenant, 10)).exact
    finally:
        async with db.system() as conn:
            await conn.execute("DELETE FROM observations WHERE tenant_id = ANY($1::text[])", [tenant, other_tenant])
        await PgVectorIndex(db, DIMS).drop_graph(tenant)


async def test_a_bulk_import_builds_the_graph_in_one_scan(db: Any, tenant: str, other_tenant: str) -> None:
    async with db.system() as conn:
        await conn.execute(FILL, tenant, 400)
        await conn.execute(FILL, other_tenant, 400)
    index = PgVectorIndex(db, DIMS, exact_below=300)
    try:
        assert await index.ensure_graph(tenant, concurrently=False)
        assert await graphs_of(db, tenant, other_tenant) == {tenant: True}
        async with db.tenant(tenant) as conn:
            assert not (await index.prepare(conn, tenant, 10)).exact
        async with db.tenant(other_tenant) as conn:  # the other tenant has no graph yet: scanned exactly
            assert (await index.prepare(conn, other_tenant, 10)).exact
    finally:
        async with db.system() as conn:
            await conn.execute("DELETE FROM observations WHERE tenant_id = ANY($1::text[])", [tenant, other_tenant])
        await index.drop_graph(tenant)
