"""embed-index on the fakes: upserts, deletions, the embedding cache and rejected texts (R-6.3)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from cloudevents.http import CloudEvent

from engram.domain.errors import InvalidEvent, Transient
from engram.domain.events import OBSERVATION_CREATED, OBSERVATION_DELETED, OBSERVATION_UPDATED, observation_changed
from engram.domain.observation import Observation, ObservationDraft, Scope
from engram.domain.plan_topics import PLAN_FLAG
from engram.domain.scopes import Visibility
from engram.domain.search import SearchFilter
from engram.services.indexing import Indexer
from functions.embed_index.main import WORKER
from tests.fakes import FakeEmbedder, FakeSearchIndex, InMemoryUnitOfWork


@pytest.fixture
def index() -> FakeSearchIndex:
    return FakeSearchIndex(64)


@pytest.fixture
def embedder() -> FakeEmbedder:
    return FakeEmbedder(64)


@pytest.fixture
def indexer(uow: InMemoryUnitOfWork, index: FakeSearchIndex, embedder: FakeEmbedder) -> Indexer:
    return Indexer(uow, index, embedder)


async def write(uow: InMemoryUnitOfWork, tenant: str, *titles: str, **kw: Any) -> list[Observation]:
    kw.setdefault("user_id", "alice")
    drafts = [ObservationDraft(tenant_id=tenant, title=t, **kw) for t in titles]
    async with uow.tenant(tenant) as tx:
        return [w.observation for w in await tx.observations.write_many(drafts)]


def changed(obs: Observation, etype: Any = OBSERVATION_CREATED) -> CloudEvent:
    return observation_changed(
        etype, obs.id, obs.updated_at.isoformat(), tenant_id=obs.tenant_id, source="/test", user_id=obs.user_id
    )


async def deliver(indexer: Indexer, *events: CloudEvent) -> list[Any]:
    return list(await WORKER.run(indexer.handle, list(events)))


def alice(tenant: str) -> Visibility:
    return Visibility(tenant_id=tenant, user_id="alice", teams=frozenset(), include_sensitive=False)


async def test_a_batch_is_embedded_once_and_searchable(
    indexer: Indexer, index: FakeSearchIndex, embedder: FakeEmbedder, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    billing, lunch = await write(uow, tenant, "Invoices are sent every quarter", "Team lunch on Fridays")
    assert await deliver(indexer, changed(billing), changed(lunch), changed(billing)) == [None] * 3
    assert await index.indexed_ids(tenant) == {str(billing.id), str(lunch.id)}
    assert len(embedder.calls) == 1 and len(embedder.calls[0]) == 2  # one call for the batch, each text once
    doc = index.documents[tenant][str(billing.id)]
    assert doc.revision == billing.updated_at and doc.scope == "private" and doc.user_id == "alice"
    where = SearchFilter(now=datetime.now(UTC))
    assert [r.id for r in await index.lexical(alice(tenant), "quarter invoices", where, 5)] == [str(billing.id)]
    nearest = await index.vector(alice(tenant), await embedder.embed_query("Fridays team lunch"), where, 1)
    assert [r.id for r in nearest] == [str(lunch.id)]
    bob = Visibility(tenant_id=tenant, user_id="bob", teams=frozenset(), include_sensitive=False)
    assert await index.lexical(bob, "quarter invoices", where, 5) == []  # private to alice


async def test_gone_and_superseded_observations_leave_the_index(
    indexer: Indexer, index: FakeSearchIndex, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    old, new, deleted = await write(uow, tenant, "old address", "new address", "soon deleted")
    await deliver(indexer, changed(old), changed(new), changed(deleted))
    uow.alter(tenant, old.id, superseded_by=new.id)
    async with uow.tenant(tenant) as tx:
        await tx.observations.delete(deleted.id)
    outcomes = await deliver(indexer, changed(old, OBSERVATION_UPDATED), changed(deleted, OBSERVATION_DELETED))
    assert outcomes == [None, None]
    assert await index.indexed_ids(tenant) == {str(new.id)}


async def test_an_older_event_never_undoes_a_newer_revision(
    indexer: Indexer, index: FakeSearchIndex, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    (v1,) = await write(uow, tenant, "Lives in Stuttgart", key="city")
    (v2,) = await write(uow, tenant, "Lives in Berlin", key="city")
    await deliver(indexer, changed(v2, OBSERVATION_UPDATED))
    await deliver(indexer, changed(v1))  # late: the worker reads the row as it is now
    doc = index.documents[tenant][str(v1.id)]
    assert doc.title == "Lives in Berlin" and doc.revision == v2.updated_at


async def test_the_embedding_cache_prevents_re_embedding(
    indexer: Indexer, embedder: FakeEmbedder, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    observations = await write(uow, tenant, "alpha", "beta", "gamma")
    await deliver(indexer, *(changed(o) for o in observations))
    assert embedder.embedded == 3
    assert len(uow.data(tenant).embeddings) == 3
    assert await indexer.reindex(tenant) == 3
    await deliver(indexer, *(changed(o) for o in observations))  # redelivered
    assert embedder.embedded == 3  # every text came from the cache
    (edited,) = await write(uow, tenant, "alpha", narrative="now with a story", key="a")
    await deliver(indexer, changed(edited))
    assert embedder.calls[-1] == ["alpha\nnow with a story"]


async def test_a_text_the_embedder_rejects_fails_alone(
    indexer: Indexer, index: FakeSearchIndex, embedder: FakeEmbedder, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    embedder.reject_containing = "HUGE"
    ok1, bad, ok2 = await write(uow, tenant, "fine one", "HUGE text", "fine two")
    outcomes = await deliver(indexer, changed(ok1), changed(bad), changed(ok2))
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], InvalidEvent) and "413" in str(outcomes[1])
    assert await index.indexed_ids(tenant) == {str(ok1.id), str(ok2.id)}
    assert [len(c) for c in embedder.calls] == [3, 1, 1, 1]  # the batch, then each text on its own
    assert len(uow.data(tenant).embeddings) == 2  # what was refused is not cached


async def test_a_vector_that_is_not_finite_is_dead_lettered_at_once(
    indexer: Indexer, index: FakeSearchIndex, embedder: FakeEmbedder, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    plain = embedder.vector

    def broken(text: str) -> Any:
        v = plain(text)
        if "broken" in text:
            v = v.copy()
            v[5] = float("nan")
        return v

    embedder.vector = broken  # type: ignore[method-assign]
    ok, bad = await write(uow, tenant, "fine", "broken model output")
    outcomes = await deliver(indexer, changed(ok), changed(bad))
    assert outcomes[0] is None
    assert isinstance(outcomes[1], InvalidEvent) and "not a finite number" in str(outcomes[1])
    assert await index.indexed_ids(tenant) == {str(ok.id)}
    assert len(uow.data(tenant).embeddings) == 1  # the broken vector is not cached either


async def test_an_embedder_outage_retries_the_whole_batch(
    indexer: Indexer, index: FakeSearchIndex, embedder: FakeEmbedder, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    observations = await write(uow, tenant, "one", "two", scope=Scope.public)
    embedder.fail = ConnectionError("embedding service unavailable")
    outcomes = await deliver(indexer, *(changed(o) for o in observations))
    assert all(isinstance(o, Transient) for o in outcomes) and await index.indexed_ids(tenant) == set()
    embedder.fail = None
    assert await deliver(indexer, *(changed(o) for o in observations)) == [None, None]
    assert await index.indexed_ids(tenant) == {str(o.id) for o in observations}


async def test_reindex_removes_entries_of_vanished_observations(
    indexer: Indexer, index: FakeSearchIndex, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    kept, gone = await write(uow, tenant, "kept", "gone")
    await deliver(indexer, changed(kept), changed(gone))
    uow.data(tenant).observations.pop(gone.id)  # deleted without an event reaching the index
    progress: list[tuple[int, int]] = []
    assert await indexer.reindex(tenant, batch_size=1, progress=lambda done, total: progress.append((done, total)))
    assert await index.indexed_ids(tenant) == {str(kept.id)} and progress == [(0, 1), (1, 1)]
    stranger = uuid.uuid4()
    assert await deliver(indexer, changed(kept.model_copy(update={"id": stranger}))) == [None]  # never stored
    assert str(stranger) not in await index.indexed_ids(tenant)


async def test_reindex_flags_the_plans_written_before_the_flag_existed(
    indexer: Indexer, uow: InMemoryUnitOfWork, tenant: str
) -> None:
    """An upgrade's `engram reindex` gives old rows the flag the stable block reads plans by (0019)."""
    plan, note = await write(uow, tenant, "My dentist appointment is on 12 May.", "I like tea.", type="event")
    rows = uow.data(tenant).observations
    rows[plan.id] = rows[plan.id].model_copy(update={"tags": []})  # as written before migration 0019
    revision = rows[plan.id].updated_at
    assert await indexer.reindex(tenant) == 2
    rows = uow.data(tenant).observations  # the committed rows
    assert rows[plan.id].tags == [PLAN_FLAG] and rows[plan.id].updated_at == revision  # no new revision
    assert rows[note.id].tags == []
    assert await indexer.reindex(tenant) == 2 and uow.data(tenant).observations[plan.id].tags == [PLAN_FLAG]  # once
