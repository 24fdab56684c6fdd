"""Backpressure, never a hang (R-16.1): with PostgreSQL, NATS, the index or the embedder stopped
or slowed (a loopback TCP proxy that drops or delays), the HTTP functions answer 503 with
Retry-After within their deadline, never a hung request and never a 500; `POST /api/ai/events`
answers 202 only once JetStream has acknowledged; a worker whose dependency is down stops
fetching instead of piling up work."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from cloudevents.http import CloudEvent
from nats.js import api as js_api

from engram import bootstrap
from engram.adapters.nats_auth import Credentials, read_seed
from engram.adapters.nats_binding import to_nats_binary
from engram.adapters.nats_bus import NatsBus, connect
from engram.bootstrap import Overrides
from engram.domain.errors import EmbeddingUnavailable, Transient
from engram.domain.subjects import subject_of
from engram.domain.topology import ConsumerSpec
from engram.runtime.guards import Deadline
from engram.runtime.jetstream import PullRunner
from tests.conftest import eventually
from tests.tcp_proxy import TcpProxy

DEADLINE = 2.0


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


@pytest.fixture
def pg_proxy(stack: dict[str, str]) -> Iterator[TcpProxy]:
    proxy = TcpProxy(_port(stack["database_url"]), delay=10.0).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def nats_proxy(stack: dict[str, str]) -> Iterator[TcpProxy]:
    proxy = TcpProxy(_port(stack["nats_url"]), delay=10.0).start()
    yield proxy
    proxy.stop()


async def _installed(services: Any, settings: Any, overrides: Overrides) -> AsyncIterator[Any]:
    built = await bootstrap.build(settings, overrides)
    previous = bootstrap.use_services(built)
    try:
        yield built
    finally:
        bootstrap.use_services(previous)
        await built.uow.drain()


def _client(app: Any) -> httpx.AsyncClient:
    """The real app behind the deadline guard with a short deadline (the apps' own is 15 s)."""
    transport = httpx.ASGITransport(app=Deadline(app, DEADLINE), raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://function", timeout=30)


def _unavailable(r: httpx.Response, started: float) -> None:
    elapsed = time.monotonic() - started
    assert r.status_code == 503, r.text
    assert r.headers["Retry-After"].isdigit()
    assert r.headers["content-type"].startswith("application/problem+json")
    assert elapsed < DEADLINE + 1.5, elapsed


@pytest.fixture
async def proxied_db(services: Any, pg_proxy: TcpProxy) -> AsyncIterator[Any]:
    settings = services.base.settings.model_copy(
        update={
            "database_url": services.base.settings.database_url.replace(
                f":{pg_proxy.target_port}/", f":{pg_proxy.port}/"
            ),
            "engram_db_timeout_seconds": 1.0,
        }
    )
    base = services.base
    async for built in _installed(services, settings, Overrides(bus=base.bus, embedder=base.embedder)):
        yield built


@pytest.mark.parametrize("mode", ["drop", "delay"])
async def test_postgresql_down_or_slow_is_a_503_within_the_deadline(
    proxied_db: Any, pg_proxy: TcpProxy, auth: Any, tenant: str, mode: str
) -> None:
    from functions.memory_api.main import app

    async with _client(app) as client:
        assert (await client.get("/api/ai/memory", headers=auth(tenant))).status_code == 200
        pg_proxy.mode = mode  # type: ignore[assignment]
        for method, path, body in (
            ("GET", "/api/ai/memory", None),
            ("POST", "/api/ai/memory", {"title": "during the outage"}),
            ("GET", "/api/ai/memory/recall?q=outage", None),
        ):
            started = time.monotonic()
            r = await client.request(method, path, json=body, headers=auth(tenant))
            _unavailable(r, started)
        pg_proxy.mode = "pass"
        r = await eventually(lambda: _ok(client.get("/api/ai/memory", headers=auth(tenant))), timeout=10, interval=0.3)
        assert r.status_code == 200


async def _ok(request: Any) -> Any:
    r = await request
    return r if r.status_code == 200 else None


@pytest.fixture
async def proxied_bus(services: Any, nats_proxy: TcpProxy, stack: dict[str, str]) -> AsyncIterator[Any]:
    seed = read_seed(Path(stack["nats_dir"]) / "credentials" / "memory-api.nk")
    nc = await connect(f"nats://127.0.0.1:{nats_proxy.port}", credentials=Credentials("memory-api", seed))
    bus = NatsBus(nc, publish_timeout=1.0)
    base = services.base
    async for built in _installed(
        services, base.settings, Overrides(db=base.db, bus=bus, embedder=base.embedder, index=base.index)
    ):
        yield built
    nats_proxy.mode = "pass"
    await nc.close()


def _event(tenant: str) -> dict[str, str]:
    return {
        "ce-specversion": "1.0",
        "ce-id": f"bp-{uuid.uuid4()}",
        "ce-source": "/crm",
        "ce-type": "com.example.crm.customer.created.v1",
        "Content-Type": "application/json",
    }


@pytest.mark.parametrize("mode", ["drop", "delay"])
async def test_nats_down_or_slow_is_a_503_and_202_means_stored(
    proxied_bus: Any, nats_proxy: TcpProxy, services: Any, auth: Any, tenant: str, mode: str
) -> None:
    from functions.memory_api.main import app

    body = '{"customer_id": "77", "name": "Backpressure GmbH"}'
    async with _client(app) as client:
        headers = {**auth(tenant, permissions=["create:AiEvent"]), **_event(tenant)}
        r = await client.post("/api/ai/events", content=body, headers=headers)
        assert r.status_code == 202, r.text
        # acknowledged by JetStream before the 202: the message is in the stream now
        subject = subject_of("com.example.crm.customer.created.v1", tenant, "alice")  # the caller is the user
        stored = await services.base.bus.js.get_last_msg("ENGRAM", subject)
        assert stored.headers["ce-id"] == headers["ce-id"]
        nats_proxy.mode = mode  # type: ignore[assignment]
        started = time.monotonic()
        headers = {**auth(tenant, permissions=["create:AiEvent"]), **_event(tenant)}
        r = await client.post("/api/ai/events", content=body, headers=headers)
        _unavailable(r, started)


class _SlowEmbedder:
    def __init__(self, real: Any, *, down: bool = False) -> None:
        self.real = real
        self.down = down
        self.model = real.model
        self.dimensions = real.dimensions

    async def embed_passages(self, texts: Any) -> Any:
        return await self.real.embed_passages(texts)

    async def embed_query(self, text: str) -> Any:
        if self.down:
            raise EmbeddingUnavailable("the embedding service answered 503 three times")
        await asyncio.sleep(30)
        return await self.real.embed_query(text)

    async def embed_queries(self, texts: Any) -> Any:
        return [await self.embed_query(t) for t in texts]


class _DownIndex:
    """A search index (Elasticsearch, say) that refuses connections."""

    async def _down(self) -> Any:
        raise ConnectionRefusedError("index unreachable")

    async def upsert(self, *_: Any) -> None:
        await self._down()

    async def delete(self, *_: Any) -> None:
        await self._down()

    async def drop_tenant(self, *_: Any) -> None:
        await self._down()

    async def lexical(self, *_: Any) -> Any:
        return await self._down()

    async def vector(self, *_: Any) -> Any:
        return await self._down()

    async def indexed_ids(self, *_: Any) -> Any:
        return await self._down()


@pytest.mark.parametrize("what", ["embedder slow", "embedder down", "index down"])
async def test_the_embedder_or_index_unavailable_is_a_503(services: Any, auth: Any, tenant: str, what: str) -> None:
    from functions.memory_api.main import app

    base = services.base
    overrides = Overrides(db=base.db, bus=base.bus, embedder=base.embedder, index=base.index)
    if what.startswith("embedder"):
        overrides = replace(overrides, embedder=_SlowEmbedder(base.embedder, down=what.endswith("down")))
    else:
        overrides = replace(overrides, index=_DownIndex())
    async for _built in _installed(services, base.settings, overrides):
        async with _client(app) as client:
            for method, path, body in (
                ("GET", "/api/ai/memory/recall?q=anything+at+all", None),
                ("POST", "/api/ai/memory/search", {"query": "anything at all"}),
            ):
                started = time.monotonic()
                r = await client.request(method, path, json=body, headers=auth(tenant))
                _unavailable(r, started)


async def test_a_worker_stops_fetching_while_its_dependency_is_down(services: Any) -> None:
    name = f"BP{uuid.uuid4().hex[:8].upper()}"
    js = services.bus.js
    await js.add_stream(js_api.StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
    spec = ConsumerSpec(durable=f"d{name.lower()}", stream=name, filter_subjects=(f"{name.lower()}.>",), max_deliver=50)
    await js.add_consumer(
        name,
        js_api.ConsumerConfig(
            durable_name=spec.durable, ack_policy=js_api.AckPolicy.EXPLICIT, ack_wait=30.0, max_deliver=50
        ),
    )
    for i in range(20):
        h, b = to_nats_binary(CloudEvent({"type": "com.x.v1", "source": "/t", "id": f"e{i}", "tenantid": "t"}, {}))
        await js.publish(f"{name.lower()}.x", b, headers=h)

    async def database_down(events: list[CloudEvent], subjects: list[str]) -> list[BaseException | None]:
        return [Transient("the database is unavailable") for _ in events]

    runner = PullRunner(js, spec, database_down, fetch_timeout=0.1, nak_base=0.05, nak_cap=0.05, pause_base=1.0)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    await asyncio.sleep(4.0)
    stop.set()
    await task
    # without the pause the nak delay of 50 ms would have it fetch ~80 batches in 4 s
    assert runner.stats.pauses >= 2
    assert runner.stats.batches <= 5, runner.stats
    assert runner.stats.dead_lettered == 0
    await js.delete_stream(name)
