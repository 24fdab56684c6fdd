"""The Elasticsearch adapter's exact requests, at the HTTP transport level (platform.md section 7).

No Elasticsearch server can run here: the official async client talks to the loopback fake,
which answers with `X-Elastic-Product: Elasticsearch` and realistic bodies and records every
request, so these tests pin the wire format a live 8.x cluster would receive.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from elasticsearch import AsyncElasticsearch

from engram.adapters.elasticsearch_index import ElasticsearchIndex, index_name, index_template
from engram.domain.observation import ObservationDraft
from engram.domain.recall import RecallQuery
from engram.domain.scopes import Permission, Principal, Visibility
from engram.domain.search import SearchFilter, index_document
from tests.fake_elasticsearch import FakeElasticsearch

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HIDDEN = "7f1f4f0e-0000-4000-8000-000000000001"


@pytest.fixture
async def es() -> AsyncIterator[tuple[FakeElasticsearch, ElasticsearchIndex]]:
    fake = await FakeElasticsearch().start()
    index = ElasticsearchIndex(AsyncElasticsearch(fake.url), 4)
    yield fake, index
    await index.close()
    await fake.stop()


def expected_filter(tenant: str) -> list[dict[str, Any]]:
    now = NOW.isoformat()
    return [
        {"term": {"tenant_id": tenant}},
        {
            "bool": {
                "should": [
                    {"term": {"scope": "public"}},
                    {"bool": {"filter": [{"term": {"scope": "private"}}, {"term": {"user_id": "alice"}}]}},
                    {
                        "bool": {
                            "filter": [{"term": {"scope": "team"}}],
                            "should": [{"term": {"user_id": "alice"}}, {"terms": {"team_ids": ["sales"]}}],
                            "minimum_should_match": 1,
                        }
                    },
                ],
                "minimum_should_match": 1,
            }
        },
        {
            "bool": {
                "should": [
                    {"bool": {"must_not": [{"exists": {"field": "valid_from"}}]}},
                    {"range": {"valid_from": {"lte": now}}},
                ],
                "minimum_should_match": 1,
            }
        },
        {
            "bool": {
                "should": [
                    {"bool": {"must_not": [{"exists": {"field": "expires_at"}}]}},
                    {"range": {"expires_at": {"gt": now}}},
                ],
                "minimum_should_match": 1,
            }
        },
        {"terms": {"type": ["fact"]}},
        {"bool": {"must_not": [{"ids": {"values": [HIDDEN]}}]}},
    ]


async def test_search_requests_carry_the_filter_inside_knn(es: Any) -> None:
    fake, index = es
    vis = Visibility("acme", "alice", frozenset({"sales"}), False, hidden_ids=frozenset({HIDDEN}))
    where = SearchFilter(now=NOW, types=("fact",))
    await index.ensure_index("acme")
    await index.lexical(vis, "quarterly invoices", where, 20)
    await index.vector(vis, np.array([1, 0, 0, 0], dtype=np.float32), where, 20)
    lexical, knn = fake.requests_to("POST", "/_search")
    assert lexical.path == f"/{index_name('acme')}/_search"
    assert lexical.body == {
        "query": {
            "bool": {
                "must": [
                    {
                        "multi_match": {
                            "query": "quarterly invoices",
                            "type": "best_fields",
                            "tie_breaker": 0.3,
                            "fields": [
                                "title.en",
                                "title.de",
                                "body.en^0.5",
                                "body.de^0.5",
                                "passage.en",
                                "passage.de",
                            ],
                        }
                    }
                ],
                "filter": expected_filter("acme"),
            }
        },
        "size": 20,
        "_source": False,
    }
    assert knn.body == {
        "knn": {
            "field": "embedding",
            "query_vector": [1.0, 0.0, 0.0, 0.0],
            "k": 20,
            "num_candidates": 200,
            "filter": expected_filter("acme"),
        },
        "size": 20,
        "_source": False,
    }
    assert "compatible-with=8" in knn.headers["Accept"]


async def test_template_index_and_bulk_requests(es: Any) -> None:
    fake, index = es
    t = datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)
    obs_id = uuid.uuid4()
    from engram.domain.observation import Observation

    obs = Observation(
        id=obs_id,
        tenant_id="Acme Corp/1",
        user_id="alice",
        team_ids=["sales"],
        type="fact",
        title="Tea",
        narrative="Green tea only",
        facts=[],
        concepts=[],
        tags=["drinks"],
        key=None,
        content_hash="h",
        discovery_tokens=[],
        relevance_count=0,
        priority="normal",
        source="user",
        verified=True,
        confidence=1.0,
        scope="team",
        trigger_source="manual",
        provenance={},
        valid_from=None,
        expires_at=None,
        superseded_by=None,
        created_at=t,
        updated_at=t,
    )
    await index.upsert("Acme Corp/1", [index_document(obs, np.array([0.6, 0.8, 0, 0], dtype=np.float32))])
    await index.delete("Acme Corp/1", [str(obs_id)])
    template = fake.requests_to("PUT", "/_index_template/")[0]
    assert template.path == "/_index_template/engram-observations"
    assert template.body == index_template(4)
    embedding = template.body["template"]["mappings"]["properties"]["embedding"]
    assert embedding == {
        "type": "dense_vector",
        "dims": 4,
        "index": True,
        "similarity": "cosine",
        "index_options": {"type": "int8_hnsw", "m": 16, "ef_construction": 100},
    }
    name = index_name("Acme Corp/1")
    assert name.startswith("engram-obs-acme-corp-1-") and name == name.lower()
    assert [r.method for r in fake.requests if r.path == f"/{name}"] == ["HEAD", "PUT"]
    index_bulk, delete_bulk = fake.requests_to("PUT", "/_bulk")
    assert index_bulk.params == {"refresh": "wait_for"}
    assert index_bulk.body == [
        {"index": {"_index": name, "_id": str(obs_id), "version": 1767323045600000, "version_type": "external_gte"}},
        {
            "observation_id": str(obs_id),
            "tenant_id": "Acme Corp/1",
            "user_id": "alice",
            "team_ids": ["sales"],
            "scope": "team",
            "type": "fact",
            "language": "english",
            "valid_from": None,
            "expires_at": None,
            "said_at": "2026-01-02T03:04:05.600000+00:00",  # no valid-from time: a day window dates it by this
            "revision": "2026-01-02T03:04:05.600000+00:00",
            "title": "Tea\ndrinks",
            "body": "Green tea only",
            "embedding": [pytest.approx(0.6), pytest.approx(0.8), 0.0, 0.0],
        },
    ]
    assert delete_bulk.body == [
        {"delete": {"_index": name, "_id": str(obs_id), "version": 2**62, "version_type": "external_gte"}}
    ]


async def test_an_index_made_before_the_passage_field_gets_it(es: Any) -> None:
    """A tenant's index made from the template before passages had a field of their own and
    before `said_at` (its mapping is strict) gets the fields on the first write, and the passage
    is indexed in it."""
    fake, index = es
    old = index_template(4)
    del old["template"]["mappings"]["properties"]["passage"]
    del old["template"]["mappings"]["properties"]["said_at"]
    name = index_name("acme")
    await index.client.indices.put_index_template(
        name="engram-observations", index_patterns=old["index_patterns"], template=old["template"]
    )
    await index.client.indices.create(index=name)
    draft = ObservationDraft(tenant_id="acme", user_id="alice", title="Assistant: keep herbs in water", type="passage")
    from tests.unit.recall_fixtures import stored

    obs = stored(draft, NOW)
    await index.upsert("acme", [index_document(obs, np.array([0.6, 0.8, 0, 0], dtype=np.float32))])
    (mapping,) = fake.requests_to("PUT", f"/{name}/_mapping")
    assert set(mapping.body["properties"]) == {"passage", "said_at"}
    (bulk,) = fake.requests_to("PUT", "/_bulk")
    assert bulk.body[1]["passage"] == "Assistant: keep herbs in water" and "title" not in bulk.body[1]
    assert fake.indices[name].docs[str(obs.id)].source["passage"] == "Assistant: keep herbs in water"


async def test_retriever_rrf_behind_the_setting(es: Any, services: Any, tenant: str) -> None:
    """ELASTICSEARCH_USE_RETRIEVER_RRF=true: one retriever.rrf request, rank_constant 60."""
    fake, _ = es
    index = ElasticsearchIndex(AsyncElasticsearch(fake.url), services.embedder.dimensions, use_retriever_rrf=True)
    from engram.adapters.observations import PgObservationStore
    from engram.services.recall import RecallService

    async with services.db.tenant(tenant) as conn:
        (w,) = await PgObservationStore(conn).write_many(
            [ObservationDraft(tenant_id=tenant, user_id="alice", title="Heron budget approved")]
        )
    vector = await services.embedder.embed_query(w.observation.searchable_text())
    await index.upsert(tenant, [index_document(w.observation, vector)])
    recall = RecallService(services.uow, index, services.embedder, None)
    principal = Principal(tenant_id=tenant, user_id="alice", permissions=frozenset({Permission.read_observation.value}))
    result = await recall.search(principal, RecallQuery("Heron budget", limit=5))
    assert [h.observation.id for h in result.hits] == [w.observation.id]
    (request,) = fake.requests_to("POST", "/_search")
    rrf = request.body["retriever"]["rrf"]
    # at least 10 candidates and twice the limit
    assert rrf["rank_constant"] == 60 and rrf["rank_window_size"] == 10 and request.body["size"] == 10
    standard, knn = rrf["retrievers"]
    assert standard["standard"]["query"]["bool"]["filter"] == knn["knn"]["filter"]
    assert knn["knn"]["filter"][0] == {"term": {"tenant_id": tenant}}
    await index.close()


async def test_product_header_is_required_by_the_client() -> None:
    """Without `X-Elastic-Product` the official client refuses the server: the fake must send it."""
    from aiohttp import web

    async def bare(_: web.Request) -> web.Response:
        return web.json_response({"hits": {"hits": []}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", bare)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = AsyncElasticsearch(f"http://127.0.0.1:{port}")
    from elasticsearch import UnsupportedProductError

    with pytest.raises(UnsupportedProductError):
        await client.search(index="x", query={"match_all": {}})
    await client.close()
    await runner.cleanup()
