"""What metrics and traces cost (R-17.1): an HTTP request, a published event, a worker batch,
and the imports a cold start pays, each against the same work without them, in the same run.

    python -m bench.observability [--requests 2000] [--rounds 5] [--json]

- http: in-process requests (httpx ASGI transport) to one FastAPI route, the app bare vs the
  same app with `install_observability` (route template, histogram, server span, headers).
- event: `to_nats_binary` of a CloudEvent vs `stamp` + `to_nats_binary` inside a span.
- batch: a worker's `consume` span over 200 events vs none (per batch).
- imports: a process importing what every function imports anyway, with and without
  `prometheus_client` and `opentelemetry.sdk.trace` (a cold start pays the difference).
Rounds alternate baseline and instrumented runs; medians are reported with their ratio. The SDK
runs with no exporter (the default), as in a cluster without OTEL_* variables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from bench._common import machine, table


def _app(instrumented: bool) -> Any:
    from fastapi import FastAPI

    from engram.runtime.observability import TELEMETRY, install_observability

    # the bare app without FastAPI's own spans either
    app = FastAPI(telemetry=TELEMETRY if instrumented else {"tracing": False})

    @app.get("/api/items/{item_id}")
    async def item(item_id: int) -> dict[str, int]:
        return {"id": item_id}

    if instrumented:
        install_observability(app, "bench")
    return app


async def _requests(app: Any, n: int) -> float:
    import httpx

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        started = time.perf_counter()
        for i in range(n):
            await client.get(f"/api/items/{i}", headers={"traceparent": f"00-{i + 1:032x}-{i + 1:016x}-01"})
        return (time.perf_counter() - started) / n * 1e6


def _events(n: int, stamped: bool) -> float:
    from engram.adapters.nats_binding import to_nats_binary
    from engram.domain.events import new_event
    from engram.instrumentation import tracing

    events = [
        new_event("io.engram.observation.created.v1", {"observation_id": str(i)}, tenant_id="t", source="/b")
        for i in range(n)
    ]
    with tracing.span("bench"):
        started = time.perf_counter()
        for event in events:
            to_nats_binary(tracing.stamp(event) if stamped else event)
        return (time.perf_counter() - started) / n * 1e6


def _batches(n: int, traced: bool) -> float:
    from engram.domain.events import new_event
    from engram.instrumentation import tracing

    batch = []
    for i in range(200):
        event = new_event("io.engram.observation.created.v1", {}, tenant_id="t", source="/b")
        event["traceparent"] = f"00-{i + 1:032x}-{i + 1:016x}-01"  # the worst case: a trace per event, linked
        batch.append(event)
    started = time.perf_counter()
    for _ in range(n):
        if traced:
            with tracing.consume("bench", batch):
                pass
        else:
            [e.get_attributes() for e in batch]
    return (time.perf_counter() - started) / n * 1e6


# what every function imports anyway (the baseline of the imports measure)
FUNCTION_IMPORTS = "import fastapi, pydantic, nats, structlog, cloudevents.http, httpx"


def _import_ms(code: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.observability", description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from engram.instrumentation import tracing

    tracing.setup("bench")
    bare, instrumented = _app(False), _app(True)
    asyncio.run(_requests(bare, 200))  # warm both paths
    asyncio.run(_requests(instrumented, 200))
    runs: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in ("http", "event", "batch", "imports")}
    for _ in range(args.rounds):
        runs["http"][0].append(asyncio.run(_requests(bare, args.requests)))
        runs["http"][1].append(asyncio.run(_requests(instrumented, args.requests)))
        runs["event"][0].append(_events(5_000, stamped=False))
        runs["event"][1].append(_events(5_000, stamped=True))
        runs["batch"][0].append(_batches(500, traced=False))
        runs["batch"][1].append(_batches(500, traced=True))
    runs["imports"][0].append(_import_ms(FUNCTION_IMPORTS, 7))
    runs["imports"][1].append(_import_ms(f"{FUNCTION_IMPORTS}, prometheus_client, opentelemetry.sdk.trace", 7))

    units = {"http": "µs/request", "event": "µs/event", "batch": "µs/batch of 200", "imports": "ms/process"}
    rows = []
    summary: dict[str, Any] = {"bench": "observability", **machine(), "rounds": args.rounds}
    for name, (base, with_) in runs.items():
        b, w = statistics.median(base), statistics.median(with_)
        rows.append([name, units[name], b, w, w - b, f"{w / b:.2f}"])
        summary[name] = {
            "unit": units[name],
            "baseline": round(b, 2),
            "instrumented": round(w, 2),
            "added": round(w - b, 2),
            "ratio": round(w / b, 3),
        }
    table(
        "metrics and traces: cost against the same work without them (medians)",
        ["measure", "unit", "baseline", "instrumented", "added", "ratio"],
        rows,
    )
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
