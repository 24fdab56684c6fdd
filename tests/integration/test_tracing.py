"""One chat turn is one trace (R-17.1): chat-turn -> extract-observation -> embed-index.

The turn goes through chat-turn's HTTP API with a caller's `traceparent`; its event travels
through the outbox and NATS to the real extract-observation worker, whose observation events
reach embed-index. The SDK's in-memory exporter collects every span of this process.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engram.adapters.nats_binding import from_nats
from engram.domain.subjects import subject_of
from engram.instrumentation import tracing
from tests.conftest import eventually
from tests.fakes import FakeRecall


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    tracing.setup("tests")
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()  # stays attached to the process's provider, but keeps nothing more


def of_trace(exporter: InMemorySpanExporter, trace_id: int) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.context is not None and s.context.trace_id == trace_id]


async def quiet(services: Any, *durables: str) -> bool:
    """Nothing pending for the consumers: the turn's events get fetches of their own."""
    for durable in durables:
        info = await services.nats.js.consumer_info("ENGRAM", durable)
        if info.num_pending or info.num_ack_pending:
            return False
    return True


async def test_one_chat_turn_is_one_trace_through_extraction_and_indexing(
    services: Any,
    workers: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    auth: Any,
    tenant: str,
    spans: InMemorySpanExporter,
) -> None:
    await eventually(lambda: quiet(services, "extract-observation", "embed-index"), timeout=30)
    trace_id = secrets.randbits(128) | 1
    caller_span = secrets.randbits(64) | 1
    headers = {
        **auth(tenant),
        "traceparent": f"00-{trace_id:032x}-{caller_span:016x}-01",
        "X-Correlation-Id": f"turn-{tenant}",
    }
    r = await chat_api.post(
        f"/api/ai/chats/{uuid.uuid4()}/turns",
        json={"message": "Wir haben entschieden, Müller ab Januar quartalsweise abzurechnen."},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    assert r.headers["traceparent"].split("-")[1] == f"{trace_id:032x}"  # the answer names the trace
    assert r.headers["x-correlation-id"] == f"turn-{tenant}"

    def indexed() -> list[ReadableSpan]:
        return [s for s in of_trace(spans, trace_id) if s.name == "process embed-index"]

    await eventually(indexed, timeout=30)
    found = of_trace(spans, trace_id)
    names = {s.name for s in found}
    assert "POST /api/ai/chats/{chat_id}/turns" in names  # the request continued the caller's trace
    assert {"process extract-observation", "process embed-index", "db.transaction", "index.apply"} <= names
    assert any(n.startswith("embed passage") for n in names)  # the indexer's model call
    server = next(s for s in found if s.name == "POST /api/ai/chats/{chat_id}/turns")
    assert server.parent is not None and server.parent.span_id == caller_span
    assert server.attributes is not None and server.attributes["http.response.status_code"] == 200
    # each worker's span is a child of a span of the same trace, never a new root
    by_id = {s.context.span_id: s for s in found if s.context is not None}
    for name in ("process extract-observation", "process embed-index"):
        worker = next(s for s in found if s.name == name)
        assert worker.parent is not None and worker.parent.trace_id == trace_id
    extraction = next(s for s in found if s.name == "process extract-observation")
    assert extraction.parent is not None and extraction.parent.span_id in by_id  # the turn's span published it

    # the turn's event in the stream carries the trace and the caller's correlation id
    subject = subject_of("io.engram.chat.turn.completed.v1", tenant, "alice")
    stored = from_nats((await services.nats.js.get_last_msg("ENGRAM", subject)).headers, b"{}")
    assert stored["traceparent"].split("-")[1] == f"{trace_id:032x}"
    assert stored["correlationid"] == f"turn-{tenant}"
