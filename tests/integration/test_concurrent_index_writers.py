"""Concurrent writers of one document's index entry: a revision replaces its document's
postings, two writers take turns, an older revision never replaces a newer one, and the
document frequencies stay exact."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from engram.adapters.pgvector_index import PgVectorIndex
from tests.integration.search_rows import insert_notes, note_document

DIMS = 64
WORDS = "billing invoice server deploy rollback budget meeting travel hotel printer network backup".split()
NOW = datetime(2026, 12, 5, tzinfo=UTC)


def revision_of(tenant: str, oid: uuid.UUID, version: int) -> Any:
    words = [WORDS[(hash(oid) + version * 5 + i) % len(WORDS)] for i in range(3 + version)]
    unit = np.ones(DIMS, dtype=np.float32) / np.sqrt(DIMS)
    return note_document(
        tenant, oid, unit, NOW + timedelta(minutes=version), title=" ".join(words[:2]), body=" ".join(words * 2)
    )


async def test_concurrent_revisions_leave_one_posting_per_document_and_term(db: Any, tenant: str) -> None:
    ids = [uuid.uuid4() for _ in range(40)]
    await insert_notes(db, tenant, ids)
    index = PgVectorIndex(db, DIMS)
    batches = [[revision_of(tenant, oid, version) for oid in ids] for version in range(4)]
    # every revision at once from four connections, twice over (a redelivery of each)
    await asyncio.gather(*(index.upsert(tenant, batch) for batch in batches + batches))
    async with db.system() as conn:
        doubled = await conn.fetchval(
            "SELECT count(*) FROM (SELECT 1 FROM search_terms WHERE tenant_id = $1"
            " GROUP BY observation_id, term HAVING count(*) > 1) x",
            tenant,
        )
        terms = {
            str(r["observation_id"]): set(r["terms"])
            for r in await conn.fetch(
                "SELECT observation_id, array_agg(term) AS terms FROM search_terms WHERE tenant_id = $1"
                " GROUP BY observation_id",
                tenant,
            )
        }
        newest = {
            str(oid): set(
                await conn.fetchval(
                    "SELECT array_agg(lexeme) FROM unnest(to_tsvector('english', $1 || ' ' || $2))",
                    batches[-1][i].title,
                    batches[-1][i].body,
                )
            )
            for i, oid in enumerate(ids)
        }
        stale = await conn.fetchval(
            "SELECT count(*) FROM search_term_stats ts WHERE ts.tenant_id = $1 AND ts.doc_freq <>"
            " (SELECT count(*) FROM search_terms s WHERE s.tenant_id = ts.tenant_id AND s.term = ts.term)",
            tenant,
        )
        docs = await conn.fetchval("SELECT doc_count FROM search_stats WHERE tenant_id = $1", tenant)
        await conn.execute("DELETE FROM observations WHERE tenant_id = $1", tenant)
    assert doubled == 0
    assert terms == newest  # the newest revision's terms, each once
    assert stale == 0 and docs == len(ids)
