"""bench.latency_cold on a small database of its own: every setting measured, cold and warm."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from bench import latency_cold
from bench.recall_latency import SEED, load, principal_for, queries
from engram.adapters.embedders import E5Embedder
from engram.adapters.migrations import migrate
from engram.adapters.pgvector_index import PgVectorIndex, graph_name
from engram.adapters.postgres import Database
from engram.development.embedded import BUFFER_SETTINGS, IO_SETTINGS, EmbeddedPostgres
from engram.services.recall import RecallService


async def test_embedded_postgres_reads_ahead_with_engram_settings(tmp_path: Path) -> None:
    pg = EmbeddedPostgres(tmp_path / "pg").start()
    try:
        db = await Database.connect(pg.url, max_size=1)
        try:
            async with db.pool.acquire() as conn:
                shown = {name: await conn.fetchval(f"SHOW {name}") for name in IO_SETTINGS}
        finally:
            await db.close()
    finally:
        pg.stop()
    assert shown == IO_SETTINGS
    assert IO_SETTINGS == {"effective_io_concurrency": "64", "io_workers": "8"}


async def test_embedded_postgres_reads_its_buffers_back_after_a_restart(tmp_path: Path) -> None:
    """pg_prewarm is preloaded: its autoprewarm worker writes the list of pages in shared_buffers
    at shutdown, and a restarted server reads those pages back."""
    data = tmp_path / "pg"
    pg = EmbeddedPostgres(data).start()
    try:
        db = await Database.connect(pg.url, max_size=1)
        try:
            async with db.pool.acquire() as conn:
                preloaded = await conn.fetchval("SHOW shared_preload_libraries")
                assert preloaded == BUFFER_SETTINGS["shared_preload_libraries"]
                await conn.execute(
                    "CREATE TABLE warm AS SELECT g AS id, repeat('x', 500) AS pad FROM generate_series(1, 5000) g"
                )
                await conn.fetchval("SELECT count(*) FROM warm")
        finally:
            await db.close()
    finally:
        pg.stop()
    blocks = data / "pgdata" / "autoprewarm.blocks"
    assert blocks.exists() and len(blocks.read_text().splitlines()) > 100  # the table's pages among them
    pg = EmbeddedPostgres(data).start()
    try:
        db = await Database.connect(pg.url, max_size=1)
        try:
            async with db.pool.acquire() as conn:

                async def cached() -> int:
                    return int(
                        await conn.fetchval(
                            "SELECT count(*) FROM pg_buffercache WHERE relfilenode = pg_relation_filenode('warm')"
                        )
                    )

                await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_buffercache")
                for _ in range(100):  # the worker reads them back in the background
                    if await cached() > 100:
                        break
                    await asyncio.sleep(0.1)
                assert await cached() > 100
        finally:
            await db.close()
    finally:
        pg.stop()


async def test_cold_tenants_are_measured_under_every_variant(tmp_path: Path) -> None:
    pg = EmbeddedPostgres(tmp_path / "pg").start()
    sizes = {"cold-a": 120, "cold-b": 80, "cold-c": 60}
    try:
        await migrate(pg.url)
        db = await Database.connect(pg.url, max_size=4)
        try:
            embedder = E5Embedder()
            index = PgVectorIndex(db, embedder.dimensions, exact_below=100)
            assert await load(db, index, sizes, interleave=True) > 0
        finally:
            await db.close()
    finally:
        pg.stop()
    texts = queries(10, random.Random(SEED))
    starts: list[dict[str, str]] = []
    start = pg.start

    def recorded_start() -> EmbeddedPostgres:
        starts.append(dict(pg.settings))
        return start()

    pg.start = recorded_start  # type: ignore[method-assign]
    figures = await latency_cold.measure_cold(
        pg, embedder, sizes, texts, 2, 100, principal_for, SEED, drop_caches=False
    )
    # every first question on a fresh start without autoprewarm (it would read back the last start's pages)
    assert len(starts) == 2 * len(latency_cold.VARIANTS)
    assert all(settings["pg_prewarm.autoprewarm"] == "off" for settings in starts)
    assert pg.proc is None  # stopped on return
    assert pg.settings == {}  # the caller's settings are restored
    assert figures["cold.tenants"] == 2
    assert figures["cold.page_cache_dropped"] is False
    for name in latency_cold.VARIANTS:
        for kind in ("first", "second"):
            p50, p95, top = (figures[f"cold.{name}.{kind}.{m}"] for m in ("p50", "p95", "max"))
            assert 0 < p50 <= p95 <= top
    for phase in ("embedding", "prepare", "bm25", "knn", "hydration"):
        assert figures[f"cold.phase.engram.first.{phase}.p50"] > 0, phase
    # the kNN phase split by how the tenant is searched: exactly (under 100 rows here) or by graph
    small = figures["cold.small_tenants"]
    assert ("cold.phase.engram.first.knn_exact.p50" in figures) == (small > 0)
    assert ("cold.phase.engram.first.knn_graph.p50" in figures) == (small < figures["cold.tenants"])
    for path, present in (("exact", small > 0), ("graph", small < figures["cold.tenants"])):
        for part in ("prepare", "total"):
            assert (f"cold.phase.engram.first.{part}_{path}.p50" in figures) == present
    assert getattr(RecallService._hydrate, "__wrapped__", None) is None  # timers removed
    for other, label in (("pg_default", "default"), ("no_warming", "no_warming")):
        ratio = figures["cold.engram.first.p50"] / figures[f"cold.{other}.first.p50"]
        assert figures[f"cold.ratio_p50_engram_to_{label}"] == pytest.approx(ratio, abs=0.01)


def test_summary_takes_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]
    assert latency_cold._summary(values) == {"p50": 10.5, "p95": 19.0, "max": 20.0}
    assert latency_cold._summary([3.0]) == {"p50": 3.0, "p95": 3.0, "max": 3.0}


@pytest.mark.parametrize(
    "argv",
    [
        ["--cold", "3"],  # no --tenants: no small tenants to ask
        ["--cold", "3", "--tenants", "5", "--database-url", "postgresql://elsewhere/db"],  # cannot restart it
        ["--cold-only", "--tenants", "5"],  # nothing left to measure
    ],
)
def test_cold_arguments_that_would_measure_nothing_are_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import recall_latency

    with pytest.raises(SystemExit) as exited:
        recall_latency.main(["--sizes", "", *argv])
    assert exited.value.code == 2
    assert "--cold" in capsys.readouterr().err


async def test_a_load_can_build_the_graphs_after_the_rows(db: Any, tenant: str, other_tenant: str) -> None:
    index = PgVectorIndex(db, 384, exact_below=100)
    sizes = {tenant: 150, other_tenant: 60}
    try:
        assert await load(db, index, sizes, interleave=True, graphs_after=True) > 0
        async with db.system() as conn:
            valid = {
                t: await conn.fetchval("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)", name)
                for t, name in ((t, graph_name(t, 384)) for t in sizes)
            }
            docs = {t: await conn.fetchval("SELECT doc_count FROM search_stats WHERE tenant_id = $1", t) for t in sizes}
        assert valid == {tenant: True, other_tenant: None}  # only the tenant over the threshold
        assert docs == sizes
    finally:
        async with db.system() as conn:
            await conn.execute("DELETE FROM observations WHERE tenant_id = ANY($1::text[])", list(sizes))
        await index.drop_graph(tenant)
