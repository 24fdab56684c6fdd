"""`python -m bench.chat_turn`: the time chat-turn adds around the LLM call.

A tenant with 10k observations; the scripted Messages API (in a process of its own, so it does
not compete for this process's GIL) answers instantly. Each turn goes through the real
chat-turn app in-process (authentication, multi-stream recall, prompt build, the SDK call,
persistence, telemetry, outbox publish). Added time = turn time - time inside LLM calls (from
the `Server-Timing` header). Reported at concurrency 1 and 8, p50/p95; target p95 <= 40 ms.
Stages: recall starts once the chat is checked and runs beside the rest of the preparation,
so "recall" is what the turn still waited for after preparing, "recall_total" all of it.

A CPU probe beside the turns (`bench.cpu_probe`: fixed work in a process of its own, its CPU
time measured) marks the turns during which the shared VM's cores ran slow for everyone; the
p50/p95 over the other turns ("at speed") are reported beside the raw ones, which stay the
figures the target is judged on (`meets_target`).

`--llm-delay-ms N` makes the scripted API answer after N ms, and the workers start evenly spread
over that time: eight users whose turns wait for a model, as in production, instead of eight
turns in lockstep that only compete for the CPU. The issue's measurement is the default (0).

Baseline of the same run: `GET /api/ai/memory?size=10` on memory-api (authentication plus one
tenant transaction), so the ratio is comparable across runs on a noisy machine.

`--recall services` (default) uses `Services.recall`, the real recall service; it refuses to
run without it. `--recall fixed` replaces recall by a stub that answers instantly with seeded
observations: it measures chat-turn's own overhead with recall excluded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.cpu_probe import SLOWED, CpuProbe, ProbeRuns

TENANT = "bench"
USERS = ("alice", "bob", "carol", "dave")
TARGET_P95_MS = 40.0
MESSAGES = (
    "Was ist mit der Rechnung von Kunde {n} passiert?",
    "Wann hat Kunde {n} zuletzt bestellt?",
    "Soll ich Kunde {n} einen Rabatt auf die nächste Bestellung geben?",
    "What is the billing model for customer {n}?",
    "Tell me about the order history of customer {n}.",
    "Should we move customer {n} to quarterly billing?",
)
# `--messages all` adds these: two things in one message (each part searched in every stream,
# `recall_plan.with_parts`) and questions to the assistant (the `answers` stream of passages)
MORE_MESSAGES = (
    "Compare the billing model of customer {n} and the order history of customer {m}.",
    "Was hast du zu Kunde {n} gesagt, und wann hat Kunde {m} bestellt?",
    "What did you suggest for the invoice of customer {n}?",
    "Was hast du mir zur Rechnung von Kunde {n} empfohlen?",
)
TYPES = (
    "fact",
    "decision",
    "event",
    "concept",
    "preference",
    "identity",
    "project",
    "skill",
    "mistake",
    "context",
    "note",
)
console = Console(stderr=True)


def _serve_stub(conn: Any, delay_ms: float = 0.0) -> None:
    """The scripted Messages API in a child process: instant answers, or each after `delay_ms`."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.anthropic_server import AnthropicServer, slow, text

    def respond(req: Any) -> Any:
        reply = text("FACT_WHAT") if "fast" in req.model else text("Gern, hier ist die Antwort.")
        return slow(delay_ms / 1000, reply) if delay_ms else reply

    server = AnthropicServer()
    server.responder = respond
    server.start()
    conn.send(server.url)
    conn.recv()  # until the parent says stop
    server.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def server_timing(header: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if dur:
            out[name] = float(dur)
    return out


def drafts(count: int) -> list[Any]:
    from engram.domain.observation import ObservationDraft, Priority, Scope

    result = []
    for i in range(count):
        customer = i % 500
        kind = TYPES[i % len(TYPES)]
        user = USERS[i % len(USERS)] if i % 3 == 0 else None
        result.append(
            ObservationDraft(
                tenant_id=TENANT,
                user_id=user,
                type=kind,
                title=f"Kunde {customer}: {kind} Nr. {i} zu Bestellung {1000 + i} und Rechnung R-{7000 + i}",
                narrative=f"Customer {customer} ({kind}): order {1000 + i}, invoice R-{7000 + i}, "
                f"billing {'quarterly' if i % 2 else 'monthly'}, contact person number {i % 37}.",
                tags=[f"customer-{customer}", kind],
                scope=Scope.private if user and i % 2 else Scope.public,
                priority=Priority.high if i % 50 == 0 else Priority.normal,
            )
        )
    return result


class FixedRecall:
    """Recall stub for `--recall fixed`: seeded observations per type, no search at all."""

    def __init__(self, by_type: dict[str, list[Any]]) -> None:
        self.by_type = by_type

    async def search(self, principal: Any, query: Any) -> Any:
        from engram.domain.recall import RecallResult, SearchHit

        hits = []
        for kind in query.types or tuple(self.by_type):
            for obs in self.by_type.get(kind, [])[: query.limit]:
                hits.append(SearchHit(obs, 1.0, 1, 1, stream_origin=query.stream_origin))
        return RecallResult(uuid.uuid4(), hits[: query.limit])


async def seed(services: Any, count: int) -> None:
    from engram.domain.events import change_events

    batch = 1_000
    all_drafts = drafts(count)
    for start in range(0, count, batch):
        async with services.uow.tenant(TENANT) as tx:
            written = await tx.observations.write_many(all_drafts[start : start + batch])
            tx.emit(change_events([w.change for w in written], "/bench"))


async def wait_for_index(services: Any, timeout: float) -> None:
    """Run the embed-index worker in this process until its consumer has no pending messages."""
    import importlib.util

    from engram.domain.topology import consumer
    from engram.runtime.jetstream import PullRunner

    if importlib.util.find_spec("functions.embed_index") is None:
        raise SystemExit("functions.embed_index is not installed: the recall service's index cannot be built")
    spec = consumer("embed-index")
    from functions.embed_index.main import WORKER

    runner = PullRunner(services.nats.js, spec, WORKER.batch_handler(services))
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    last_report = started
    try:
        while time.monotonic() < deadline:
            info = await services.bus.js.consumer_info(spec.stream, spec.durable)
            if info.num_pending == 0 and info.num_ack_pending == 0 and runner.stats.acked:
                console.print(f"indexed in {time.monotonic() - started:.0f}s ({runner.stats.acked} events)")
                return
            if time.monotonic() - last_report > 15:
                last_report = time.monotonic()
                console.print(
                    f"indexing: {runner.stats.acked} acked, {info.num_pending} pending, "
                    f"{info.num_ack_pending} in flight, {runner.stats.dead_lettered} dead-lettered"
                )
            await asyncio.sleep(1.0)
        raise SystemExit(f"the index did not catch up within {timeout:.0f}s")
    finally:
        stop.set()
        await task


@dataclass
class Sample:
    total_ms: float
    llm_ms: float
    stages: dict[str, float]
    message: int = 0  # index into the run's messages (MESSAGES, then MORE_MESSAGES with --messages all)
    started: float = 0.0  # time.monotonic(), for the CPU probe
    ended: float = 0.0
    slowdown: float | None = None  # the machine's CPU slowdown beside this turn (bench.cpu_probe)

    @property
    def added_ms(self) -> float:
        return self.total_ms - self.llm_ms


async def run_level(
    client: Any,
    tokens: list[str],
    concurrency: int,
    turns: int,
    spread_s: float = 0.0,
    *,
    messages: tuple[str, ...],
) -> list[Sample]:
    """`turns` turns by `concurrency` workers, each sending `messages` in turn; with `spread_s`,
    the workers start evenly spread over that time (independent users), not all at once."""
    samples: list[Sample] = []
    counter = iter(range(turns))

    async def worker(w: int) -> None:
        await asyncio.sleep(spread_s * w / concurrency)
        chat_id = uuid.uuid4()
        headers = {"Authorization": f"Bearer {tokens[w % len(tokens)]}"}
        for n in counter:
            template = n % len(messages)
            message = messages[template].format(n=(n * 7 + w) % 500, m=(n * 11 + w + 250) % 500)
            started = time.monotonic()
            r = await client.post(f"/api/ai/chats/{chat_id}/turns", json={"message": message}, headers=headers)
            ended = time.monotonic()
            if r.status_code != 200:
                raise SystemExit(f"turn failed: {r.status_code} {r.text[:500]}")
            timing = server_timing(r.headers.get("server-timing", ""))
            samples.append(Sample((ended - started) * 1000, timing.get("llm", 0.0), timing, template, started, ended))

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return samples


async def baseline(client: Any, token: str, requests: int) -> list[float]:
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        r = await client.get("/api/ai/memory?size=10", headers={"Authorization": f"Bearer {token}"})
        times.append((time.perf_counter() - started) * 1000)
        if r.status_code != 200:
            raise SystemExit(f"baseline failed: {r.status_code} {r.text[:300]}")
    return times


def turn_slowdown(sample: Sample, runs: ProbeRuns) -> float | None:
    """The machine's CPU slowdown beside the turn's own work: from its start up to the LLM call,
    and while it persists after it (the wait for the model, long with `--llm-delay-ms`, is left out)."""
    persist = sample.stages.get("persist", 0.0) / 1000
    before = sample.added_ms / 1000 - persist
    found = [
        x
        for x in (
            runs.slowdown(sample.started, sample.started + before),
            runs.slowdown(sample.ended - persist, sample.ended),
        )
        if x is not None
    ]
    return max(found) if found else None


def by_message(samples: list[Sample], intents: list[str], messages: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Added time per message template, with the strategy its keywords pick: where the tail is."""
    out: dict[str, dict[str, Any]] = {}
    for index, template in enumerate(messages):
        mine = [s for s in samples if s.message == index]
        if mine:
            added = [s.added_ms for s in mine]
            out[template] = {
                "intent": intents[index],
                "turns": len(mine),
                "p50_added_ms": round(percentile(added, 0.5), 2),
                "p95_added_ms": round(percentile(added, 0.95), 2),
                "p50_recall_total_ms": round(statistics.median(s.stages.get("recall_total", 0.0) for s in mine), 2),
            }
    return out


def summarize(samples: list[Sample]) -> dict[str, Any]:
    added = [s.added_ms for s in samples]
    stages = {
        k: statistics.median([s.stages.get(k, 0.0) for s in samples])
        for k in ("prepare", "recall", "recall_total", "persist")
    }
    # where the tail is: the stages of the slowest 5 % of turns (by added time), as medians
    slow = sorted(samples, key=lambda s: s.added_ms)[-max(1, len(samples) // 20) :]
    tail = {k: statistics.median([s.stages.get(k, 0.0) for s in slow]) for k in ("prepare", "recall", "persist", "llm")}
    tail["other"] = statistics.median(
        [s.added_ms - sum(s.stages.get(k, 0.0) for k in ("prepare", "recall", "persist")) for s in slow]
    )
    # the turns during which the machine's CPU ran at its usual speed (bench.cpu_probe); a turn
    # no probe run overlapped counts as at speed (it cannot make the figure look better)
    at_speed = [s.added_ms for s in samples if s.slowdown is None or s.slowdown < SLOWED]
    return {
        "turns": len(samples),
        "p50_added_ms": round(percentile(added, 0.5), 2),
        "p95_added_ms": round(percentile(added, 0.95), 2),
        "turns_machine_slowed": len(samples) - len(at_speed),
        "turns_without_probe": sum(1 for s in samples if s.slowdown is None),
        "p50_added_ms_at_speed": round(percentile(at_speed, 0.5), 2) if at_speed else None,
        "p95_added_ms_at_speed": round(percentile(at_speed, 0.95), 2) if at_speed else None,
        "p50_total_ms": round(percentile([s.total_ms for s in samples], 0.5), 2),
        "p95_total_ms": round(percentile([s.total_ms for s in samples], 0.95), 2),
        "p50_llm_ms": round(percentile([s.llm_ms for s in samples], 0.5), 2),
        **{f"p50_{k}_ms": round(v, 2) for k, v in stages.items()},
        **{f"slowest5pct_{k}_ms": round(v, 2) for k, v in tail.items()},
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    import httpx

    from engram import bootstrap
    from engram.services.auth import issue_jwt

    services = await bootstrap.get_services()
    try:
        if args.recall == "services" and services.recall is None:
            raise SystemExit(
                "Services.recall is not configured: this benchmark measures chat-turn with the real recall "
                "service (retrieval issue). Run it on a build that has it, or use --recall fixed to measure "
                "chat-turn's own overhead without recall."
            )
        async with services.db.tenant(TENANT) as conn:
            stored = int(await conn.fetchval("SELECT count(*) FROM observations"))
        if stored >= args.observations and len(await services.index.indexed_ids(TENANT)) >= args.observations:
            console.print(f"reusing {stored} stored and indexed observations from --state")
        else:
            console.print(f"seeding {args.observations} observations ...")
            started = time.perf_counter()
            await seed(services, args.observations)
            console.print(f"seeded in {time.perf_counter() - started:.1f}s")
            if args.recall == "services":
                await wait_for_index(services, args.index_timeout)
        # the planner's statistics as autovacuum keeps them in production: the embedded server
        # runs only during a run, so its analyze may never see the seeded tenant, whose estimate then
        # stays at one row (the profile read scanned all of its observations, BM25 all of its terms)
        await services.db.system_statement("ANALYZE")
        if args.recall == "fixed":
            from engram.adapters.observation_rows import to_observation

            async with services.db.tenant(TENANT) as conn:
                rows = await conn.fetch(
                    "SELECT * FROM observations WHERE scope = 'public' ORDER BY created_at LIMIT 400"
                )
            by_type: dict[str, list[Any]] = {}
            for row in rows:
                obs = to_observation(row)
                by_type.setdefault(obs.type, []).append(obs)
            services.recall = FixedRecall(by_type)

        multistream = services.chat.multistream if services.chat is not None else None
        messages = MESSAGES + (MORE_MESSAGES if args.messages == "all" else ())
        intents = [
            (intent.name if (intent := multistream.keyword_intent(m.format(n=1, m=2))) else "model-routed")
            if multistream is not None
            else "-"
            for m in messages
        ]
        secret = os.environ["ENGRAM_JWT_SECRET"]
        perms = ["read:AiObservation", "create:AiObservation"]
        tokens = [issue_jwt(secret, tenant_id=TENANT, user_id=u, permissions=perms, ttl_seconds=7200) for u in USERS]

        from engram.runtime.heap import settle_heap
        from functions.chat_turn.main import app as chat_app
        from functions.memory_api.main import app as memory_app

        chat_transport = httpx.ASGITransport(app=chat_app)
        memory_transport = httpx.ASGITransport(app=memory_app)
        async with (
            httpx.AsyncClient(transport=chat_transport, base_url="http://chat", timeout=60) as chat,
            httpx.AsyncClient(transport=memory_transport, base_url="http://memory", timeout=60) as memory,
        ):
            await run_level(chat, tokens, 2, args.warmup, messages=messages)
            await baseline(memory, tokens[0], 20)
            settle_heap()  # what the apps' lifespan does after start-up (ASGITransport runs no lifespan)
            base = await baseline(memory, tokens[0], args.turns)
            levels = {}
            profiler = None
            if args.profile:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            measured: dict[str, tuple[list[Sample], float, float]] = {}
            with CpuProbe() as probe:
                for concurrency in args.concurrency:
                    cpu, wall = time.process_time(), time.perf_counter()
                    samples = await run_level(
                        chat, tokens, concurrency, args.turns, args.llm_delay_ms / 1000, messages=messages
                    )
                    measured[f"c{concurrency}"] = (samples, time.process_time() - cpu, time.perf_counter() - wall)
            for name, (samples, cpu_s, wall_s) in measured.items():
                for s in samples:
                    s.slowdown = turn_slowdown(s, probe.runs)
                levels[name] = summarize(samples)
                levels[name]["by_message"] = by_message(samples, intents, messages)
                levels[name]["cpu_ms_per_turn"] = round(cpu_s * 1000 / len(samples), 2)
                levels[name]["turns_per_second"] = round(len(samples) / wall_s, 1)
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(args.profile)
        base_p95 = percentile(base, 0.95)
        result: dict[str, Any] = {
            "bench": "chat_turn",
            "recall": args.recall,
            "observations": args.observations,
            "messages": args.messages,
            "baseline": "GET /api/ai/memory?size=10",
            "baseline_p50_ms": round(percentile(base, 0.5), 2),
            "baseline_p95_ms": round(base_p95, 2),
            "target_p95_added_ms": TARGET_P95_MS,
            "llm_delay_ms": args.llm_delay_ms,
            "cpu_probe": {
                "runs": len(probe.runs.runs),
                "median_cpu_ms": round(probe.runs.median_ms, 3),
                "share_slowed": round(probe.runs.slowed_share(), 4),
                "slowed_at": SLOWED,
            },
            **levels,
        }
        for name, level in levels.items():
            result[f"ratio_{name}_p95_added_to_baseline"] = round(level["p95_added_ms"] / base_p95, 2)
        result["meets_target"] = all(level["p95_added_ms"] <= TARGET_P95_MS for level in levels.values())
        result["meets_target_at_speed"] = all(
            (level["p95_added_ms_at_speed"] or float("inf")) <= TARGET_P95_MS for level in levels.values()
        )
        return result
    finally:
        await bootstrap.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chat_turn", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--observations", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=200, help="measured turns per concurrency level")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--concurrency", type=lambda v: [int(x) for x in v.split(",")], default=[1, 8])
    parser.add_argument("--recall", choices=("services", "fixed"), default="services")
    parser.add_argument("--index-timeout", type=float, default=900.0)
    parser.add_argument(
        "--llm-delay-ms",
        type=float,
        default=0.0,
        help="the scripted API answers after this long (default 0: instantly, the issue's measurement); "
        "with a real model's latency the turns' CPU phases seldom coincide, as in production",
    )
    parser.add_argument("--profile", metavar="PATH", help="write a cProfile of the measured turns to PATH")
    parser.add_argument(
        "--messages",
        choices=("plain", "all"),
        default="plain",
        help="plain: the six one-thing messages (comparable with earlier runs); all: also two-thing "
        "messages (their parts searched in every stream) and questions to the assistant (the answers stream)",
    )
    parser.add_argument(
        "--state",
        metavar="DIR",
        help="keep the embedded servers' data in DIR and reuse an indexed corpus from an earlier run "
        "(indexing 10k observations with e5 takes about 10 minutes)",
    )
    args = parser.parse_args()

    from engram.runtime.logs import configure_logging

    os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")
    configure_logging()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    stub = ctx.Process(target=_serve_stub, args=(child, args.llm_delay_ms), daemon=True)
    stub.start()
    os.environ["ANTHROPIC_BASE_URL"] = parent.recv()
    os.environ["ANTHROPIC_API_KEY"] = "bench-key"
    os.environ.setdefault("ENGRAM_FAST_MODEL", "claude-fast-bench")
    os.environ.setdefault("ENGRAM_JWT_SECRET", secrets.token_urlsafe(32))

    from engram.adapters.migrations import apply_migrations
    from engram.adapters.nats_bus import declare_streams
    from engram.development.embedded import EmbeddedNats, EmbeddedPostgres

    tmp = Path(args.state).resolve() if args.state else Path(tempfile.mkdtemp(prefix="engram-bench-"))
    pg = nats = None
    try:
        if not os.environ.get("DATABASE_URL"):
            pg = EmbeddedPostgres(tmp / "postgres").start()
            os.environ["DATABASE_URL"] = pg.url
        if not os.environ.get("NATS_URL"):
            nats = EmbeddedNats(tmp / "nats").start()
            os.environ["NATS_URL"] = nats.url
            os.environ.update(nats.client_env())
        from engram.adapters.nats_auth import bus_credentials
        from engram.settings import get_settings

        get_settings.cache_clear()
        asyncio.run(apply_migrations(os.environ["DATABASE_URL"]))
        asyncio.run(
            declare_streams(os.environ["NATS_URL"], get_settings().engram_stream, bus_credentials(get_settings()))
        )
        try:
            result = asyncio.run(main_async(args))
        except SystemExit as exc:
            console.print(f"[red]{exc}[/red]")
            if args.json:
                print(json.dumps({"bench": "chat_turn", "error": str(exc)}))
            return 2
    finally:
        parent.send("stop")
        stub.join(5)
        if nats is not None:
            nats.stop()
        if pg is not None:
            pg.stop()
        if not args.state:
            shutil.rmtree(tmp, ignore_errors=True)

    if args.json:
        print(json.dumps(result))
        return 0
    table = Table(title=f"chat-turn added time ({args.observations} observations, recall: {args.recall})")
    for column in (
        "level",
        "turns",
        "p50 added",
        "p95 added",
        "p50 total",
        "p50 LLM",
        "p50 prepare",
        "p50 recall wait / all",
        "p50 persist",
        "p95 / baseline",
        "p95 added at speed (turns slowed)",
    ):
        table.add_column(column, justify="right")
    for name in (f"c{c}" for c in args.concurrency):
        lv = result[name]
        table.add_row(
            name,
            str(lv["turns"]),
            f"{lv['p50_added_ms']:.1f} ms",
            f"{lv['p95_added_ms']:.1f} ms",
            f"{lv['p50_total_ms']:.1f} ms",
            f"{lv['p50_llm_ms']:.1f} ms",
            f"{lv['p50_prepare_ms']:.1f} ms",
            f"{lv['p50_recall_ms']:.1f} / {lv['p50_recall_total_ms']:.1f} ms",
            f"{lv['p50_persist_ms']:.1f} ms",
            f"{result[f'ratio_{name}_p95_added_to_baseline']:.1f}x",
            f"{lv['p95_added_ms_at_speed'] or float('nan'):.1f} ms ({lv['turns_machine_slowed']})",
        )
    Console().print(table)
    per_message = Table(title=f"added time per message (c{args.concurrency[0]}); the strategy its keywords pick")
    for column in ("message", "strategy", "turns", "p50 added", "p95 added", "p50 recall"):
        per_message.add_column(column, justify="left" if column in ("message", "strategy") else "right")
    first = result[f"c{args.concurrency[0]}"]["by_message"]
    for template, row in first.items():
        per_message.add_row(
            template,
            row["intent"],
            str(row["turns"]),
            f"{row['p50_added_ms']:.1f} ms",
            f"{row['p95_added_ms']:.1f} ms",
            f"{row['p50_recall_total_ms']:.1f} ms",
        )
    Console().print(per_message)
    Console().print(
        f"baseline ({result['baseline']}): p50 {result['baseline_p50_ms']} ms, p95 {result['baseline_p95_ms']} ms; "
        f"target p95 added <= {TARGET_P95_MS:.0f} ms: {'met' if result['meets_target'] else 'NOT met'}; "
        f"over the turns at the machine's usual CPU speed: {'met' if result['meets_target_at_speed'] else 'NOT met'}"
    )
    probe = result["cpu_probe"]
    Console().print(
        f"CPU probe: {probe['runs']} runs, median {probe['median_cpu_ms']} ms of CPU; "
        f"{probe['share_slowed']:.1%} of them took >= {SLOWED:.0f}x that (the machine, not this code)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
