"""Migration 0013: BM25 reads its postings from a covering index (an index-only scan) and
ranks exactly as it did through the old (tenant, term, impact) index, on the same postings,
for callers of every scope, with type and validity filters, exact and capped per term."""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from engram.adapters.migrations import MIGRATIONS_DIR
from engram.adapters.pgvector_index import PgVectorIndex
from engram.domain.scopes import Visibility
from engram.domain.search import IndexDocument, SearchFilter
from tests.integration.plans import Explaining, scans
from tests.integration.search_rows import insert_notes

DIMS = 64
WORDS = "billing invoice server deploy rollback budget meeting travel hotel printer network backup".split()
# with a few hundred postings the planner may rightly prefer a sort or a bitmap scan; the
# question here is what the impact-ordered index scans return
PLAN_SETTINGS = (
    "SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true),"
    " set_config('enable_seqscan', 'off', true)"
)
OLD_INDEX = "CREATE INDEX search_terms_impact ON search_terms (tenant_id, term, impact DESC)"
QUERIES = ["billing invoice", "server deploy rollback", "hotel travel budget", "printer network backup meeting"]
NOW = datetime(2026, 12, 2, tzinfo=UTC)


class Rollback(Exception):
    pass


def documents(tenant: str, ids: list[uuid.UUID]) -> list[IndexDocument]:
    rng = random.Random(21)
    out = []
    for i, oid in enumerate(ids):
        scope = rng.choice(["public", "private", "team", "sensitive"])
        start = NOW + timedelta(days=1) if i % 17 == 0 else None
        end = NOW - timedelta(days=1) if i % 13 == 0 else None
        out.append(
            IndexDocument(
                observation_id=oid,
                tenant_id=tenant,
                user_id=rng.choice(["alice", "bob", "carol", None]),
                team_ids=rng.sample(["red", "blue", "green"], rng.randint(0, 2)),
                scope=scope,
                type=rng.choice(["note", "decision"]),
                valid_from=start,
                expires_at=end,
                revision=NOW,
                title=" ".join(rng.choices(WORDS, k=rng.randint(1, 4))),
                body=" ".join(rng.choices(WORDS, k=rng.randint(0, 12))),
                language="english",
                embedding=np.ones(DIMS, dtype=np.float32) / np.sqrt(DIMS),
            )
        )
    return out


CALLERS = [
    Visibility(tenant_id="", user_id="alice", teams=frozenset({"red"}), include_sensitive=False),
    Visibility(tenant_id="", user_id="bob", teams=frozenset(), include_sensitive=True),
    Visibility(tenant_id="", user_id="nobody", teams=frozenset({"blue", "green"}), include_sensitive=False),
]


async def rankings(conn: Any, tenant: str, hidden: frozenset[str]) -> list[Any]:
    """Every query for every caller, filter and mode (exact BM25, and capped at 15 postings per term)."""
    await conn.execute(
        "SELECT set_config('role', 'engram_app', true), set_config('engram.tenant_id', $1, true)", tenant
    )
    await conn.execute(PLAN_SETTINGS)
    out = []
    for exact_below in (10_000, 50):
        index = PgVectorIndex(None, DIMS, exact_below=exact_below, postings_per_term=15)  # type: ignore[arg-type]
        for caller in CALLERS:
            visibility = Visibility(
                tenant_id=tenant,
                user_id=caller.user_id,
                teams=caller.teams,
                include_sensitive=caller.include_sensitive,
                hidden_ids=hidden,
            )
            for where in (SearchFilter(now=NOW), SearchFilter(now=NOW, types=("decision",))):
                for text in QUERIES:
                    found = await index.lexical_in(conn, visibility, text, where, 50)
                    out.append([(r.id, round(r.score, 9), r.type) for r in found])
    await conn.execute("RESET ROLE")
    return out


async def index_used(conn: Any, tenant: str) -> set[str]:
    """The indexes one capped BM25 statement reads its postings through."""
    await conn.execute(PLAN_SETTINGS)
    explaining = Explaining(conn)
    visibility = Visibility(tenant_id=tenant, user_id="alice", teams=frozenset(), include_sensitive=False)
    index = PgVectorIndex(None, DIMS, exact_below=50, postings_per_term=15)  # type: ignore[arg-type]
    await index.lexical_in(explaining, visibility, QUERIES[0], SearchFilter(now=NOW), 10)
    return {s["Index Name"] for s in scans(explaining.plan["Plan"], "search_terms")}


@pytest.fixture
async def postings(db: Any, tenant: str) -> Any:
    ids = [uuid.uuid4() for _ in range(400)]
    await insert_notes(db, tenant, ids)
    await PgVectorIndex(db, DIMS).upsert(tenant, documents(tenant, ids))
    yield frozenset(str(i) for i in ids[:7])
    async with db.system() as conn:
        await conn.execute("DELETE FROM observations WHERE tenant_id = $1", tenant)


async def test_rankings_equal_through_the_old_index(db: Any, tenant: str, postings: frozenset[str]) -> None:
    sql = (MIGRATIONS_DIR / "0013_covering_postings.sql").read_text()
    async with db.system() as conn:
        await conn.execute(sql)  # idempotent: already applied to the session database
        covered = await rankings(conn, tenant, postings)
        assert await index_used(conn, tenant) == {"search_terms_impact_covering"}
    assert sum(len(r) for r in covered) > 500 and all(len(r) <= 50 for r in covered)
    old: list[Any] = []
    with pytest.raises(Rollback):
        async with db.system() as conn:
            await conn.execute("DROP INDEX search_terms_impact_covering")
            await conn.execute(OLD_INDEX)
            old = await rankings(conn, tenant, postings)
            assert await index_used(conn, tenant) == {"search_terms_impact"}
            raise Rollback
    assert old == covered
    async with db.system() as conn:
        names = {
            r["indexname"]
            for r in await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename = 'search_terms'")
        }
    assert "search_terms_impact_covering" in names and "search_terms_impact" not in names


async def test_postings_come_from_the_index_alone(db: Any, tenant: str, postings: frozenset[str]) -> None:
    index = PgVectorIndex(db, DIMS, exact_below=50, postings_per_term=15)
    visibility = Visibility(
        tenant_id=tenant, user_id="alice", teams=frozenset({"red"}), include_sensitive=False, hidden_ids=postings
    )
    for attempt in range(5):
        # the session database commits asynchronously (synchronous_commit=off): VACUUM marks a page
        # all-visible only once the commits of its rows are on disk, and only when no transaction
        # older than them is open (a background task of an earlier test may still hold one: in
        # one run of the suite 81 postings were fetched from the heap after the first VACUUM)
        await db.system_statement("CHECKPOINT")
        await db.system_statement("VACUUM search_terms")
        async with db.tenant(tenant) as conn:
            plan = await index.prepare(conn, tenant, 10)
            await conn.execute(PLAN_SETTINGS)
            explaining = Explaining(conn)
            await index.lexical_in(explaining, visibility, "billing invoice", SearchFilter(now=NOW), 10, plan)
        found = scans(explaining.plan["Plan"], "search_terms")
        assert found and all(s["Node Type"] == "Index Only Scan" for s in found), found
        assert {s["Index Name"] for s in found} == {"search_terms_impact_covering"}
        if sum(s["Heap Fetches"] for s in found) == 0 or attempt == 4:
            break
        await asyncio.sleep(0.5)
    assert sum(s["Heap Fetches"] for s in found) == 0
