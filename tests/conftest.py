"""Test fixtures: real PostgreSQL (pgvector) and NATS (JetStream) on free ports, per test session.

Nothing here relies on servers started by hand: the session starts its own from the PyPI
wheels in a temporary folder and stops them at the end. Tests isolate themselves by tenant:
every test gets fresh tenant ids, which is also how production separates customers.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Settings are read from the environment once per process: set them before anything imports them.
_TMP = Path(tempfile.mkdtemp(prefix="engram-test-"))
atexit.register(shutil.rmtree, _TMP, True)  # also when no test started the servers
os.environ.setdefault("ENGRAM_JWT_SECRET", secrets.token_urlsafe(32))
os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")
os.environ.setdefault("ENGRAM_EMBEDDER", "static")  # fast 64-dim model; retrieval-quality tests pick e5 themselves
JWT_SECRET = os.environ["ENGRAM_JWT_SECRET"]

ALL_PERMISSIONS = [
    "read:AiObservation",
    "create:AiObservation",
    "update:AiObservation",
    "delete:AiObservation",
    "create:AiObservationFeedback",
    "create:AiEvent",
    "read:AiEvent",
]


@pytest.fixture(scope="session")
def stack() -> Iterator[dict[str, str]]:
    from engram.development.embedded import EmbeddedNats, EmbeddedPostgres

    external_pg = os.environ.get("ENGRAM_TEST_DATABASE_URL")
    pg = None if external_pg else EmbeddedPostgres(_TMP / "postgres").start()
    nats = EmbeddedNats(_TMP / "nats").start()
    urls = {
        "database_url": external_pg or (pg.url if pg else ""),
        "nats_url": nats.url,
        "nats_monitor_url": nats.monitor_url,
        "nats_dir": str(nats.data_dir),
        "data_dir": str(_TMP),
    }
    os.environ["DATABASE_URL"] = urls["database_url"]
    os.environ["NATS_URL"] = urls["nats_url"]
    # the bus authenticates every client: this process is the admin user, which may do
    # what every function does; tests of the functions' own users connect as those
    os.environ["ENGRAM_NATS_USER"] = "engram"
    os.environ["ENGRAM_NATS_SEED_FILE"] = str(nats.seed_file("engram"))
    from engram.settings import get_settings

    get_settings.cache_clear()
    import asyncio

    from engram.adapters.migrations import apply_migrations
    from engram.adapters.nats_bus import declare_streams

    asyncio.run(apply_migrations(urls["database_url"]))
    asyncio.run(declare_streams(urls["nats_url"], "ENGRAM", nats.credentials("engram")))
    try:
        yield urls
    finally:
        nats.stop()
        if pg is not None:
            pg.stop()
        shutil.rmtree(_TMP, ignore_errors=True)  # the servers' data: ~70 MB per session


class CurrentServices:
    """The services the HTTP apps and workers of this process use right now: the session's, or
    those a fixture built with overrides (`llm`, `fake_recall`) and installed for one test.
    Attribute reads and writes go to them."""

    def __init__(self, base: Any) -> None:
        object.__setattr__(self, "base", base)

    def _current(self) -> Any:
        from engram import bootstrap

        return bootstrap._services or object.__getattribute__(self, "base")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._current(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._current(), name, value)


@pytest.fixture(scope="session")
async def services(stack: dict[str, str]) -> AsyncIterator[Any]:
    from engram import bootstrap

    svc = await bootstrap.get_services()
    yield CurrentServices(svc)
    await bootstrap.shutdown()


async def installed(services: Any, overrides: Any, settings: Any = None) -> AsyncIterator[Any]:
    """Services built with `overrides` on the session's database, bus, embedder and index, made
    the process-wide ones for one test; the session's come back afterwards."""
    from dataclasses import replace

    from engram import bootstrap

    base = services.base
    shared = replace(overrides, db=base.db, bus=base.bus, embedder=base.embedder, index=base.index)
    built = await bootstrap.build(settings or services.settings, shared)
    previous = bootstrap.use_services(built)
    try:
        yield built
    finally:
        bootstrap.use_services(previous)
        await built.uow.drain()


async def write_telemetry(conn: Any, records: Any) -> None:
    """Telemetry rows on a connection inside a tenant transaction (tests that set the scene)."""
    from engram.adapters.telemetry_store import PgTelemetryStore

    await PgTelemetryStore(conn, records[0].tenant_id if records else "").write(records)


@pytest.fixture(scope="session")
async def db(services: Any) -> Any:
    return services.db


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def other_tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


TokenFactory = Callable[..., str]


@pytest.fixture
def token() -> TokenFactory:
    from engram.services.auth import issue_jwt

    def make(
        tenant_id: str,
        user_id: str = "alice",
        teams: list[str] | None = None,
        permissions: list[str] | None = None,
        ttl_seconds: int = 3600,
        now: float | None = None,
    ) -> str:
        return issue_jwt(
            JWT_SECRET,
            tenant_id=tenant_id,
            user_id=user_id,
            teams=teams or [],
            permissions=ALL_PERMISSIONS if permissions is None else permissions,
            ttl_seconds=ttl_seconds,
            now=now,
        )

    return make


@pytest.fixture
def auth(token: TokenFactory) -> Callable[..., dict[str, str]]:
    def headers(tenant_id: str, user_id: str = "alice", **kw: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {token(tenant_id, user_id, **kw)}"}

    return headers


@pytest.fixture(scope="session")
async def api(services: Any) -> AsyncIterator[Any]:
    import httpx

    from functions.memory_api.main import app

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://memory-api") as client:
        yield client


@pytest.fixture(scope="session")
async def workers(services: Any) -> AsyncIterator[dict[str, Any]]:
    """The event workers, in this process, on their real durable consumers. Each batch goes to
    the services installed at that moment (`CurrentServices`)."""
    import asyncio

    from engram.domain.topology import consumer
    from engram.runtime.jetstream import PullRunner
    from functions.embed_index.main import WORKER as EMBED_INDEX
    from functions.extract_observation.main import WORKER as EXTRACT_OBSERVATION
    from functions.record_feedback.main import WORKER as RECORD_FEEDBACK

    stop = asyncio.Event()
    runners: dict[str, Any] = {}
    tasks = []
    for worker in (EXTRACT_OBSERVATION, RECORD_FEEDBACK, EMBED_INDEX):

        async def handle(events: list[Any], subjects: list[str], worker: Any = worker) -> Any:
            return await worker.handle_events(services._current(), events, subjects)

        async def gave_up(event: Any, reason: str, worker: Any = worker) -> None:
            hook = worker.gave_up_hook(services._current())
            if hook is not None:
                await hook(event, reason)

        runner = PullRunner(
            services.nats.js,
            consumer(worker.durable),
            handle,
            fetch_timeout=0.2,
            on_gave_up=gave_up if worker.gave_up is not None else None,
            on_dead_letter=worker.dead_letter_hook(services),
        )
        runners[worker.durable] = runner
        tasks.append(asyncio.create_task(runner.run(stop)))
    for runner in runners.values():
        await asyncio.wait_for(runner.consuming.wait(), 10)
    yield runners
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)


async def deliver(services: Any, worker: Any, events: list[Any], handler: Any = None) -> list[Any]:
    """`events` through an event function's worker declaration, as one fetch (outcome per event);
    `handler` instead of the service the declaration names (a service built by the test)."""
    if handler is not None:
        return list(await worker.run(handler, events))
    return list(await worker.handle_events(services._current(), events))


def zone_where(now: Any, hours: range) -> str:
    """An IANA zone whose time of day at `now` (a UTC datetime) is within `hours`: an Etc zone of
    whole hours (its sign is inverted: Etc/GMT-2 is UTC+2), UTC if that one is."""
    from datetime import timedelta

    offset = next(o for o in range(-12, 15) if (now + timedelta(hours=o)).hour in hours)
    return f"Etc/GMT{-offset:+d}" if offset else "UTC"


async def eventually(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll an async or sync check until it returns a truthy value."""
    import asyncio
    import inspect
    import time

    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")


# ---- chat-turn: a scripted Anthropic API, a fake recall, an LLM-enabled chat service ----------


@pytest.fixture(scope="session")
def anthropic_server() -> Iterator[Any]:
    from tests.anthropic_server import AnthropicServer

    server = AnthropicServer().start()
    yield server
    server.stop()


@pytest.fixture
def anthropic(anthropic_server: Any) -> Any:
    """The scripted Messages API, emptied for this test (scripts, recorded requests)."""
    anthropic_server.reset()
    return anthropic_server


@pytest.fixture(scope="session")
def openai_server() -> Iterator[Any]:
    from tests.openai_server import OpenAIServer

    server = OpenAIServer().start()
    yield server
    server.stop()


@pytest.fixture
def openai_api(openai_server: Any) -> Any:
    """The scripted OpenAI-compatible Chat Completions API (a local model), emptied for this test."""
    openai_server.reset()
    return openai_server


@pytest.fixture
async def fake_recall(services: Any) -> AsyncIterator[Any]:
    """The services built with a hand-written fake recall for one test."""
    from engram.bootstrap import Overrides
    from tests.fakes import FakeRecall

    recall = FakeRecall()
    async for _built in installed(services, Overrides(recall=recall, gateway=services.gateway)):
        yield recall


FAST_TEST_MODEL = "claude-fast-test"
EXTRACTION_TEST_MODEL = "claude-extraction-test"


@pytest.fixture
async def llm(services: Any, anthropic: Any, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """The services built on the scripted Anthropic API (the real SDK), for one test.

    Routing/compression and extraction get models of their own, so a background extraction
    left over from an earlier test never takes a reply scripted for a chat model. With
    `fake_recall` in the same test, its fake stays (the recall of the services installed before).
    """
    from pydantic import SecretStr

    from engram.bootstrap import Overrides, build_gateway
    from tests.anthropic_server import text, tool_use

    monkeypatch.setenv("ENGRAM_FAST_MODEL", FAST_TEST_MODEL)
    monkeypatch.setenv("ENGRAM_EXTRACTION_MODEL", EXTRACTION_TEST_MODEL)

    def default(request: Any) -> Any:
        if request.model == FAST_TEST_MODEL:
            return text("FACT_WHAT")
        if request.model == EXTRACTION_TEST_MODEL:
            tool = (request.body.get("tool_choice") or {}).get("name", "record_observations")
            if tool == "record_summary":
                return tool_use(tool, {"request": "a chat", "learned": "nothing new"})
            return tool_use(tool, {"observations": []})
        return text("Scripted answer.")

    anthropic.responder = default

    settings = services.base.settings.model_copy(
        update={
            "anthropic_api_key": SecretStr("sk-test"),
            "anthropic_base_url": anthropic.url,
            "engram_chat_rate_limit_wait": 0.05,
            "llm_rate_limit_wait": 0.05,
        }
    )
    gateway = build_gateway(settings)
    profiles = dict(gateway.config.profiles)
    profiles["extraction_backup"] = profiles["extraction_backup"].model_copy(update={"model": EXTRACTION_TEST_MODEL})
    gateway.config = gateway.config.model_copy(update={"profiles": profiles})
    async for _built in installed(services, Overrides(recall=services.recall, gateway=gateway), settings):
        yield gateway
    await gateway.close(drain_seconds=10)  # a background extraction still running finishes first


@pytest.fixture(scope="session")
async def chat_api(services: Any) -> AsyncIterator[Any]:
    import httpx

    from functions.chat_turn.main import app

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://chat-turn", timeout=30) as client:
        yield client
