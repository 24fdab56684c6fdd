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
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags, TraceState

TRACER_NAME = "engram"
_CORRELATION: ContextVar[str | None] = ContextVar("engram_correlation", default=None)
_CORRELATION_PATTERN = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_installed = False
MAX_LINKS = 64  # of a worker's batch span to the traces of its events (the SDK keeps 128)


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
    current = trace.get_current_span().get_span_context()
    if current.is_valid and event.get("traceparent") is None:
        # W3C trace-context, formatted directly: a batch stamps hundreds of events
        event["traceparent"] = f"00-{current.trace_id:032x}-{current.span_id:016x}-{current.trace_flags:02x}"
        if current.trace_state:
            event["tracestate"] = current.trace_state.to_header()
    if event.get("correlationid") is None:
        correlation = correlation_id() or (f"{current.trace_id:032x}" if current.is_valid else None)
        if correlation is not None:
            event["correlationid"] = correlation
    return event


_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


def span_context_of(attributes: Mapping[str, Any]) -> SpanContext | None:
    """The remote span an event's `traceparent` names (None without a valid one), as the W3C
    propagator reads it: version ff and all-zero ids are invalid, version 00 has no suffix."""
    parent = attributes.get("traceparent")
    found = _TRACEPARENT.match(parent.strip().lower()) if isinstance(parent, str) else None
    if found is None:
        return None
    version, trace_id, span_id, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    state = attributes.get("tracestate")
    context = SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(flags, 16) & 0x03),
        trace_state=TraceState.from_header([state]) if isinstance(state, str) and state else None,
    )
    return context if context.is_valid else None


def context_of(attributes: Mapping[str, Any]) -> Context | None:
    """The trace context an event carries, to start a span in (None without a valid `traceparent`)."""
    remote = span_context_of(attributes)
    return trace.set_span_in_context(NonRecordingSpan(remote)) if remote is not None else None


@contextlib.contextmanager
def consume(consumer: str, events: Sequence[CloudEvent]) -> Iterator[Span]:
    """The span in which a worker applies a fetch (see the module's docstring)."""
    remotes = [span_context_of(e.get_attributes()) for e in events]
    traces = {r.trace_id for r in remotes if r is not None}
    parent: Context | None = None
    links: list[Link] = []
    first = remotes[0] if remotes else None
    if len(traces) == 1 and first is not None and all(r is not None for r in remotes):
        parent = trace.set_span_in_context(NonRecordingSpan(first))
    else:  # one link per distinct trace, at most MAX_LINKS
        distinct = {r.trace_id: r for r in remotes if r is not None}
        links = [Link(r) for r in list(distinct.values())[:MAX_LINKS]]
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
