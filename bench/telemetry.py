"""Telemetry API over a million events (R-10): `python -m bench.telemetry [--events N] [--json]`.

Starts its own PostgreSQL and NATS (the embedded ones the tests use) in a temporary folder,
applies the migrations, generates typed events with COPY (one tenant with `--events` rows
spread over 35 days, plus a second tenant with a fifth of that as neighbours in the same
table), then times every telemetry endpoint end to end through the FastAPI app (JWT, SQL
with row-level security, JSON). The baseline, measured in the same run on the same data,
is the same overview computed straight from the raw `ai_events` rows without the rollups;
the ratio baseline / rollup is what the rollups buy on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

TENANT = "bench"
NEIGHBOUR = "bench-neighbour"
TOOLS = [f"tool_{i:02d}" for i in range(30)]
MODELS = ["claude-sonnet-4-6", "claude-opus-4-7", "claude-haiku-4-5"]

# share of each taxonomy event among all events
MIX = [
    ("chat.turn_completed", 0.40),
    ("chat.tool_used", 0.35),
    ("chat.model_auto_routed", 0.12),
    ("memory.extraction", 0.08),
    ("chat.error", 0.025),
    ("chat.compaction_fired", 0.01),
    ("chat.ptl_recovery", 0.005),
    ("memory.cache_break", 0.005),
    ("chat.approval_decision", 0.003),
    ("chat.advisor_auto_triggered", 0.002),
]


def metadata(name: str, rng: random.Random) -> dict[str, Any]:
    """Valid metadata for every taxonomy event (checked against the models before loading)."""
    if name == "chat.turn_completed":
        inp, out = rng.randint(200, 20_000), rng.randint(50, 4_000)
        return {
            "model": rng.choice(MODELS),
            "inputTokens": inp,
            "outputTokens": out,
            "cacheCreationInputTokens": rng.choice([0, 0, 0, 2_000]),
            "cacheReadInputTokens": rng.choice([0, 5_000, 12_000]),
            "costUsd": round(inp * 3e-6 + out * 15e-6, 6),
            "durationMs": rng.randint(300, 30_000),
            "ragHits": rng.randint(0, 12),
            "offline": False,
        }
    if name == "chat.tool_used":
        return {"toolName": rng.choice(TOOLS), "durationMs": rng.randint(5, 5_000), "success": rng.random() > 0.07}
    if name == "chat.model_auto_routed":
        return {"selectedModel": rng.choice(MODELS), "tier": "default", "reason": "length", "confidence": 0.8}
    if name == "memory.extraction":
        return {"trigger": "chat", "count": rng.randint(0, 5), "dedupHits": 0, "durationMs": 40, "status": "ok"}
    if name == "chat.error":
        return {"stage": "llm", "errorType": "overloaded", "message": "upstream overloaded"}
    if name == "chat.compaction_fired":
        return {"summaryChars": 1_800, "iterationInputTokens": 150_000}
    if name == "chat.ptl_recovery":
        return {"model": MODELS[0], "droppedMessages": 6, "succeeded": True}
    if name == "memory.cache_break":
        return {"reason": "system prompt changed"}
    if name == "chat.approval_decision":
        return {"action": "send_mail", "decision": "approved"}
    return {"trigger": "keyword", "executorModel": MODELS[0], "durationMs": 2_500}


def _check_templates() -> None:
    from engram.domain.telemetry import validate_metadata

    rng = random.Random(0)
    for name, _ in MIX:
        for _ in range(20):
            validate_metadata(name, metadata(name, rng))


async def load(url: str, tenant: str, count: int, *, days: int, seed: int, chunk: int = 100_000) -> float:
    """COPY `count` events into ai_events (the rollup trigger runs once per chunk); seconds taken."""
    import asyncpg

    rng = random.Random(seed)
    names = [n for n, _ in MIX]
    weights = [w for _, w in MIX]
    users = [f"user-{i:03d}" for i in range(500)]
    chats = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(20_000)]
    now = datetime.now(UTC)
    span = days * 86_400
    conn = await asyncpg.connect(url)
    elapsed = 0.0
    try:
        done = 0
        while done < count:
            n = min(chunk, count - done)
            rows = []
            for name in rng.choices(names, weights, k=n):
                at = now - timedelta(seconds=rng.random() * span)
                rows.append((tenant, name, rng.choice(users), rng.choice(chats), json.dumps(metadata(name, rng)), at))
            started = time.perf_counter()
            await conn.copy_records_to_table(
                "ai_events",
                records=rows,
                columns=["tenant_id", "event_name", "user_id", "chat_id", "metadata", "created_at"],
            )
            elapsed += time.perf_counter() - started
            done += n
        await conn.execute(
            "ANALYZE ai_events; ANALYZE ai_events_hourly; ANALYZE ai_events_hourly_users;"
            " ANALYZE ai_events_hourly_tools"
        )
    finally:
        await conn.close()
    return elapsed


BASELINE_OVERVIEW = """
SELECT count(*) AS events,
       count(*) FILTER (WHERE event_name = 'chat.turn_completed') AS turns,
       coalesce(sum((metadata->>'costUsd')::float8), 0) AS cost,
       coalesce(sum((metadata->>'inputTokens')::bigint) FILTER (WHERE event_name = 'chat.turn_completed'), 0),
       coalesce(sum((metadata->>'outputTokens')::bigint) FILTER (WHERE event_name = 'chat.turn_completed'), 0),
       coalesce(sum((metadata->>'cacheReadInputTokens')::bigint) FILTER (WHERE event_name = 'chat.turn_completed'), 0),
       coalesce(sum((metadata->>'cacheCreationInputTokens')::bigint)
                FILTER (WHERE event_name = 'chat.turn_completed'), 0),
       count(*) FILTER (WHERE event_name = 'chat.error') AS errors,
       count(*) FILTER (WHERE event_name = 'chat.ptl_recovery') AS ptl,
       count(*) FILTER (WHERE event_name = 'chat.tool_used') AS tools
FROM ai_events WHERE tenant_id = $1 AND created_at >= $2 AND created_at < $3
"""


async def timed(call: Callable[[], Awaitable[Any]], runs: int, warmup: int = 3) -> dict[str, float]:
    for _ in range(warmup):
        await call()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p95_ms": round(samples[min(len(samples) - 1, round(0.95 * len(samples)) - 1)], 2),
        "max_ms": round(samples[-1], 2),
    }


async def run(events: int, runs: int) -> dict[str, Any]:
    from engram.development.embedded import EmbeddedNats, EmbeddedPostgres

    _check_templates()
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-telemetry-"))
    pg = EmbeddedPostgres(tmp / "postgres").start()
    nats = EmbeddedNats(tmp / "nats").start()
    secret = secrets.token_urlsafe(32)
    os.environ.update({"DATABASE_URL": pg.url, "NATS_URL": nats.url, "ENGRAM_JWT_SECRET": secret, **nats.client_env()})
    try:
        import httpx

        from engram import bootstrap
        from engram.adapters.migrations import apply_migrations
        from engram.adapters.nats_bus import declare_streams
        from engram.services.auth import issue_jwt
        from engram.settings import get_settings

        get_settings.cache_clear()
        await apply_migrations(pg.url)
        await declare_streams(nats.url, "ENGRAM", nats.credentials("engram"))
        copy_main = await load(pg.url, TENANT, events, days=35, seed=1)
        copy_neighbour = await load(pg.url, NEIGHBOUR, events // 5, days=35, seed=2)

        from functions.telemetry_query.main import app

        token = issue_jwt(secret, tenant_id=TENANT, user_id="bench", permissions=["view:FE_DevTools"])
        headers = {"Authorization": f"Bearer {token}"}
        services = await bootstrap.get_services()
        results: dict[str, dict[str, float]] = {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://tq") as client:

            def endpoint(path: str) -> Callable[[], Awaitable[Any]]:
                async def call() -> Any:
                    r = await client.get(path, headers=headers)
                    r.raise_for_status()
                    return r

                return call

            async def baseline(period: timedelta) -> Any:
                now = datetime.now(UTC)
                async with services.db.tenant(TENANT) as conn:
                    return await conn.fetchrow(BASELINE_OVERVIEW, TENANT, now - period, now)

            first = (await client.get("/api/ai/telemetry/overview?period=30d", headers=headers)).json()
            baseline_row = await baseline(timedelta(days=30))
            cases = {
                "overview 1h": "/api/ai/telemetry/overview?period=1h",
                "overview 24h": "/api/ai/telemetry/overview?period=24h",
                "overview 7d": "/api/ai/telemetry/overview?period=7d",
                "overview 30d": "/api/ai/telemetry/overview?period=30d",
                "events 30d page 1": "/api/ai/telemetry/events?period=30d&size=50",
                "events 30d page 200": "/api/ai/telemetry/events?period=30d&size=50&page=200",
                "events 30d eventName": "/api/ai/telemetry/events?period=30d&eventName=chat.error",
                "events 30d userId": "/api/ai/telemetry/events?period=30d&userId=user-042",
                "timeseries turns 7d hour": "/api/ai/telemetry/timeseries?metric=turns&period=7d&granularity=hour",
                "timeseries cost 30d day": "/api/ai/telemetry/timeseries?metric=cost&period=30d&granularity=day",
                "top-tools 30d": "/api/ai/telemetry/top-tools?period=30d&limit=10",
                "top-users 30d": "/api/ai/telemetry/top-users?period=30d&limit=10",
            }
            for label, path in cases.items():
                results[label] = await timed(endpoint(path), runs)

            results["baseline: overview 30d from raw rows"] = await timed(
                lambda: baseline(timedelta(days=30)), max(5, runs // 3)
            )
            results["baseline: overview 24h from raw rows"] = await timed(lambda: baseline(timedelta(days=1)), runs)
        async with services.db.system() as conn:
            sizes = {
                r["name"]: r["mb"]
                for r in await conn.fetch(
                    "SELECT relname AS name, round(pg_total_relation_size(oid) / 1048576.0, 1)::float AS mb"
                    " FROM pg_class WHERE relname IN ('ai_events', 'ai_events_hourly', 'ai_events_hourly_users',"
                    " 'ai_events_daily_users', 'ai_events_hourly_tools')"
                )
            }
            rollup_rows = await conn.fetchval(
                "SELECT (SELECT count(*) FROM ai_events_hourly) + (SELECT count(*) FROM ai_events_hourly_users)"
                " + (SELECT count(*) FROM ai_events_daily_users) + (SELECT count(*) FROM ai_events_hourly_tools)"
            )
        # the two ways agree (the rollup answer and the raw one are taken a moment apart)
        agree = abs(first["turns"] - baseline_row["turns"]) <= max(2, first["turns"] // 10_000)
        await bootstrap.shutdown()
        overview = results["overview 30d"]
        base = results["baseline: overview 30d from raw rows"]
        return {
            "events_tenant": events,
            "events_total": events + events // 5,
            "copy_seconds": round(copy_main + copy_neighbour, 2),
            "copy_events_per_second": round((events + events // 5) / (copy_main + copy_neighbour)),
            "rollup_rows": rollup_rows,
            "sizes_mb": sizes,
            "overview_30d_turns": first["turns"],
            "rollup_and_raw_agree": agree,
            "endpoints": results,
            "overview_30d_p95_ms": overview["p95_ms"],
            "baseline_30d_p95_ms": base["p95_ms"],
            "ratio_baseline_over_rollup_p95": round(base["p95_ms"] / overview["p95_ms"], 1),
            "target_met": overview["p95_ms"] < 200
            and all(v["p95_ms"] < 200 for k, v in results.items() if "overview" in k and "baseline" not in k),
            "runs": runs,
        }
    finally:
        nats.stop()
        pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # about 2 GB of PostgreSQL data at a million events


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.telemetry", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000, help="events of the measured tenant")
    parser.add_argument("--runs", type=int, default=40, help="timed requests per endpoint")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    from engram.runtime.logs import configure_logging

    os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")
    configure_logging()
    figures = asyncio.run(run(args.events, args.runs))
    if args.json:
        print(json.dumps(figures))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"telemetry API, {figures['events_total']:,} events ({figures['events_tenant']:,} in the tenant)"
    )
    for column in ("endpoint", "p50 ms", "p95 ms", "max ms"):
        table.add_column(column, justify="left" if column == "endpoint" else "right")
    for label, t in figures["endpoints"].items():
        table.add_row(label, f"{t['p50_ms']:.1f}", f"{t['p95_ms']:.1f}", f"{t['max_ms']:.1f}")
    console = Console()
    console.print(table)
    console.print(
        f"COPY {figures['copy_events_per_second']:,} events/s with rollups ({figures['copy_seconds']} s); "
        f"rollup rows {figures['rollup_rows']:,}; sizes MB {figures['sizes_mb']}\n"
        f"overview 30d p95 {figures['overview_30d_p95_ms']} ms vs raw {figures['baseline_30d_p95_ms']} ms: "
        f"x{figures['ratio_baseline_over_rollup_p95']}; target <200 ms met: {figures['target_met']}"
    )


if __name__ == "__main__":
    main()
