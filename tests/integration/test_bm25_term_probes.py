"""BM25 looks up each query term's document frequency by its key, whatever the planner believes
about the tenant's vocabulary.

With statistics taken before a tenant grew (it is then estimated at one row), the planner
merge-joined the query's few terms with all of the tenant's `search_term_stats` rows: a scan of
the whole vocabulary on every search, growing with the tenant. Turning nested loops off stands
in for such statistics here: it makes a join of the vocabulary the plan the planner prefers."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np

from engram.adapters.pgvector_index import PgVectorIndex
from engram.domain.scopes import Visibility
from engram.domain.search import SearchFilter
from tests.integration.plans import Explaining, rows_read
from tests.integration.search_rows import insert_notes, note_document

DIMS = 64
NOW = datetime(2026, 12, 7, tzinfo=UTC)
VOCABULARY = [f"word{i:04d}" for i in range(1500)]
QUERY = "word0001 word0002 word0003"
# a join of the vocabulary becomes the cheapest plan, as with statistics older than the tenant
JOIN_PREFERRED = "SELECT set_config('enable_nestloop', 'off', true), set_config('enable_hashjoin', 'off', true)"


async def test_each_query_term_is_one_probe(db: Any, tenant: str) -> None:
    rng = random.Random(7)
    ids = [uuid.uuid4() for _ in range(300)]
    await insert_notes(db, tenant, ids)
    embedding = np.ones(DIMS, dtype=np.float32) / np.sqrt(DIMS)
    docs = [
        note_document(tenant, oid, embedding, NOW, title=" ".join(rng.sample(VOCABULARY, 12)), body="") for oid in ids
    ]
    try:
        await PgVectorIndex(db, DIMS).upsert(tenant, docs)
        visibility = Visibility(tenant_id=tenant, user_id="alice", teams=frozenset(), include_sensitive=False)
        index = PgVectorIndex(db, DIMS)
        async with db.tenant(tenant) as conn:
            vocabulary = await conn.fetchval("SELECT count(*) FROM search_term_stats WHERE tenant_id = $1", tenant)
            expected = await index.lexical_in(conn, visibility, QUERY, SearchFilter(now=NOW), 20)
            await conn.execute(JOIN_PREFERRED)
            found = await index.lexical_in(conn, visibility, QUERY, SearchFilter(now=NOW), 20)
            explaining = Explaining(conn)
            await index.lexical_in(explaining, visibility, QUERY, SearchFilter(now=NOW), 20)
    finally:
        async with db.system() as conn:
            await conn.execute("DELETE FROM observations WHERE tenant_id = $1", tenant)
    assert vocabulary > 1000
    assert expected and found == expected  # the same list, whatever the plan
    # the document frequencies of 3 terms, for the scores and for the query's weight: 6 rows at
    # most, where a join of the vocabulary read every one of the tenant's terms
    assert rows_read(explaining.plan["Plan"], "search_term_stats") <= 6
