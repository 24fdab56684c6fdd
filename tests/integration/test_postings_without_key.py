"""Migration 0015: the postings have no primary key. No statement read it; what it enforced
(one posting per document and term) holds through the writes themselves
(`test_concurrent_index_writers.py`)."""

from __future__ import annotations

from typing import Any


async def test_postings_keep_only_the_indexes_statements_read(db: Any) -> None:
    async with db.system() as conn:
        key = await conn.fetchval(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'search_terms'::regclass AND contype = 'p'"
        )
        names = {
            r["indexname"]
            for r in await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename = 'search_terms'")
        }
    assert key == 0
    assert names == {"search_terms_impact_covering", "search_terms_doc"}
