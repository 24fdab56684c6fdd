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
    from engram.devstack import EmbeddedNats, EmbeddedPostgres

    external_pg = os.environ.get("ENGRAM_TEST_DATABASE_URL")
    pg = None if external_pg else EmbeddedPostgres(_TMP / "postgres").start()
    nats = EmbeddedNats(_TMP / "nats").start()
    urls = {
        "database_url": external_pg or (pg.url if pg else ""),
        "nats_url": nats.url,
        "nats_monitor_url": nats.monitor_url,
        "data_dir": str(_TMP),
    }
    os.environ["DATABASE_URL"] = urls["database_url"]
    os.environ["NATS_URL"] = urls["nats_url"]
    from engram.settings import get_settings

    get_settings.cache_clear()
    import asyncio

    from engram.provision import apply_migrations, declare_streams

    asyncio.run(apply_migrations(urls["database_url"]))
    asyncio.run(declare_streams(urls["nats_url"], "ENGRAM"))
    try:
        yield urls
    finally:
        nats.stop()
        if pg is not None:
            pg.stop()
        shutil.rmtree(_TMP, ignore_errors=True)  # the servers' data: ~70 MB per session


@pytest.fixture(scope="session")
async def services(stack: dict[str, str]) -> AsyncIterator[Any]:
    from engram import bootstrap

    svc = await bootstrap.get_services()
    yield svc
    await bootstrap.shutdown()


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
    from engram.runtime.auth import issue_jwt

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


WORKERS = [
    ("functions.extract_observation.main", "extract_observation", "extract-observation"),
    ("functions.record_feedback.main", "record_feedback", "record-feedback"),
    ("functions.embed_index.main", "embed_index", "embed-index"),
]


@pytest.fixture(scope="session")
async def workers(services: Any) -> AsyncIterator[dict[str, Any]]:
    """The event workers, in this process, on their real durable consumers."""
    import asyncio
    import importlib

    from engram.runtime.jetstream import PullRunner, load_gave_up, load_handler
    from engram.topology import consumer

    stop = asyncio.Event()
    runners: dict[str, Any] = {}
    tasks = []
    for module, target, durable in WORKERS:
        if importlib.util.find_spec(module) is None:
            continue
        runner = PullRunner(
            services.bus.js,
            consumer(durable),
            load_handler(module, target),
            fetch_timeout=0.2,
            on_gave_up=load_gave_up(module, target),
        )
        runners[durable] = runner
        tasks.append(asyncio.create_task(runner.run(stop)))
    for runner in runners.values():
        await asyncio.wait_for(runner.consuming.wait(), 10)
    yield runners
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)


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


@pytest.fixture
async def fake_recall(services: Any) -> AsyncIterator[Any]:
    """`services.recall` replaced by a hand-written fake for one test (restored afterwards)."""
    from tests.fakes import FakeRecall

    saved = services.recall
    services.recall = FakeRecall()
    yield services.recall
    services.recall = saved


FAST_TEST_MODEL = "claude-fast-test"
EXTRACTION_TEST_MODEL = "claude-extraction-test"


@pytest.fixture
async def llm(services: Any, anthropic: Any, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """chat-turn and chat extraction talking to the scripted API through the real SDK.

    Routing/compression and extraction get models of their own, so a background extraction
    left over from an earlier test never takes a reply scripted for a chat model.
    """
    from pydantic import SecretStr

    from engram.bootstrap import build_chat, build_gateway
    from engram.services.chat_memory import ChatMemory
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

    settings = services.settings.model_copy(
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
    saved = (services.gateway, services.chat, services.extraction.chat_extractor)
    services.gateway = gateway
    services.chat = build_chat(settings, services.db, services.bus, gateway, lambda: services.recall)
    services.extraction.chat_extractor = ChatMemory(gateway, settings.engram_observation_types)
    yield gateway
    services.gateway, services.chat, services.extraction.chat_extractor = saved
    await gateway.close(drain_seconds=10)  # a background extraction still running finishes first


@pytest.fixture(scope="session")
async def chat_api(services: Any) -> AsyncIterator[Any]:
    import httpx

    from functions.chat_turn.main import app

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://chat-turn", timeout=30) as client:
        yield client
