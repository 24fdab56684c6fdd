"""The embedded search index on PostgreSQL (AI_MEMORY_PROVIDER=pgvector, R-6.2).

Lexical: BM25 over a postings table. Each (document, term) row stores the document side of
BM25 (saturated term frequency, normalised by the document's length against the tenant's
average; headline terms count fully, body terms `pgvector_writes.BODY_WEIGHT`; the statements
are in `pgvector_writes`); the IDF is computed at query time from exact document frequencies.
Terms come from PostgreSQL's English or German stemmer, chosen per document by its language;
a query is stemmed both ways. Each query term reads its best postings through an (tenant,
term, impact) index with the visibility filter applied in that scan: all of them in tenants
below `exact_below` documents (exact BM25), at most `postings_per_term` in larger ones, so
the cost stays bounded (top-k per term, the usual impact-ordered approximation). That index
carries the filter's columns (migration 0013), so the scan is index-only: no table page per posting.
A search within a day window reads the window's documents first (`pgvector_bm25`).

Vector: cosine distance on pgvector, over half-precision vectors (`halfvec`, migration 0014:
half the bytes of `vector`, the same ranking for unit vectors). A tenant below `exact_below`
documents is scanned exactly (a bitmap heap scan of its rows through the tenant's btree, forced;
on cold pages one 8 kB page per 8 rows at 384 dims, read ahead by PostgreSQL 18's read stream
with the `effective_io_concurrency`/`io_workers` of `development.embedded.IO_SETTINGS`; a
covering index with the vectors is no smaller than the heap). From that size on a tenant has
an HNSW graph of its own: a partial index on its vectors (`WHERE
tenant_id = ... AND dims = ...`, see `graph_name`), searched with pgvector's iterative scan so
the visibility filter runs inside the index scan without losing results. One graph shared by
all tenants (before migration 0012) made every tenant that is a small share of it slow: the
filtered scan waded through other tenants' vectors, or the exact scan took over (measured in
bench/RESULTS.md, `## recall_latency`). The graph is created when a write takes the tenant
over the threshold (`CREATE INDEX CONCURRENTLY`); until it is valid the tenant is scanned
exactly, so a search is never wrong, only slower. A graph of up to `warm_blocks` pages is read
into shared_buffers at once (`engram_warm_graph`, migration 0016: combined reads instead of
the search's one page at a time) before the tenant's first graph search in `WARM_SECONDS`.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np
import structlog

from engram.adapters.observation_rows import search_filter_sql, visibility_sql
from engram.adapters.pgvector_bm25 import SEARCH_CONFIGS, lexical_statement
from engram.adapters.pgvector_writes import INSERT_DOCUMENTS, INSERT_POSTINGS
from engram.adapters.postgres import Connection, Database, vector_literal
from engram.adapters.unit_of_work import connection_of
from engram.domain.scopes import Visibility
from engram.domain.search import IndexDocument, Ranked, SearchFilter, SearchPlan, Vector
from engram.ports import TenantSearch, TenantTx

log = structlog.get_logger(__name__)

GRAPH_RETRY_SECONDS = 60.0
HALF_MAX = 65504.0  # the largest float16: search_documents stores halfvec (migration 0014)
GRAPH_LOCK_TIMEOUT = "10s"
WARM_SECONDS = 300.0  # a tenant's graph is warmed at most this often per process
GRAPH_BUILD_SECONDS = 6 * 3600.0  # the client's wait for a build (asyncpg's None means the pool's 60 s)


def graph_name(tenant_id: str, dims: int) -> str:
    """The name of a tenant's HNSW index for one embedding width (migration 0012 names it alike)."""
    return f"search_documents_hnsw_{int(dims)}_{hashlib.md5(tenant_id.encode()).hexdigest()}"


class PgVectorIndex:
    def __init__(
        self,
        db: Database,
        dimensions: int,
        *,
        exact_below: int = 5_000,
        postings_per_term: int = 300,
        ef_search: int = 40,
        warm_blocks: int = 2_048,
    ) -> None:
        self.db = db
        self.dimensions = int(dimensions)
        self.exact_below = exact_below
        self.postings_per_term = postings_per_term
        self.ef_search = ef_search
        self.warm_blocks = warm_blocks
        self._warmed: dict[str, float] = {}  # tenant -> monotonic time its graph was last warmed
        self._graphs: set[str] = set()  # tenants whose graph this process saw valid
        self._graph_failed: dict[str, float] = {}  # tenant -> monotonic time of a failed build

    async def ensure_graph(self, tenant_id: str, *, concurrently: bool = True) -> bool:
        """The tenant's own HNSW index, built if it is missing (or left invalid by a failed
        concurrent build). Writers of other tenants are not blocked; a build that cannot get
        its locks in `GRAPH_LOCK_TIMEOUT` is given up and tried again after a minute.
        `concurrently=False` is for a bulk import no one writes beside: one scan of the table
        instead of two, while writes to `search_documents` wait."""
        if tenant_id in self._graphs:
            return True
        failed = self._graph_failed.get(tenant_id)
        if failed is not None and time.monotonic() - failed < GRAPH_RETRY_SECONDS:
            return False
        d, name = self.dimensions, graph_name(tenant_id, self.dimensions)
        try:
            async with self.db.pool.acquire() as conn:  # CONCURRENTLY cannot run in a transaction
                valid = await conn.fetchval("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)", name)
                if valid is None or not valid:
                    literal = await conn.fetchval("SELECT quote_literal($1::text)", tenant_id)
                    await conn.execute(f"SET lock_timeout = '{GRAPH_LOCK_TIMEOUT}'")
                    # a build takes as long as the tenant is large: not the pool's command timeout
                    if valid is not None:
                        await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}", timeout=GRAPH_BUILD_SECONDS)
                    how = "CONCURRENTLY " if concurrently else ""
                    await conn.execute(
                        f"CREATE INDEX {how}IF NOT EXISTS {name} ON search_documents"
                        f" USING hnsw ((embedding::halfvec({d})) halfvec_cosine_ops)"
                        f" WHERE tenant_id = {literal} AND dims = {d}",
                        timeout=GRAPH_BUILD_SECONDS,
                    )
                    log.info("pgvector.graph_created", tenant=tenant_id, dims=d, index=name)
        except (asyncpg.PostgresError, OSError, TimeoutError) as exc:  # lock timeout, a concurrent builder
            log.warning("pgvector.graph_deferred", tenant=tenant_id, dims=d, error=repr(exc))
            self._graph_failed[tenant_id] = time.monotonic()
            return False
        self._graph_failed.pop(tenant_id, None)
        self._graphs.add(tenant_id)
        return True

    async def drop_graph(self, tenant_id: str) -> None:
        self._graphs.discard(tenant_id)
        async with self.db.pool.acquire() as conn:
            await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {graph_name(tenant_id, self.dimensions)}")

    # ---- writes -----------------------------------------------------------------------------

    async def upsert(self, tenant_id: str, documents: Sequence[IndexDocument]) -> None:
        if not documents:
            return
        for doc in documents:
            if doc.tenant_id != tenant_id:
                raise ValueError(f"document {doc.id} belongs to tenant {doc.tenant_id!r}, not {tenant_id!r}")
            if doc.embedding.shape != (self.dimensions,):
                raise ValueError(f"embedding of {doc.id} has shape {doc.embedding.shape}, index has {self.dimensions}")
            if not np.all(np.abs(doc.embedding) <= HALF_MAX):
                raise ValueError(f"embedding of {doc.id} has a component that is not finite or beyond +-{HALF_MAX:g}")
        latest: dict[str, IndexDocument] = {}
        for doc in documents:
            if doc.id not in latest or latest[doc.id].revision <= doc.revision:
                latest[doc.id] = doc
        async with self.db.tenant(tenant_id) as conn:
            docs = await self._upsert(conn, tenant_id, list(latest.values()))
        if docs >= self.exact_below and tenant_id not in self._graphs:
            await self.ensure_graph(tenant_id)

    async def _upsert(self, conn: Connection, tenant_id: str, documents: list[IndexDocument]) -> int:
        """Write the documents; the tenant's document count afterwards."""
        ids = [doc.observation_id for doc in documents]
        # two workers indexing one observation at once take turns (FOR UPDATE locks only rows
        # that exist: both would insert a new entry); in id order, so they never deadlock. The
        # locks come in a statement of their own: a statement that waited for them inside
        # itself would read with the snapshot it started with, miss the entries the other
        # worker committed meanwhile, and let an older revision replace a newer one
        await conn.execute(
            "SELECT count(pg_advisory_xact_lock(hashtextextended(i::text, 0)))"
            " FROM (SELECT i FROM unnest($1::uuid[]) AS i ORDER BY i) ordered",
            ids,
        )
        existing = {
            str(r["observation_id"]): r["revision"]
            for r in await conn.fetch(
                "SELECT observation_id, revision FROM search_documents"
                " WHERE observation_id = ANY($1::uuid[]) FOR UPDATE",
                ids,
            )
        }
        # observations consolidation superseded or retired are not indexed, also when an older
        # revision arrives late (the same database: no tombstones needed, R-15.1)
        current = {
            str(r["id"])
            for r in await conn.fetch(
                "SELECT id FROM observations WHERE id = ANY($1::uuid[]) AND superseded_by IS NULL AND valid_to IS NULL",
                ids,
            )
        }
        # an older revision arriving late (redelivery, concurrent workers) never overwrites a newer one
        fresh = [d for d in documents if d.id in current and (d.id not in existing or existing[d.id] <= d.revision)]
        if not fresh:
            return 0
        await conn.execute(
            "DELETE FROM search_documents WHERE observation_id = ANY($1::uuid[])", [d.observation_id for d in fresh]
        )
        payload = [
            {
                "id": d.id,
                "user_id": d.user_id,
                "team_ids": list(d.team_ids),
                "scope": d.scope,
                "type": d.type,
                "valid_from": d.valid_from.isoformat() if d.valid_from else None,
                "expires_at": d.expires_at.isoformat() if d.expires_at else None,
                "said_at": d.said_at.isoformat() if d.said_at else None,
                "revision": d.revision.isoformat(),
                "language": d.language if d.language in SEARCH_CONFIGS else "english",
                "title": d.title,
                "body": d.body,
                "dims": self.dimensions,
                "embedding": vector_literal(d.embedding),
            }
            for d in fresh
        ]
        await conn.execute(INSERT_DOCUMENTS, tenant_id, payload)
        await conn.execute(
            INSERT_POSTINGS,
            tenant_id,
            [d.observation_id for d in fresh],
            [d.title for d in fresh],
            [d.body for d in fresh],
        )
        return int(await conn.fetchval("SELECT coalesce((SELECT doc_count FROM search_stats), 0)"))

    async def delete(self, tenant_id: str, observation_ids: Sequence[str]) -> None:
        if not observation_ids:
            return
        async with self.db.tenant(tenant_id) as conn:
            await conn.execute(
                "DELETE FROM search_documents WHERE observation_id = ANY($1::uuid[])",
                [uuid.UUID(str(i)) for i in observation_ids],
            )

    async def withdraw(self, tenant_id: str, revisions: Mapping[str, datetime]) -> None:
        """Remove the entries of observations no longer current, unless the entry is of a later
        revision: a worker that read a row before an unmerge must not remove what another worker
        indexed after it. No tombstones: an upsert of a later revision brings the row back."""
        if not revisions:
            return
        async with self.db.tenant(tenant_id) as conn:
            await conn.execute(
                "DELETE FROM search_documents s USING unnest($1::uuid[], $2::timestamptz[]) AS w(id, revision)"
                " WHERE s.observation_id = w.id AND s.revision <= w.revision",
                [uuid.UUID(str(i)) for i in revisions],
                list(revisions.values()),
            )

    async def drop_tenant(self, tenant_id: str) -> None:
        async with self.db.tenant(tenant_id) as conn:
            await conn.execute("DELETE FROM search_documents")
            await conn.execute("DELETE FROM search_stats")
        await self.drop_graph(tenant_id)

    async def indexed_ids(self, tenant_id: str) -> set[str]:
        async with self.db.tenant(tenant_id) as conn:
            rows = await conn.fetch("SELECT observation_id FROM search_documents")
        return {str(r["observation_id"]) for r in rows}

    # ---- reads ------------------------------------------------------------------------------
    #
    # `lexical` and `vector` open a tenant transaction each. The recall service, which works on
    # the same PostgreSQL, instead runs `prepare`, `lexical_in` and `vector_in` (and its own
    # hydration) inside its own tenant transactions: fewer round trips per recall.

    async def prepare(self, conn: Connection, tenant_id: str, limit: int) -> SearchPlan:
        """The tenant's size, whether its own graph is ready (else an exact scan), and the scan
        settings, for this transaction."""
        sizes = await conn.fetchrow(
            "SELECT s.doc_count AS docs, s.bm25_docs,"
            " (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($3)) AS graph"
            " FROM (SELECT set_config('hnsw.ef_search', $2, true),"
            " set_config('hnsw.iterative_scan', 'relaxed_order', true),"
            # a generic plan cannot see the query vector, nor which tenant's graph applies
            " set_config('plan_cache_mode', 'force_custom_plan', true)) AS settings"
            " LEFT JOIN search_stats s ON s.tenant_id = $1",
            tenant_id,
            str(max(self.ef_search, limit)),
            graph_name(tenant_id, self.dimensions),
        )
        assert sizes is not None
        docs = int(sizes["docs"] or 0)
        plan = SearchPlan(
            docs=docs, exact=docs < self.exact_below or not sizes["graph"], bm25_docs=int(sizes["bm25_docs"] or 0)
        )
        if not plan.exact:
            await self._warm(conn, tenant_id)
        return plan

    async def _warm(self, conn: Connection, tenant_id: str) -> None:
        """Read a small graph into shared_buffers in one go (migration 0016), at most every
        `WARM_SECONDS` per tenant: on cold pages much faster than the search's own reads, one
        page at a time; on warm ones ~0.4 ms per 1,000 pages."""
        now = time.monotonic()
        if self.warm_blocks <= 0 or now - self._warmed.get(tenant_id, -WARM_SECONDS) < WARM_SECONDS:
            return
        if len(self._warmed) > 10_000:  # forget the tenants not warmed lately
            self._warmed = {t: at for t, at in self._warmed.items() if now - at < WARM_SECONDS}
        self._warmed[tenant_id] = now
        await conn.fetchval("SELECT engram_warm_graph($1, $2)", self.dimensions, self.warm_blocks)

    async def lexical(self, visibility: Visibility, text: str, where: SearchFilter, limit: int) -> list[Ranked]:
        async with self.db.tenant(visibility.tenant_id) as conn:
            return await self.lexical_in(conn, visibility, text, where, limit)

    async def lexical_in(
        self,
        conn: Connection,
        visibility: Visibility,
        text: str,
        where: SearchFilter,
        limit: int,
        plan: SearchPlan | None = None,
    ) -> list[Ranked]:
        sql, params = lexical_statement(
            visibility,
            text,
            where,
            limit,
            exact_below=self.exact_below,
            postings_per_term=self.postings_per_term,
            plan=plan,
        )
        rows = await conn.fetch(sql, *params)
        return [Ranked(r["id"], r["score"], r["type"], r["score"] / r["mass"] if r["mass"] else None) for r in rows]

    async def vector(self, visibility: Visibility, embedding: Vector, where: SearchFilter, limit: int) -> list[Ranked]:
        async with self.db.tenant(visibility.tenant_id) as conn:
            plan = await self.prepare(conn, visibility.tenant_id, limit)
            return await self.vector_in(conn, visibility, embedding, where, limit, plan)

    async def vector_in(
        self,
        conn: Connection,
        visibility: Visibility,
        embedding: Vector,
        where: SearchFilter,
        limit: int,
        plan: SearchPlan,
    ) -> list[Ranked]:
        """kNN after `prepare` in the same transaction (its scan settings apply)."""
        if embedding.shape != (self.dimensions,):
            raise ValueError(f"query vector has shape {embedding.shape}, index has {self.dimensions}")
        if where.within is not None and not plan.exact:
            # a graph's walk under a narrow window's filter goes far for few entries: a day is
            # searched by its BM25 list alone in a tenant large enough for a graph
            return []
        d = self.dimensions
        # a float4[] parameter: asyncpg sends it binary (no 384 float reprs for PostgreSQL to parse)
        params: list[Any] = [visibility.tenant_id, embedding.tolist()]
        vis = visibility_sql(visibility, params, "s", id_column="observation_id")
        flt = search_filter_sql(where, params, "s")
        params.append(limit)
        k = f"${len(params)}"
        if plan.exact:
            sql = f"""
            SELECT s.observation_id::text AS id, s.type, (s.embedding <=> $2::real[]::halfvec) AS distance
            FROM search_documents s
            WHERE s.tenant_id = $1 AND s.dims = {d} AND {vis} AND {flt}
            ORDER BY distance, id LIMIT {k}
            """
        else:
            sql = f"""
            WITH c AS MATERIALIZED (
              SELECT s.observation_id, s.type, (s.embedding::halfvec({d})) <=> $2::real[]::halfvec({d}) AS distance
              FROM search_documents s
              WHERE s.dims = {d} AND s.tenant_id = $1 AND {vis} AND {flt}
              ORDER BY (s.embedding::halfvec({d})) <=> $2::real[]::halfvec({d}) LIMIT {k}
            )
            SELECT observation_id::text AS id, type, distance FROM c ORDER BY distance, id
            """
        if not plan.exact:
            rows = await conn.fetch(sql, *params)
        else:
            # a bitmap heap scan reads the tenant's pages ahead (PostgreSQL 18's read stream); the
            # plain index scan the planner may prefer reads them one at a time: 50-87 ms instead
            # of 13-17 on cold pages, the same warm (bench/RESULTS.md). Only for this statement:
            # hydration's probes by primary key need index scans
            await conn.execute("SET LOCAL enable_indexscan = off")
            rows = await conn.fetch(sql, *params)
            await conn.execute("SET LOCAL enable_indexscan = on")
        return [Ranked(r["id"], 1.0 - float(r["distance"]), r["type"]) for r in rows]

    def within(self, tx: TenantTx) -> TenantSearch:
        """This index's searches inside `tx` (a transaction of `PgUnitOfWork` on the same database)."""
        return _InTransaction(self, connection_of(tx), tx.tenant_id)


class _InTransaction:
    """`PgVectorIndex`'s searches on one tenant transaction's connection."""

    def __init__(self, index: PgVectorIndex, conn: Connection, tenant_id: str) -> None:
        self.index = index
        self.conn = conn
        self.tenant_id = tenant_id

    async def prepare(self, limit: int) -> SearchPlan:
        return await self.index.prepare(self.conn, self.tenant_id, limit)

    async def lexical(
        self, visibility: Visibility, text: str, where: SearchFilter, limit: int, plan: SearchPlan | None = None
    ) -> list[Ranked]:
        return await self.index.lexical_in(self.conn, visibility, text, where, limit, plan)

    async def vector(
        self, visibility: Visibility, embedding: Vector, where: SearchFilter, limit: int, plan: SearchPlan
    ) -> list[Ranked]:
        return await self.index.vector_in(self.conn, visibility, embedding, where, limit, plan)

    async def embeddings(self, ids: Sequence[str]) -> dict[str, Vector]:
        rows = await self.conn.fetch(
            "SELECT observation_id::text AS id, embedding::real[] AS e FROM search_documents"
            " WHERE tenant_id = $1 AND dims = $2 AND observation_id = ANY($3::uuid[])",
            self.tenant_id,
            self.index.dimensions,
            list(ids),
        )
        return {r["id"]: np.asarray(r["e"], dtype=np.float32) for r in rows}
