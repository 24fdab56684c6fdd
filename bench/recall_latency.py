"""Recall latency at 10k and 100k observations: `python -m bench.recall_latency [--json]`.

One tenant per size, filled with generated German and English observations from 40 users in
6 teams, with private, team, public, tenant-wide and sensitive scopes. Observations are
written through the observation store and indexed by the same `Indexer` embed-index runs;
their vectors come from the fast 64-dim static model, lifted to the default embedder's width
(384) by a fixed random projection, so the corpus loads in minutes while the index has the
default width and real neighbourhoods (index latency depends on width and count, not on the
model). Queries go through `RecallService.search`, including the query embedding with the
default embedder (multilingual-e5-small), at concurrency 1 and 8.

Baseline in the same run: the query embedding alone (the part of recall no index can speed
up); the report gives recall p95 and the ratio to that baseline's p50. Time to searchable:
while 8 clients query, new observations are written and handed to the indexer the way a
worker with an empty queue would; the clock runs from the write's commit until recall
returns the observation.

State (PostgreSQL with the loaded tenants) lives in `.engram/bench-latency`, so a re-run skips
loading. PostgreSQL runs with `shared_buffers=1GB` (`--shared-buffers`): the embedded
development default of 256 MB cannot hold a 100k-vector HNSW index and its table, and buffer
misses then dominate the kNN query.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.locomo import CollectingBus
from engram.adapters.embedders import E5Embedder, StaticEmbedder
from engram.adapters.observations import PgObservationStore
from engram.adapters.pgvector_index import PgVectorIndex
from engram.adapters.postgres import Database
from engram.adapters.unit_of_work import PgUnitOfWork
from engram.domain.events import change_events
from engram.domain.observation import ObservationDraft, Priority, Scope
from engram.domain.recall import RecallQuery
from engram.domain.scopes import Permission, Principal
from engram.domain.search import Vector
from engram.services.indexing import Indexer
from engram.services.recall import RecallService
from functions.embed_index.main import WORKER as EMBED_INDEX

console = Console(stderr=True)
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


def drafts(tenant: str, count: int, rng: random.Random) -> list[ObservationDraft]:
    out = []
    for i in range(count):
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


async def load(db: Database, tenant: str, size: int, dims: int) -> float:
    async with db.tenant(tenant) as conn:
        have = await conn.fetchval("SELECT doc_count FROM search_stats")
    if have == size:
        console.print(f"{tenant}: {size} observations already loaded")
        return 0.0
    started = time.perf_counter()
    async with db.tenant(tenant) as conn:
        await conn.execute("DELETE FROM observations")
        await conn.execute("DELETE FROM search_stats")
    rng = random.Random(SEED + size)
    corpus = drafts(tenant, size, rng)
    for start in range(0, size, 2000):
        async with db.tenant(tenant) as conn:
            await PgObservationStore(conn).write_many(corpus[start : start + 2000])
    console.print(f"{tenant}: {size} observations written in {time.perf_counter() - started:.0f} s; indexing")
    indexer = Indexer(PgUnitOfWork(db, None), PgVectorIndex(db, dims), ProjectedStatic(dims))

    def progress(done: int, total: int) -> None:
        if done and done % 10_000 == 0:
            console.print(f"  indexed {done}/{total} in {time.perf_counter() - started:.0f} s")

    await indexer.reindex(tenant, batch_size=1000, progress=progress)
    async with db.pool.acquire() as conn:  # VACUUM cannot run inside a transaction
        await conn.execute("VACUUM ANALYZE search_terms")
        await conn.execute("VACUUM ANALYZE search_documents")
    return time.perf_counter() - started


def percentiles(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"p50": round(statistics.median(ordered), 2), "p95": pick(0.95), "p99": pick(0.99)}


async def measure(recall: RecallService, tenant: str, texts: list[str], concurrency: int) -> dict[str, float]:
    rng = random.Random(SEED + concurrency)
    work = [(principal_for(tenant, rng), t) for t in texts]
    latencies: list[float] = []

    async def client(items: list[tuple[Principal, str]]) -> None:
        for principal, text in items:
            t0 = time.perf_counter()
            await recall.search(principal, RecallQuery(text=text, limit=10))
            latencies.append((time.perf_counter() - t0) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(client(work[i::concurrency]) for i in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {**percentiles(latencies), "qps": round(len(work) / elapsed, 1)}


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


def index_options(args: argparse.Namespace) -> dict[str, int]:
    options = {}
    if args.exact_below is not None:
        options["exact_below"] = args.exact_below
    return options


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from engram.adapters.migrations import migrate
    from engram.development.embedded import EmbeddedPostgres

    # sized for a 100k-vector index (the embedded default of 256 MB is for development)
    pg = EmbeddedPostgres(args.state_dir / "postgres", settings={"shared_buffers": args.shared_buffers}).start()
    figures: dict[str, Any] = {}
    try:
        await migrate(pg.url)
        db = await Database.connect(pg.url, max_size=20)
        try:
            embedder = E5Embedder()
            await embedder.embed_query("warm up")
            rng = random.Random(SEED)
            texts = queries(args.queries, rng)
            for size in args.sizes:
                tenant = f"latency-{size}"
                load_s = await load(db, tenant, size, embedder.dimensions)
                if args.load_only:
                    console.print(f"{tenant}: loaded in {load_s:.0f} s")
                    continue
                index = PgVectorIndex(db, embedder.dimensions, **index_options(args))
                recall = RecallService(PgUnitOfWork(db, None), index, embedder, None)
                for text in texts[:20]:  # warm caches and the connection pool
                    await recall.search(principal_for(tenant, rng), RecallQuery(text=text))
                base = await embedding_baseline(embedder, texts)
                c1 = await measure(recall, tenant, texts, 1)
                c8 = await measure(recall, tenant, texts, 8)
                tts = await time_to_searchable(db, recall, embedder.dimensions, tenant, args.fresh)
                key = f"{size // 1000}k"
                figures[f"{key}.load_seconds"] = round(load_s, 1)
                for name, values in (("embed_only", base), ("c1", c1), ("c8", c8), ("time_to_searchable", tts)):
                    for metric, value in values.items():
                        figures[f"{key}.{name}.{metric}"] = value
                figures[f"{key}.ratio_p95_to_embed_p50"] = round(c1["p95"] / base["p50"], 2)
                console.print(f"{tenant}: c1 {c1}, c8 {c8}, embed {base}, time to searchable {tts}")
        finally:
            await db.close()
    finally:
        pg.stop()
    figures["queries"] = args.queries
    return figures


def print_table(figures: dict[str, Any], sizes: Sequence[int]) -> None:
    table = Table(title="Recall latency (ms), pgvector, multilingual-e5-small query embedding included")
    for col in ("size", "measure", "p50", "p95", "p99", "queries/s"):
        table.add_column(col, justify="right")
    for size in sizes:
        key = f"{size // 1000}k"
        for name, label in (
            ("embed_only", "baseline: query embedding"),
            ("c1", "recall, concurrency 1"),
            ("c8", "recall, concurrency 8"),
            ("time_to_searchable", "time to searchable"),
        ):
            table.add_row(
                key,
                label,
                *(str(figures.get(f"{key}.{name}.{m}", "")) for m in ("p50", "p95", "p99", "qps")),
            )
        table.add_row(key, "ratio c1 p95 / embedding p50", str(figures[f"{key}.ratio_p95_to_embed_p50"]), "", "", "")
        table.add_section()
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recall_latency", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--fresh", type=int, default=20, help="observations timed to searchable")
    parser.add_argument("--state", default=".engram/bench-latency")
    parser.add_argument("--load-only", action="store_true", help="load the corpora, measure nothing")
    parser.add_argument("--exact-below", type=int, default=None, help="override ENGRAM_PGVECTOR_EXACT_BELOW")
    parser.add_argument("--shared-buffers", default="1GB", help="PostgreSQL shared_buffers for the run")
    args = parser.parse_args(argv)
    from engram.runtime.logs import configure_logging

    configure_logging("WARNING")
    args.state_dir = Path(args.state).resolve()
    figures = asyncio.run(run(args))
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    elif not args.load_only:
        print_table(figures, args.sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
