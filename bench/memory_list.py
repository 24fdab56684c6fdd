"""The memory list at every tenant size: `python -m bench.memory_list [--json]`.

The REST list (`GET /api/ai/memory`, `MemoryService.list`) of one caller of each `bench.
recall_latency` tenant (`--sizes`, loaded into its `--state` first where missing), 50 memories
a page, timed through the service (its transaction, row-level security and the adapter's two
statements). Baseline in the same run: the same page with its total counted exactly, as every
page did before `domain.paging` (a count with no cap). Rows:

- `first page, exact total` (baseline) and `first page` (the total counted up to `paging.TOTAL_CAP`);
- `page 20 / 200 by number`: an OFFSET of 950 / 9,950 rows;
- `page 200 by mark`: the same page, asked `after` the `next` of page 199 (a range read);
- `last page by number` and `last page by mark`: the caller's last page.

p50 / p95 ms over `--requests` calls each, alternating the variants. Nothing is written.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from bench._common import emit_json, machine, table
from bench.recall_latency import SEED, label, load, parse_sizes, percentiles, principal_for
from engram.adapters.pgvector_index import PgVectorIndex
from engram.adapters.postgres import Database
from engram.adapters.unit_of_work import PgUnitOfWork
from engram.domain.scopes import Principal
from engram.ports import EventBus
from engram.services.memory import MemoryService, Page

SIZE = 50
UNCAPPED = 10**12
VARIANTS = (
    "first page, exact total",
    "first page",
    "page 20 by number",
    "page 200 by number",
    "page 200 by mark",
    "last page by number",
    "last page by mark",
)


async def marks(service: MemoryService, caller: Principal, pages: list[int]) -> dict[int, str | None]:
    """The mark each page of `pages` starts after: the `next` of the page before it, walked by marks."""
    out: dict[int, str | None] = {1: None}
    after: str | None = None
    for n in range(1, max(pages)):
        page = await service.list(caller, size=SIZE, after=after)
        after = page.next
        out[n + 1] = after
    return out


async def measure_size(db: Database, size: int, requests: int) -> dict[str, Any]:
    tenant = f"latency-{label(size)}"
    caller = principal_for(tenant, random.Random(SEED))
    service = MemoryService(PgUnitOfWork(db, None), cast(EventBus, None), frozenset())
    exact = MemoryService(PgUnitOfWork(db, None), cast(EventBus, None), frozenset())
    exact.total_cap = UNCAPPED
    counted = await exact.list(caller, size=1)
    last = max(1, -(-counted.total // SIZE))
    start = await marks(service, caller, [200, last] if last >= 200 else [last])
    calls: dict[str, Callable[[], Awaitable[Page]]] = {
        "first page, exact total": lambda: exact.list(caller, size=SIZE),
        "first page": lambda: service.list(caller, size=SIZE),
        "page 20 by number": lambda: service.list(caller, size=SIZE, page=20),
        "page 200 by number": lambda: service.list(caller, size=SIZE, page=200),
        "page 200 by mark": lambda: service.list(caller, size=SIZE, after=start.get(200)),
        "last page by number": lambda: service.list(caller, size=SIZE, page=last),
        "last page by mark": lambda: service.list(caller, size=SIZE, after=start[last]),
    }
    if last < 200:  # a caller with fewer than 200 pages has none of them
        calls = {k: v for k, v in calls.items() if "200" not in k}
    # the same page either way, or the bench compares different work
    if last >= 200:
        assert [o.id for o in (await calls["page 200 by number"]()).items] == [
            o.id for o in (await calls["page 200 by mark"]()).items
        ]
    assert [o.id for o in (await calls["last page by number"]()).items] == [
        o.id for o in (await calls["last page by mark"]()).items
    ]
    timings: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(2):  # warm-up
        for call in calls.values():
            await call()
    for _ in range(requests):
        for name, call in calls.items():
            t0 = time.perf_counter()
            await call()
            timings[name].append((time.perf_counter() - t0) * 1000)
    figures: dict[str, Any] = {f"{label(size)}.visible": counted.total, f"{label(size)}.pages": last}
    for name, values in timings.items():
        for stat, value in percentiles(values).items():
            figures[f"{label(size)}.{name}.{stat}"] = value
    first, baseline = timings["first page"], timings["first page, exact total"]
    figures[f"{label(size)}.first_page_ratio_p50"] = round(statistics.median(first) / statistics.median(baseline), 3)
    return figures


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from engram.adapters.migrations import migrate
    from engram.development.embedded import EmbeddedPostgres

    pg = EmbeddedPostgres(args.state_dir / "postgres", settings={"shared_buffers": "2GB"}).start()
    figures: dict[str, Any] = {**machine(), "requests": args.requests, "page_size": SIZE}
    try:
        await migrate(pg.url)
        db = await Database.connect(pg.url, max_size=4)
        try:
            dims = 384  # the bench's tenants were loaded with e5-small's width (`bench.recall_latency`)
            await load(db, PgVectorIndex(db, dims), {f"latency-{label(n)}": n for n in args.sizes}, interleave=False)
            for size in args.sizes:
                figures.update(await measure_size(db, size, args.requests))
        finally:
            await db.close()
    finally:
        pg.stop()
    return figures


def print_table(figures: dict[str, Any], sizes: list[int]) -> None:
    rows = []
    for size in sizes:
        key = label(size)
        for name in VARIANTS:
            if f"{key}.{name}.p50" in figures:
                rows.append(
                    [key, figures[f"{key}.visible"], name, figures[f"{key}.{name}.p50"], figures[f"{key}.{name}.p95"]]
                )
    table("memory list, 50 a page (ms)", ["tenant", "visible to the caller", "request", "p50", "p95"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory_list", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1k,10k,100k"), help="e.g. 1k,10k,100k,1m")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--state", default=".engram/bench-latency", help="bench.recall_latency's state")
    args = parser.parse_args(argv)
    from engram.runtime.logs import configure_logging

    configure_logging("WARNING")
    args.state_dir = Path(args.state).resolve()
    figures = asyncio.run(run(args))
    print_table(figures, args.sizes)
    if args.json:
        emit_json(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
