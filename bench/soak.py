"""Bounded growth (R-16.2, issue 16): 100,000 events through extract-observation (and what they
cause through embed-index), measuring the workers' memory and the two tables that only grow
unless pruned: the inbox (`processed_events`) and the embedding cache.

The workers run as their own processes (`python -m functions.<name>`, static embedder) with a
short retention so the soak can show the steady state in minutes: `ENGRAM_INBOX_RETENTION_HOURS`
= 1 minute (below the 25-minute redelivery horizon the default of 24 h respects; the worker
logs a warning saying so), `ENGRAM_EMBEDDING_CACHE_DAYS` = 1 minute, pruning every 10 s. The
events come in chunks of 10,000 published to JetStream; after each chunk the bench waits until
both consumers have caught up and samples: worker RSS (`/proc/<pid>/status`), rows and total
size of each table, and the observations (which grow by design). A baseline run with pruning
off (`--no-prune`) is the comparison.

    python -m bench.soak [--events 100000] [--chunk 10000] [--no-prune] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench._common import console, machine, table
from engram.adapters.nats_binding import to_nats_binary
from engram.adapters.nats_bus import NatsBus, connect
from engram.development.embedded import EmbeddedNats, EmbeddedPostgres
from engram.domain.events import new_event, subject_for
from engram.ports import RawMessage

REPO = Path(__file__).resolve().parents[1]
TYPE = "com.example.orders.order.completed.v1"
WORKERS = {"extract-observation": "extract_observation", "embed-index": "embed_index"}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def publish_chunk(bus: NatsBus, start: int, count: int, tenants: int = 5) -> None:
    for offset in range(0, count, 1000):
        items = []
        for i in range(start + offset, start + min(count, offset + 1000)):
            event = new_event(
                TYPE,
                {"order_id": f"s-{i}", "customer_name": f"Kunde {i % 997}", "total": f"{i}.00"},
                tenant_id=f"soak-{i % tenants}",
                source="/bench/soak",
                event_id=f"soak-{i}-{uuid.uuid4().hex[:6]}",
            )
            items.append(RawMessage(subject_for(event), *to_nats_binary(event), event_id=str(event["id"])))
        for result in await bus.publish_raw_many(items, timeout=60):
            if isinstance(result, BaseException):
                raise result


async def caught_up(monitor: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    calm = 0
    async with httpx.AsyncClient(timeout=5) as client:
        while time.monotonic() < deadline:
            jsz = (await client.get(f"{monitor}/jsz?consumers=true")).json()
            pending = sum(
                c["num_pending"] + c["num_ack_pending"]
                for account in jsz.get("account_details", [])
                for stream in account.get("stream_detail", [])
                for c in stream.get("consumer_detail", [])
                if c["name"] in WORKERS
            )
            calm = calm + 1 if pending == 0 else 0
            if calm >= 3:
                return
            await asyncio.sleep(0.5)
    raise RuntimeError("the workers did not catch up")


async def sizes(db_url: str) -> dict[str, Any]:
    conn = await asyncpg.connect(db_url)
    try:
        out: dict[str, Any] = {}
        for name in ("processed_events", "embedding_cache", "observations"):
            out[f"{name}_rows"] = await conn.fetchval(f"SELECT count(*) FROM {name}")
            out[f"{name}_mb"] = round(await conn.fetchval("SELECT pg_total_relation_size($1)", name) / 2**20, 1)
        return out
    finally:
        await conn.close()


async def soak(pg: EmbeddedPostgres, nats: EmbeddedNats, pids: dict[str, int], events: int, chunk: int) -> list[Any]:
    bus = NatsBus(
        await connect(nats.url, name="soak-producer", credentials=nats.credentials("engram")), publish_timeout=30
    )
    samples: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        for start in range(0, events, chunk):
            await publish_chunk(bus, start, min(chunk, events - start))
            await caught_up(nats.monitor_url)
            await asyncio.sleep(12)  # one pruning round after the chunk
            sample = {"events": start + chunk, "elapsed_s": round(time.monotonic() - started, 1)}
            sample.update({f"rss_{n}_mb": round(rss_mb(pid), 1) for n, pid in pids.items()})
            sample.update(await sizes(pg.url))
            samples.append(sample)
            console.print(sample)
    finally:
        await bus.close()
    return samples


def run(events: int, chunk: int, prune: bool) -> list[Any]:
    from engram.adapters.migrations import apply_migrations
    from engram.adapters.nats_bus import declare_streams

    root = Path(tempfile.mkdtemp(prefix="engram-soak-"))
    pg = EmbeddedPostgres(root / "pg").start()
    nats = EmbeddedNats(root / "nats").start()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        asyncio.run(apply_migrations(pg.url))
        asyncio.run(declare_streams(nats.url, "ENGRAM", nats.credentials("engram")))
        env = {
            **os.environ,
            "DATABASE_URL": pg.url,
            "NATS_URL": nats.url,
            "ENGRAM_EMBEDDER": "static",
            "ENGRAM_LOG_LEVEL": "WARNING",
            "ENGRAM_INBOX_RETENTION_HOURS": str(1 / 60 if prune else 1000),
            "ENGRAM_EMBEDDING_CACHE_DAYS": str(1 / 1440 if prune else 1000),
            "ENGRAM_PRUNE_INTERVAL_SECONDS": "10",
        }
        for name, module in WORKERS.items():
            with open(root / f"{name}.log", "wb") as out:
                procs[name] = subprocess.Popen(
                    [sys.executable, "-m", f"functions.{module}"],
                    cwd=REPO,
                    env={**env, **nats.client_env(name)},  # each worker as its own bus user
                    stdout=out,
                    stderr=out,
                )
        time.sleep(3)
        return asyncio.run(soak(pg, nats, {n: p.pid for n, p in procs.items()}, events, chunk))
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(20)
        nats.stop()
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--no-prune", action="store_true", help="the baseline: retention far beyond the run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    samples = run(args.events, args.chunk, prune=not args.no_prune)
    columns = ["events", "elapsed_s", *[k for k in samples[0] if k not in ("events", "elapsed_s")]]
    table(
        "bench.soak" + (" (no pruning)" if args.no_prune else ""), columns, [[s[c] for c in columns] for s in samples]
    )
    warm = samples[min(2, len(samples) - 1)]
    last = samples[-1]
    growth = {
        key: round(last[key] / warm[key], 2) if warm[key] else None
        for key in last
        if key.startswith(("rss_", "processed_events", "embedding_cache"))
    }
    console.print(f"growth from {warm['events']:,} to {last['events']:,} events (ratio): {growth}")
    print(
        json.dumps(
            {
                "bench": "soak",
                "machine": machine(),
                "prune": not args.no_prune,
                "samples": samples,
                "growth_after_warmup": growth,
            }
        )
    )


if __name__ == "__main__":
    main()
