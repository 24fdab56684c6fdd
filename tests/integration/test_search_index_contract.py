"""One behavioural suite for both search-index adapters (R-6.2).

pgvector runs on the session's real PostgreSQL. Elasticsearch runs against the loopback fake
in `tests/fake_elasticsearch.py`, which stores the documents and evaluates the filters the
adapter sends (bool/term/terms/range/exists/ids, kNN with `knn.filter`); its text analysis is
simplified, so stemming is only checked on pgvector (`test_pgvector_stems_german_and_english`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from engram.adapters.observations import PgObservationStore
from engram.domain.chat_extraction import Origin, Turn, offline_summary, summary_draft
from engram.domain.observation import Observation, ObservationDraft, Scope
from engram.domain.scopes import Visibility
from engram.domain.search import IndexDocument, SearchFilter, index_document
from tests.fake_elasticsearch import FakeElasticsearch

DIMS = 64


def unit(label: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "big")
    v = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture(params=["pgvector", "elasticsearch"])
async def index(request: Any, services: Any) -> AsyncIterator[Any]:
    if request.param == "pgvector":
        from engram.adapters.pgvector_index import PgVectorIndex

        yield PgVectorIndex(services.db, DIMS)
        return
    from elasticsearch import AsyncElasticsearch

    from engram.adapters.elasticsearch_index import ElasticsearchIndex

    fake = await FakeElasticsearch().start()
    es = ElasticsearchIndex(AsyncElasticsearch(fake.url), DIMS)
    try:
        yield es
    finally:
        await es.close()
        await fake.stop()


async def store(db: Any, drafts: Sequence[ObservationDraft]) -> list[Observation]:
    async with db.tenant(drafts[0].tenant_id) as conn:
        written = await PgObservationStore(conn).write_many(drafts)
    return [w.observation for w in written]


def draft(tenant: str, title: str, **kw: Any) -> ObservationDraft:
    kw.setdefault("user_id", "alice")
    return ObservationDraft(tenant_id=tenant, title=title, **kw)


async def put(index: Any, db: Any, drafts: Sequence[ObservationDraft]) -> list[Observation]:
    observations = await store(db, drafts)
    await index.upsert(drafts[0].tenant_id, [index_document(o, unit(o.title)) for o in observations])
    return observations


def now() -> SearchFilter:
    return SearchFilter(now=datetime.now(UTC))


async def lexical_ids(index: Any, vis: Visibility, text: str, where: SearchFilter | None = None) -> list[str]:
    return [r.id for r in await index.lexical(vis, text, where or now(), 50)]


async def vector_ids(index: Any, vis: Visibility, label: str, where: SearchFilter | None = None) -> list[str]:
    return [r.id for r in await index.vector(vis, unit(label), where or now(), 50)]


def vis(tenant: str, user: str | None = "alice", teams: Sequence[str] = (), sensitive: bool = False) -> Visibility:
    return Visibility(tenant_id=tenant, user_id=user, teams=frozenset(teams), include_sensitive=sensitive)


async def test_exact_match_is_found_by_both_lists(index: Any, db: Any, tenant: str) -> None:
    obs = await put(
        index,
        db,
        [draft(tenant, "Quarterly invoicing for Zephyrcorp"), draft(tenant, "Team lunch on Friday")],
    )
    assert (await lexical_ids(index, vis(tenant), "zephyrcorp"))[0] == str(obs[0].id)
    assert (await vector_ids(index, vis(tenant), "Quarterly invoicing for Zephyrcorp"))[0] == str(obs[0].id)


async def test_visibility_rules_inside_both_searches(index: Any, db: Any, tenant: str) -> None:
    word = "kumquat"
    drafts = [
        draft(tenant, f"{word} alice private"),
        draft(tenant, f"{word} bob private", user_id="bob"),
        draft(tenant, f"{word} sales team", user_id="carol", scope=Scope.team, team_ids=["sales"]),
        draft(tenant, f"{word} alice public", scope=Scope.public),
        draft(tenant, f"{word} tenant wide", user_id=None, scope=Scope.public),
        draft(tenant, f"{word} tenant team", user_id=None, scope=Scope.team, team_ids=["ops"]),
        draft(tenant, f"{word} sensitive", scope=Scope.sensitive),
    ]
    observations = await put(index, db, drafts)
    callers = [
        vis(tenant, "alice"),
        vis(tenant, "bob", teams=["sales"]),
        vis(tenant, "carol"),
        vis(tenant, "dave", teams=["ops"]),
        vis(tenant, "alice", sensitive=True),
        vis(tenant, None),
    ]
    for caller in callers:
        expected = {str(o.id) for o in observations if caller.allows(o)}
        assert set(await lexical_ids(index, caller, word)) == expected, caller
        found = set()
        for o in observations:
            found.update(await vector_ids(index, caller, o.title))
        assert found == expected, caller


async def test_hidden_ids_types_and_time_filters(index: Any, db: Any, tenant: str) -> None:
    t = datetime.now(UTC)
    drafts = [
        draft(tenant, "marmalade decision", type="decision"),
        draft(tenant, "marmalade fact", type="fact"),
        draft(tenant, "marmalade expired", expires_at=t - timedelta(seconds=1), valid_from=t - timedelta(days=1)),
        draft(tenant, "marmalade later", valid_from=t + timedelta(days=1)),
        draft(tenant, "marmalade expires soon", expires_at=t + timedelta(hours=1)),
    ]
    decision, fact, _expired, _later, soon = (str(o.id) for o in await put(index, db, drafts))
    assert set(await lexical_ids(index, vis(tenant), "marmalade")) == {decision, fact, soon}
    typed = SearchFilter(now=t, types=("decision",))
    assert await lexical_ids(index, vis(tenant), "marmalade", typed) == [decision]
    assert await vector_ids(index, vis(tenant), "marmalade decision", typed) == [decision]
    # types left out (an assistant's passages unless the question asks the assistant)
    others = SearchFilter(now=t, except_types=("decision", "passage"))
    assert set(await lexical_ids(index, vis(tenant), "marmalade", others)) == {fact, soon}
    assert decision not in await vector_ids(index, vis(tenant), "marmalade decision", others)
    hidden = Visibility(tenant, "alice", frozenset(), False, hidden_ids=frozenset({decision}))
    assert decision not in await lexical_ids(index, hidden, "marmalade")
    assert decision not in await vector_ids(index, hidden, "marmalade decision")
    # an hour later "expires soon" is gone and "later" is not yet in force
    assert set(await lexical_ids(index, vis(tenant), "marmalade", SearchFilter(now=t + timedelta(hours=2)))) == {
        decision,
        fact,
    }


async def test_a_window_keeps_the_memories_of_its_days(index: Any, db: Any, tenant: str) -> None:
    """A question that names a day is also searched within it (`SearchFilter.within`): only
    memories whose valid-from time falls in the window, or, without one, that were said in it
    (a fact told in a chat, a "remember this" click: `IndexDocument.said_at`)."""
    day = datetime(2025, 3, 5, 18, 30, tzinfo=UTC)
    drafts = [
        draft(tenant, "marmalade on the day", valid_from=day),
        draft(tenant, "marmalade a week later", valid_from=day + timedelta(days=7)),
        draft(tenant, "marmalade undated"),  # said now, years after the window
        draft(tenant, "marmalade told that day", said_at=day + timedelta(hours=3)),
        # a valid-from time outside the window is when it holds: when it was said does not count
        draft(tenant, "marmalade told then of later", valid_from=day + timedelta(days=7), said_at=day),
    ]
    on_day, later, undated, told, told_of_later = (str(o.id) for o in await put(index, db, drafts))
    window = SearchFilter(now=datetime.now(UTC), within=(day - timedelta(days=1), day + timedelta(days=1)))
    assert set(await lexical_ids(index, vis(tenant), "marmalade", window)) == {on_day, told}
    assert set(await vector_ids(index, vis(tenant), "marmalade a week later", window)) == {on_day, told}
    assert set(await lexical_ids(index, vis(tenant), "marmalade")) == {on_day, later, undated, told, told_of_later}
    start = SearchFilter(now=datetime.now(UTC), within=(day, day + timedelta(days=7)))  # [start, end)
    assert set(await lexical_ids(index, vis(tenant), "marmalade", start)) == {on_day, told}
    # when it was said is for windows only: in force at an instant before it, as before
    assert told in await lexical_ids(index, vis(tenant), "marmalade", SearchFilter(now=day - timedelta(days=30)))


async def test_pgvector_a_window_scores_its_memories_as_the_whole_search_does(db: Any, tenant: str) -> None:
    """A window's BM25 list reads the window's documents first (`pgvector_bm25`): the same
    scores, in the same order, as the search without the window gives them."""
    from engram.adapters.pgvector_index import PgVectorIndex

    index = PgVectorIndex(db, DIMS)
    day = datetime(2025, 3, 5, tzinfo=UTC)
    texts = ["orange marmalade recipe", "marmalade", "orange juice and toast", "toast with marmalade and butter"]
    drafts = [draft(tenant, text, valid_from=day + timedelta(hours=i)) for i, text in enumerate(texts)]
    drafts.append(draft(tenant, "orange marmalade the week after", valid_from=day + timedelta(days=8)))
    await put(index, db, drafts)
    window = SearchFilter(now=datetime.now(UTC), within=(day, day + timedelta(days=1)))
    whole = await index.lexical(vis(tenant), "orange marmalade", now(), 50)
    within = await index.lexical(vis(tenant), "orange marmalade", window, 50)
    in_day = [r for r in whole if r.id in {x.id for x in within}]
    assert len(within) == 4 and [(r.id, r.type) for r in within] == [(r.id, r.type) for r in in_day]
    assert [r.score for r in within] == pytest.approx([r.score for r in in_day])
    assert [r.coverage for r in within] == pytest.approx([r.coverage for r in in_day])


async def test_delete_and_revisions(index: Any, db: Any, tenant: str) -> None:
    (obs,) = await put(index, db, [draft(tenant, "papaya plan", key="plan", type="project")])
    newer = obs.model_copy(update={"title": "mango plan", "updated_at": obs.updated_at + timedelta(seconds=5)})
    await index.upsert(tenant, [index_document(newer, unit("mango plan"))])
    await index.upsert(tenant, [index_document(obs, unit("papaya plan"))])  # late, older: ignored
    assert await lexical_ids(index, vis(tenant), "mango") == [str(obs.id)]
    assert await lexical_ids(index, vis(tenant), "papaya") == []
    await index.upsert(tenant, [index_document(newer, unit("mango plan"))])  # redelivery: same result
    assert await index.indexed_ids(tenant) == {str(obs.id)}
    await index.delete(tenant, [str(obs.id)])
    await index.delete(tenant, [str(obs.id)])  # idempotent
    assert await lexical_ids(index, vis(tenant), "mango") == []
    assert await vector_ids(index, vis(tenant), "mango plan") == []
    assert await index.indexed_ids(tenant) == set()


async def test_withdrawn_entries_come_back_with_a_later_revision(index: Any, db: Any, tenant: str) -> None:
    """Superseded by consolidation: out of the results, back on unmerge (R-15.1); a late older
    revision does not bring it back."""
    (obs,) = await put(index, db, [draft(tenant, "guava merger")])

    async def set_valid_to(value: str) -> datetime:
        async with db.tenant(tenant) as conn:
            revision: datetime = await conn.fetchval(
                f"UPDATE observations SET valid_to = {value}, updated_at = updated_at + interval '1 second'"
                " WHERE id = $1 RETURNING updated_at",
                obs.id,
            )
        return revision

    await index.withdraw(tenant, {str(obs.id): await set_valid_to("now()")})  # retired
    assert await lexical_ids(index, vis(tenant), "guava") == []
    await index.upsert(tenant, [index_document(obs, unit("guava merger"))])  # the old revision, late
    assert await lexical_ids(index, vis(tenant), "guava") == []
    restored = obs.model_copy(update={"updated_at": await set_valid_to("NULL")})  # unmerged
    await index.upsert(tenant, [index_document(restored, unit("guava merger"))])
    assert await lexical_ids(index, vis(tenant), "guava") == [str(obs.id)]
    assert await vector_ids(index, vis(tenant), "guava merger") == [str(obs.id)]


async def test_tenants_are_separate(index: Any, db: Any, tenant: str, other_tenant: str) -> None:
    (mine,) = await put(index, db, [draft(tenant, "guava shipment", scope=Scope.public)])
    (theirs,) = await put(index, db, [draft(other_tenant, "guava shipment", scope=Scope.public)])
    assert await lexical_ids(index, vis(tenant), "guava") == [str(mine.id)]
    assert await vector_ids(index, vis(other_tenant), "guava shipment") == [str(theirs.id)]
    await index.drop_tenant(other_tenant)
    assert await lexical_ids(index, vis(other_tenant), "guava") == []
    assert await lexical_ids(index, vis(tenant), "guava") == [str(mine.id)]


async def test_bm25_prefers_rare_terms_and_short_documents(index: Any, db: Any, tenant: str) -> None:
    filler = " ".join(f"word{i}" for i in range(40))
    drafts = [draft(tenant, f"common thing {i}") for i in range(8)]
    drafts.append(draft(tenant, "common rareterm"))
    drafts.append(draft(tenant, f"rareterm {filler}"))
    obs = await put(index, db, drafts)
    ranked = await lexical_ids(index, vis(tenant), "common rareterm")
    assert ranked[0] == str(obs[8].id)  # both terms, short
    assert ranked.index(str(obs[9].id)) < ranked.index(str(obs[0].id))  # the rare term outweighs the common one


async def test_a_session_summary_is_not_found_by_its_layout(index: Any, db: Any, tenant: str) -> None:
    """Its labels and the note on how it was made are not what the session said
    (`domain/session_summary`): "language" does not find an offline summary, "budget" does."""
    turns = [Turn("user", "Can you help me set up a monthly budget?"), Turn("assistant", "Sure.")]
    origin = Origin(tenant, "alice", uuid.uuid4(), None, "evt-1")
    summary = summary_draft(offline_summary(turns, "en"), origin, uuid.uuid4())
    obs = await put(index, db, [summary, draft(tenant, "I am learning a new language: Japanese")])
    assert await lexical_ids(index, vis(tenant), "Which language model?") == [str(obs[1].id)]
    assert await lexical_ids(index, vis(tenant), "answers, messages, notes") == []
    assert await lexical_ids(index, vis(tenant), "budget") == [str(obs[0].id)]


async def test_upsert_rejects_other_tenants_documents(index: Any, db: Any, tenant: str, other_tenant: str) -> None:
    (obs,) = await store(db, [draft(tenant, "lychee")])
    doc: IndexDocument = index_document(obs, unit("lychee"))
    with pytest.raises(ValueError, match="belongs to tenant"):
        await index.upsert(other_tenant, [doc])


async def test_pgvector_stems_german_and_english(db: Any, tenant: str) -> None:
    from engram.adapters.pgvector_index import PgVectorIndex

    index = PgVectorIndex(db, DIMS)
    obs = await put(
        index,
        db,
        [
            draft(tenant, "Die Häuser wurden im Sommer gebaut und die Rechnungen verschickt"),
            draft(tenant, "The invoices were sent after the houses were built"),
        ],
    )
    assert str(obs[0].id) in await lexical_ids(index, vis(tenant), "Haus Rechnung")
    assert str(obs[1].id) in await lexical_ids(index, vis(tenant), "invoice sending")


async def test_passages_leave_the_bm25_scores_of_searches_without_them(index: Any, db: Any, tenant: str) -> None:
    """An assistant's passages keep their words for BM25 but not their place in its statistics
    (pgvector: migration 0017; Elasticsearch: a field of their own): a search that leaves them
    out scores exactly as if there were none, and a search of the passages still finds them."""
    await put(index, db, [draft(tenant, f"kestrel invoice {i} for Bremen") for i in range(3)])
    await put(index, db, [draft(tenant, "the osprey contract is signed")])
    without = SearchFilter(now=datetime.now(UTC), except_types=("passage",))

    async def scores() -> list[tuple[str, float]]:
        return [(r.id, r.score) for r in await index.lexical(vis(tenant), "kestrel osprey invoice", without, 50)]

    before = await scores()
    passages = await put(
        index,
        db,
        [draft(tenant, f"kestrel kestrel invoice advice number {i}", type="passage") for i in range(6)],
    )
    assert await scores() == before
    only = SearchFilter(now=datetime.now(UTC), types=("passage",))
    assert set(await lexical_ids(index, vis(tenant), "kestrel advice", only)) == {str(p.id) for p in passages}
    await index.delete(tenant, [str(p.id) for p in passages])
    assert await scores() == before


async def test_pgvector_prepare_reads_the_sizes_and_sets_the_scan(db: Any, tenant: str) -> None:
    """`prepare` reads the tenant's sizes (none yet: zero) and sets the scan's settings for the
    transaction in the same statement."""
    from engram.adapters.pgvector_index import PgVectorIndex

    index = PgVectorIndex(db, DIMS)
    async with db.tenant(tenant) as conn:
        empty = await index.prepare(conn, tenant, 10)
    assert (empty.docs, empty.bm25_docs, empty.exact) == (0, 0, True)
    await put(index, db, [draft(tenant, f"kestrel invoice {i}") for i in range(3)])
    await put(index, db, [draft(tenant, "kestrel advice", type="passage")])
    async with db.tenant(tenant) as conn:
        plan = await index.prepare(conn, tenant, 500)
        settings = await conn.fetchrow(
            "SELECT current_setting('hnsw.ef_search') AS ef, current_setting('hnsw.iterative_scan') AS scan,"
            " current_setting('plan_cache_mode') AS plans"
        )
    assert (plan.docs, plan.bm25_docs) == (4, 3)
    assert (settings["ef"], settings["scan"], settings["plans"]) == ("500", "relaxed_order", "force_custom_plan")


async def test_pgvector_passages_leave_the_statistics_tables(db: Any, tenant: str) -> None:
    """`search_term_stats` and BM25's N and length in `search_stats` do not count passages;
    `doc_count`, the vector search's size, does."""
    from engram.adapters.pgvector_index import PgVectorIndex

    index = PgVectorIndex(db, DIMS)
    await put(index, db, [draft(tenant, f"kestrel invoice {i} for Bremen") for i in range(3)])

    async def tables() -> tuple[list[Any], Any]:
        async with db.system() as conn:
            terms = await conn.fetch(
                "SELECT term, doc_freq FROM search_term_stats WHERE tenant_id = $1 ORDER BY term", tenant
            )
            stats = await conn.fetchrow(
                "SELECT doc_count, bm25_docs, total_length FROM search_stats WHERE tenant_id = $1", tenant
            )
        return list(terms), stats

    terms, stats = await tables()
    passages = await put(index, db, [draft(tenant, f"kestrel advice number {i}", type="passage") for i in range(6)])
    after_terms, after = await tables()
    assert after_terms == terms and (after["bm25_docs"], after["total_length"]) == (3, stats["total_length"])
    assert after["doc_count"] == stats["doc_count"] + 6
    await index.delete(tenant, [str(p.id) for p in passages])
    assert await tables() == (terms, stats)


async def test_pgvector_large_tenant_uses_hnsw_with_filters(db: Any, tenant: str) -> None:
    """Above `exact_below` the HNSW path (iterative scan) must honour the same filters."""
    from engram.adapters.pgvector_index import PgVectorIndex

    index = PgVectorIndex(db, DIMS, exact_below=0, postings_per_term=10)
    drafts = [draft(tenant, f"item {i}", user_id="alice" if i % 2 else "bob") for i in range(40)]
    observations = await put(index, db, drafts)
    results = await index.vector(vis(tenant, "alice"), unit("item 3"), now(), 10)
    alice = {str(o.id) for o in observations if o.user_id == "alice"}
    assert results and {r.id for r in results} <= alice
    assert results[0].id == str(observations[3].id)
    assert uuid.UUID(results[0].id)
    # BM25 reads at most 10 postings per term here, after the visibility filter
    lexical = await index.lexical(vis(tenant, "alice"), "item", now(), 50)
    assert len(lexical) == 10 and {r.id for r in lexical} <= alice


async def test_pgvector_a_window_in_a_graph_tenant_is_searched_by_bm25_alone(db: Any, tenant: str) -> None:
    """A graph's walk under a narrow window's filter would go far for few entries: above
    `exact_below` a window's kNN list is empty and its BM25 list still filters."""
    from engram.adapters.pgvector_index import PgVectorIndex

    index = PgVectorIndex(db, DIMS, exact_below=0)
    day = datetime(2025, 3, 5, tzinfo=UTC)
    drafts = [draft(tenant, f"item {i}", valid_from=day + timedelta(days=i)) for i in range(12)]
    drafts.append(draft(tenant, "item told that day", said_at=day + timedelta(hours=5)))  # no valid-from time
    observations = await put(index, db, drafts)
    window = SearchFilter(now=datetime.now(UTC), within=(day, day + timedelta(days=1)))
    assert await index.vector(vis(tenant), unit("item 0"), window, 10) == []
    in_day = {str(observations[0].id), str(observations[-1].id)}
    assert {r.id for r in await index.lexical(vis(tenant), "item", window, 10)} == in_day
    assert len(await index.vector(vis(tenant), unit("item 0"), now(), 10)) == 10


async def explain_vector(index: Any, db: Any, visibility: Visibility, query: np.ndarray) -> str:
    """The plan of the kNN statement `vector_in` runs (EXPLAIN instead of fetching rows)."""

    class Explaining:
        def __init__(self, conn: Any) -> None:
            self.conn, self.plan = conn, ""

        async def fetch(self, sql: str, *args: Any) -> list[Any]:
            self.plan = "\n".join(r[0] for r in await self.conn.fetch("EXPLAIN " + sql, *args))
            return []

        async def execute(self, sql: str, *args: Any) -> str:  # the statement's settings
            result: str = await self.conn.execute(sql, *args)
            return result

    async with db.tenant(visibility.tenant_id) as conn:
        plan = await index.prepare(conn, visibility.tenant_id, 10)
        # a few dozen rows: sorting them would be cheaper; the question is whether the graph applies
        await conn.execute("SET LOCAL enable_sort = off")
        explaining = Explaining(conn)
        await index.vector_in(explaining, visibility, query, now(), 10, plan)
    return explaining.plan


async def test_pgvector_tenant_graph_keeps_scopes_and_tenants_apart(db: Any, tenant: str, other_tenant: str) -> None:
    """A tenant over `exact_below` gets an HNSW graph of its own (migration 0012); searching it
    returns only what the caller may see, never another tenant's rows, and the same ranking as
    the exact scan a smaller tenant gets."""
    from engram.adapters.pgvector_index import PgVectorIndex, graph_name

    index = PgVectorIndex(db, DIMS, exact_below=30)
    scopes = [Scope.private, Scope.team, Scope.public, Scope.sensitive]
    drafts = [
        draft(
            tenant,
            f"graph item {i}",
            user_id="alice" if i % 3 == 0 else "bob",
            scope=scopes[i % 4],
            team_ids=["sales"] if scopes[i % 4] is Scope.team else [],
        )
        for i in range(48)
    ]
    observations = await put(index, db, drafts)
    small = await put(index, db, [draft(other_tenant, f"graph item {i}", user_id="alice") for i in range(12)])
    async with db.system() as conn:
        graphs = {
            r["indexrelid"]: r["indisvalid"]
            for r in await conn.fetch(
                "SELECT indexrelid::regclass::text AS indexrelid, indisvalid FROM pg_index"
                " WHERE indrelid = 'search_documents'::regclass"
            )
        }
    assert graphs.get(graph_name(tenant, DIMS)) is True
    assert graph_name(other_tenant, DIMS) not in graphs  # under the threshold: exact scans, no graph

    bob = vis(tenant, "bob", teams=[])
    plan = await explain_vector(index, db, bob, unit("graph item 5"))
    assert graph_name(tenant, DIMS) in plan
    results = await index.vector(bob, unit("graph item 5"), now(), 10)
    allowed = {str(o.id) for o in observations if Visibility.allows(bob, o)}
    assert results and {r.id for r in results} <= allowed
    assert results[0].id == str(observations[5].id)
    exact = await PgVectorIndex(db, DIMS, exact_below=10_000).vector(bob, unit("graph item 5"), now(), 10)
    assert [r.id for r in results] == [r.id for r in exact]

    other = vis(other_tenant, "alice")
    assert graph_name(tenant, DIMS) not in await explain_vector(index, db, other, unit("graph item 5"))
    found = {r.id for r in await index.vector(other, unit("graph item 5"), now(), 50)}
    assert found == {str(o.id) for o in small}

    await index.drop_tenant(tenant)
    async with db.system() as conn:
        assert await conn.fetchval("SELECT to_regclass($1)", graph_name(tenant, DIMS)) is None


async def test_pgvector_exact_scan_reads_the_tenants_pages_ahead(db: Any, tenant: str) -> None:
    """A tenant under `exact_below` is scanned through a bitmap heap scan (its pages read ahead
    on cold storage) whatever the planner would have picked, and only that statement runs with
    index scans off: hydration's primary-key probes after it keep theirs."""
    from engram.adapters.pgvector_index import PgVectorIndex

    index = PgVectorIndex(db, DIMS, exact_below=10_000)
    observations = await put(index, db, [draft(tenant, f"exact item {i}", user_id="alice") for i in range(30)])
    alice = vis(tenant, "alice")
    assert "Bitmap Heap Scan" in await explain_vector(index, db, alice, unit("exact item 3"))
    async with db.tenant(tenant) as conn:
        plan = await index.prepare(conn, tenant, 10)
        assert plan.exact
        found = await index.vector_in(conn, alice, unit("exact item 3"), now(), 10, plan)
        assert await conn.fetchval("SHOW enable_indexscan") == "on"
    assert found[0].id == str(observations[3].id)
