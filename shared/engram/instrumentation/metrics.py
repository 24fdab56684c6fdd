"""The Prometheus metric families of every function (R-17.1), in prometheus-client's default
registry (which also carries the `process_*` and `python_*` collectors).

Label values are bounded: route templates (never raw paths), consumers, models, profiles,
modes and streams; never a user or chat id. A `tenant` label exists on the per-tenant families
but stays empty (Prometheus treats an empty label as absent) unless `ENGRAM_METRICS_TENANT_LABEL`
is on: a cluster with thousands of tenants would otherwise multiply every series by them.

Counters only ever move forward; gauges are refreshed where their value is known: consumer lag
after each batch and every few seconds (`engram.runtime.metrics_server`), the outbox backlog by
the relay after each pass.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest

# seconds: from a cache hit (~1 ms) to a slow model call (~2 min)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
BATCH_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
UNMATCHED_ROUTE = "(unmatched)"

HTTP_REQUESTS = Histogram(
    "engram_http_request_duration_seconds",
    "HTTP requests by route template, method and status: duration until the answer is complete",
    ("route", "method", "status"),
    buckets=LATENCY_BUCKETS,
)
WORKER_FETCHED = Counter("engram_worker_fetched", "Messages fetched from the durable consumer", ("consumer",))
WORKER_ACKED = Counter("engram_worker_acked", "Messages acknowledged (applied, or erased)", ("consumer",))
WORKER_NAKKED = Counter("engram_worker_nakked", "Messages nak'd for redelivery with backoff", ("consumer",))
WORKER_DEAD_LETTERED = Counter(
    "engram_worker_dead_lettered",
    "Messages sent to the dead-letter stream (poison: refused at once; else given up after max_deliver)",
    ("consumer", "poison", "tenant"),
)
WORKER_BATCH = Histogram(
    "engram_worker_batch_duration_seconds",
    "One fetched batch, decoded, applied and settled",
    ("consumer",),
    buckets=BATCH_BUCKETS,
)
CONSUMER_PENDING = Gauge(
    "engram_consumer_pending_messages",
    "Messages in the stream the durable consumer has not delivered yet",
    ("consumer",),
)
CONSUMER_ACK_PENDING = Gauge(
    "engram_consumer_ack_pending_messages", "Messages delivered and not yet acknowledged", ("consumer",)
)
OUTBOX_BACKLOG = Gauge("engram_outbox_backlog_events", "Events in the outbox not yet published")
OUTBOX_OLDEST = Gauge("engram_outbox_oldest_event_age_seconds", "Age of the oldest unpublished outbox event")
OUTBOX_RELAYED = Counter("engram_outbox_relayed_events", "Events the relay published for an interrupted writer")
RECALL = Histogram(
    "engram_recall_duration_seconds",
    "Recall searches by mode and stream (`-` outside multi-stream recall)",
    ("mode", "stream", "tenant"),
    buckets=LATENCY_BUCKETS,
)
LLM_CALLS = Counter(
    "engram_llm_calls",
    "Provider calls by model, profile and outcome (ok, timeout, rate_limited, ...)",
    ("model", "profile", "outcome"),
)
LLM_TOKENS = Counter(
    "engram_llm_tokens",
    "Tokens of successful calls by kind (input, output, cache_read, cache_creation)",
    ("model", "profile", "kind"),
)
LLM_COST = Counter("engram_llm_cost_usd", "What successful calls cost, by model and profile", ("model", "profile"))
LLM_REQUESTS = Counter(
    "engram_llm_requests",
    "Gateway requests by task and how they ended: first (the first profile answered), fallback (a later"
    " one did), failed (none did)",
    ("task", "result"),
)
EMBEDDER_BATCH = Histogram(
    "engram_embedder_batch_duration_seconds",
    "One embedding model call (a batch of texts)",
    ("model", "kind"),
    buckets=LATENCY_BUCKETS,
)
EMBEDDER_TEXTS = Counter("engram_embedder_texts", "Texts embedded", ("model", "kind"))
COLD_START = Gauge(
    "engram_cold_start_seconds", "From the process's start until it served (HTTP: services built; worker: consuming)"
)


def tenant_label(tenant: str | None) -> str:
    """The tenant as a label value: empty (no label) unless `ENGRAM_METRICS_TENANT_LABEL` is on."""
    from engram.settings import get_settings

    if tenant and get_settings().engram_metrics_tenant_label:
        return tenant
    return ""


def dead_lettered(consumer: str, *, poison: bool, tenant: str | None) -> None:
    WORKER_DEAD_LETTERED.labels(consumer, "true" if poison else "false", tenant_label(tenant)).inc()


def recalled(mode: str, stream: str | None, seconds: float, tenant: str | None) -> None:
    RECALL.labels(mode, stream or "-", tenant_label(tenant)).observe(seconds)


def llm_call(model: str, profile: str, outcome: str) -> None:
    LLM_CALLS.labels(model, profile, outcome).inc()


def llm_usage(model: str, profile: str, usage: Mapping[str, int], cost: float) -> None:
    for kind, tokens in usage.items():
        if tokens:
            LLM_TOKENS.labels(model, profile, kind.removesuffix("_input_tokens").removesuffix("_tokens")).inc(tokens)
    if cost:
        LLM_COST.labels(model, profile).inc(cost)


def embedded(model: str, kind: str, texts: int, seconds: float) -> None:
    EMBEDDER_BATCH.labels(model, kind).observe(seconds)
    EMBEDDER_TEXTS.labels(model, kind).inc(texts)


@contextlib.contextmanager
def embedding(model: str, is_query: bool, texts: int) -> Iterator[None]:
    """One embedding model call: in the metrics (batch latency, texts) and as a span."""
    from engram.instrumentation import tracing

    kind = "query" if is_query else "passage"
    started = time.perf_counter()
    with tracing.span(f"embed {kind}", engram__embedder__model=model, engram__embedder__texts=texts):
        try:
            yield
        finally:
            embedded(model, kind, texts, time.perf_counter() - started)


def consumer_lag(consumer: str, pending: int, ack_pending: int) -> None:
    CONSUMER_PENDING.labels(consumer).set(pending)
    CONSUMER_ACK_PENDING.labels(consumer).set(ack_pending)


def outbox_backlog(events: int, oldest_seconds: float) -> None:
    OUTBOX_BACKLOG.set(events)
    OUTBOX_OLDEST.set(oldest_seconds)


def process_age() -> float:
    """Seconds since this process started: from /proc on Linux (10 ms ticks), else since this
    module was loaded."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime, the 22nd field (fields[0] is the 3rd)
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - started)
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _LOADED


_LOADED = time.monotonic()
_started_serving = False


def served() -> None:
    """The process serves now: record its cold start (once)."""
    global _started_serving
    if not _started_serving:
        _started_serving = True
        COLD_START.set(process_age())


def exposition() -> tuple[bytes, str]:
    """The registry in the Prometheus text format, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
