"""Metrics and traces without servers: route templates, bounded labels, trace context on events,
a worker's span, and exporters only when the OTEL_* variables ask for them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from engram.domain.events import new_event
from engram.instrumentation import metrics, tracing
from engram.runtime.observability import TELEMETRY, install_observability, route_of

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    tracing.setup("unit-tests")
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


def app() -> FastAPI:
    tracing.setup("unit-tests")  # before the app, as function_app does
    application = FastAPI(telemetry=TELEMETRY)

    @application.get("/items/{item_id}")
    async def item(item_id: int) -> dict[str, int]:
        return {"id": item_id}

    install_observability(application, "unit")
    return application


def requests(route: str, status: str) -> float:
    labels = {"route": route, "method": "GET", "status": status}
    return REGISTRY.get_sample_value("engram_http_request_duration_seconds_count", labels) or 0.0


async def test_requests_are_counted_by_route_template_and_continue_the_callers_trace(
    spans: InMemorySpanExporter,
) -> None:
    before = requests("/items/{item_id}", "200"), requests("/items/{item_id}", "422"), requests("(unmatched)", "404")
    transport = httpx.ASGITransport(app=app())
    async with httpx.AsyncClient(transport=transport, base_url="http://unit") as client:
        ok = await client.get("/items/7", headers={"traceparent": PARENT, "X-Correlation-Id": "order-5001"})
        bad = await client.get("/items/seven", headers={"X-Correlation-Id": "no spaces allowed"})
        missing = await client.get("/nothing/here")
        scraped = await client.get("/metrics")
    assert (ok.status_code, bad.status_code, missing.status_code) == (200, 422, 404)
    after = requests("/items/{item_id}", "200"), requests("/items/{item_id}", "422"), requests("(unmatched)", "404")
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1]
    assert ok.headers["traceparent"].split("-")[1] == TRACE
    assert ok.headers["x-correlation-id"] == "order-5001"
    assert bad.headers["x-correlation-id"] == bad.headers["traceparent"].split("-")[1]  # refused: the trace id
    assert scraped.headers["content-type"].startswith("text/plain")
    assert 'route="/items/{item_id}"' in scraped.text and "/items/7" not in scraped.text
    server = next(
        s
        for s in spans.get_finished_spans()
        if s.context.trace_id == int(TRACE, 16) and s.kind is trace.SpanKind.SERVER
    )
    assert server.name == "GET /items/{item_id}" and server.attributes["http.response.status_code"] == 200


def test_route_of_names_the_template_or_unmatched() -> None:
    application = app()
    scope: dict[str, Any] = {"type": "http", "path": "/items/3", "method": "POST", "root_path": ""}
    assert route_of(application.router, scope) == "/items/{item_id}"  # the method does not matter
    assert route_of(application.router, {**scope, "path": "/x"}) == metrics.UNMATCHED_ROUTE


def test_published_events_carry_the_current_trace_and_correlation(spans: InMemorySpanExporter) -> None:
    event = new_event("com.example.crm.customer.created.v1", {}, tenant_id="t", source="/crm")
    own = new_event("com.example.crm.customer.created.v1", {}, tenant_id="t", source="/crm")
    own["traceparent"] = PARENT
    with tracing.span("unit"), tracing.correlated("corr-1"):
        current = trace.get_current_span().get_span_context()
        tracing.stamp(event)
        tracing.stamp(own)
    assert event["traceparent"].split("-")[1:3] == [f"{current.trace_id:032x}", f"{current.span_id:016x}"]
    assert event["correlationid"] == "corr-1" and own["correlationid"] == "corr-1"
    assert own["traceparent"] == PARENT  # a producer's own trace is kept
    quiet = new_event("com.example.crm.customer.created.v1", {}, tenant_id="t", source="/crm")
    tracing.stamp(quiet)  # outside any span: nothing to pass on
    assert quiet.get("traceparent") is None and quiet.get("correlationid") is None


def test_a_worker_continues_one_trace_and_links_several(spans: InMemorySpanExporter) -> None:
    other = f"00-{'1' * 32}-{'2' * 16}-01"
    events = []
    for parent in (PARENT, PARENT, other, None):
        event = new_event("com.example.crm.customer.created.v1", {}, tenant_id="t", source="/crm")
        if parent:
            event["traceparent"] = parent
            event["correlationid"] = "c-1"
        events.append(event)
    with tracing.consume("unit-worker", events[:2]) as one:
        assert tracing.correlation_id() == "c-1"
    with tracing.consume("unit-worker", events) as mixed:
        assert tracing.correlation_id() is None
    assert one.get_span_context().trace_id == int(TRACE, 16)
    assert mixed.get_span_context().trace_id not in (int(TRACE, 16), int("1" * 32, 16))
    finished = {s.context.span_id: s for s in spans.get_finished_spans()}
    assert {link.context.trace_id for link in finished[mixed.get_span_context().span_id].links} == {
        int(TRACE, 16),
        int("1" * 32, 16),
    }


def test_no_exporter_unless_the_otel_variables_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert tracing._exporters() == []
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    (otlp,) = tracing._exporters()
    assert type(otlp).__name__ == "OTLPSpanExporter"
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert tracing._exporters() == []
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    assert [type(e).__name__ for e in tracing._exporters()] == ["ConsoleSpanExporter"]


def test_the_tenant_label_is_empty_unless_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    from engram.settings import get_settings

    assert metrics.tenant_label("t-1") == ""
    monkeypatch.setenv("ENGRAM_METRICS_TENANT_LABEL", "true")
    get_settings.cache_clear()
    try:
        assert metrics.tenant_label("t-1") == "t-1"
    finally:
        monkeypatch.delenv("ENGRAM_METRICS_TENANT_LABEL")
        get_settings.cache_clear()


def test_the_process_age_is_measured() -> None:
    assert 0 < metrics.process_age() < 24 * 3600
