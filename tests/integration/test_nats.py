"""The NATS binding and the pull runner against a real JetStream server."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from cloudevents.http import CloudEvent
from hypothesis import HealthCheck, given, settings
from nats.js import api as js_api
from starlette.exceptions import HTTPException

from engram.adapters.nats_binding import from_nats, to_nats_binary, to_nats_structured
from engram.domain.topology import ConsumerSpec
from engram.runtime.jetstream import PullRunner, backoff_delay
from tests.conftest import eventually
from tests.strategies import cloud_events


@pytest.fixture
async def scratch_stream(services: Any) -> Any:
    """A stream and durable of its own, so runner tests cannot disturb the real consumers."""
    name = f"T{uuid.uuid4().hex[:10].upper()}"
    js = services.bus.js
    await js.add_stream(js_api.StreamConfig(name=name, subjects=[f"{name.lower()}.>"], duplicate_window=120))
    spec = ConsumerSpec(
        durable=f"d{name.lower()}",
        stream=name,
        filter_subjects=(f"{name.lower()}.>",),
        ack_wait_seconds=5,
        max_deliver=3,
    )
    await js.add_consumer(
        name,
        js_api.ConsumerConfig(
            durable_name=spec.durable,
            ack_policy=js_api.AckPolicy.EXPLICIT,
            ack_wait=5.0,
            max_deliver=3,
            filter_subjects=list(spec.filter_subjects),
        ),
    )
    yield name.lower(), spec
    await js.delete_stream(name)


async def test_two_tenants_events_with_one_id_are_both_kept(services: Any, scratch_stream: Any) -> None:
    """Issue 16's finding: `Nats-Msg-Id` was the event id alone, so JetStream dropped tenant B's
    `order-1` as a duplicate of tenant A's. Now only a repeat of the same tenant's event is."""
    subject_prefix, _ = scratch_stream
    js = services.bus.js
    acks = []
    for tenant in ("acme", "globex", "acme"):
        event = CloudEvent(
            {"id": "order-1", "source": "/crm", "type": "com.acme.order.created", "tenantid": tenant}, {"n": 1}
        )
        headers, body = to_nats_binary(event)
        acks.append(await js.publish(f"{subject_prefix}.{tenant}", body, headers=headers))
    assert [bool(a.duplicate) for a in acks] == [False, False, True]
    info = await js.stream_info(subject_prefix.upper())
    assert info.state.messages == 2


async def test_binding_round_trip_through_jetstream(services: Any, scratch_stream: Any) -> None:
    subject_prefix, spec = scratch_stream
    js = services.bus.js
    sub = await js.pull_subscribe_bind(durable=spec.durable, stream=spec.stream)
    loop = asyncio.get_running_loop()
    sent: list[CloudEvent] = []

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cloud_events())
    def publish_any(event: CloudEvent) -> None:
        sent.append(event)

    publish_any()
    for i, event in enumerate(sent):
        encode = to_nats_binary if i % 2 == 0 else to_nats_structured
        headers, body = encode(event)
        headers["Nats-Msg-Id"] = f"rt-{i}"  # hypothesis may repeat ids; keep every example
        await js.publish(f"{subject_prefix}.rt", body, headers=headers)
    received: list[CloudEvent] = []
    while len(received) < len(sent):
        for msg in await sub.fetch(100, timeout=5):
            received.append(from_nats(msg.headers, msg.data))
            await msg.ack()
    for a, b in zip(sent, received, strict=True):
        assert dict(a.get_attributes()) == dict(b.get_attributes())
        assert a.get_data() == b.get_data()
    assert loop.is_running()


async def test_republished_event_id_is_dropped_by_jetstream(services: Any, scratch_stream: Any) -> None:
    subject_prefix, _ = scratch_stream
    event = CloudEvent({"type": "com.x.y.v1", "source": "/t", "tenantid": "t1"}, {"n": 1})
    headers, body = to_nats_binary(event)
    acks = [await services.bus.js.publish(f"{subject_prefix}.dup", body, headers=headers) for _ in range(3)]
    assert [bool(a.duplicate) for a in acks] == [False, True, True]


async def _dead_letters(services: Any, durable: str, expect: int) -> list[Any]:
    js = services.bus.js
    sub = await js.pull_subscribe(f"dlq.engram.{durable}.>", stream="ENGRAM_DLQ")
    out: list[Any] = []
    while len(out) < expect:
        out.extend(await sub.fetch(expect - len(out), timeout=5))
    await sub.unsubscribe()
    return out


async def test_poison_goes_to_dead_letter_and_the_next_event_is_processed(services: Any, scratch_stream: Any) -> None:
    subject_prefix, spec = scratch_stream
    handled: list[str] = []

    async def handler(events: list[CloudEvent], subjects: list[str]) -> list[BaseException | None]:
        out: list[BaseException | None] = []
        for e in events:
            if e.get_data() == {"poison": True}:
                out.append(HTTPException(422, "field 'name' is required"))
            else:
                handled.append(e["id"])
                out.append(None)
        return out

    runner = PullRunner(services.bus.js, spec, handler, fetch_timeout=0.2)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    bad = CloudEvent({"type": "com.x.v1", "source": "/t", "id": "bad-1", "tenantid": "t1"}, {"poison": True})
    good = CloudEvent({"type": "com.x.v1", "source": "/t", "id": "good-1", "tenantid": "t1"}, {"ok": 1})
    for ev in (bad, good):
        h, b = to_nats_binary(ev)
        await services.bus.js.publish(f"{subject_prefix}.x", b, headers=h)
    # garbage that is not a CloudEvent at all
    await services.bus.js.publish(f"{subject_prefix}.x", b"\x00garbage", headers={"Nats-Msg-Id": "junk"})
    await eventually(lambda: handled == ["good-1"] and runner.stats.dead_lettered == 2)
    stop.set()
    await task
    letters = await _dead_letters(services, spec.durable, 2)
    reasons = sorted(m.headers["Engram-Dlq-Reason"] for m in letters)
    assert reasons[0] == "field 'name' is required"
    assert reasons[1].startswith("undecodable message")
    poison = next(m for m in letters if m.headers.get("ce-id") == "bad-1")
    assert poison.headers["ce-tenantid"] == "t1"  # original headers kept
    assert poison.headers["Engram-Dlq-Subject"] == f"{subject_prefix}.x"


async def test_transient_failure_is_retried_then_dead_lettered(services: Any, scratch_stream: Any) -> None:
    subject_prefix, spec = scratch_stream
    attempts: dict[str, int] = {}

    async def handler(events: list[CloudEvent], subjects: list[str]) -> list[BaseException | None]:
        out: list[BaseException | None] = []
        for e in events:
            attempts[e["id"]] = attempts.get(e["id"], 0) + 1
            if e["id"] == "flaky" and attempts["flaky"] < 2:
                out.append(ConnectionError("database restarting"))
            elif e["id"] == "broken":
                out.append(HTTPException(503, "dependency down"))
            else:
                out.append(None)
        return out

    gave_up: list[tuple[str, str]] = []

    async def hook(event: CloudEvent, reason: str) -> None:
        gave_up.append((event["id"], reason))

    runner = PullRunner(services.bus.js, spec, handler, fetch_timeout=0.2, nak_base=0.1, nak_cap=0.2, on_gave_up=hook)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    for eid in ("flaky", "broken"):
        h, b = to_nats_binary(CloudEvent({"type": "com.x.v1", "source": "/t", "id": eid, "tenantid": "t"}, {}))
        await services.bus.js.publish(f"{subject_prefix}.x", b, headers=h)
    await eventually(lambda: attempts.get("flaky") == 2 and runner.stats.dead_lettered == 1, timeout=15)
    stop.set()
    await task
    assert attempts["broken"] == spec.max_deliver
    (letter,) = await _dead_letters(services, spec.durable, 1)
    assert letter.headers["Engram-Dlq-Reason"] == "gave up after 3 deliveries: dependency down"
    assert gave_up == [("broken", "gave up after 3 deliveries: dependency down")]  # the handler hears of it


def test_backoff_is_capped() -> None:
    assert [backoff_delay(n) for n in (1, 2, 3, 7, 20)] == [1.0, 2.0, 4.0, 60.0, 60.0]


async def test_in_progress_keeps_long_work_alive(services: Any, scratch_stream: Any) -> None:
    subject_prefix, spec = scratch_stream
    calls = 0

    async def slow(events: list[CloudEvent], subjects: list[str]) -> list[BaseException | None]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(7)  # longer than ack_wait (5 s): without in_progress it would be redelivered
        return [None] * len(events)

    runner = PullRunner(services.bus.js, spec, slow, fetch_timeout=0.2)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    h, b = to_nats_binary(CloudEvent({"type": "com.x.v1", "source": "/t", "id": "slow", "tenantid": "t"}, {}))
    await services.bus.js.publish(f"{subject_prefix}.x", b, headers=h)
    await eventually(lambda: runner.stats.acked == 1, timeout=15)
    await asyncio.sleep(1)
    stop.set()
    await task
    assert calls == 1
