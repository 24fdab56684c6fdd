"""Migration 0017: an assistant's passages keep their postings but leave BM25's statistics. The
searches' side is in `test_search_index_contract.py`; here, a database that already holds
passages counted the old way is corrected by the migration."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from engram.adapters.migrations import MIGRATIONS_DIR, migrate
from engram.adapters.observations import PgObservationStore
from engram.adapters.pgvector_index import PgVectorIndex
from engram.adapters.postgres import Database
from engram.domain.observation import ObservationDraft
from engram.domain.search import index_document
from tests.integration.databases import fresh_database

DIMS = 64


async def test_the_migration_takes_stored_passages_out_of_the_statistics(stack: dict[str, str], tmp_path: Path) -> None:
    before = tmp_path / "migrations"
    before.mkdir()
    for f in sorted(MIGRATIONS_DIR.glob("*.sql")):
        if int(f.name[:4]) < 17:
            shutil.copy(f, before / f.name)
    url = await fresh_database(stack["database_url"], "passages")
    await migrate(url, before)
    db = await Database.connect(url, max_size=2)
    try:
        async with db.system() as conn:  # the column the adapter reads; the triggers are still 0016's
            await conn.execute("ALTER TABLE search_stats ADD COLUMN bm25_docs bigint NOT NULL DEFAULT 0")
        tenant = f"t-{uuid.uuid4().hex[:8]}"
        drafts = [ObservationDraft(tenant_id=tenant, user_id="alice", title=f"kestrel invoice {i}") for i in range(3)]
        drafts += [
            ObservationDraft(tenant_id=tenant, user_id="alice", title=f"kestrel advice {i} on invoices", type="passage")
            for i in range(4)
        ]
        async with db.tenant(tenant) as conn:
            written = [w.observation for w in await PgObservationStore(conn).write_many(drafts)]
        vector = np.ones(DIMS, dtype=np.float32) / np.sqrt(DIMS)
        await PgVectorIndex(db, DIMS).upsert(tenant, [index_document(o, vector) for o in written])

        async def stats() -> tuple[Any, dict[str, int]]:
            async with db.system() as conn:
                row = await conn.fetchrow(
                    "SELECT doc_count, bm25_docs, total_length FROM search_stats WHERE tenant_id = $1", tenant
                )
                terms = await conn.fetch("SELECT term, doc_freq FROM search_term_stats WHERE tenant_id = $1", tenant)
            return row, {r["term"]: r["doc_freq"] for r in terms}

        _, counted = await stats()
        assert counted["kestrel"] == 7  # before: the passages count
        await migrate(url)
        row, terms = await stats()
        async with db.system() as conn:
            lengths = await conn.fetchval(
                "SELECT sum(doc_length) FROM search_documents WHERE tenant_id = $1 AND type <> 'passage'", tenant
            )
        assert (row["doc_count"], row["bm25_docs"], row["total_length"]) == (7, 3, lengths)
        assert terms["kestrel"] == 3 and terms["invoic"] == 3 and terms["advic"] == 0
    finally:
        await db.close()
