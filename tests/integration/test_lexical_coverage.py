"""BM25 lists carry their coverage: each score over the query's weight (the idf of each query
word, a word no memory has at df 0, stop words of either language left out), so fusion can
tell a list that matched the question from one that matched two generic words of it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from engram.adapters.pgvector_index import PgVectorIndex
from engram.domain.ranking import bm25_idf, lexical_weight
from engram.domain.scopes import Visibility
from engram.domain.search import SearchFilter
from tests.integration.search_rows import insert_notes, note_document

DIMS = 64
NOW = datetime(2026, 12, 3, tzinfo=UTC)
TEXTS = [
    "billing invoice for the march order",
    "the invoice was sent by mail",
    "server deploy and rollback plan",
    "hotel and travel budget",
    "printer network backup",
    "meeting notes about the budget",
]


@pytest.fixture
async def corpus(db: Any, tenant: str) -> Any:
    ids = [uuid.uuid4() for _ in TEXTS]
    await insert_notes(db, tenant, ids)
    embedding = np.ones(DIMS, dtype=np.float32) / np.sqrt(DIMS)
    docs = [note_document(tenant, oid, embedding, NOW, title=t, body="") for oid, t in zip(ids, TEXTS, strict=True)]
    await PgVectorIndex(db, DIMS).upsert(tenant, docs)
    yield [str(i) for i in ids]
    async with db.system() as conn:
        await conn.execute("DELETE FROM observations WHERE tenant_id = $1", tenant)


async def search(db: Any, tenant: str, text: str) -> list[Any]:
    visibility = Visibility(tenant_id=tenant, user_id="alice", teams=frozenset(), include_sensitive=False)
    return await PgVectorIndex(db, DIMS).lexical(visibility, text, SearchFilter(now=NOW), 10)


async def test_coverage_is_the_score_over_the_query_weight(db: Any, tenant: str, corpus: list[str]) -> None:
    n = len(TEXTS)
    found = await search(db, tenant, "billing invoice")
    assert found[0].id == corpus[0]
    mass = bm25_idf(n, 1) + bm25_idf(n, 2)  # "billing" in one memory, "invoice" in two
    assert all(r.coverage == pytest.approx(r.score / mass) for r in found)
    assert found[0].coverage > found[1].coverage > 0
    assert lexical_weight(found[0].coverage) == 1.0  # the question's words are what the memory says


async def test_words_no_memory_has_lower_it_and_stop_words_do_not_count(
    db: Any, tenant: str, corpus: list[str]
) -> None:
    n = len(TEXTS)
    alone = (await search(db, tenant, "billing"))[0]
    assert alone.coverage == pytest.approx(alone.score / bm25_idf(n, 1))
    # stop words of English and German ("what", "is", "the", "die", "und") weigh nothing
    assert (await search(db, tenant, "What is the billing, und die?"))[0].coverage == pytest.approx(alone.coverage)
    # a word no memory has counts as the rarest: the best match now stands for less of the query
    paraphrased = (await search(db, tenant, "billing zymurgy quokka"))[0]
    assert paraphrased.score == pytest.approx(alone.score)
    assert paraphrased.coverage == pytest.approx(alone.score / (bm25_idf(n, 1) + 2 * bm25_idf(n, 0)))
    assert lexical_weight(paraphrased.coverage) < 1.0


async def test_a_query_of_stop_words_only_has_no_coverage(db: Any, tenant: str, corpus: list[str]) -> None:
    assert await search(db, tenant, "the and") == []
