"""Migration 0014: search_documents keeps its vectors in half precision. A database written
before it is converted in place (the tenants' graphs survive), the exact scan of a small
tenant and the graph of a large one compute the same distances, and a vector float16 cannot
hold is refused before anything is written."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from engram.adapters.migrations import MIGRATIONS_DIR
from engram.adapters.pgvector_index import PgVectorIndex, graph_name
from engram.domain.scopes import Visibility
from engram.domain.search import IndexDocument, SearchFilter
from tests.integration.search_rows import insert_notes, note_document

DIMS = 64
COUNT = 150
NOW = datetime(2026, 12, 2, tzinfo=UTC)
COLUMN_TYPE = (
    "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
    " WHERE attrelid = 'search_documents'::regclass AND attname = 'embedding'"
)


def unit_vectors(count: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((count, DIMS)).astype(np.float32)
    unit: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
    return unit


def document(tenant: str, oid: uuid.UUID, embedding: np.ndarray) -> IndexDocument:
    return note_document(tenant, oid, embedding, NOW)


@pytest.fixture
async def stored(db: Any, tenant: str) -> Any:
    """COUNT unit vectors of the tenant, indexed through the adapter, and its own graph."""
    ids = [uuid.uuid4() for _ in range(COUNT)]
    vectors = unit_vectors(COUNT, 14)
    await insert_notes(db, tenant, ids)
    index = PgVectorIndex(db, DIMS, exact_below=50)  # the upsert builds the tenant's graph
    await index.upsert(tenant, [document(tenant, oid, v) for oid, v in zip(ids, vectors, strict=True)])
    yield dict(zip((str(i) for i in ids), vectors, strict=True))
    async with db.system() as conn:
        await conn.execute("DELETE FROM observations WHERE tenant_id = $1", tenant)
    await index.drop_graph(tenant)


async def knn(db: Any, tenant: str, query: np.ndarray, exact_below: int) -> tuple[bool, list[tuple[str, float]]]:
    index = PgVectorIndex(db, DIMS, exact_below=exact_below)
    visibility = Visibility(tenant_id=tenant, user_id="alice", teams=frozenset(), include_sensitive=False)
    async with db.tenant(tenant) as conn:
        plan = await index.prepare(conn, tenant, 10)
        found = await index.vector_in(conn, visibility, query, SearchFilter(now=NOW), 10, plan)
    return plan.exact, [(r.id, r.score) for r in found]


async def test_vectors_are_stored_in_half_precision(db: Any, tenant: str, stored: dict[str, Any]) -> None:
    async with db.system() as conn:
        assert await conn.fetchval(COLUMN_TYPE) == "halfvec"
        rows = await conn.fetch(
            "SELECT observation_id::text AS id, pg_column_size(embedding) AS size, embedding::real[] AS e"
            " FROM search_documents WHERE tenant_id = $1",
            tenant,
        )
    assert len(rows) == COUNT
    # varlena header, dimensions and an unused field (8 bytes), then 2 bytes per component
    assert {r["size"] for r in rows} == {8 + 2 * DIMS}
    for r in rows:
        assert np.array_equal(np.asarray(r["e"], dtype=np.float32), stored[r["id"]].astype(np.float16))


async def test_exact_scan_and_graph_give_the_same_distances(db: Any, tenant: str, stored: dict[str, Any]) -> None:
    ids = list(stored)
    halves = np.stack([stored[i].astype(np.float16).astype(np.float32) for i in ids])
    for query in unit_vectors(8, 15):
        exact, by_scan = await knn(db, tenant, query, exact_below=10_000)
        graph, by_graph = await knn(db, tenant, query, exact_below=50)
        assert (exact, graph) == (True, False)
        # what float16 vectors and a float16 query give, ranked here
        q = query.astype(np.float16).astype(np.float32)
        cosine = halves @ q / (np.linalg.norm(halves, axis=1) * np.linalg.norm(q))
        expected = [ids[j] for j in np.argsort(-cosine, kind="stable")[:10]]
        assert [i for i, _ in by_scan] == expected
        scan_scores = dict(by_scan)
        common = [(i, s) for i, s in by_graph if i in scan_scores]
        assert len(common) >= 9  # HNSW may miss one of 150; what it finds scores alike
        assert all(s == scan_scores[i] for i, s in common)


async def test_migration_converts_a_single_precision_table(db: Any, tenant: str, stored: dict[str, Any]) -> None:
    sql = (MIGRATIONS_DIR / "0014_half_precision_documents.sql").read_text()
    query = unit_vectors(1, 16)[0]
    _, before = await knn(db, tenant, query, exact_below=50)
    async with db.system() as conn:
        # the table as migrations 0002-0013 left it
        await conn.execute("ALTER TABLE search_documents ALTER COLUMN embedding TYPE vector USING embedding::vector")
        assert await conn.fetchval(COLUMN_TYPE) == "vector"
    async with db.system() as conn:
        await conn.execute(sql)
        assert await conn.fetchval(COLUMN_TYPE) == "halfvec"
        node = await conn.fetchval("SELECT pg_relation_filenode('search_documents')")
        await conn.execute(sql)  # idempotent: no second rewrite
        assert await conn.fetchval("SELECT pg_relation_filenode('search_documents')") == node
        valid = await conn.fetchval(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)", graph_name(tenant, DIMS)
        )
    assert valid is True
    exact, after = await knn(db, tenant, query, exact_below=50)
    assert not exact and after == before
    # the previous release's exact statement (a single-precision query) still runs during a
    # rollout: PostgreSQL casts the vector to halfvec implicitly
    async with db.tenant(tenant) as conn:
        old = await conn.fetch(
            "SELECT observation_id::text AS id, 1 - (embedding <=> $1::real[]::vector) AS score"
            " FROM search_documents WHERE tenant_id = $2 AND dims = $3 ORDER BY 2 DESC, 1 LIMIT 10",
            query.tolist(),
            tenant,
            DIMS,
        )
    _, scanned = await knn(db, tenant, query, exact_below=10_000)
    assert [(r["id"], r["score"]) for r in old] == scanned


async def test_vectors_float16_cannot_hold_are_refused(tenant: str) -> None:
    index = PgVectorIndex(None, DIMS)  # type: ignore[arg-type]  # refused before any connection
    for bad in (70_000.0, float("nan"), float("inf")):
        embedding = np.zeros(DIMS, dtype=np.float32)
        embedding[3] = bad
        with pytest.raises(ValueError, match="not finite or beyond"):
            await index.upsert(tenant, [document(tenant, uuid.uuid4(), embedding)])
