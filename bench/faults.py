"""A fault campaign you can rerun (R-16.2, issue 16): 10,000 events through the real local stack
while processes and servers are killed.

The stack is what `make run` starts: embedded PostgreSQL and NATS, and memory-api,
extract-observation, embed-index and record-feedback as their own processes under the local
stack's supervisor (`engram.development.supervisor`, which restarts a crashed function). Two
producers send `order.completed` domain events for five tenants: one over HTTP
(`POST /api/ai/events`, binary mode), one straight to JetStream; about 1 % carry a NUL in their
data (poison). A producer retries an event (same id) until it is accepted: an HTTP 202 or a
JetStream ack. The run has one phase per fault, each sending its share of the events while the
fault happens:

    none                      (baseline)
    kill -9 extract-observation, embed-index, record-feedback, memory-api   (restarted by the supervisor)
    kill -9 NATS, kill -9 PostgreSQL (the whole process group)              (restarted by the bench after 2 s)
    SIGSTOP extract-observation for longer than its ack wait (120 s), then SIGCONT

Then it waits for quiescence (every durable consumer without pending or unacknowledged
messages, the outbox empty) and checks, per phase: every accepted event became exactly one
observation (`source_event_id`), every observation is in the search index, every poison event is
in the dead-letter stream with a reason, and nothing else is there. "Time to recover" is from the
fault to the moment a probe event sent right after it is an indexed observation.

PostgreSQL runs with `synchronous_commit=on` (as `make run` does): with it off, a kill -9 loses
the last commits the workers have already acknowledged.

    python -m bench.faults [--events 10000] [--stop-seconds 130] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench._common import console, machine, table
from engram.adapters.nats_binding import to_nats_binary
from engram.adapters.nats_bus import connect
from engram.development.embedded import EmbeddedNats, EmbeddedPostgres, free_port
from engram.development.supervisor import Supervisor
from engram.domain.events import new_event, subject_for

REPO = Path(__file__).resolve().parents[1]
TYPE = "com.example.orders.order.completed.v1"
TENANTS = [f"faults-{i}" for i in range(5)]
SECRET = "bench-faults-secret-0123456789abcdef"
DURABLES = ("extract-observation", "embed-index", "record-feedback")
FAULTS = [
    "none",
    "kill -9 extract-observation",
    "kill -9 embed-index",
    "kill -9 record-feedback",
    "kill -9 memory-api",
    "kill -9 NATS",
    "kill -9 PostgreSQL",
    "SIGSTOP extract-observation",
]


@dataclass
class Phase:
    fault: str
    accepted: set[str] = field(default_factory=set)
    poison: set[str] = field(default_factory=set)
    recover_s: float | None = None


@dataclass
class Row:
    fault: str
    accepted: int
    lost: int
    duplicated: int
    unindexed: int
    poison: int
    poison_dead_lettered: int
    recover_s: float | None


class Stack:
    """PostgreSQL, NATS and the functions, with the handles to kill and restart each."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pg = EmbeddedPostgres(root / "pg", settings={"synchronous_commit": "on"})
        self.nats = EmbeddedNats(root / "nats")
        self.api_port = free_port()
        self.supervisor = Supervisor(open(root / "functions.log", "w"), grace=10)
        self._ticking = threading.Event()

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self) -> None:
        from engram.adapters.migrations import apply_migrations
        from engram.adapters.nats_bus import declare_streams

        self.pg.start()
        self.nats.start()
        asyncio.run(apply_migrations(self.pg.url))
        asyncio.run(declare_streams(self.nats.url, "ENGRAM", self.nats.credentials("engram")))
        env = {
            **os.environ,
            "DATABASE_URL": self.pg.url,
            "NATS_URL": self.nats.url,
            "ENGRAM_JWT_SECRET": SECRET,
            "ENGRAM_EMBEDDER": "static",
            "ENGRAM_LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
        for name, module in (
            ("memory-api", "memory_api"),
            ("extract-observation", "extract_observation"),
            ("embed-index", "embed_index"),
            ("record-feedback", "record_feedback"),
        ):
            child_env = {**env, **self.nats.client_env(name)}  # each function as its own bus user
            if module == "memory_api":
                child_env["PORT"] = str(self.api_port)
            self.supervisor.add(name, [sys.executable, "-m", f"functions.{module}"], env=child_env, cwd=str(REPO))
        for child in self.supervisor.children.values():
            self.supervisor._spawn(child)
        threading.Thread(target=self._tick, daemon=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.api}/readyz", timeout=2).status_code == 200:
                    return
            time.sleep(0.3)
        raise RuntimeError("memory-api did not become ready")

    def _tick(self) -> None:
        while not self._ticking.wait(0.2):
            self.supervisor.step()

    def kill_pg(self) -> None:
        assert self.pg.proc is not None
        os.killpg(self.pg.proc.pid, signal.SIGKILL)
        self.pg.proc.wait()

    def restart_pg(self) -> None:
        self.pg = EmbeddedPostgres(self.root / "pg", port=self.pg.port, settings={"synchronous_commit": "on"}).start()

    def kill_nats(self) -> None:
        assert self.nats.proc is not None
        self.nats.proc.kill()
        self.nats.proc.wait()

    def restart_nats(self) -> None:
        self.nats = EmbeddedNats(self.root / "nats", port=self.nats.port, monitor_port=self.nats.monitor_port).start()

    def stop(self) -> None:
        self._ticking.set()
        self.supervisor.stop()
        self.nats.stop()
        self.pg.stop()


def token(tenant: str) -> str:
    from engram.services.auth import issue_jwt

    return issue_jwt(SECRET, tenant_id=tenant, user_id="producer", permissions=["create:AiEvent"], ttl_seconds=7200)


class Producers:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.http = httpx.AsyncClient(timeout=10)
        self.tokens = {t: token(t) for t in TENANTS}
        self.nc: Any = None
        self.n = 0

    async def open(self) -> None:
        self.nc = await connect(
            self.stack.nats.url, name="bench-producer", credentials=self.stack.nats.credentials("engram")
        )

    async def close(self) -> None:
        await self.http.aclose()
        with contextlib.suppress(Exception):
            await self.nc.close()

    def next_event(self, *, poison: bool = False) -> tuple[str, str, dict[str, Any]]:
        self.n += 1
        tenant = TENANTS[self.n % len(TENANTS)]
        event_id = f"f-{self.n}-{uuid.uuid4().hex[:8]}"
        name = "Bad\u0000Kunde" if poison else f"Kunde {self.n}"
        return tenant, event_id, {"order_id": event_id, "customer_name": name, "total": f"{self.n}.00"}

    async def send_http(self, tenant: str, event_id: str, data: dict[str, Any]) -> bool:
        headers = {
            "Authorization": f"Bearer {self.tokens[tenant]}",
            "ce-specversion": "1.0",
            "ce-id": event_id,
            "ce-source": "/bench/http",
            "ce-type": TYPE,
            "Content-Type": "application/json",
        }
        try:
            r = await self.http.post(f"{self.stack.api}/api/ai/events", headers=headers, content=json.dumps(data))
        except httpx.HTTPError:
            return False
        return r.status_code == 202

    async def send_nats(self, tenant: str, event_id: str, data: dict[str, Any]) -> bool:
        event = new_event(TYPE, data, tenant_id=tenant, source="/bench/nats", event_id=event_id)
        headers, body = to_nats_binary(event)
        try:
            await self.nc.jetstream().publish(subject_for(event), body, headers=headers, timeout=3)
        except Exception:
            return False
        return True

    async def deliver(self, via: str, tenant: str, event_id: str, data: dict[str, Any]) -> None:
        """Until accepted (the producer's retry, same event id)."""
        send = self.send_http if via == "http" else self.send_nats
        deadline = time.monotonic() + 300
        while not await send(tenant, event_id, data):
            if time.monotonic() > deadline:
                raise RuntimeError(f"event {event_id} was never accepted")
            await asyncio.sleep(0.5)

    async def send_phase(self, phase: Phase, count: int, concurrency: int = 8) -> None:
        queue: asyncio.Queue[tuple[str, bool]] = asyncio.Queue()
        for i in range(count):
            queue.put_nowait(("nats" if i % 2 else "http", i % 100 == 50))

        async def worker() -> None:
            while not queue.empty():
                via, poison = queue.get_nowait()
                via = "nats" if poison else via  # over HTTP a NUL is a 422 at the edge, never accepted
                tenant, event_id, data = self.next_event(poison=poison)
                await self.deliver(via, tenant, event_id, data)
                (phase.poison if poison else phase.accepted).add(f"{tenant}/{event_id}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))


async def observed(db_url: str, keys: set[str]) -> tuple[dict[str, int], set[str]]:
    """Observations per accepted event, and the events whose observation is not in the index."""
    ids = [k.split("/", 1)[1] for k in keys]
    conn = await asyncpg.connect(db_url, timeout=5)
    try:
        rows = await conn.fetch(
            "SELECT o.tenant_id, o.source_event_id, count(*) AS n, bool_and(d.observation_id IS NOT NULL) AS indexed"
            " FROM observations o LEFT JOIN search_documents d ON d.observation_id = o.id"
            " WHERE o.source_event_id = ANY($1::text[]) GROUP BY 1, 2",
            ids,
        )
    finally:
        await conn.close()
    counts = {f"{r['tenant_id']}/{r['source_event_id']}": r["n"] for r in rows}
    unindexed = {f"{r['tenant_id']}/{r['source_event_id']}" for r in rows if not r["indexed"]}
    return counts, unindexed


async def probe(stack: Stack, producers: Producers, started: float) -> float:
    """Seconds from `started` until a fresh event is an indexed observation."""
    tenant, event_id, data = producers.next_event()
    await producers.deliver("nats", tenant, event_id, data)
    key = f"{tenant}/{event_id}"
    while True:
        with contextlib.suppress(Exception):
            counts, unindexed = await observed(stack.pg.url, {key})
            if counts.get(key) and key not in unindexed:
                return time.monotonic() - started
        await asyncio.sleep(0.2)


async def inject(stack: Stack, fault: str, stop_seconds: float) -> None:
    if fault.startswith("kill -9 ") and fault[8:] in stack.supervisor.children:
        stack.supervisor.kill(fault[8:])
    elif fault == "kill -9 NATS":
        stack.kill_nats()
        await asyncio.sleep(2)
        await asyncio.to_thread(stack.restart_nats)
    elif fault == "kill -9 PostgreSQL":
        stack.kill_pg()
        await asyncio.sleep(2)
        await asyncio.to_thread(stack.restart_pg)
    elif fault == "SIGSTOP extract-observation":
        pid = stack.supervisor.kill("extract-observation", signal.SIGSTOP)
        await asyncio.sleep(stop_seconds)
        os.kill(pid, signal.SIGCONT)


async def quiescent(stack: Stack, timeout: float = 300) -> float:
    """Wait until no consumer has pending or unacknowledged messages and the outbox is empty (3 s in a row)."""
    started = time.monotonic()
    calm_since: float | None = None
    while time.monotonic() - started < timeout:
        busy = True
        with contextlib.suppress(Exception):
            async with httpx.AsyncClient(timeout=5) as client:
                jsz = (await client.get(f"{stack.nats.monitor_url}/jsz?consumers=true")).json()
            pending = sum(
                c["num_pending"] + c["num_ack_pending"]
                for account in jsz.get("account_details", [])
                for stream in account.get("stream_detail", [])
                for c in stream.get("consumer_detail", [])
                if c["name"] in DURABLES
            )
            conn = await asyncpg.connect(stack.pg.url, timeout=5)
            try:
                outbox = await conn.fetchval("SELECT count(*) FROM outbox")
            finally:
                await conn.close()
            busy = bool(pending or outbox)
        if busy:
            calm_since = None
        elif calm_since is None:
            calm_since = time.monotonic()
        elif time.monotonic() - calm_since >= 3:
            return time.monotonic() - started
        await asyncio.sleep(0.5)
    raise RuntimeError("the stack did not become quiescent")


async def dead_letters(stack: Stack) -> dict[str, str]:
    """`tenant/event id` -> reason of every dead letter of extract-observation."""
    nc = await connect(stack.nats.url, name="bench-dlq", credentials=stack.nats.credentials("engram"))
    out: dict[str, str] = {}
    try:
        sub = await nc.jetstream().pull_subscribe("dlq.engram.extract-observation.>", stream="ENGRAM_DLQ")
        while True:
            try:
                msgs = await sub.fetch(500, timeout=2)
            except Exception:
                break
            for m in msgs:
                out[f"{m.headers.get('ce-tenantid')}/{m.headers.get('ce-id')}"] = m.headers.get("Engram-Dlq-Reason", "")
                await m.ack()
    finally:
        await nc.close()
    return out


async def campaign(stack: Stack, events: int, stop_seconds: float) -> tuple[list[Phase], float, dict[str, str]]:
    producers = Producers(stack)
    await producers.open()
    phases = [Phase(f) for f in FAULTS]
    share = events // len(phases)
    try:
        for phase in phases:
            console.print(f"[bold]{phase.fault}[/bold]: {share} events")
            started = time.monotonic()
            fault = asyncio.create_task(inject(stack, phase.fault, stop_seconds))
            await asyncio.sleep(0.05)
            sending = asyncio.create_task(producers.send_phase(phase, share))
            phase.recover_s = round(await probe(stack, producers, started), 2)
            await asyncio.gather(fault, sending)
        settle = await quiescent(stack)
        return phases, settle, await dead_letters(stack)
    finally:
        await producers.close()


async def rows_of(stack: Stack, phases: list[Phase], letters: dict[str, str]) -> list[Row]:
    rows = []
    for phase in phases:
        counts, unindexed = await observed(stack.pg.url, phase.accepted)
        rows.append(
            Row(
                fault=phase.fault,
                accepted=len(phase.accepted) + len(phase.poison),
                lost=sum(1 for k in phase.accepted if counts.get(k, 0) == 0),
                duplicated=sum(1 for k in phase.accepted if counts.get(k, 0) > 1),
                unindexed=len(unindexed),
                poison=len(phase.poison),
                poison_dead_lettered=sum(1 for k in phase.poison if letters.get(k)),
                recover_s=phase.recover_s,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--stop-seconds", type=float, default=130.0, help="SIGSTOP length (ack wait is 120 s)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.getLogger("nats").setLevel(logging.CRITICAL)  # the producers' reconnect errors during the NATS fault
    root = Path(tempfile.mkdtemp(prefix="engram-faults-"))
    stack = Stack(root)
    started = time.monotonic()
    try:
        stack.start()
        phases, settle, letters = asyncio.run(campaign(stack, args.events, args.stop_seconds))
        rows = asyncio.run(rows_of(stack, phases, letters))
    finally:
        stack.stop()
        for data in ("pg", "nats"):
            shutil.rmtree(root / data, ignore_errors=True)
    poison = {k for p in phases for k in p.poison}
    unexpected = sorted(set(letters) - poison)
    restarts = {name: c.restarts for name, c in stack.supervisor.children.items()}
    table(
        "bench.faults",
        ["fault", "accepted", "lost", "duplicated", "unindexed", "poison", "poison in DLQ", "recover (s)"],
        [
            [r.fault, r.accepted, r.lost, r.duplicated, r.unindexed, r.poison, r.poison_dead_lettered, r.recover_s]
            for r in rows
        ],
    )
    console.print(f"dead letters not poison: {len(unexpected)}; quiescent {settle:.1f} s after the last phase")
    console.print(f"restarts by the supervisor: {restarts}; functions' log: {root / 'functions.log'}")
    result = {
        "bench": "faults",
        "machine": machine(),
        "events": args.events,
        "rows": [asdict(r) for r in rows],
        "dead_letters_not_poison": unexpected[:20],
        "poison_without_reason": sorted(k for k in poison if not letters.get(k))[:20],
        "restarts": restarts,
        "quiescent_after_s": round(settle, 1),
        "total_s": round(time.monotonic() - started, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
