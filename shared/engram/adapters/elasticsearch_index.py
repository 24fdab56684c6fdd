"""The Elasticsearch 8 search index (AI_MEMORY_PROVIDER=dense_vector, R-6.2).

One index per tenant (`engram-obs-<tenant>-<hash>`), created from the index template
`engram-observations`: keyword filter fields, `title`/`body` text with English and German
sub-fields, and a `dense_vector` with explicit `index_options` (int8_hnsw, m 16,
ef_construction 100) so behaviour does not drift between versions. Writes are bulk requests
with external versions (the observation's revision), so a late, older event never
overwrites a newer document. Searches are a BM25 query and a kNN query, both carrying the
R-7.2 visibility filter (for kNN inside `knn.filter`, which is applied during the HNSW
search, not after it); recall fuses them client-side with RRF (k = 60) because
`retriever.rrf` needs an Enterprise licence. `ELASTICSEARCH_USE_RETRIEVER_RRF=true` sends one
`retriever.rrf` request instead (licensed clusters). An assistant's passages (type
`memory_units.PASSAGE_TYPE`) keep their words in a text field of their own, `passage`: BM25's
statistics are per field, so a search that leaves them out ranks as if there were none, as on
PostgreSQL (migration 0017). A day window holds a document by `valid_from`, else by `said_at`
(migration 0021). An index made before those fields gets them added on first use.

Tested at the HTTP transport level against a fake server; it has not run against a live
cluster yet.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import structlog
from elasticsearch import AsyncElasticsearch, NotFoundError
from elasticsearch.helpers import async_bulk

from engram.domain.memory_units import PASSAGE_TYPE
from engram.domain.ranking import RRF_K
from engram.domain.scopes import Visibility
from engram.domain.search import IndexDocument, Ranked, SearchFilter, Vector

log = structlog.get_logger(__name__)

TEMPLATE = "engram-observations"
INDEX_PREFIX = "engram-obs-"
BODY_BOOST = 0.5
DELETED_VERSION = 2**62
_UNSAFE = re.compile(r"[^a-z0-9-]+")


def index_name(tenant_id: str) -> str:
    """Lowercase, safe, and unique per tenant id (a short hash tells apart ids that sanitise alike)."""
    slug = _UNSAFE.sub("-", tenant_id.casefold()).strip("-")[:60] or "tenant"
    digest = hashlib.sha256(tenant_id.encode()).hexdigest()[:10]
    return f"{INDEX_PREFIX}{slug}-{digest}"


def _text_field() -> dict[str, Any]:
    return {
        "type": "text",
        "analyzer": "standard",
        "fields": {"en": {"type": "text", "analyzer": "english"}, "de": {"type": "text", "analyzer": "german"}},
    }


def text_fields(document: IndexDocument) -> dict[str, str]:
    """The document's words by field: a passage's in `passage`, out of the other documents'
    BM25 statistics (see the module); everything else's in `title` and `body`."""
    if document.type == PASSAGE_TYPE:
        return {"passage": "\n".join(p for p in (document.title, document.body) if p)}
    return {"title": document.title, "body": document.body}


def added_fields() -> dict[str, Any]:
    """The fields added to the template after its first release: an index made before gets them on first use."""
    return {"passage": _text_field(), "said_at": {"type": "date"}}


def index_template(dimensions: int) -> dict[str, Any]:
    """One shard per tenant index, and a replica of it once the cluster has a second node
    (`auto_expand_replicas` 0-1): a single node stays green, three nodes keep every document on
    two of them, so an index survives losing a node (k8s/components/search: three ECK nodes)."""
    return {
        "index_patterns": [f"{INDEX_PREFIX}*"],
        "priority": 100,
        "template": {
            "settings": {"number_of_shards": 1, "auto_expand_replicas": "0-1", "refresh_interval": "1s"},
            "mappings": {
                "dynamic": "strict",
                "properties": {
                    "observation_id": {"type": "keyword"},
                    "tenant_id": {"type": "keyword"},
                    "user_id": {"type": "keyword"},
                    "team_ids": {"type": "keyword"},
                    "scope": {"type": "keyword"},
                    "type": {"type": "keyword"},
                    "language": {"type": "keyword"},
                    "valid_from": {"type": "date"},
                    "expires_at": {"type": "date"},
                    "said_at": {"type": "date"},
                    "revision": {"type": "date"},
                    "title": _text_field(),
                    "body": _text_field(),
                    "passage": _text_field(),
                    "embedding": {
                        "type": "dense_vector",
                        "dims": dimensions,
                        "index": True,
                        "similarity": "cosine",
                        "index_options": {"type": "int8_hnsw", "m": 16, "ef_construction": 100},
                    },
                },
            },
        },
        "_meta": {"owner": "engram", "dims": dimensions},
    }


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value else None


def _micros(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000)


def _absent_or(*, field: str, op: str, value: str) -> dict[str, Any]:
    """`field` unset, or within the range (validity bounds of an observation)."""
    return {
        "bool": {
            "should": [
                {"bool": {"must_not": [{"exists": {"field": field}}]}},
                {"range": {field: {op: value}}},
            ],
            "minimum_should_match": 1,
        }
    }


def visibility_filter(visibility: Visibility, where: SearchFilter) -> list[dict[str, Any]]:
    """R-7.2 plus "in force" and the type filter, as Elasticsearch filter clauses."""
    user = visibility.user_id
    readable: list[dict[str, Any]] = [{"term": {"scope": "public"}}]
    if user is not None:
        readable.append({"bool": {"filter": [{"term": {"scope": "private"}}, {"term": {"user_id": user}}]}})
    team_should: list[dict[str, Any]] = []
    if user is not None:
        team_should.append({"term": {"user_id": user}})
    if visibility.teams:
        team_should.append({"terms": {"team_ids": sorted(visibility.teams)}})
    if team_should:
        readable.append(
            {"bool": {"filter": [{"term": {"scope": "team"}}], "should": team_should, "minimum_should_match": 1}}
        )
    if visibility.include_sensitive:
        readable.append({"term": {"scope": "sensitive"}})
    now = where.now.astimezone(UTC).isoformat()
    clauses: list[dict[str, Any]] = [
        {"term": {"tenant_id": visibility.tenant_id}},
        {"bool": {"should": readable, "minimum_should_match": 1}},
        _absent_or(field="valid_from", op="lte", value=now),
        _absent_or(field="expires_at", op="gt", value=now),
    ]
    if where.types:
        clauses.append({"terms": {"type": list(where.types)}})
    if where.except_types:
        clauses.append({"bool": {"must_not": [{"terms": {"type": list(where.except_types)}}]}})
    if where.within is not None:  # by the valid-from time, else when it was said (`IndexDocument.said_at`)
        start, end = (t.astimezone(UTC).isoformat() for t in where.within)
        dated = {"gte": start, "lt": end}
        undated = {
            "bool": {"must_not": [{"exists": {"field": "valid_from"}}], "filter": [{"range": {"said_at": dated}}]}
        }
        clauses.append({"bool": {"should": [{"range": {"valid_from": dated}}, undated], "minimum_should_match": 1}})
    if visibility.hidden_ids:
        clauses.append({"bool": {"must_not": [{"ids": {"values": sorted(visibility.hidden_ids)}}]}})
    return clauses


def text_query(text: str) -> dict[str, Any]:
    return {
        "multi_match": {
            "query": text,
            "type": "best_fields",
            "tie_breaker": 0.3,
            "fields": [
                "title.en",
                "title.de",
                f"body.en^{BODY_BOOST}",
                f"body.de^{BODY_BOOST}",
                "passage.en",
                "passage.de",
            ],
        }
    }


class ElasticsearchIndex:
    server_side_fusion: bool

    def __init__(
        self,
        client: AsyncElasticsearch,
        dimensions: int,
        *,
        use_retriever_rrf: bool = False,
        refresh: bool | str = "wait_for",
        num_candidates: int = 200,
    ) -> None:
        self.client = client
        self.dimensions = dimensions
        self.server_side_fusion = use_retriever_rrf
        self.refresh = refresh
        self.num_candidates = num_candidates
        self._template_ready = False
        self._indices: set[str] = set()

    @classmethod
    def connect(
        cls, url: str, dimensions: int, *, api_key: str | None = None, use_retriever_rrf: bool = False
    ) -> ElasticsearchIndex:
        client = AsyncElasticsearch(url, api_key=api_key, request_timeout=30, retry_on_timeout=True, max_retries=3)
        return cls(client, dimensions, use_retriever_rrf=use_retriever_rrf)

    async def close(self) -> None:
        await self.client.close()

    async def ensure_template(self) -> None:
        if self._template_ready:
            return
        body = index_template(self.dimensions)
        await self.client.indices.put_index_template(
            name=TEMPLATE,
            index_patterns=body["index_patterns"],
            priority=body["priority"],
            template=body["template"],
            meta=body["_meta"],
        )
        self._template_ready = True

    async def ensure_index(self, tenant_id: str) -> str:
        name = index_name(tenant_id)
        if name in self._indices:
            return name
        await self.ensure_template()
        if not await self.client.indices.exists(index=name):
            try:
                await self.client.indices.create(index=name)
            except Exception as exc:  # a concurrent worker created it first
                if "resource_already_exists_exception" not in str(exc):
                    raise
        else:  # made before the `passage` or `said_at` field: adding fields to a mapping is allowed, and idempotent
            await self.client.indices.put_mapping(index=name, properties=added_fields())
        self._indices.add(name)
        return name

    # ---- writes -----------------------------------------------------------------------------

    async def upsert(self, tenant_id: str, documents: Sequence[IndexDocument]) -> None:
        if not documents:
            return
        name = await self.ensure_index(tenant_id)
        actions = []
        for d in documents:
            if d.tenant_id != tenant_id:
                raise ValueError(f"document {d.id} belongs to tenant {d.tenant_id!r}, not {tenant_id!r}")
            actions.append(
                {
                    "_op_type": "index",
                    "_index": name,
                    "_id": d.id,
                    "version": _micros(d.revision),
                    "version_type": "external_gte",
                    "_source": {
                        "observation_id": d.id,
                        "tenant_id": d.tenant_id,
                        "user_id": d.user_id,
                        "team_ids": list(d.team_ids),
                        "scope": d.scope,
                        "type": d.type,
                        "language": d.language,
                        "valid_from": _iso(d.valid_from),
                        "expires_at": _iso(d.expires_at),
                        "said_at": _iso(d.said_at),
                        "revision": _iso(d.revision),
                        **text_fields(d),
                        "embedding": [float(x) for x in d.embedding.tolist()],
                    },
                }
            )
        await self._bulk(actions)

    async def delete(self, tenant_id: str, observation_ids: Sequence[str]) -> None:
        if not observation_ids:
            return
        name = await self.ensure_index(tenant_id)
        # a deleted observation never comes back under its id: the delete outranks every revision,
        # so a late, older index request cannot resurrect it
        await self._bulk(
            [
                {
                    "_op_type": "delete",
                    "_index": name,
                    "_id": str(i),
                    "version": DELETED_VERSION,
                    "version_type": "external_gte",
                }
                for i in observation_ids
            ]
        )

    async def withdraw(self, tenant_id: str, revisions: Mapping[str, datetime]) -> None:
        """Delete at the observation's revision (superseded or retired), not above every revision
        as `delete` does: the observation comes back when a later revision is indexed (unmerge),
        and a late, older index request is still refused."""
        if not revisions:
            return
        name = await self.ensure_index(tenant_id)
        await self._bulk(
            [
                {
                    "_op_type": "delete",
                    "_index": name,
                    "_id": str(i),
                    "version": _micros(revision),
                    "version_type": "external_gte",
                }
                for i, revision in revisions.items()
            ]
        )

    async def _bulk(self, actions: list[dict[str, Any]]) -> None:
        _ok, errors = await async_bulk(
            self.client, actions, raise_on_error=False, raise_on_exception=True, refresh=self.refresh
        )
        real = []
        for item in errors if isinstance(errors, list) else []:
            ((op, result),) = item.items()
            status = result.get("status")
            if status == 409 or (op == "delete" and status == 404):
                continue  # a newer revision is already there / already gone: the goal state holds
            real.append(result)
        if real:
            raise RuntimeError(f"Elasticsearch bulk failed for {len(real)} document(s): {real[0].get('error')}")

    async def drop_tenant(self, tenant_id: str) -> None:
        name = index_name(tenant_id)
        await self.client.indices.delete(index=name, ignore_unavailable=True)
        self._indices.discard(name)

    async def indexed_ids(self, tenant_id: str) -> set[str]:
        name = index_name(tenant_id)
        found: set[str] = set()
        after: list[Any] | None = None
        while True:
            try:
                page = await self.client.search(
                    index=name,
                    query={"match_all": {}},
                    size=1000,
                    sort=[{"observation_id": "asc"}],
                    source=False,
                    search_after=after,
                )
            except NotFoundError:
                return found
            hits = page["hits"]["hits"]
            found.update(h["_id"] for h in hits)
            if len(hits) < 1000:
                return found
            after = hits[-1]["sort"]

    # ---- reads ------------------------------------------------------------------------------

    def lexical_body(self, visibility: Visibility, text: str, where: SearchFilter, limit: int) -> dict[str, Any]:
        return {
            "query": {"bool": {"must": [text_query(text)], "filter": visibility_filter(visibility, where)}},
            "size": limit,
            "_source": False,
        }

    def knn_body(self, visibility: Visibility, embedding: Vector, where: SearchFilter, limit: int) -> dict[str, Any]:
        return {
            "knn": {
                "field": "embedding",
                "query_vector": [float(x) for x in embedding.tolist()],
                "k": limit,
                "num_candidates": max(self.num_candidates, limit),
                "filter": visibility_filter(visibility, where),
            },
            "size": limit,
            "_source": False,
        }

    def rrf_body(
        self, visibility: Visibility, text: str, embedding: Vector, where: SearchFilter, limit: int
    ) -> dict[str, Any]:
        knn = self.knn_body(visibility, embedding, where, limit)["knn"]
        return {
            "retriever": {
                "rrf": {
                    "retrievers": [
                        {"standard": {"query": self.lexical_body(visibility, text, where, limit)["query"]}},
                        {"knn": knn},
                    ],
                    "rank_window_size": limit,
                    "rank_constant": RRF_K,
                }
            },
            "size": limit,
            "_source": False,
        }

    async def _search(self, tenant_id: str, body: dict[str, Any]) -> list[Ranked]:
        try:
            response = await self.client.search(index=index_name(tenant_id), body=body)
        except NotFoundError:
            return []  # no index yet: nothing stored for this tenant
        return [Ranked(h["_id"], float(h.get("_score") or 0.0)) for h in response["hits"]["hits"]]

    async def lexical(self, visibility: Visibility, text: str, where: SearchFilter, limit: int) -> list[Ranked]:
        return await self._search(visibility.tenant_id, self.lexical_body(visibility, text, where, limit))

    async def vector(self, visibility: Visibility, embedding: Vector, where: SearchFilter, limit: int) -> list[Ranked]:
        if embedding.shape != (self.dimensions,):
            raise ValueError(f"query vector has shape {embedding.shape}, index has {self.dimensions}")
        return await self._search(visibility.tenant_id, self.knn_body(visibility, embedding, where, limit))

    async def hybrid(
        self, visibility: Visibility, text: str, embedding: Vector, where: SearchFilter, limit: int
    ) -> list[Ranked]:
        """Server-side `retriever.rrf` (Enterprise licence)."""
        return await self._search(visibility.tenant_id, self.rrf_body(visibility, text, embedding, where, limit))
