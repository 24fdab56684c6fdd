"""Metrics and traces of the HTTP functions (R-17.1): the outermost ASGI middleware and `/metrics`.

`RequestTelemetry` times every request by its route template (never the raw path: ids would
make a series each), method and status, and runs it in a server span that continues the
caller's W3C `traceparent` (or starts a trace). The request's correlation id is its
`X-Correlation-Id` when that is a short safe token, else the trace id; every event published
while the request runs carries both (`engram.instrumentation.tracing.stamp`). The answer
carries `traceparent` and `X-Correlation-Id` back.

A hand-written middleware rather than opentelemetry-instrumentation-asgi: the route template
is needed for the metric anyway, and the beta instrumentation packages pin the SDK tightly.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from fastapi import FastAPI
from fastapi.responses import Response
from nats.js import JetStreamContext
from opentelemetry import propagate
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.routing import Match, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram.instrumentation import metrics, tracing


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
    def __init__(self, app: ASGIApp, router: Router) -> None:
        self.app = app
        self.router = router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = route_of(self.router, scope)
        method = str(scope.get("method", "GET"))
        if route == "/metrics":  # the scrape itself is neither timed nor traced
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        started = time.perf_counter()
        status = 500  # what the client sees when the app fails before answering
        caller = next((v.decode("latin-1") for k, v in headers if k == b"x-correlation-id"), None)
        with tracing.tracer().start_as_current_span(
            f"{method} {route}",
            context=tracing.extract_http(headers),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "http.route": route, "url.scheme": scope.get("scheme", "http")},
        ) as span:
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
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))
                metrics.HTTP_REQUESTS.labels(route, method, str(status)).observe(time.perf_counter() - started)


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

    start_http_server(port, addr=os.environ.get("HOST", "127.0.0.1"))


async def watch_lag(js: JetStreamContext, stream: str, durable: str, interval: float = LAG_INTERVAL_SECONDS) -> None:
    """Refresh the consumer's pending and ack-pending gauges from its consumer info."""
    while True:
        with contextlib.suppress(Exception):  # the bus is down: the gauges keep their last value
            info = await js.consumer_info(stream, durable)
            metrics.consumer_lag(durable, int(info.num_pending or 0), int(info.num_ack_pending or 0))
        await asyncio.sleep(interval)
