"""Metrics and traces of the HTTP functions (R-17.1): the outermost ASGI middleware and `/metrics`.

`RequestTelemetry` times every request by its route template (never the raw path: ids would
make a series each), method and status. The request's correlation id is its
`X-Correlation-Id` when that is a short safe token, else the trace id; every event published
while the request runs carries both (`engram.instrumentation.tracing.stamp`). The answer
carries `traceparent` and `X-Correlation-Id` back.

The server span is FastAPI's own (its native OpenTelemetry support, `TELEMETRY`): W3C
extraction, the route template as its name, the status. The metric needs the route template
too, which this middleware matches itself (a body-cleaning middleware copies the scope, so what
routing writes into it does not come back out).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog
from fastapi import FastAPI
from fastapi.responses import Response
from fastapi.telemetry import TelemetryConfig
from nats.js import JetStreamContext
from opentelemetry import propagate
from starlette.routing import Match, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram.instrumentation import metrics, tracing

log = structlog.get_logger(__name__)


def route_of(router: Router, scope: Scope) -> str:
    """The template of the route `scope` matches (method aside), else `(unmatched)`."""
    partial: str | None = None
    for route in router.routes:
        match, _ = route.matches(scope)
        path = getattr(route, "path", None)
        if match is Match.FULL and isinstance(path, str):
            return path
        if match is Match.PARTIAL and partial is None and isinstance(path, str):
            partial = path
    return partial or metrics.UNMATCHED_ROUTE


class RequestTelemetry:
    """Time each request by route template, method and status; answer with the trace and the
    correlation id. The server span itself is FastAPI's (its native OpenTelemetry support:
    W3C extraction, `http.route`, status), which runs outside every middleware."""

    def __init__(self, app: ASGIApp, router: Router) -> None:
        self.app = app
        self.router = router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = route_of(self.router, scope)
        if route in UNTIMED:  # the scrape and the probes are neither timed nor traced
            await self.app(scope, receive, send)
            return
        method = str(scope.get("method", "GET"))
        started = time.perf_counter()
        status = 500  # what the client sees when the app fails before answering
        caller = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"x-correlation-id"), None)
        correlation = tracing.valid_correlation(caller) or tracing.current_trace_id()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                extra: dict[str, str] = {}
                propagate.inject(extra)
                reply = list(message.get("headers", []))
                reply += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()]
                if correlation is not None:
                    reply.append((b"x-correlation-id", correlation.encode("latin-1")))
                message = {**message, "headers": reply}
            await send(message)

        try:
            with tracing.correlated(correlation):
                await self.app(scope, receive, sending)
        finally:
            metrics.HTTP_REQUESTS.labels(route, method, str(status)).observe(time.perf_counter() - started)


UNTIMED = frozenset({"/metrics", "/healthz", "/readyz"})
# FastAPI's native telemetry: the server span only (no span per dependency and serialisation,
# no log records of request bodies); metrics are prometheus-client's
TELEMETRY: TelemetryConfig = {
    "operation_spans": False,
    "logs": False,
    "metrics": False,
    "exclude": lambda scope: scope.get("path") in UNTIMED,
}


def metrics_routes(app: FastAPI) -> None:
    """`GET /metrics`: the Prometheus text format (not part of the OpenAPI document)."""

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)


def install_observability(app: FastAPI, name: str) -> None:
    tracing.setup(name)
    metrics_routes(app)
    app.add_middleware(RequestTelemetry, router=app.router)  # added last: runs first, sees every answer


# ---- workers ---------------------------------------------------------------------------------------

LAG_INTERVAL_SECONDS = 5.0


def serve_metrics(port: int) -> None:
    """A worker's `/metrics` on `port` (HOST, default 127.0.0.1), from a daemon thread:
    prometheus-client's own server, which answers any path with the registry."""
    import os

    from prometheus_client import start_http_server

    try:
        start_http_server(port, addr=os.environ.get("HOST", "127.0.0.1"))
    except OSError as exc:  # a worker without its metrics still consumes
        log.warning("metrics.port_unavailable", port=port, error=str(exc))


async def watch_lag(js: JetStreamContext, stream: str, durable: str, interval: float = LAG_INTERVAL_SECONDS) -> None:
    """Refresh the consumer's pending and ack-pending gauges from its consumer info."""
    while True:
        with contextlib.suppress(Exception):  # the bus is down: the gauges keep their last value
            info = await js.consumer_info(stream, durable)
            metrics.consumer_lag(durable, int(info.num_pending or 0), int(info.num_ack_pending or 0))
        await asyncio.sleep(interval)
