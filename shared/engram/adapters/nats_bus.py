"""NATS JetStream: publishing CloudEvents and declaring the topology."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import nats
import structlog
from cloudevents.http import CloudEvent
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import NotFoundError

from engram.adapters.nats_auth import Credentials
from engram.adapters.nats_binding import to_nats_binary
from engram.domain.bus_access import inbox_prefix
from engram.domain.dead_letters import tenant_filters
from engram.domain.events import subject_for
from engram.domain.subjects import dead_letter_user_filters, user_filters
from engram.domain.topology import DLQ_SUBJECT_PREFIX, ConsumerSpec, StreamSpec, consumers, streams
from engram.instrumentation.tracing import stamp
from engram.ports import Published, RawMessage

log = structlog.get_logger(__name__)


async def _log_error(error: Exception) -> None:
    # a refused publish or subscription (permissions) arrives here, not at the caller
    log.warning("nats.error", error=str(error))


async def connect(url: str, *, name: str = "engram", credentials: Credentials | None = None) -> NatsClient:
    """A connection as `credentials`' user (its NKey, its own reply inbox), or anonymous."""
    if any(u.strip().startswith(("ws://", "wss://")) for u in url.split(",")):
        from engram._nats_import import enable_websocket_transport

        enable_websocket_transport()
    auth: dict[str, Any] = {}
    if credentials is not None:
        auth = {"nkeys_seed_str": credentials.seed, "inbox_prefix": inbox_prefix(credentials.user)}
    return await nats.connect(
        url,
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        connect_timeout=5,
        allow_reconnect=True,
        error_cb=_log_error,
        **auth,
    )


class NatsBus:
    """The EventBus port on JetStream: binary-mode CloudEvents, `Nats-Msg-Id` per tenant, source and event id."""

    def __init__(
        self, nc: NatsClient, *, publish_concurrency: int = 256, publish_timeout: float = 10.0, stream: str = "ENGRAM"
    ) -> None:
        self.nc = nc
        self.publish_timeout = publish_timeout  # no ack by then: the caller learns it (503, a retry)
        self.js: JetStreamContext = nc.jetstream()
        self.stream = stream
        self._gate = asyncio.Semaphore(publish_concurrency)

    async def publish(self, event: CloudEvent) -> Published:
        subject = subject_for(event)
        headers, body = to_nats_binary(stamp(event))
        return await self.publish_raw(subject, headers, body, event_id=event["id"])

    async def publish_raw(self, subject: str, headers: dict[str, str], body: bytes, *, event_id: str) -> Published:
        async with self._gate:
            ack = await self.js.publish(subject, body, headers=headers, timeout=self.publish_timeout)
        return Published(event_id=event_id, subject=subject, duplicate=bool(ack.duplicate), seq=ack.seq)

    async def publish_many(self, events: Sequence[CloudEvent]) -> list[Published]:
        """Publish a batch with pipelined acks; raises the first failure."""
        items = [RawMessage(subject_for(e), *to_nats_binary(stamp(e)), event_id=str(e["id"])) for e in events]
        results = await self.publish_raw_many(items)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return [r for r in results if isinstance(r, Published)]

    async def publish_raw_many(
        self, items: Sequence[RawMessage], *, timeout: float | None = None
    ) -> list[Published | BaseException]:
        """Publish without waiting for each ack in turn (JetStream async publish), then collect the acks."""
        futures = [await self.js.publish_async(m.subject, m.body, headers=m.headers) for m in items]
        try:
            acks = await asyncio.wait_for(
                asyncio.gather(*futures, return_exceptions=True), timeout or self.publish_timeout
            )
        except TimeoutError:
            acks = [f.result() if f.done() and not f.exception() else TimeoutError("no ack") for f in futures]
        results: list[Published | BaseException] = []
        for m, ack in zip(items, acks, strict=True):
            if isinstance(ack, BaseException):
                results.append(ack)
            else:
                results.append(Published(m.event_id, m.subject, bool(ack.duplicate), ack.seq))
        return results

    async def erase_user(self, tenant_id: str, user_id: str) -> dict[str, int]:
        """Purge the user's subjects (`engram.domain.subjects.user_filters`) from the main stream and
        the dead letters, up to the last message stored now: what is published later is either the
        user's new activity (kept) or an older event that a worker drops and deletes on arrival."""
        purged: dict[str, int] = {}
        dlq = f"{self.stream}_DLQ"
        for stream, filters in (
            (self.stream, user_filters(tenant_id, user_id)),
            (dlq, dead_letter_user_filters(DLQ_SUBJECT_PREFIX, tenant_id, user_id)),
        ):
            last = (await self.js.stream_info(stream)).state.last_seq
            purged[stream] = 0
            for subject_filter in filters:
                purged[stream] += await self._purge(stream, subject_filter, before=last + 1)
        return purged

    async def purge_tenant(self, tenant_id: str) -> dict[str, int]:
        """Purge every subject of the tenant from the main stream and the dead letters (off-boarding)."""
        main, dead = tenant_filters(tenant_id)
        dlq = f"{self.stream}_DLQ"
        return {self.stream: await self._purge(self.stream, main), dlq: await self._purge(dlq, dead)}

    async def _purge(self, stream: str, subject_filter: str, *, before: int | None = None) -> int:
        request: dict[str, Any] = {"filter": subject_filter}
        if before is not None:
            request["seq"] = before
        reply = await self.nc.request(f"$JS.API.STREAM.PURGE.{stream}", json.dumps(request).encode(), timeout=10)
        answer = json.loads(reply.data)
        if "error" in answer:
            raise RuntimeError(f"purging {subject_filter} from {stream}: {answer['error']}")
        return int(answer.get("purged", 0))

    async def ping(self) -> bool:
        if not self.nc.is_connected:
            return False
        await self.nc.flush(timeout=2)
        return True

    async def close(self) -> None:
        if not self.nc.is_closed:
            await self.nc.drain()


def _stream_config(spec: StreamSpec) -> js_api.StreamConfig:
    return js_api.StreamConfig(
        name=spec.name,
        subjects=list(spec.subjects),
        retention=js_api.RetentionPolicy(spec.retention),
        storage=js_api.StorageType(spec.storage),
        max_age=float(spec.max_age_seconds),
        max_bytes=spec.max_bytes,
        duplicate_window=float(spec.duplicate_window_seconds),
        num_replicas=spec.replicas,
        discard=js_api.DiscardPolicy.OLD,
    )


def _consumer_config(spec: ConsumerSpec) -> js_api.ConsumerConfig:
    return js_api.ConsumerConfig(
        durable_name=spec.durable,
        description=spec.description or None,
        deliver_policy=js_api.DeliverPolicy.ALL,
        ack_policy=js_api.AckPolicy.EXPLICIT,
        ack_wait=float(spec.ack_wait_seconds),
        max_deliver=spec.max_deliver,
        max_ack_pending=spec.max_ack_pending,
        filter_subjects=list(spec.filter_subjects),
        replay_policy=js_api.ReplayPolicy.INSTANT,
        num_replicas=spec.replicas,
    )


async def declare_topology(js: JetStreamContext, main: str = "ENGRAM", replicas: int = 1) -> dict[str, Any]:
    """Create or update the streams and durable consumers; safe to run any number of times."""
    report: dict[str, Any] = {"streams": [], "consumers": []}
    for spec in streams(main, replicas):
        config = _stream_config(spec)
        try:
            await js.stream_info(spec.name)
            await js.update_stream(config)
            report["streams"].append({"name": spec.name, "action": "updated"})
        except NotFoundError:
            await js.add_stream(config)
            report["streams"].append({"name": spec.name, "action": "created"})
    for cspec in consumers(main, replicas):
        # add_consumer with an existing durable updates its config (same name, same stream)
        await js.add_consumer(cspec.stream, _consumer_config(cspec))
        report["consumers"].append({"name": cspec.durable, "stream": cspec.stream})
    log.info("nats.topology_declared", **report)
    return report


async def declare_streams(url: str, stream: str, credentials: Credentials | None = None, replicas: int = 1) -> str:
    """Declare the JetStream streams and durable consumers (idempotent); a summary line (`engram declare`)."""
    nc = await connect(url, credentials=credentials)
    try:
        report = await declare_topology(nc.jetstream(), stream, replicas)
    finally:
        await nc.drain()
    streams = [s["name"] for s in report["streams"]]
    consumers = [c["name"] for c in report["consumers"]]
    return f"streams: {streams}, consumers: {consumers}"
