"""Recall latency from 1k to 1M observations per tenant: `python -m bench.recall_latency [--json]`.

`--sizes 1k,10k,100k,1m`: one tenant per size, filled with generated German and English
observations from 40 users in 6 teams, with private, team, public, tenant-wide and sensitive
scopes. `--tenants N`: besides them, N tenants of 1k-10k observations each (log-uniform, the
first n the same for any N), their rows interleaved the way a shared database fills up;
a tenant over the exact-scan threshold gets its graph before its rows (filled row by row, as
embed-index does), or with `--graphs-after-load` once its group of 100 tenants is loaded
(one build each, as a restore would: 2.5x faster to load).
Corpora are loaded with COPY and indexed by the pgvector adapter's own SQL
(`bench.latency_corpus`); vectors come from the fast 64-dim static model, lifted to the
default embedder's width (384) by a fixed random projection, so a million loads in minutes on
a quiet machine while the index has the default width and real neighbourhoods (index latency
depends on width and count, not on the model). Queries go through `RecallService.search`,
including the query embedding with the default embedder (multilingual-e5-small), at
concurrency 1 and 8 (and at 1 again after those two passes, `c1_warm`: a restarted
PostgreSQL reads a large tenant's graph into shared_buffers during the first); with
`--tenants`, each query goes to a random tenant, then (after one
warm-up pass) to a random one of 20 active tenants (10 small, 10 with a graph), and the kNN
statement's planning and execution time are read from EXPLAIN ANALYZE with every graph index
of the database in the catalogue. `--cold N` (with `--tenants`, on the state's own PostgreSQL):
the first question to each of N tenants after a restart with the page cache dropped, with
PostgreSQL's default read-ahead settings and with Engram's (`bench.latency_cold`).

Baselines in the same run: the query embedding alone (the part of recall no index can speed
up); the report gives recall p95 and the ratio to that baseline's p50. Per size also the kNN
statement alone by exact scan and by the tenant's own HNSW graph (where it has one), the
measurement the exact-scan threshold (`--exact-below`, ENGRAM_PGVECTOR_EXACT_BELOW) comes
from. Time to searchable: while 8 clients query, new observations are written and handed to
the indexer the way a worker with an empty queue would; the clock runs from the write's
commit until recall returns the observation. Disk per million observations comes from
`pg_total_relation_size` / `pg_relation_size`.

State (PostgreSQL with the loaded tenants) lives in `--state` (`.engram/bench-latency`), so a
re-run skips loading. PostgreSQL runs with `shared_buffers=2GB` (`--shared-buffers`): the
embedded development default of 256 MB cannot hold a large tenant's graph and its rows.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.latency_cold import PHASES, VARIANTS, measure_cold
from bench.latency_corpus import LONG, bulk_load, interleaved, single
from bench.locomo import CollectingBus
from engram.adapters.embedders import E5Embedder, StaticEmbedder
from engram.adapters.observations import PgObservationStore
from engram.adapters.pgvector_index import PgVectorIndex, graph_name
from engram.adapters.postgres import Database
from engram.adapters.unit_of_work import PgUnitOfWork
from engram.domain.events import change_events
from engram.domain.observation import ObservationDraft, Priority, Scope
from engram.domain.recall import RecallQuery
from engram.domain.scopes import Permission, Principal, Visibility
from engram.domain.search import SearchFilter, SearchPlan, Vector
from engram.services.indexing import Indexer
from engram.services.recall import RecallService
from functions.embed_index.main import WORKER as EMBED_INDEX

console = Console(stderr=True)
GRAPH_AFTER_LOAD = 50_000  # a tenant this large gets its graph after its load (one build)
SEED = 20261130
USERS = [f"user{i:02d}" for i in range(40)]
TEAMS = ["sales", "billing", "support", "engineering", "legal", "marketing"]
TYPES = ["fact", "decision", "event", "preference", "project", "note", "context", "mistake"]

EN_SUBJECTS = [
    "the invoice run",
    "the Müller account",
    "the Q3 roadmap",
    "our onboarding flow",
    "the Berlin office",
    "the pricing page",
    "customer churn",
    "the support backlog",
    "the data export",
    "the annual audit",
    "the mobile app",
    "the search feature",
    "vendor contracts",
    "the release train",
    "the sales pipeline",
]
EN_VERBS = [
    "was postponed to",
    "is owned by",
    "needs a review from",
    "was approved by",
    "depends on",
    "was discussed with",
    "is blocked by",
    "will be presented to",
    "was escalated to",
    "got feedback from",
]
EN_TAILS = [
    "before the end of the quarter",
    "after the customer call",
    "because of the new regulation",
    "as agreed in the weekly meeting",
    "pending the budget decision",
    "until legal signs off",
    "with a focus on reliability",
    "to reduce costs",
    "for the enterprise tier",
    "next Tuesday",
]
DE_SUBJECTS = [
    "die Rechnungsstellung",
    "das Konto Schmidt",
    "die Roadmap für Q3",
    "der Onboarding-Prozess",
    "das Büro in Hamburg",
    "die Preisseite",
    "die Kundenabwanderung",
    "der Support-Rückstau",
    "der Datenexport",
    "die Jahresprüfung",
    "die mobile App",
    "die Suchfunktion",
    "die Lieferantenverträge",
]
DE_VERBS = [
    "wurde verschoben auf",
    "gehört zu",
    "braucht eine Prüfung durch",
    "wurde genehmigt von",
    "hängt ab von",
    "wurde besprochen mit",
    "wird blockiert durch",
    "wird vorgestellt für",
]
DE_TAILS = [
    "vor Quartalsende",
    "nach dem Kundentermin",
    "wegen der neuen Vorschrift",
    "wie im Wochentreffen vereinbart",
    "bis die Rechtsabteilung zustimmt",
    "mit Fokus auf Stabilität",
    "um Kosten zu senken",
    "nächsten Dienstag",
]
NAMES = [
    "Anna",
    "Ben",
    "Carla",
    "Deniz",
    "Elif",
    "Felix",
    "Greta",
    "Hannes",
    "Ines",
    "Jonas",
    "Katrin",
    "Lars",
    "Mira",
    "Noah",
    "Olga",
    "Paul",
    "Rita",
    "Sven",
    "Tara",
    "Uwe",
]


class ProjectedStatic:
    """The static 64-dim model lifted to `dims` by a fixed random projection (corpus loading only)."""

    def __init__(self, dims: int) -> None:
        self.static = StaticEmbedder()
        self.dims = dims
        rng = np.random.default_rng(SEED)
        self.projection = rng.standard_normal((self.static.dimensions, dims)).astype(np.float32)

    @property
    def model(self) -> str:
        return f"static-projected-{self.dims}"

    @property
    def dimensions(self) -> int:
        return self.dims

    def _lift(self, vectors: Vector) -> Vector:
        lifted = vectors @ self.projection
        lifted /= np.linalg.norm(lifted, axis=1, keepdims=True)
        result: Vector = lifted.astype(np.float32)
        return result

    async def embed_passages(self, texts: Sequence[str]) -> Vector:
        return self._lift(await self.static.embed_passages(texts))

    async def embed_query(self, text: str) -> Vector:
        first: Vector = self._lift(await self.static.embed_passages([text]))[0]
        return first


def sentence(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.5:
        s, v, t = rng.choice(EN_SUBJECTS), rng.choice(EN_VERBS), rng.choice(EN_TAILS)
        title = f"{s[0].upper()}{s[1:]} {v} {rng.choice(NAMES)} {t}"
        narrative = (
            f"{rng.choice(NAMES)} noted that {rng.choice(EN_SUBJECTS)} {rng.choice(EN_VERBS)} {rng.choice(NAMES)}."
        )
    else:
        s, v, t = rng.choice(DE_SUBJECTS), rng.choice(DE_VERBS), rng.choice(DE_TAILS)
        title = f"{s[0].upper()}{s[1:]} {v} {rng.choice(NAMES)} {t}"
        narrative = f"{rng.choice(NAMES)} meinte, {rng.choice(DE_SUBJECTS)} {rng.choice(DE_VERBS)} {rng.choice(NAMES)}."
    return title, narrative


def drafts(tenant: str, count: int, rng: random.Random, start: int = 0) -> list[ObservationDraft]:
    out = []
    for i in range(start, start + count):
        title, narrative = sentence(rng)
        roll = rng.random()
        user: str | None = rng.choice(USERS)
        teams: list[str] = []
        if roll < 0.5:
            scope = Scope.private
        elif roll < 0.7:
            scope, teams = Scope.team, rng.sample(TEAMS, rng.randint(1, 2))
        elif roll < 0.9:
            scope = Scope.public
        elif roll < 0.95:
            scope, user = Scope.public, None
        else:
            scope = Scope.sensitive
        out.append(
            ObservationDraft(
                tenant_id=tenant,
                user_id=user,
                team_ids=teams,
                scope=scope,
                type=rng.choice(TYPES),
                title=f"{title} (#{i})",
                narrative=narrative,
                tags=rng.sample(["müller", "q3", "billing", "hr", "ops", "urgent", "kunde", "intern"], 2),
                priority=rng.choice([Priority.normal] * 6 + [Priority.high, Priority.low, Priority.critical]),
                verified=rng.random() < 0.6,
            )
        )
    return out


def queries(count: int, rng: random.Random) -> list[str]:
    out = []
    for _ in range(count):
        if rng.random() < 0.5:
            out.append(f"What happened with {rng.choice(EN_SUBJECTS)} and {rng.choice(NAMES)}?")
        else:
            out.append(f"Was ist mit {rng.choice(DE_SUBJECTS)} und {rng.choice(NAMES)} passiert?")
    return out


def principal_for(tenant: str, rng: random.Random) -> Principal:
    return Principal(
        tenant_id=tenant,
        user_id=rng.choice(USERS),
        teams=frozenset(rng.sample(TEAMS, rng.randint(0, 2))),
        permissions=frozenset({Permission.read_observation.value}),
    )


def parse_sizes(text: str) -> list[int]:
    """`1k,10k,100k,1m` -> [1000, 10000, 100000, 1000000]."""
    out = []
    for part in (p.strip().lower() for p in text.split(",") if p.strip()):
        unit = {"k": 1_000, "m": 1_000_000}.get(part[-1], 1)
        out.append(int(float(part[:-1] if unit > 1 else part) * unit))
    return out


def label(size: int) -> str:
    return f"{size // 1_000_000}m" if size % 1_000_000 == 0 else f"{size // 1_000}k"


def many_sizes(count: int) -> dict[str, int]:
    """`count` tenants of 1k-10k observations, log-uniform (most tenants of a SaaS are small);
    the first n of any count are the same."""
    rng = random.Random(SEED)
    return {f"many-{i:04d}": int(round(1_000 * 10 ** rng.random(), -1)) for i in range(count)}


async def loaded_count(db: Database, tenant: str) -> int:
    async with db.system() as conn:
        return int(
            await conn.fetchval("SELECT coalesce((SELECT doc_count FROM search_stats WHERE tenant_id = $1), 0)", tenant)
        )


async def load(
    db: Database, index: PgVectorIndex, plan: dict[str, int], *, interleave: bool, graphs_after: bool = False
) -> float:
    """Load what is missing of `plan` (tenant -> observations) with COPY; seconds taken.
    `graphs_after`: every tenant's graph is built once its group's rows are in (as a restore
    would), not filled row by row; 2.5x faster for many small tenants."""
    missing = {t: n for t, n in plan.items() if await loaded_count(db, t) != n}
    if not missing:
        for tenant, n in plan.items():  # a graph an interrupted run left unbuilt
            if n >= index.exact_below:
                assert await index.ensure_graph(tenant), tenant
        if plan:
            async with db.pool.acquire() as conn:  # an interrupted run may not have analysed
                analysed = await conn.fetchval(
                    "SELECT coalesce(last_analyze, last_autoanalyze) IS NOT NULL FROM pg_stat_user_tables"
                    " WHERE relname = 'search_documents'"
                )
                if not analysed:  # (its sample reads pages of every tenant: not before a cold run)
                    await conn.execute("ANALYZE search_documents", timeout=LONG)
            console.print(f"{len(plan)} tenant(s) already loaded")
        return 0.0
    started = time.perf_counter()
    async with db.system() as conn:  # a partial load from an interrupted run
        await conn.execute("DELETE FROM observations WHERE tenant_id = ANY($1::text[])", list(missing), timeout=LONG)
    # graphs of small tenants before their rows (filled one vector at a time, as embed-index
    # does; an index build scans the whole table), of large ones after (one build)
    after = index.exact_below if graphs_after else GRAPH_AFTER_LOAD
    for tenant, n in missing.items():
        if index.exact_below <= n < after:
            assert await index.ensure_graph(tenant), tenant
    embedder = ProjectedStatic(index.dimensions)
    names = list(missing)
    # many tenants: 100 at a time, interleaved (an interrupted load keeps whole groups)
    for group in [names[i : i + 100] for i in range(0, len(names), 100)] if interleave else [names]:
        part = {t: missing[t] for t in group}
        total = sum(part.values())
        console.print(f"loading {total} observations of {len(part)} tenant(s)")
        if interleave:
            chunks: Iterable[list[ObservationDraft]] = interleaved(part, SEED, drafts)
        else:
            chunks = itertools.chain.from_iterable(single(t, n, SEED, drafts) for t, n in part.items())
        await bulk_load(db, chunks, total, embedder.embed_passages, index.dimensions, log=console.print)
        t0 = time.perf_counter()
        built = [t for t, n in part.items() if n >= after]
        for tenant in built:
            assert await index.ensure_graph(tenant, concurrently=False), tenant
        if built:
            console.print(f"  {len(built)} graph(s) built in {time.perf_counter() - t0:.0f} s")
    async with db.pool.acquire() as conn:  # VACUUM cannot run inside a transaction
        for table in ("observations", "search_documents", "search_terms", "search_term_stats"):
            await conn.execute(f"VACUUM ANALYZE {table}", timeout=LONG)
    return time.perf_counter() - started


async def storage(db: Database) -> dict[str, float]:
    """Disk per million indexed observations (MB): tables with their indexes, the graphs."""
    async with db.system() as conn:
        row = await conn.fetchrow(
            # documents from the tenants' statistics: counting the table would read all of it into
            # the page cache, and the questions after it would not be asked of cold tenants
            "SELECT (SELECT coalesce(sum(doc_count), 0) FROM search_stats) AS docs,"
            " pg_total_relation_size('observations') AS observations,"
            " pg_relation_size('search_documents') AS documents_heap,"
            " pg_total_relation_size('search_documents') AS documents_total,"
            " pg_total_relation_size('search_terms') + pg_total_relation_size('search_term_stats') AS postings,"
            " (SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0) FROM pg_index i"
            "  JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
            "  WHERE i.indrelid = 'search_documents'::regclass AND a.amname = 'hnsw') AS graphs,"
            " (SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            "  JOIN pg_am a ON a.oid = c.relam"
            "  WHERE i.indrelid = 'search_documents'::regclass AND a.amname = 'hnsw') AS graph_count"
        )
    assert row is not None
    docs = max(1, int(row["docs"]))
    per_million = {
        k: round(float(row[k]) / docs * 1_000_000 / 2**20, 1)
        for k in ("observations", "documents_heap", "documents_total", "postings")
    }
    return {
        "docs": docs,
        "graphs": int(row["graph_count"]),
        "graphs_mb": round(float(row["graphs"]) / 2**20, 1),
        **{f"mb_per_million.{k}": v for k, v in per_million.items()},
    }


def percentiles(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"p50": round(statistics.median(ordered), 2), "p95": pick(0.95), "p99": pick(0.99)}


async def measure(
    recall: RecallService, tenants: Sequence[str], texts: list[str], concurrency: int
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Recall latency over `texts`, each asked by a random caller of a random tenant of `tenants`."""
    rng = random.Random(SEED + concurrency)
    work = [(principal_for(rng.choice(tenants), rng), t) for t in texts]
    latencies: list[float] = []
    by_tenant: dict[str, list[float]] = {}

    async def client(items: list[tuple[Principal, str]]) -> None:
        for principal, text in items:
            t0 = time.perf_counter()
            await recall.search(principal, RecallQuery(text=text, limit=10))
            ms = (time.perf_counter() - t0) * 1000
            latencies.append(ms)
            by_tenant.setdefault(principal.tenant_id, []).append(ms)

    started = time.perf_counter()
    await asyncio.gather(*(client(work[i::concurrency]) for i in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {**percentiles(latencies), "qps": round(len(work) / elapsed, 1)}, by_tenant


async def knn_only(index: PgVectorIndex, tenant: str, vectors: Sequence[Vector], exact: bool) -> dict[str, float]:
    """The kNN statement alone (no embedding, no BM25), by the exact scan or the tenant's graph."""
    rng = random.Random(SEED)
    latencies = []
    where = SearchFilter(now=datetime.now(UTC))
    for vector in vectors:
        visibility = Visibility.for_principal(principal_for(tenant, rng))
        async with index.db.tenant(tenant) as conn:
            plan = await index.prepare(conn, tenant, 20)
            t0 = time.perf_counter()
            await index.vector_in(conn, visibility, vector, where, 20, dataclasses.replace(plan, exact=exact))
            latencies.append((time.perf_counter() - t0) * 1000)
    return percentiles(latencies)


async def time_to_searchable(db: Database, recall: RecallService, dims: int, tenant: str, n: int) -> dict[str, float]:
    """Write observations while 8 clients query; time from commit until recall returns each."""
    bus = CollectingBus()
    indexer = Indexer(PgUnitOfWork(db, None), PgVectorIndex(db, dims), ProjectedStatic(dims))
    stop = asyncio.Event()
    rng = random.Random(SEED)
    background = queries(400, rng)

    async def load_clients() -> None:
        i = 0
        while not stop.is_set():
            await recall.search(principal_for(tenant, rng), RecallQuery(text=background[i % len(background)]))
            i += 1

    clients = [asyncio.create_task(load_clients()) for _ in range(8)]
    owner = Principal(tenant_id=tenant, user_id="user00", permissions=frozenset({Permission.read_observation.value}))
    times = []
    try:
        for i in range(n):
            marker = f"zzfresh{int(time.time() * 1000)}x{i}"
            draft = ObservationDraft(tenant_id=tenant, user_id="user00", title=f"Fresh note {marker} about billing")
            t0 = time.perf_counter()
            async with db.tenant(tenant) as conn:
                written = await PgObservationStore(conn).write_many([draft])
            events = change_events([w.change for w in written], "/bench")
            await bus.publish_many(events)
            await EMBED_INDEX.run(indexer.handle, bus.take())
            while True:
                result = await recall.search(owner, RecallQuery(text=marker, limit=1, mode="lexical"))
                if result.hits and result.hits[0].observation.id == written[0].observation.id:
                    break
                await asyncio.sleep(0.005)
            times.append((time.perf_counter() - t0) * 1000)
            async with db.tenant(tenant) as conn:
                await conn.execute("DELETE FROM observations WHERE id = $1", written[0].observation.id)
    finally:
        stop.set()
        await asyncio.gather(*clients, return_exceptions=True)
    return percentiles(times)


async def embedding_baseline(embedder: E5Embedder, texts: list[str]) -> dict[str, float]:
    latencies = []
    for text in texts:
        t0 = time.perf_counter()
        await embedder.embed_query(text)
        latencies.append((time.perf_counter() - t0) * 1000)
    return percentiles(latencies)


class _Explaining:
    """Stands in for the connection in `vector_in`: runs its statement under EXPLAIN ANALYZE."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.plan: dict[str, Any] = {}

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        found = await self.conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args)
        self.plan = (json.loads(found) if isinstance(found, str) else found)[0]  # the pool decodes json
        return []

    async def execute(self, sql: str, *args: Any) -> str:  # the statement's settings
        result: str = await self.conn.execute(sql, *args)
        return result


async def _explained(
    index: PgVectorIndex, tenant: str, statement: Callable[[_Explaining, SearchPlan], Awaitable[object]]
) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of one of the adapter's statements, in a tenant transaction
    prepared as recall prepares it."""
    async with index.db.tenant(tenant) as conn:
        plan = await index.prepare(conn, tenant, 20)
        explaining = _Explaining(conn)
        await statement(explaining, plan)
    return explaining.plan


async def buffers_per_query(index: PgVectorIndex, tenant: str, vectors: Sequence[Vector], exact: bool) -> float:
    """Shared buffers (8 kB pages) one kNN statement touches, the mean over `vectors`."""
    rng = random.Random(SEED)
    where = SearchFilter(now=datetime.now(UTC))
    touched = []
    for vector in vectors:
        visibility = Visibility.for_principal(principal_for(tenant, rng))

        async def knn(
            conn: _Explaining, plan: SearchPlan, vector: Vector = vector, vis: Visibility = visibility
        ) -> object:
            return await index.vector_in(conn, vis, vector, where, 20, dataclasses.replace(plan, exact=exact))

        top = (await _explained(index, tenant, knn))["Plan"]
        touched.append(top["Shared Hit Blocks"] + top["Shared Read Blocks"])
    return round(float(statistics.mean(touched)), 1)


async def bm25_only(index: PgVectorIndex, tenant: str, texts: Sequence[str]) -> dict[str, float]:
    """The BM25 statement alone (no embedding, no kNN), as recall runs it after `prepare`."""
    rng = random.Random(SEED)
    latencies = []
    where = SearchFilter(now=datetime.now(UTC))
    for text in texts:
        visibility = Visibility.for_principal(principal_for(tenant, rng))
        async with index.db.tenant(tenant) as conn:
            plan = await index.prepare(conn, tenant, 20)
            t0 = time.perf_counter()
            await index.lexical_in(conn, visibility, text, where, 20, plan)
            latencies.append((time.perf_counter() - t0) * 1000)
    return percentiles(latencies)


async def bm25_buffers(index: PgVectorIndex, tenant: str, texts: Sequence[str]) -> dict[str, float]:
    """Shared buffers one BM25 statement touches (mean), and how many of its postings came
    from the table (heap fetches of index-only scans plus rows of plain index scans)."""
    rng = random.Random(SEED)
    where = SearchFilter(now=datetime.now(UTC))
    touched, fetched = [], []
    for text in texts:
        visibility = Visibility.for_principal(principal_for(tenant, rng))

        async def bm25(conn: _Explaining, plan: SearchPlan, text: str = text, vis: Visibility = visibility) -> object:
            return await index.lexical_in(conn, vis, text, where, 20, plan)

        top = (await _explained(index, tenant, bm25))["Plan"]
        touched.append(top["Shared Hit Blocks"] + top["Shared Read Blocks"])
        fetched.append(_heap_rows(top))
    return {
        "buffers": round(float(statistics.mean(touched)), 1),
        "heap_rows": round(float(statistics.mean(fetched)), 1),
    }


def _heap_rows(node: dict[str, Any]) -> float:
    """Postings read from `search_terms`' heap under a plan node (per loop counts times loops)."""
    own = 0.0
    if node.get("Relation Name") == "search_terms":
        loops = node.get("Actual Loops", 1)
        if node["Node Type"] == "Index Only Scan":
            own = node.get("Heap Fetches", 0)  # already summed over loops
        else:
            own = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * loops
    return own + sum(_heap_rows(child) for child in node.get("Plans", []))


async def measure_single(
    db: Database,
    index: PgVectorIndex,
    recall: RecallService,
    embedder: E5Embedder,
    size: int,
    texts: list[str],
    recall_only: bool = False,
) -> dict[str, Any]:
    tenant = f"latency-{label(size)}"
    rng = random.Random(SEED)
    for text in texts[:20]:  # warm caches and the connection pool
        await recall.search(principal_for(tenant, rng), RecallQuery(text=text))
    base = await embedding_baseline(embedder, texts)
    c1, _ = await measure(recall, [tenant], texts, 1)
    c8, _ = await measure(recall, [tenant], texts, 8)
    # the same questions again: the tenant's graph and rows are in shared_buffers now (the first
    # pass after a restart reads a large tenant's graph pages in; no query vector is cached)
    c1_warm, _ = await measure(recall, [tenant], texts, 1)
    bm25 = await bm25_only(index, tenant, texts)
    buffers = {f"bm25.{k}": v for k, v in (await bm25_buffers(index, tenant, texts[:30])).items()}
    knn: dict[str, dict[str, float]] = {"bm25": bm25}
    async with db.system() as conn:
        graph = await conn.fetchval("SELECT pg_relation_size(to_regclass($1))", graph_name(tenant, index.dimensions))
    tts: dict[str, float] = {}
    if not recall_only:
        vectors = [await embedder.embed_query(t) for t in texts[:60]]
        knn["knn_exact"] = await knn_only(index, tenant, vectors, True)
        buffers["knn_exact.buffers"] = await buffers_per_query(index, tenant, vectors[:10], True)
        if graph is not None:
            knn["knn_graph"] = await knn_only(index, tenant, vectors, False)
            buffers["knn_graph.buffers"] = await buffers_per_query(index, tenant, vectors[:10], False)
        tts = await time_to_searchable(db, recall, embedder.dimensions, tenant, 20)
    key = label(size)
    figures: dict[str, Any] = {f"{key}.graph_mb": round(graph / 2**20, 1) if graph is not None else 0.0}
    measured = (("embed_only", base), ("c1", c1), ("c8", c8), ("c1_warm", c1_warm), ("time_to_searchable", tts))
    for name, values in (*measured, *knn.items()):
        for metric, value in values.items():
            figures[f"{key}.{name}.{metric}"] = value
    figures.update({f"{key}.{k}": v for k, v in buffers.items()})
    figures[f"{key}.ratio_p95_to_embed_p50"] = round(c1["p95"] / base["p50"], 2)
    console.print(f"{tenant}: buffers per statement {buffers}")
    console.print(f"{tenant}: c1 {c1}, c8 {c8}, embed {base}, BM25 and kNN {knn}, time to searchable {tts}")
    return figures


async def measure_many(
    recall: RecallService,
    index: PgVectorIndex,
    embedder: E5Embedder,
    sizes: dict[str, int],
    texts: list[str],
    graph_count: int,
) -> dict[str, Any]:
    exact_below = index.exact_below
    tenants = sorted(sizes)
    rng = random.Random(SEED)
    for text in texts[:20]:
        await recall.search(principal_for(rng.choice(tenants), rng), RecallQuery(text=text))
    base = await embedding_baseline(embedder, texts)
    c1, by_tenant = await measure(recall, tenants, texts, 1)
    c8, _ = await measure(recall, tenants, texts, 8)
    figures: dict[str, Any] = {"many.tenants": len(sizes), "many.observations": sum(sizes.values())}
    for name, values in (("embed_only", base), ("c1", c1), ("c8", c8)):
        for metric, value in values.items():
            figures[f"many.{name}.{metric}"] = value
    for part, graphs in (("exact", False), ("graph", True)):
        chosen = [ms for t, values in by_tenant.items() if (sizes[t] >= exact_below) is graphs for ms in values]
        if chosen:
            for metric, value in percentiles(chosen).items():
                figures[f"many.c1_{part}_tenants.{metric}"] = value
            figures[f"many.c1_{part}_tenants.queries"] = len(chosen)
    figures["many.ratio_p95_to_embed_p50"] = round(c1["p95"] / base["p50"], 2)
    console.print(f"{len(sizes)} tenants: c1 {c1}, c8 {c8}, embed {base}")
    figures.update(await hot_set(recall, sizes, exact_below, texts))
    figures.update(await planning(index, embedder, sizes, texts, graph_count))
    return figures


def _some(sizes: dict[str, int], exact_below: int, per_kind: int) -> tuple[list[str], list[str]]:
    """`per_kind` tenants under `exact_below` and as many with a graph, the same ones every run."""
    small = [t for t in sorted(sizes) if sizes[t] < exact_below][:per_kind]
    large = [t for t in sorted(sizes) if sizes[t] >= exact_below][:per_kind]
    return small, large


async def hot_set(recall: RecallService, sizes: dict[str, int], exact_below: int, texts: list[str]) -> dict[str, Any]:
    """Recall over a working set of 20 active tenants once their pages are in memory (one pass
    of the questions first): what a database of many mostly idle tenants gives its active ones."""
    small, large = _some(sizes, exact_below, 10)
    hot = small + large
    await measure(recall, hot, texts, 1)  # warm-up pass
    c1, _ = await measure(recall, hot, texts, 1)
    c8, _ = await measure(recall, hot, texts, 8)
    figures: dict[str, Any] = {"many.hot.tenants": len(hot), "many.hot.observations": sum(sizes[t] for t in hot)}
    for name, values in (("c1", c1), ("c8", c8)):
        for metric, value in values.items():
            figures[f"many.hot.{name}.{metric}"] = value
    console.print(f"hot set of {len(hot)} tenants: c1 {c1}, c8 {c8}")
    return figures


async def planning(
    index: PgVectorIndex, embedder: E5Embedder, sizes: dict[str, int], texts: list[str], graph_count: int
) -> dict[str, Any]:
    """Planning and execution time of the kNN statement (EXPLAIN ANALYZE), small and graph
    tenants, with every graph index of the database in the catalogue (`graph_count` of them, counted
    by `storage`): the planner checks each partial index's predicate, so planning grows with
    the number of graphs."""
    figures: dict[str, Any] = {"many.graph_indexes": graph_count}
    rng = random.Random(SEED)
    where = SearchFilter(now=datetime.now(UTC))
    vectors = [await embedder.embed_query(t) for t in texts[:10]]
    small, large = _some(sizes, index.exact_below, 5)
    for part, tenants in (("exact", small), ("graph", large)):
        plan_ms: list[float] = []
        exec_ms: list[float] = []
        for tenant in tenants:
            for vector in vectors:
                visibility = Visibility.for_principal(principal_for(tenant, rng))

                async def knn(
                    conn: _Explaining, plan: SearchPlan, v: Vector = vector, vis: Visibility = visibility
                ) -> object:
                    return await index.vector_in(conn, vis, v, where, 20, plan)

                explained = await _explained(index, tenant, knn)
                plan_ms.append(explained["Planning Time"])
                exec_ms.append(explained["Execution Time"])
        if plan_ms:
            figures[f"many.knn_{part}.planning_ms"] = round(statistics.median(plan_ms), 2)
            figures[f"many.knn_{part}.execution_ms"] = round(statistics.median(exec_ms), 2)
    console.print(f"planning with {graph_count} graphs: {figures}")
    return figures


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from engram.adapters.migrations import migrate
    from engram.development.embedded import EmbeddedPostgres

    settings = {"shared_buffers": args.shared_buffers, "maintenance_work_mem": args.maintenance_work_mem}
    settings.update(dict(item.split("=", 1) for item in args.pg_setting))
    pg = None if args.database_url else EmbeddedPostgres(args.state_dir / "postgres", settings=settings).start()
    url = args.database_url if pg is None else pg.url
    figures: dict[str, Any] = {}
    try:
        if pg is not None:  # a --database-url is migrated already (and may be loading)
            await migrate(url)
        db = await Database.connect(url, max_size=20)
        try:
            embedder = E5Embedder()
            await embedder.embed_query("warm up")
            warming = {} if args.warm_blocks is None else {"warm_blocks": args.warm_blocks}
            index = PgVectorIndex(db, embedder.dimensions, exact_below=args.exact_below, **warming)
            singles = {f"latency-{label(n)}": n for n in args.sizes}
            many = many_sizes(args.tenants) if args.tenants else {}
            figures["load_seconds"] = round(await load(db, index, singles, interleave=False), 1)
            loaded = await load(db, index, many, interleave=True, graphs_after=args.graphs_after_load)
            figures["many.load_seconds"] = round(loaded, 1)
            figures.update({f"storage.{k}": v for k, v in (await storage(db)).items()})
            if args.load_only:
                return figures
            recall = RecallService(PgUnitOfWork(db, None), index, embedder, None)
            texts = queries(args.queries, random.Random(SEED))
            for size in [] if args.cold_only else args.sizes:
                figures.update(await measure_single(db, index, recall, embedder, size, texts, args.recall_only))
            if many and not args.cold_only:
                figures.update(await measure_many(recall, index, embedder, many, texts, figures["storage.graphs"]))
        finally:
            await db.close()
        if args.cold and pg is not None and many:
            pg.stop()
            figures.update(
                await measure_cold(pg, embedder, many, texts, args.cold, args.exact_below, principal_for, SEED)
            )
    finally:
        if pg is not None:
            pg.stop()
    figures["queries"] = args.queries
    figures["exact_below"] = args.exact_below
    return figures


def print_table(figures: dict[str, Any], sizes: Sequence[int]) -> None:
    table = Table(title="Recall latency (ms), pgvector, multilingual-e5-small query embedding included")
    for col in ("size", "measure", "p50", "p95", "p99", "queries/s"):
        table.add_column(col, justify="right")
    rows = [
        ("embed_only", "baseline: query embedding"),
        ("c1", "recall, concurrency 1"),
        ("c8", "recall, concurrency 8"),
        ("c1_warm", "recall, concurrency 1, second pass (warm)"),
        ("bm25", "BM25 alone"),
        ("knn_exact", "kNN alone, exact scan"),
        ("knn_graph", "kNN alone, tenant's graph"),
        ("time_to_searchable", "time to searchable"),
        ("c1_exact_tenants", "c1, tenants < exact_below"),
        ("c1_graph_tenants", "c1, tenants with a graph"),
        ("hot.c1", "c1, 20 active tenants, warm"),
        ("hot.c8", "c8, 20 active tenants, warm"),
    ]
    keys = [label(s) for s in sizes] + (["many"] if "many.tenants" in figures else [])
    for key in keys:
        for name, text in rows:
            if f"{key}.{name}.p50" in figures:
                values = (str(figures.get(f"{key}.{name}.{m}", "")) for m in ("p50", "p95", "p99", "qps"))
                table.add_row(key, text, *values)
        table.add_row(key, "ratio c1 p95 / embedding p50", str(figures[f"{key}.ratio_p95_to_embed_p50"]), "", "", "")
        for part in ("exact", "graph"):
            if f"{key}.knn_{part}.planning_ms" in figures:
                planned, ran = figures[f"{key}.knn_{part}.planning_ms"], figures[f"{key}.knn_{part}.execution_ms"]
                graphs = figures[f"{key}.graph_indexes"]
                table.add_row(key, f"kNN {part}: planning / execution, {graphs} graphs", str(planned), str(ran), "", "")
        table.add_section()
    Console().print(table)
    if "cold.tenants" in figures:
        print_cold(figures)


def print_cold(figures: dict[str, Any]) -> None:
    dropped = "page cache dropped" if figures["cold.page_cache_dropped"] else "page cache NOT dropped (not root)"
    table = Table(title=f"Cold tenants: first question after a restart, {dropped} (ms)")
    for col in ("settings", "question", "p50", "p95", "max"):
        table.add_column(col, justify="right")
    for name in VARIANTS:
        for kind in ("first", "second"):
            values = (str(figures[f"cold.{name}.{kind}.{m}"]) for m in ("p50", "p95", "max"))
            table.add_row(name, kind, *values)
    table.add_row("ratio", "first p50 engram / default", str(figures["cold.ratio_p50_engram_to_default"]), "", "")
    table.add_row("ratio", "first p50 engram / no_warming", str(figures["cold.ratio_p50_engram_to_no_warming"]), "", "")
    Console().print(table)
    phases = Table(title="Cold tenants: median ms per phase (phases overlap)")
    # the kNN, the warming and the whole question of exact and graph tenants apart
    names = (*PHASES.values(), "knn_exact", "knn_graph", "prepare_graph", "total_exact", "total_graph")
    for col in ("settings", "question", *names):
        phases.add_column(col, justify="right")
    for name in VARIANTS:
        for kind in ("first", "second"):
            phases.add_row(name, kind, *(str(figures.get(f"cold.phase.{name}.{kind}.{p}.p50", "")) for p in names))
    Console().print(phases)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recall_latency", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1k,10k,100k"), help="e.g. 1k,10k,100k,1m")
    parser.add_argument("--tenants", type=int, default=0, help="also this many tenants of 1k-10k in the database")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--state", default=".engram/bench-latency")
    parser.add_argument(
        "--database-url", default=None, help="a running, migrated PostgreSQL instead of the state's own"
    )
    parser.add_argument("--load-only", action="store_true", help="load the corpora, measure nothing")
    parser.add_argument(
        "--graphs-after-load",
        action="store_true",
        help="build each of the --tenants' graphs after its rows (as a restore would) instead of filling it row by row",
    )
    parser.add_argument(
        "--recall-only", action="store_true", help="skip the kNN-alone and time-to-searchable measurements"
    )
    parser.add_argument(
        "--cold",
        type=int,
        default=0,
        help="also N cold tenants of --tenants: restart, dropped page cache, first question (bench.latency_cold)",
    )
    parser.add_argument("--cold-only", action="store_true", help="with --cold: measure only the cold tenants")
    parser.add_argument("--exact-below", type=int, default=5_000, help="ENGRAM_PGVECTOR_EXACT_BELOW for the run")
    parser.add_argument(
        "--warm-blocks", type=int, default=None, help="ENGRAM_PGVECTOR_WARM_BLOCKS for the run (0: no graph warming)"
    )
    parser.add_argument("--shared-buffers", default="2GB", help="PostgreSQL shared_buffers for the run")
    parser.add_argument("--maintenance-work-mem", default="2GB", help="for the graph builds")
    parser.add_argument(
        "--pg-setting", action="append", default=[], metavar="NAME=VALUE", help="extra PostgreSQL setting, repeatable"
    )
    args = parser.parse_args(argv)
    if args.cold and (args.database_url or not args.tenants):
        # it restarts the state's own PostgreSQL and asks the --tenants of 1k-10k
        parser.error("--cold needs --tenants N and the state's embedded PostgreSQL (not --database-url)")
    if args.cold_only and not args.cold:
        parser.error("--cold-only needs --cold N")
    from engram.runtime.logs import configure_logging

    configure_logging("WARNING")
    args.state_dir = Path(args.state).resolve()
    figures = asyncio.run(run(args))
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    elif args.cold_only:
        print_cold(figures)
    elif not args.load_only:
        print_table(figures, args.sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
