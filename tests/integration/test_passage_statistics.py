"""Migration 0017: an assistant's passages keep their postings but leave BM25's statistics. The
searches' side is in `test_search_index_contract.py`; here, a database that already holds
passages counted the old way is corrected by the migration."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path

import asyncpg
import numpy as np

from engram.adapters.migrations import MIGRATIONS_DIR, migrate
from engram.adapters.observations import PgObservationStore
from engram.adapters.pgvector_index import PgVectorIndex
from engram.adapters.postgres import Database
from engram.domain.observation import ObservationDraft
from engram.domain.search import index_document
from tests.integration.databases import fresh_database

DIMS = 64


async def _database_at_0016(stack: dict[str, str], tmp_path: Path) -> tuple[str, Database]:
    """A fresh database migrated up to 0016, with the columns the adapter reads (its triggers
    are still 0016's, counting the passages; the observations' `said_at` is 0018's, the index
    documents' 0021's)."""
    before = tmp_path / "migrations"
    before.mkdir()
    for f in sorted(MIGRATIONS_DIR.glob("*.sql")):
        if int(f.name[:4]) < 17:
            shutil.copy(f, before / f.name)
    url = await fresh_database(stack["database_url"], "passages")
    await migrate(url, before)
    db = await Database.connect(url, max_size=6)
    async with db.system() as conn:
        await conn.execute("ALTER TABLE search_stats ADD COLUMN bm25_docs bigint NOT NULL DEFAULT 0")
        await conn.execute("ALTER TABLE observations ADD COLUMN said_at timestamptz")
        await conn.execute("ALTER TABLE search_documents ADD COLUMN said_at timestamptz")
    return url, db


async def _write(db: Database, tenant: str, label: str) -> None:
    """A note and a passage of an answer, stored and indexed."""
    drafts = [
        ObservationDraft(tenant_id=tenant, user_id="alice", title=f"kestrel invoice {label}"),
        ObservationDraft(
            tenant_id=tenant, user_id="alice", title=f"kestrel advice {label} on invoices", type="passage"
        ),
    ]
    async with db.tenant(tenant) as conn:
        written = [w.observation for w in await PgObservationStore(conn).write_many(drafts)]
    vector = np.ones(DIMS, dtype=np.float32) / np.sqrt(DIMS)
    await PgVectorIndex(db, DIMS).upsert(tenant, [index_document(o, vector) for o in written])


async def _statistics_match_a_recount(db: Database, tenant: str) -> None:
    async with db.system() as conn:
        row = await conn.fetchrow(
            "SELECT doc_count, bm25_docs, total_length FROM search_stats WHERE tenant_id = $1", tenant
        )
        recount = await conn.fetchrow(
            "SELECT count(*) AS docs, count(*) FILTER (WHERE type <> 'passage') AS counted,"
            " coalesce(sum(doc_length) FILTER (WHERE type <> 'passage'), 0) AS len"
            " FROM search_documents WHERE tenant_id = $1",
            tenant,
        )
        mismatched = await conn.fetch(
            "SELECT coalesce(c.term, s.term) AS term, c.n, s.doc_freq FROM"
            " (SELECT term, count(*) AS n FROM search_terms WHERE tenant_id = $1 AND type <> 'passage'"
            "  GROUP BY term) c"
            " FULL JOIN (SELECT term, doc_freq FROM search_term_stats WHERE tenant_id = $1 AND doc_freq > 0) s"
            " ON s.term = c.term WHERE c.n IS DISTINCT FROM s.doc_freq",
            tenant,
        )
    assert (row["doc_count"], row["bm25_docs"], row["total_length"]) == (
        recount["docs"],
        recount["counted"],
        recount["len"],
    )
    assert list(mismatched) == []


async def test_the_migration_takes_stored_passages_out_of_the_statistics(stack: dict[str, str], tmp_path: Path) -> None:
    url, db = await _database_at_0016(stack, tmp_path)
    try:
        tenant = f"t-{uuid.uuid4().hex[:8]}"
        for i in range(3):
            await _write(db, tenant, str(i))
        async with db.system() as conn:
            kestrel = await conn.fetchval(
                "SELECT doc_freq FROM search_term_stats WHERE tenant_id = $1 AND term = 'kestrel'", tenant
            )
        assert kestrel == 6  # before: the passages count
        await migrate(url)
        await _statistics_match_a_recount(db, tenant)
        async with db.system() as conn:
            terms = await conn.fetch("SELECT term, doc_freq FROM search_term_stats WHERE tenant_id = $1", tenant)
        counts = {r["term"]: r["doc_freq"] for r in terms}
        assert counts["kestrel"] == 3 and counts["invoic"] == 3 and counts["advic"] == 0
    finally:
        await db.close()


async def test_writes_and_deletes_during_the_migration_are_counted_once(stack: dict[str, str], tmp_path: Path) -> None:
    """A write or a delete (a cascade from `observations`) that arrives while the migration's
    transaction is open waits for it, then runs the new statistics triggers. Without the
    migration's lock on the documents, the cascade's trigger started with 0016's definition,
    waited for `search_stats`, and then took the passage's length out of BM25's length and left
    the note in BM25's N (checked: the recount then differs)."""
    url, db = await _database_at_0016(stack, tmp_path)
    try:
        tenant = f"t-{uuid.uuid4().hex[:8]}"
        await _write(db, tenant, "first")
        await _write(db, tenant, "second")
        async with db.system() as conn:
            doomed = [r["id"] for r in await conn.fetch("SELECT id FROM observations WHERE title LIKE '%second%'")]

        async def delete() -> None:
            async with db.tenant(tenant) as conn:
                await conn.execute("DELETE FROM observations WHERE id = ANY($1::uuid[])", doomed)

        sql = (MIGRATIONS_DIR / "0017_passages_outside_bm25_statistics.sql").read_text()
        migration = await asyncpg.connect(url)
        try:
            await migration.execute("BEGIN")
            await migration.execute(sql)  # open: its locks held, its definitions not yet seen
            during = [asyncio.create_task(_write(db, tenant, "during")), asyncio.create_task(delete())]
            await asyncio.sleep(0.3)
            assert not any(t.done() for t in during)  # both wait for the migration
            await migration.execute("COMMIT")
        finally:
            await migration.close()
        await asyncio.gather(*during)
        await _statistics_match_a_recount(db, tenant)
    finally:
        await db.close()
