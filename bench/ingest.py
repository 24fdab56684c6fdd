"""Ingest throughput: domain events -> observations, end to end, against a direct COPY baseline.

`python -m bench.ingest [--events N] [--json]`

Pipeline: N domain CloudEvents are published to JetStream (binary mode, concurrently), the
extract-observation worker runs as its own process (`python -m functions.extract_observation`,
as in production) and the clock stops when all N observations exist. Baseline, same run:
the same N rows written with asyncpg `copy_records_to_table`. Target: pipeline >= 25 % of it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg

from bench._common import console, emit_json, machine, servers, table
from engram.adapters.nats_auth import bus_credentials
from engram.adapters.nats_bus import NatsBus, connect
from engram.bootstrap import load_rules
from engram.domain.events import new_event
from engram.domain.observation import ObservationDraft, Provenance, Source, TriggerSource
from engram.domain.rules import apply_rule, event_context
from engram.settings import get_settings

EVENT_TYPE = "com.example.orders.order.completed.v1"


def events(tenant: str, n: int) -> list[Any]:
    return [
        new_event(
            EVENT_TYPE,
            {"order_id": f"{i:07d}", "customer_name": f"Kunde {i % 997}", "total": f"{(i * 37) % 10000}.00"},
            tenant_id=tenant,
            source="/bench/orders",
            event_id=f"bench-{tenant}-{i}",
            time="2026-11-30T10:00:00+00:00",
        )
        for i in range(n)
    ]


def drafts_for(tenant: str, evs: list[Any]) -> list[ObservationDraft]:
    (rule,) = load_rules(get_settings()).for_type(EVENT_TYPE)
    out = []
    for ev in evs:
        rendered = apply_rule(rule, event_context(ev.get_attributes(), ev.get_data()))
        out.append(
            ObservationDraft(
                tenant_id=tenant,
                source=Source.system,
                trigger_source=TriggerSource.hook,
                provenance=Provenance(source_event_id=ev["id"]),
                **rendered.model_dump(),
            )
        )
    return out


async def direct_copy(url: str, drafts: list[ObservationDraft]) -> float:
    now = datetime.now(UTC)
    records = [
        (
            uuid.uuid4(),
            d.tenant_id,
            d.user_id,
            d.team_ids,
            d.type,
            d.title,
            d.narrative,
            d.facts,
            d.concepts,
            d.tags,
            d.key,
            d.content_hash,
            d.discovery_tokens,
            d.priority.value,
            d.source.value,
            d.verified,
            d.confidence,
            d.scope.value,
            d.trigger_source.value,
            d.provenance.source_event_id,
            now,
            now,
        )
        for d in drafts
    ]
    columns = [
        "id",
        "tenant_id",
        "user_id",
        "team_ids",
        "type",
        "title",
        "narrative",
        "facts",
        "concepts",
        "tags",
        "key",
        "content_hash",
        "discovery_tokens",
        "priority",
        "source",
        "verified",
        "confidence",
        "scope",
        "trigger_source",
        "source_event_id",
        "created_at",
        "updated_at",
    ]
    conn = await asyncpg.connect(url)
    try:
        started = time.perf_counter()
        await conn.copy_records_to_table("observations", records=records, columns=columns)
        return time.perf_counter() - started
    finally:
        await conn.close()


async def pipeline(url: str, nats_url: str, tenant: str, evs: list[Any]) -> tuple[float, float]:
    nc = await connect(nats_url, credentials=bus_credentials(get_settings()))  # the admin (bench._common)
    bus = NatsBus(nc, publish_concurrency=512)
    conn = await asyncpg.connect(url)
    try:
        started = time.perf_counter()
        await bus.publish_many(evs)
        published = time.perf_counter() - started
        while True:
            done = await conn.fetchval("SELECT count(*) FROM observations WHERE tenant_id = $1", tenant)
            if done >= len(evs):
                break
            if time.perf_counter() - started > 600:
                raise TimeoutError(f"only {done} of {len(evs)} observations after 600 s")
            await asyncio.sleep(0.02)
        return time.perf_counter() - started, published
    finally:
        await conn.close()
        await nc.drain()


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """One extract-observation replica, as KEDA would start it; returns once it consumes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "functions.extract_observation"],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    for raw in proc.stderr:  # wait until it consumes, so its start-up is not timed
        if b"runner.consuming" in raw:
            break
    # keep draining its log so a full pipe never blocks it
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return proc


def measure(s: Any, n: int, batch: int, replicas: int) -> tuple[float, float]:
    env = {**os.environ, "ENGRAM_BATCH_SIZE": str(batch), "ENGRAM_LOG_LEVEL": "INFO"}
    workers = [start_worker(env) for _ in range(replicas)]
    try:
        warm = f"bench-warm-{uuid.uuid4().hex[:8]}"
        asyncio.run(pipeline(s.database_url, s.nats_url, warm, events(warm, 200)))  # warm caches and pools
        tenant = f"bench-pipe-{uuid.uuid4().hex[:8]}"
        return asyncio.run(pipeline(s.database_url, s.nats_url, tenant, events(tenant, n)))
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=500, help="worker fetch batch (ENGRAM_BATCH_SIZE)")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2], help="worker processes to measure")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with servers() as s:
        t_base = f"bench-copy-{uuid.uuid4().hex[:8]}"
        copy_s = asyncio.run(direct_copy(s.database_url, drafts_for(t_base, events(t_base, args.events))))
        runs = {r: measure(s, args.events, args.batch, r) for r in args.replicas}
    copy_rate = args.events / copy_s
    figures: dict[str, Any] = {
        **machine(),
        "events": args.events,
        "batch": args.batch,
        "direct_copy.rows_per_s": round(copy_rate, 1),
        "target_ratio": 0.25,
    }
    rows: list[list[Any]] = [["direct COPY (baseline)", copy_s, copy_rate, "100 %"]]
    for replicas, (total_s, publish_s) in runs.items():
        rate = args.events / total_s
        figures[f"pipeline.{replicas}.events_per_s"] = round(rate, 1)
        figures[f"pipeline.{replicas}.publish_s"] = round(publish_s, 3)
        figures[f"pipeline.{replicas}.ratio"] = round(rate / copy_rate, 3)
        rows.append([f"pipeline, {replicas} worker(s)", total_s, rate, f"{rate / copy_rate:.1%}"])
    best = max(figures[f"pipeline.{r}.ratio"] for r in runs)
    figures["ratio"] = best
    figures["target_met"] = best >= 0.25
    table(
        f"ingest: {args.events} domain events end to end (publish -> extract-observation -> rows), batch {args.batch}",
        ["path", "seconds", "per second", "of baseline"],
        rows,
    )
    console.print(f"best pipeline / direct COPY = {best:.1%} (target >= 25 %)")
    if args.json:
        emit_json(figures)


if __name__ == "__main__":
    main()
