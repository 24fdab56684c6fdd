"""`make run`: the whole system on one machine.

Starts PostgreSQL (pgvector) and NATS (JetStream) from PyPI wheels unless `DATABASE_URL` /
`NATS_URL` are set, migrates, declares streams, starts every function as its own process
under a supervisor, seeds a demo tenant through the public API, and prints URLs, a demo JWT and
example calls. Ctrl-C stops everything. A function that crashes is restarted with backoff
(`engram.development.supervisor`); the others keep serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.panel import Panel

from engram.development.embedded import EmbeddedNats, EmbeddedPostgres
from engram.services.auth import issue_jwt

console = Console(highlight=False)

REPO = Path(__file__).resolve().parents[3]
DEMO_TENANT = "demo"
DEMO_USER = "alice"
DEMO_PERMISSIONS = [
    "read:AiObservation",
    "create:AiObservation",
    "update:AiObservation",
    "delete:AiObservation",
    "manage:AiObservation",
    "create:AiObservationFeedback",
    "create:AiEvent",
    "read:AiEvent",
    "view:FE_DevTools",
]


@dataclass(frozen=True)
class Function:
    name: str
    module: str
    port: int | None  # HTTP functions listen; workers consume
    worker_metrics_port: int | None = None  # a worker's /metrics (HTTP functions serve it on `port`)

    @property
    def exists(self) -> bool:
        return (REPO / "functions" / self.module / "__main__.py").exists()

    @property
    def url(self) -> str | None:
        return f"http://127.0.0.1:{self.port}" if self.port else None

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.port or self.worker_metrics_port}/metrics"


def functions(port_base: int) -> list[Function]:
    candidates = [
        Function("memory-api", "memory_api", port_base + 1),
        Function("chat-turn", "chat_turn", port_base + 2),
        Function("telemetry-query", "telemetry_query", port_base + 3),
        Function("memory-mcp", "memory_mcp", port_base + 4),
        Function("extract-observation", "extract_observation", None, port_base + 11),
        Function("embed-index", "embed_index", None, port_base + 12),
        Function("record-feedback", "record_feedback", None, port_base + 13),
        Function("consolidate-memory", "consolidate_memory", None, port_base + 14),
    ]
    return [f for f in candidates if f.exists]


def _secret(data_dir: Path) -> str:
    if os.environ.get("ENGRAM_JWT_SECRET"):
        return os.environ["ENGRAM_JWT_SECRET"]
    path = data_dir / "jwt-secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
    return path.read_text().strip()


def _wait_ready(url: str, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return True
        time.sleep(0.3)
    return False


DEMO_EVENTS = [
    (
        "demo-customer-1001",
        "com.example.crm.customer.created.v1",
        "/crm",
        {
            "customer_id": "1001",
            "name": "Müller Maschinenbau GmbH",
            "city": "Stuttgart",
            "industry": "machinery",
        },
    ),
    (
        "demo-order-5001",
        "com.example.orders.order.completed.v1",
        "/orders",
        {
            "order_id": "5001",
            "customer_name": "Müller Maschinenbau GmbH",
            "total": "12,400.00",
            "currency": "EUR",
        },
    ),
    (
        "demo-receipt-7001",
        "com.example.invoicing.receipt.cancelled.v1",
        "/invoicing",
        {
            "receipt_id": "R-7001",
            "customer_name": "Müller Maschinenbau GmbH",
            "reason": "duplicate invoice",
            "team": "sales",
        },
    ),
]


def seed_demo(api: str, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    sent = 0
    for event_id, etype, source, data in DEMO_EVENTS:
        r = httpx.post(
            f"{api}/api/ai/events",
            headers={
                **headers,
                "ce-specversion": "1.0",
                "ce-id": event_id,
                "ce-type": etype,
                "ce-source": source,
                "Content-Type": "application/json",
            },
            content=json.dumps(data),
            timeout=10,
        )
        r.raise_for_status()
        sent += 1
    httpx.post(
        f"{api}/api/ai/memory",
        headers=headers,
        json={
            "type": "preference",
            "title": "Alice prefers short answers with bullet points",
            "tags": ["style"],
            "key": "preference:answer-style",
        },
        timeout=10,
    ).raise_for_status()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        listing = httpx.get(f"{api}/api/ai/memory", headers=headers, timeout=10).json()
        if listing.get("total", 0) >= len(DEMO_EVENTS) + 1:
            break
        time.sleep(0.3)
    return sent


@dataclass(frozen=True)
class Example:
    """A call printed by `make run`; the end-to-end test runs the very same ones."""

    title: str
    method: str
    path: str
    headers: dict[str, str]
    body: str | None = None

    def curl(self, base: str) -> str:
        parts = ["curl -s"]
        if self.method != "GET":
            parts.append(f"-X {self.method}")
        parts.append('-H "Authorization: Bearer $TOKEN"')
        parts += [f"-H '{k}: {v}'" if "$(" not in v else f'-H "{k}: {v}"' for k, v in self.headers.items()]
        if self.body is not None:
            parts.append(f"-d '{self.body}'")
        parts.append(f"'{base}{self.path}'")
        return " ".join(parts)


def examples() -> list[Example]:
    return [
        Example("list the memories of the demo tenant that alice may see", "GET", "/api/ai/memory?size=10", {}),
        Example(
            "remember a team decision (a verified, user-sourced observation)",
            "POST",
            "/api/ai/memory",
            {"Content-Type": "application/json"},
            json.dumps(
                {
                    "type": "decision",
                    "title": "We bill Müller quarterly from 2027",
                    "tags": ["billing"],
                    "scope": "team",
                    "team_ids": ["sales"],
                },
                ensure_ascii=False,
            ),
        ),
        Example(
            "send a domain CloudEvent (binary mode); it becomes an observation within a second",
            "POST",
            "/api/ai/events",
            {
                "ce-specversion": "1.0",
                "ce-id": "$(date +%s%N)",
                "ce-type": "com.example.crm.customer.created.v1",
                "ce-source": "/crm",
                "Content-Type": "application/json",
            },
            json.dumps({"customer_id": "1002", "name": "Schmidt Logistik AG", "city": "Hamburg"}),
        ),
        Example(
            "alice's profile: what every assistant should know of her unasked (the chat's stable memory block)",
            "GET",
            "/api/ai/memory/profile",
            {},
        ),
    ]


DEMO_CHAT_ID = "7e1a0000-0000-4000-8000-000000000001"


def chat_examples() -> list[Example]:
    """Calls of chat-turn printed by `make run` (offline mode without ANTHROPIC_API_KEY)."""
    path = f"/api/ai/chats/{DEMO_CHAT_ID}/turns"
    return [
        Example(
            "chat with memory (JSON); without ANTHROPIC_API_KEY it answers in a marked offline mode",
            "POST",
            path,
            {"Content-Type": "application/json"},
            json.dumps({"message": "What do we know about Müller Maschinenbau?"}, ensure_ascii=False),
        ),
        Example(
            "the same chat, streamed as server-sent events",
            "POST",
            path,
            {"Content-Type": "application/json", "Accept": "text/event-stream"},
            json.dumps({"message": "Was ist mit der Rechnung R-7001 passiert?"}, ensure_ascii=False),
        ),
    ]


def banner(fns: list[Function], token: str, pg_url: str, nats_url: str) -> None:
    api = next((f.url for f in fns if f.name == "memory-api" and f.url), "")
    lines = [f"[bold]{f.name}[/bold]  {f.url or 'worker (JetStream)'}  metrics {f.metrics_url}" for f in fns]
    lines += [
        "",
        f"PostgreSQL  {pg_url}",
        f"NATS        {nats_url}",
        "",
        f"Demo JWT: tenant {DEMO_TENANT}, user {DEMO_USER}, team sales, valid 24 h (TOKEN below)",
    ]
    console.print(Panel("\n".join(lines), title="Engram is running", expand=False))
    console.print("[bold]Try it[/bold] (copy and paste):\n")
    console.print(f"export TOKEN='{token}'\n", soft_wrap=True)
    for i, example in enumerate(examples(), 1):
        console.print(f"# {i}. {example.title}", soft_wrap=True)
        console.print(example.curl(api) + "\n", soft_wrap=True, markup=False)
    chat = next((f.url for f in fns if f.name == "chat-turn" and f.url), None)
    if chat:
        for i, example in enumerate(chat_examples(), len(examples()) + 1):
            console.print(f"# {i}. {example.title}", soft_wrap=True)
            console.print(example.curl(chat) + "\n", soft_wrap=True, markup=False)
    dashboard = next((f.url for f in fns if f.name == "telemetry-query" and f.url), None)
    if dashboard:
        console.print("# telemetry dashboard (open in a browser):", soft_wrap=True)
        console.print(f"{dashboard}/api/ai/telemetry/dashboard#token={token}\n", soft_wrap=True, markup=False)
    mcp = next((f.url for f in fns if f.name == "memory-mcp" and f.url), None)
    if mcp:
        console.print("# MCP server for agent clients (Streamable HTTP; or `engram mcp` over stdio):", soft_wrap=True)
        console.print(f'{mcp}/mcp  with the header "Authorization: Bearer $TOKEN"\n', soft_wrap=True, markup=False)
    console.print("Ctrl-C stops everything.\n")


def function_env(fn: Function, env: dict[str, str], nats: EmbeddedNats | None) -> dict[str, str]:
    """A function's environment: its port, and on the embedded server its own bus user (R-16.3)."""
    fn_env = dict(env)
    if nats is not None:
        fn_env.update(nats.client_env(fn.name))
        fn_env.pop("ENGRAM_NATS_SEED", None)
    if fn.port:
        fn_env["PORT"] = str(fn.port)
    if fn.worker_metrics_port:
        fn_env["ENGRAM_METRICS_PORT"] = str(fn.worker_metrics_port)
    return fn_env


def local_data_dir(configured: Path) -> Path:
    """`ENGRAM_DATA_DIR` (`.engram/`), relative to the repository."""
    return (REPO / configured).resolve() if not configured.is_absolute() else configured


def run_local_stack(*, seed: bool = True) -> int:
    import logging

    from engram.development.supervisor import Supervisor
    from engram.settings import get_settings

    logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = get_settings()
    data_dir = local_data_dir(settings.engram_data_dir)
    port_base = int(os.environ.get("ENGRAM_PORT_BASE", "8080"))
    pg: EmbeddedPostgres | None = None
    nats: EmbeddedNats | None = None
    try:
        pg_url = settings.database_url
        if not pg_url:
            # synchronous commits: a killed server loses no commit a worker has acknowledged
            pg = EmbeddedPostgres(data_dir / "postgres", settings={"synchronous_commit": "on"}).start()
            pg_url = pg.url
        nats_url = settings.nats_url
        if not nats_url:
            nats = EmbeddedNats(data_dir / "nats", stream=settings.engram_stream).start()
            nats_url = nats.url

        from engram.adapters.migrations import apply_migrations
        from engram.adapters.nats_auth import bus_credentials
        from engram.adapters.nats_bus import declare_streams

        console.print(asyncio.run(apply_migrations(pg_url)))
        admin = nats.credentials("engram") if nats is not None else bus_credentials(settings)
        console.print(asyncio.run(declare_streams(nats_url, settings.engram_stream, admin)))

        secret = _secret(data_dir)
        env = {
            **os.environ,
            "DATABASE_URL": pg_url,
            "NATS_URL": nats_url,
            "ENGRAM_JWT_SECRET": secret,
            "PYTHONUNBUFFERED": "1",
        }
        fns = functions(port_base)
        supervisor = Supervisor()
        for fn in fns:
            fn_env = function_env(fn, env, nats)
            supervisor.add(fn.name, [sys.executable, "-m", f"functions.{fn.module}"], env=fn_env, cwd=str(REPO))
        token = issue_jwt(
            secret,
            tenant_id=DEMO_TENANT,
            user_id=DEMO_USER,
            teams=["sales"],
            permissions=DEMO_PERMISSIONS,
            ttl_seconds=24 * 3600,
        )

        def after_start() -> None:
            urls = [f.url for f in fns if f.url]
            if not all(_wait_ready(u) for u in urls):
                console.print("[red]a function did not become ready; see its log lines above[/red]")
                return
            api = next((f.url for f in fns if f.name == "memory-api"), None)
            if seed and api:
                try:
                    count = seed_demo(api, token)
                    console.print(f"seeded tenant '{DEMO_TENANT}' with {count} domain events and a preference")
                except httpx.HTTPError as exc:
                    console.print(f"[red]seeding failed: {exc}[/red]")
            banner(fns, token, pg_url or "", nats_url or "")

        return supervisor.run(on_started=after_start)
    finally:
        if nats is not None:
            nats.stop()
        if pg is not None:
            pg.stop()
        console.print("stopped.")
