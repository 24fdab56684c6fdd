"""Cold tenants for `python -m bench.recall_latency --cold N`: the first question to a tenant
none of whose pages are in memory, and what PostgreSQL and the index do about it compared.

A database of many mostly idle tenants does not keep them all in memory: the first question
to an idle tenant reads its rows, postings and hits from disk. For each of N tenants (a fixed
random choice) and each variant of `VARIANTS`: PostgreSQL is stopped, the page cache dropped
(`sync; echo 3 > /proc/sys/vm/drop_caches`, root only: otherwise the figures say so and hold
only for PostgreSQL's own buffers), PostgreSQL started with that setting and without
autoprewarm (which would read back the pages of the previous start), one recall to an
empty tenant loads the catalogues (a running server has them), and then the tenant's first
question is timed (query embedding included), then a second one, warm, as the baseline of the
same restart. The variants alternate per tenant, so the machine's noise falls on all alike.

What is compared (each variant is PostgreSQL settings and `PgVectorIndex` arguments):
- `pg_default` against `engram`: PostgreSQL 18 reads the pages of a bitmap heap scan (the
  plan of a small tenant's exact kNN scan) through a read stream, with up to
  `effective_io_concurrency` reads in flight, carried out by `io_workers` processes
  (io_method=worker). The defaults are 16 and 3; `engram.development.embedded.IO_SETTINGS`
  and the Kubernetes manifests set 64 and 8.
- `no_warming` against `engram`: a small tenant's graph read into shared_buffers at once
  before its first search (`warm_blocks`, migration 0016) or, without it, page by page by the
  search itself.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engram.adapters.embedders import E5Embedder
from engram.adapters.pgvector_index import PgVectorIndex
from engram.adapters.postgres import Database
from engram.adapters.unit_of_work import PgUnitOfWork
from engram.development.embedded import IO_SETTINGS, EmbeddedPostgres
from engram.domain.recall import RecallQuery
from engram.services.recall import RecallService

# name -> (PostgreSQL settings, PgVectorIndex keyword arguments)
VARIANTS: dict[str, tuple[dict[str, str], dict[str, int]]] = {
    "pg_default": ({"effective_io_concurrency": "16", "io_workers": "3"}, {}),
    "no_warming": (dict(IO_SETTINGS), {"warm_blocks": 0}),
    "engram": (dict(IO_SETTINGS), {}),
}
NO_AUTOPREWARM = {"pg_prewarm.autoprewarm": "off"}
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
WARMUP_TENANT = "cold-warmup"  # no rows: its recall reads catalogues and index roots only
# where a question's time goes: (class, method) -> phase
PHASES: dict[tuple[type, str], str] = {
    (RecallService, "_embed"): "embedding",
    (PgVectorIndex, "prepare"): "prepare",
    (PgVectorIndex, "lexical_in"): "bm25",
    (PgVectorIndex, "vector_in"): "knn",
    (RecallService, "_hydrate"): "hydration",
}


@contextlib.contextmanager
def phase_timers(into: dict[str, float]) -> Iterator[None]:
    """Adds each phase's wall time (ms) to `into` while the block runs (phases may overlap:
    the query embedding runs beside the first statements)."""
    originals = {key: getattr(key[0], key[1]) for key in PHASES}

    def timed(method: Any, phase: str) -> Any:
        @functools.wraps(method)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                into[phase] = into.get(phase, 0.0) + (time.perf_counter() - t0) * 1000

        return wrapper

    for (owner, name), phase in PHASES.items():
        setattr(owner, name, timed(originals[(owner, name)], phase))
    try:
        yield
    finally:
        for (owner, name), method in originals.items():
            setattr(owner, name, method)


def drop_page_cache() -> bool:
    """Write dirty pages out and drop the page cache; False where that is not allowed."""
    subprocess.run(["sync"], check=True)
    if os.geteuid() != 0:
        return False
    try:
        DROP_CACHES.write_text("3\n")
    except OSError:
        return False
    return True


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 1),
        "p95": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 1),
        "max": round(ordered[-1], 1),
    }


async def measure_cold(
    pg: EmbeddedPostgres,
    embedder: E5Embedder,
    sizes: dict[str, int],
    texts: list[str],
    count: int,
    exact_below: int,
    principal_for: Callable[[str, random.Random], Any],
    seed: int,
    drop_caches: bool = True,
) -> dict[str, Any]:
    """`count` cold tenants per setting; `pg` is stopped on entry and on return. `drop_caches`
    False (tests) restarts PostgreSQL only: its buffers are empty, the page cache is not."""
    rng = random.Random(seed + 7)
    tenants = rng.sample(sorted(sizes), min(count, len(sizes)))
    base = dict(pg.settings)
    cold: dict[str, list[float]] = {name: [] for name in VARIANTS}
    warm: dict[str, list[float]] = {name: [] for name in VARIANTS}
    phases: dict[str, list[float]] = {}
    dropped = True
    for i, tenant in enumerate(tenants):
        names = list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))
        for name in names:
            settings, arguments = VARIANTS[name]
            # autoprewarm would read back the pages of the previous start (this tenant's, for
            # the second variant) in the background: neither cold nor quiet
            pg.settings = {**base, **settings, **NO_AUTOPREWARM}
            dropped = (drop_page_cache() if drop_caches else False) and dropped
            pg.start()
            try:
                db = await Database.connect(pg.url, max_size=2)
                try:
                    index = PgVectorIndex(db, embedder.dimensions, exact_below=exact_below, **arguments)
                    recall = RecallService(PgUnitOfWork(db, None), index, embedder, None)
                    asker = random.Random(seed + i)
                    await recall.search(principal_for(WARMUP_TENANT, asker), RecallQuery(text=texts[0], limit=10))
                    first, second = texts[(2 * i + 1) % len(texts)], texts[(2 * i + 2) % len(texts)]
                    for kind, into, text in (("first", cold, first), ("second", warm, second)):
                        spent: dict[str, float] = {}
                        with phase_timers(spent):
                            t0 = time.perf_counter()
                            await recall.search(principal_for(tenant, asker), RecallQuery(text=text, limit=10))
                            into[name].append((time.perf_counter() - t0) * 1000)
                        for phase, ms in spent.items():
                            phases.setdefault(f"{name}.{kind}.{phase}", []).append(ms)
                        # the kNN, `prepare` (a graph's warming) and the whole question of tenants
                        # scanned exactly apart from those searched by graph
                        path = "exact" if sizes[tenant] < exact_below else "graph"
                        phases.setdefault(f"{name}.{kind}.knn_{path}", []).append(spent.get("knn", 0.0))
                        phases.setdefault(f"{name}.{kind}.prepare_{path}", []).append(spent.get("prepare", 0.0))
                        phases.setdefault(f"{name}.{kind}.total_{path}", []).append(into[name][-1])
                finally:
                    await db.close()
            finally:
                pg.stop()
    pg.settings = base
    figures: dict[str, Any] = {
        "cold.tenants": len(tenants),
        "cold.small_tenants": sum(1 for t in tenants if sizes[t] < exact_below),
        "cold.page_cache_dropped": dropped,
    }
    for name in VARIANTS:
        for kind, values in (("first", cold[name]), ("second", warm[name])):
            for metric, value in _summary(values).items():
                figures[f"cold.{name}.{kind}.{metric}"] = value
    for key, values in sorted(phases.items()):
        figures[f"cold.phase.{key}.p50"] = round(statistics.median(values), 1)
    for other, label in (("pg_default", "default"), ("no_warming", "no_warming")):
        figures[f"cold.ratio_p50_engram_to_{label}"] = round(
            figures["cold.engram.first.p50"] / figures[f"cold.{other}.first.p50"], 2
        )
    return figures
