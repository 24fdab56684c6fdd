"""W3C trace context across HTTP and NATS (R-3.2, R-17.1), on the OpenTelemetry SDK.

- `setup(name)` installs the SDK's tracer provider once per process. Spans are exported only
  when the standard variables ask for it: `OTEL_TRACES_EXPORTER=otlp` (or `console`), or an
  `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; the OTLP/HTTP exporter
  reads its endpoint, headers and timeout from the `OTEL_EXPORTER_OTLP_*` variables itself.
  `OTEL_SDK_DISABLED=true` leaves the no-op API in place (an incoming trace is still passed on).
  Without an exporter, spans are still made (ids to pass on) but go nowhere.
- HTTP functions continue the request's `traceparent` (or start a trace); every CloudEvent
  published gets `traceparent`/`tracestate` and `correlationid` (`stamp`, at the unit of work's
  `emit` and the bus's direct publishes), so the outbox stores them with the event.
- A worker continues the trace of what it consumes (`consume`): a fetch whose events share one
  trace continues it; a fetch mixing traces gets a span of its own linked to each (the
  OpenTelemetry messaging conventions for batch processing), and what it publishes carries on
  from that span.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from cloudevents.http import CloudEvent
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind

TRACER_NAME = "engram"
_CORRELATION: ContextVar[str | None] = ContextVar("engram_correlation", default=None)
_CORRELATION_PATTERN = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_installed = False


def setup(name: str) -> None:
    """Install the SDK tracer provider for function `name` (`OTEL_SERVICE_NAME` wins); idempotent."""
    global _installed
    if _installed or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return
    _installed = True
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider

    service = os.environ.get("OTEL_SERVICE_NAME") or f"engram-{name}"
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    for exporter in _exporters():
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


def _exporters() -> list[Any]:
    """What the standard variables ask for; the OTLP exporter is imported only then (cold start)."""
    wanted = {e.strip().lower() for e in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()}
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if "none" in wanted:
        return []
    if not wanted and endpoint:
        wanted = {"otlp"}
    exporters: list[Any] = []
    if "otlp" in wanted:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporters.append(OTLPSpanExporter())
    if "console" in wanted:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        exporters.append(ConsoleSpanExporter())
    return exporters


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


@contextlib.contextmanager
def span(name: str, *, kind: SpanKind = SpanKind.INTERNAL, **attributes: Any) -> Iterator[Span]:
    """A span of the current trace (attributes whose value is None are left out)."""
    attrs = {k.replace("__", "."): v for k, v in attributes.items() if v is not None}
    with tracer().start_as_current_span(name, kind=kind, attributes=attrs) as current:
        yield current


def finished_span(name: str, start_ns: int, end_ns: int, **attributes: Any) -> None:
    """A span of the current trace recorded after the fact (work that ran inside a shared call,
    such as one stream of a multi-stream recall)."""
    attrs = {k.replace("__", "."): v for k, v in attributes.items() if v is not None}
    tracer().start_span(name, start_time=start_ns, attributes=attrs).end(end_time=end_ns)


# ---- correlation -------------------------------------------------------------------------------


def correlation_id() -> str | None:
    return _CORRELATION.get()


@contextlib.contextmanager
def correlated(value: str | None) -> Iterator[None]:
    """`value` is the correlation id of what happens inside (None: leave it as it is)."""
    if value is None:
        yield
        return
    token = _CORRELATION.set(value)
    try:
        yield
    finally:
        _CORRELATION.reset(token)


def valid_correlation(value: str | None) -> str | None:
    """A caller's correlation id if it is a short token of safe characters, else None."""
    return value if value is not None and _CORRELATION_PATTERN.fullmatch(value) else None


def current_trace_id() -> str | None:
    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None


# ---- across CloudEvents --------------------------------------------------------------------------


def stamp(event: CloudEvent) -> CloudEvent:
    """Give `event` the current trace context and correlation id, unless it has its own."""
    if event.get("traceparent") is None:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        if "traceparent" in carrier:
            event["traceparent"] = carrier["traceparent"]
            if carrier.get("tracestate"):
                event["tracestate"] = carrier["tracestate"]
    if event.get("correlationid") is None:
        correlation = correlation_id() or current_trace_id()
        if correlation is not None:
            event["correlationid"] = correlation
    return event


def context_of(attributes: Mapping[str, Any]) -> Context | None:
    """The trace context an event carries (None without a valid `traceparent`)."""
    parent = attributes.get("traceparent")
    if not isinstance(parent, str):
        return None
    carrier = {"traceparent": parent}
    state = attributes.get("tracestate")
    if isinstance(state, str):
        carrier["tracestate"] = state
    context = propagate.extract(carrier)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


@contextlib.contextmanager
def consume(consumer: str, events: Sequence[CloudEvent]) -> Iterator[Span]:
    """The span in which a worker applies a fetch (see the module's docstring)."""
    contexts = [context_of(e.get_attributes()) for e in events]
    traces = {trace.get_current_span(c).get_span_context().trace_id for c in contexts if c is not None}
    parent: Context | None = None
    links: list[Link] = []
    if len(traces) == 1 and all(c is not None for c in contexts):
        parent = contexts[0]
    else:
        links = [Link(trace.get_current_span(c).get_span_context()) for c in contexts if c is not None]
    correlations = {e.get("correlationid") for e in events}
    correlation = next(iter(correlations)) if len(correlations) == 1 else None
    attributes: dict[str, str | int] = {
        "messaging.system": "nats",
        "messaging.operation.type": "process",
        "messaging.consumer.group.name": consumer,
        "messaging.batch.message_count": len(events),
    }
    with (
        correlated(valid_correlation(correlation) if isinstance(correlation, str) else None),
        tracer().start_as_current_span(
            f"process {consumer}",
            context=parent or Context(),
            kind=SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
        ) as current,
    ):
        yield current


# ---- across HTTP ---------------------------------------------------------------------------------


def extract_http(headers: Sequence[tuple[bytes, bytes]]) -> Context:
    """The trace context of an ASGI request's headers (W3C `traceparent`/`tracestate`)."""
    carrier = {}
    for name, value in headers:
        key = name.decode("latin-1").lower()
        if key in ("traceparent", "tracestate", "baggage"):
            carrier[key] = value.decode("latin-1")
    return propagate.extract(carrier)
