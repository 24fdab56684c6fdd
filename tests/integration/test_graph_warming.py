"""Migration 0016 and `PgVectorIndex.prepare`: a small tenant's graph is read into shared_buffers
at once before its first graph search, only its own tenant's graph, at most every
`WARM_SECONDS` per process, and only up to `warm_blocks` pages."""

from __future__ import annotations

from typing import Any

import pytest

from engram.adapters.pgvector_index import PgVectorIndex, graph_name
from tests.integration.test_tenant_graphs import DIMS, FILL


async def cached(db: Any, tenant: str) -> int:
    """Pages of the tenant's graph in shared_buffers."""
    async with db.system() as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_buffercache WHERE relfilenode = pg_relation_filenode($1::regclass)"
                " AND reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())",
                graph_name(tenant, DIMS),
            )
        )


async def evict(db: Any, *tenants: str) -> None:
    async with db.system() as conn:
        for tenant in tenants:
            await conn.execute("SELECT pg_buffercache_evict_relation($1::regclass)", graph_name(tenant, DIMS))
    for tenant in tenants:
        assert await cached(db, tenant) == 0


async def prepare(db: Any, index: PgVectorIndex, tenant: str) -> bool:
    """`prepare` in a tenant transaction; whether the tenant is scanned exactly."""
    async with db.tenant(tenant) as conn:
        return (await index.prepare(conn, tenant, 10)).exact


@pytest.fixture
async def graphs(db: Any, tenant: str, other_tenant: str) -> Any:
    async with db.system() as conn:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_buffercache")
        await conn.execute(FILL, tenant, 400)
        await conn.execute(FILL, other_tenant, 400)
    builder = PgVectorIndex(db, DIMS, exact_below=300)
    assert await builder.ensure_graph(tenant, concurrently=False)
    assert await builder.ensure_graph(other_tenant, concurrently=False)
    async with db.system() as conn:
        pages = int(await conn.fetchval("SELECT pg_relation_size($1::regclass) / 8192", graph_name(tenant, DIMS)))
    yield pages
    async with db.system() as conn:
        await conn.execute("DELETE FROM observations WHERE tenant_id = ANY($1::text[])", [tenant, other_tenant])
    await builder.drop_graph(tenant)
    await builder.drop_graph(other_tenant)


async def test_the_first_graph_search_reads_only_its_tenants_graph_at_once(
    db: Any, tenant: str, other_tenant: str, graphs: int
) -> None:
    assert graphs > 10
    index = PgVectorIndex(db, DIMS, exact_below=300)
    await evict(db, tenant, other_tenant)
    assert not await prepare(db, index, tenant)
    assert await cached(db, tenant) == graphs  # every page of its graph
    assert await cached(db, other_tenant) == 0  # and nothing of the other tenant's
    # within WARM_SECONDS this process does not read it again
    await evict(db, tenant)
    assert not await prepare(db, index, tenant)
    assert await cached(db, tenant) == 0
    # the other tenant's first search is its own
    assert not await prepare(db, index, other_tenant)
    assert await cached(db, other_tenant) == graphs


async def test_graphs_over_the_limit_or_a_zero_limit_are_left_to_the_search(
    db: Any, tenant: str, other_tenant: str, graphs: int
) -> None:
    await evict(db, tenant, other_tenant)
    assert not await prepare(db, PgVectorIndex(db, DIMS, exact_below=300, warm_blocks=graphs - 1), tenant)
    assert not await prepare(db, PgVectorIndex(db, DIMS, exact_below=300, warm_blocks=0), other_tenant)
    assert await cached(db, tenant) == 0 and await cached(db, other_tenant) == 0
    # an exact scan (the tenant under the threshold) warms nothing either
    assert await prepare(db, PgVectorIndex(db, DIMS, exact_below=1_000), tenant)
    assert await cached(db, tenant) == 0


async def test_the_function_warms_the_callers_tenant_only(db: Any, tenant: str, graphs: int) -> None:
    await evict(db, tenant)
    async with db.system() as conn:  # no tenant in the transaction: nothing to warm
        assert await conn.fetchval("SELECT engram_warm_graph($1, 100000)", DIMS) == 0
    async with db.tenant(tenant) as conn:
        assert await conn.fetchval("SELECT engram_warm_graph($1, 100000)", DIMS) == graphs
        assert await conn.fetchval("SELECT engram_warm_graph($1, 100000)", DIMS + 1) == 0  # no such graph
        assert await conn.fetchval("SELECT engram_warm_graph($1, 1)", DIMS) == 0  # over the limit
        # the search's transaction goes on after it (the function never aborts it)
        assert await conn.fetchval("SELECT count(*) FROM search_documents") == 400
