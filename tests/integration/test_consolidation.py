"""consolidate-memory on PostgreSQL (R-15): the worker declaration on real rows, redelivery,
history, unmerge and recall as of a time over HTTP, conflict marks in the recall text, both
index adapters in step, and the LLM path against the scripted Anthropic API.

The consolidator here is built by each test on the session's unit of work with a pinned
embedder (tests choose which observations are near): the session's durable consumer is not
run, so other tests' observations are never consolidated.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram.adapters.observations import PgObservationStore
from engram.domain.events import OBSERVATION_CREATED, OBSERVATION_UPDATED, observation_changed
from engram.domain.observation import Observation, ObservationDraft
from engram.domain.scopes import Principal, Visibility
from engram.domain.search import SearchFilter
from engram.services.consolidation import Consolidator
from engram.services.consolidation_llm import ConsolidationJudge
from engram.services.indexing import Indexer
from functions.consolidate_memory.main import WORKER
from functions.embed_index.main import WORKER as EMBED_INDEX
from tests.conftest import EXTRACTION_TEST_MODEL, deliver
from tests.fake_elasticsearch import FakeElasticsearch
from tests.fakes import PinnedEmbedder


def pinned(**pins: str) -> PinnedEmbedder:
    return PinnedEmbedder({phrase: label for label, phrase in pins.items()})


async def write(db: Any, tenant: str, *drafts: ObservationDraft) -> list[Observation]:
    async with db.tenant(tenant) as conn:
        return [w.observation for w in await PgObservationStore(conn).write_many(list(drafts))]


def draft(tenant: str, title: str, **kw: Any) -> ObservationDraft:
    kw.setdefault("user_id", "alice")
    return ObservationDraft(tenant_id=tenant, title=title, **kw)


async def backdate(db: Any, obs: Observation, days: float) -> Observation:
    async with db.tenant(obs.tenant_id) as conn:
        await conn.execute(
            "UPDATE observations SET created_at = created_at - make_interval(days => $2),"
            " updated_at = updated_at - make_interval(days => $2) WHERE id = $1",
            obs.id,
            days,
        )
        row = await PgObservationStore(conn).get(obs.id)
    assert row is not None
    return row


async def rows(db: Any, tenant: str) -> dict[uuid.UUID, Observation]:
    async with db.tenant(tenant) as conn:
        found = await conn.fetch("SELECT id FROM observations")
        return {o.id: o for o in await PgObservationStore(conn).get_many([r["id"] for r in found])}


def changed(obs: Observation, etype: Any = OBSERVATION_CREATED) -> Any:
    return observation_changed(
        etype, obs.id, obs.updated_at.isoformat(), tenant_id=obs.tenant_id, source="/test", user_id=obs.user_id
    )


async def consolidations(db: Any, tenant: str) -> list[Any]:
    async with db.tenant(tenant) as conn:
        return list(await conn.fetch("SELECT * FROM consolidations ORDER BY created_at"))


async def test_duplicates_merge_on_postgres_and_a_redelivery_changes_nothing(
    services: Any, db: Any, tenant: str
) -> None:
    a, b = await write(
        db,
        tenant,
        draft(tenant, "Müller GmbH is customer 1001", facts=["customer_id=1001", "city=Stuttgart"], tags=["crm"]),
        draft(tenant, "Customer 1001: Müller GmbH", facts=["customer_id=1001", "city=Stuttgart", "industry=tools"]),
    )
    consolidator = Consolidator(services.uow, pinned(m="Müller GmbH"), services.index)
    event = changed(b)
    assert await deliver(services, WORKER, [event, event], consolidator.handle) == [None, None]
    assert await deliver(services, WORKER, [event], consolidator.handle) == [None]
    stored = await rows(db, tenant)
    [merged] = [o for o in stored.values() if o.is_current]
    assert set(merged.merged_from) == {a.id, b.id} and merged.trigger_source.value == "consolidation"
    assert set(merged.facts) == {"customer_id=1001", "city=Stuttgart", "industry=tools"} and merged.tags == ["crm"]
    assert all(stored[s].superseded_by == merged.id and stored[s].valid_to for s in (a.id, b.id))
    [decision] = await consolidations(db, tenant)
    assert decision["decision"] == "duplicate" and set(decision["source_ids"]) == {a.id, b.id}
    async with db.tenant(tenant) as conn:
        telemetry = await conn.fetch("SELECT metadata FROM ai_events WHERE event_name = 'memory.consolidation'")
    assert len(telemetry) == 1


async def test_update_history_as_of_and_unmerge_over_http(
    services: Any, db: Any, api: Any, auth: Any, tenant: str
) -> None:
    [old] = await write(
        db, tenant, draft(tenant, "Müller GmbH sits in Stuttgart", facts=["customer_id=1001", "city=Stuttgart"])
    )
    old = await backdate(db, old, 30)
    [new] = await write(
        db, tenant, draft(tenant, "Müller GmbH sits in Hamburg", facts=["customer_id=1001", "city=Hamburg"])
    )
    consolidator = Consolidator(services.uow, pinned(m="Müller GmbH"), services.index)
    await deliver(services, WORKER, [changed(new)], consolidator.handle)
    await services.indexing.reindex(tenant)
    r = await api.get("/api/ai/memory/recall", params={"q": "Müller GmbH sits"}, headers=auth(tenant))
    assert r.status_code == 200 and "Hamburg" in r.text and "Stuttgart" not in r.text, r.text
    then = (datetime.now(UTC) - timedelta(days=20)).isoformat()
    r = await api.get("/api/ai/memory/recall", params={"q": "Müller GmbH sits", "as_of": then}, headers=auth(tenant))
    assert r.status_code == 200 and "Stuttgart" in r.text and "Hamburg" not in r.text, r.text
    early = (datetime.now(UTC) - timedelta(days=40)).isoformat()
    r = await api.post(
        "/api/ai/memory/search", json={"query": "Müller GmbH sits", "as_of": early}, headers=auth(tenant)
    )
    assert r.status_code == 200 and r.json()["hits"] == []  # nothing was recorded yet
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    r = await api.get("/api/ai/memory/recall", params={"q": "Müller GmbH sits", "as_of": future}, headers=auth(tenant))
    assert r.status_code == 200 and "Hamburg" in r.text and "Stuttgart" not in r.text, r.text  # known up to now
    naive = datetime.now().replace(tzinfo=None).isoformat()
    r = await api.get("/api/ai/memory/recall", params={"q": "x", "as_of": naive}, headers=auth(tenant))
    assert r.status_code == 422 and r.json()["field"] == "as_of"

    r = await api.get(f"/api/ai/memory/{old.id}/history", headers=auth(tenant))
    assert r.status_code == 200, r.text
    history = r.json()
    assert {v["observation"]["id"]: v["status"] for v in history["versions"]} == {
        str(old.id): "superseded",
        str(new.id): "current",
    }
    [decision] = history["decisions"]
    assert decision["decision"] == "update" and "city" in decision["reason"] and decision["path"] == "rules"
    assert (await api.get(f"/api/ai/memory/{old.id}/history", headers=auth(tenant, "bob"))).status_code == 404

    r = await api.post(f"/api/ai/memory/{old.id}/unmerge", headers=auth(tenant))
    assert r.status_code == 200, r.text
    assert r.json()["restored"] == [str(old.id)] and r.json()["consolidation"]["undone_by"] == "alice"
    again = await api.post(f"/api/ai/memory/{old.id}/unmerge", headers=auth(tenant))
    assert again.status_code == 409 and "no consolidation to undo" in again.json()["detail"]  # a state conflict
    await services.indexing.reindex(tenant)
    r = await api.get("/api/ai/memory/recall", params={"q": "Müller GmbH sits"}, headers=auth(tenant))
    assert "Hamburg" in r.text and "Stuttgart" in r.text
    await deliver(
        services, WORKER, [changed((await rows(db, tenant))[old.id], OBSERVATION_UPDATED)], consolidator.handle
    )
    assert (await rows(db, tenant))[old.id].is_current  # kept apart: a person decided


async def test_a_late_event_is_superseded_by_what_was_said_after_it(
    services: Any, db: Any, api: Any, auth: Any, tenant: str
) -> None:
    """Hamburg was said on 5 May and written first; Stuttgart was said on 3 May but its event
    arrived late and was written last. Consolidating the late one keeps Hamburg: the order is
    when they were said, not when a worker got to them."""
    current, late = [
        (
            await write(
                db,
                tenant,
                draft(
                    tenant,
                    f"Müller GmbH sits in {city}",
                    facts=["customer_id=1001", f"city={city}"],
                    said_at=datetime(2026, 5, day, 9, tzinfo=UTC),
                ),
            )
        )[0]
        for city, day in (("Hamburg", 5), ("Stuttgart", 3))  # written in this order
    ]
    assert late.created_at > current.created_at
    consolidator = Consolidator(services.uow, pinned(m="Müller GmbH"), services.index)
    assert await deliver(services, WORKER, [changed(late)], consolidator.handle) == [None]
    stored = await rows(db, tenant)
    assert stored[current.id].is_current and stored[late.id].superseded_by == current.id
    [decision] = await consolidations(db, tenant)
    assert decision["decision"] == "update" and decision["result_id"] == current.id
    await services.indexing.reindex(tenant)
    r = await api.get("/api/ai/memory/recall", params={"q": "Müller GmbH sits"}, headers=auth(tenant))
    assert r.status_code == 200 and "Hamburg" in r.text and "Stuttgart" not in r.text, r.text


async def test_conflicts_are_marked_in_the_recall_text(
    services: Any, db: Any, api: Any, auth: Any, tenant: str
) -> None:
    a, b = await write(
        db,
        tenant,
        draft(tenant, "Contact at Becker AG is Frau Weber", facts=["customer_id=77", "contact=Weber"]),
        draft(tenant, "Contact at Becker AG is Herr Schmidt", facts=["customer_id=77", "contact=Schmidt"]),
    )
    consolidator = Consolidator(services.uow, pinned(b="Becker AG"), services.index)
    await deliver(services, WORKER, [changed(b)], consolidator.handle)
    await services.indexing.reindex(tenant)
    r = await api.get("/api/ai/memory/recall", params={"q": "Frau Weber"}, headers=auth(tenant))
    assert '(conflicting: "Contact at Becker AG is Herr Schmidt")' in r.text, r.text
    assert '(conflicting: "Contact at Becker AG is Frau Weber")' in r.text  # the partner came along
    r = await api.post(f"/api/ai/memory/{a.id}/unmerge", headers=auth(tenant))
    assert r.status_code == 200 and set(r.json()["unlinked"]) == {str(a.id), str(b.id)}


@pytest.fixture(params=["pgvector", "elasticsearch"])
async def index(request: Any, services: Any) -> AsyncIterator[Any]:
    if request.param == "pgvector":
        yield services.index
        return
    from elasticsearch import AsyncElasticsearch

    from engram.adapters.elasticsearch_index import ElasticsearchIndex

    fake = await FakeElasticsearch().start()
    es = ElasticsearchIndex(AsyncElasticsearch(fake.url), services.index.dimensions)
    try:
        yield es
    finally:
        await es.close()
        await fake.stop()


async def test_superseded_observations_leave_both_indexes_and_come_back_on_unmerge(
    services: Any, db: Any, index: Any, tenant: str
) -> None:
    embedder = pinned(z="Zeppelin")
    indexer = Indexer(services.uow, index, embedder)
    a, b = await write(
        db,
        tenant,
        draft(tenant, "Project Zeppelin ends in May", facts=["project_id=9", "end=May"]),
        draft(tenant, "Zeppelin project end: May", facts=["project_id=9", "end=May"]),
    )
    alice = Visibility(tenant, "alice", frozenset(), include_sensitive=False)

    async def found() -> set[str]:
        return {r.id for r in await index.lexical(alice, "Zeppelin", SearchFilter(now=datetime.now(UTC)), 10)}

    async def follow() -> None:  # what embed-index does with the change events: read the rows, index them
        events = [changed(o, OBSERVATION_UPDATED) for o in (await rows(db, tenant)).values()]
        assert set(await deliver(services, EMBED_INDEX, events, indexer.handle)) == {None}

    await follow()
    assert await found() == {str(a.id), str(b.id)}
    consolidator = Consolidator(services.uow, embedder, index)
    await deliver(services, WORKER, [changed(b)], consolidator.handle)
    [merged] = [o for o in (await rows(db, tenant)).values() if o.is_current]
    await follow()
    assert await found() == {str(merged.id)}
    person = Principal(tenant, "alice", permissions=frozenset({"read:AiObservation", "update:AiObservation"}))
    await services.memory_history.unmerge(person, merged.id)
    await follow()
    assert await found() == {str(a.id), str(b.id)}


async def test_the_llm_path_makes_one_call_per_cluster_on_the_scripted_api(
    services: Any, db: Any, llm: Any, anthropic: Any, tenant: str
) -> None:
    from tests.anthropic_server import tool_use

    def respond(request: Any) -> Any:
        tool = (request.body.get("tool_choice") or {}).get("name")
        assert tool == "record_consolidation"
        return tool_use(
            tool,
            {
                "decisions": [{"candidate": 1, "decision": "duplicate", "reason": "both: write to Alice briefly"}],
                "merged_title": "Alice wants brief answers",
                "merged_narrative": "Answer Alice in a few sentences.",
            },
        )

    anthropic.responder = respond
    a, b = await write(db, tenant, draft(tenant, "Alice wants short answers"), draft(tenant, "Keep replies brief"))
    embedder = PinnedEmbedder({"short answers": "same", "replies brief": "same"})
    consolidator = Consolidator(services.uow, embedder, services.index, ConsolidationJudge(llm))
    assert await deliver(services, WORKER, [changed(b)], consolidator.handle) == [None]
    calls = anthropic.requests_for(EXTRACTION_TEST_MODEL)
    assert len(calls) == 1 and "Alice wants short answers" in str(calls[0].body["messages"])
    [merged] = [o for o in (await rows(db, tenant)).values() if o.is_current]
    assert merged.title == "Alice wants brief answers" and set(merged.merged_from) == {a.id, b.id}
    [decision] = await consolidations(db, tenant)
    assert decision["path"] == "llm" and decision["model"] == EXTRACTION_TEST_MODEL


async def test_the_sweep_on_postgres_digests_old_low_priority_memories(services: Any, db: Any, tenant: str) -> None:
    from engram.adapters.consolidation_store import PgConsolidationScan
    from engram.domain.observation import Priority
    from engram.services.consolidation_sweep import ConsolidationSweep

    notes = await write(
        db,
        tenant,
        *(draft(tenant, f"Lunch idea {i}: lentil soup", priority=Priority.low, tags=["lunch"]) for i in range(3)),
        draft(tenant, "Lunch idea: important", tags=["lunch"]),  # normal priority: stays
    )
    answers = await write(  # an assistant's turn units: low priority too, but records of what was said
        db,
        tenant,
        *(
            draft(
                tenant, f"Answer {i}: a lentil soup recipe", priority=Priority.low, tags=["lunch"], key=f"turn:c:a{i}"
            )
            for i in range(3)
        ),
    )
    for note in [*notes, *answers]:
        await backdate(db, note, 45)
    scan = PgConsolidationScan(db)
    now = datetime.now(UTC)
    assert tenant in await scan.tenants(now - timedelta(hours=1), now - timedelta(days=30))
    sweep = ConsolidationSweep(Consolidator(services.uow, pinned(x="nothing")), scan, digest_days=30)
    report = await sweep.run(tenants=[tenant])
    assert report.digested == 3 and report.failed == []
    stored = await rows(db, tenant)
    [digest] = [o for o in stored.values() if "digest" in o.tags]
    assert set(digest.merged_from) == {n.id for n in notes[:3]} and digest.is_current
    assert all(stored[n.id].superseded_by == digest.id for n in notes[:3]) and stored[notes[3].id].is_current
    assert all(stored[a.id].is_current for a in answers)
    assert (await sweep.run(tenants=[tenant])).digested == 0
