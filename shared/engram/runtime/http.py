"""Shared HTTP pieces for the FastAPI functions: problem+json errors, body limit, auth, health.

Every error leaves as RFC 9457 `application/problem+json` with the field at fault where
there is one; bad input is a 4xx, never a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

import structlog
from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram.adapters.failures import failure_kind
from engram.bootstrap import Services, get_services
from engram.domain.deliveries import reason
from engram.domain.errors import (
    Conflict,
    Forbidden,
    InvalidEvent,
    NotFound,
    RecallUnavailable,
    TelemetryError,
    TenantRequired,
    Unauthorized,
    Unprocessable,
)
from engram.domain.scopes import Principal
from engram.instrumentation import metrics, tracing
from engram.runtime.guards import RETRY_AFTER_SECONDS, Deadline, TextHygiene
from engram.runtime.heap import settle_heap
from engram.runtime.observability import TELEMETRY, install_observability
from engram.runtime.problems import problem

log = structlog.get_logger(__name__)


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        where, rest = parts[0], parts[1:]
        return f"{where}.{'.'.join(rest)}" if rest else where
    return ".".join(parts)


async def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"field": _field(e.get("loc", ())), "message": e.get("msg", "invalid"), "type": e.get("type")}
        for e in exc.errors()
    ]
    first = errors[0] if errors else {"field": None, "message": "invalid request"}
    return problem(422, f"{first['field']}: {first['message']}", field=first["field"], errors=errors)


async def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return problem(exc.status_code, str(exc.detail))


async def _mapped(_: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, Unauthorized):
        return problem(401, str(exc))
    if isinstance(exc, Forbidden):
        return problem(403, str(exc))
    if isinstance(exc, NotFound):
        return problem(404, str(exc))
    if isinstance(exc, Conflict):
        return problem(409, str(exc))
    if isinstance(exc, Unprocessable):
        return problem(422, str(exc), field=exc.field)
    if isinstance(exc, InvalidEvent | TelemetryError | TenantRequired):
        return problem(422, str(exc), field="event")
    if isinstance(exc, RecallUnavailable):
        return problem(503, str(exc), title="Recall Unavailable")
    kind = failure_kind(exc)
    if kind == "outage":  # a dependency is down or slow: come back later, never a 500
        log.warning("http.dependency_unavailable", error=str(exc) or type(exc).__name__)
        response = problem(503, "a dependency is unavailable; retry later", title="Service Unavailable")
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    if kind == "data":  # a value the database refuses that no validation caught
        log.warning("http.data_error", error=str(exc))
        return problem(422, f"the request holds a value that cannot be stored: {reason(exc)}")
    log.exception("http.unhandled", error=str(exc))
    return problem(500, "an unexpected error occurred; it has been logged")


class BodyLimit:
    """Reject bodies over `limit` bytes with 413 before they are read into memory."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared < 0 or declared > self.limit:
                    await self._reject(scope, receive, send)
                    return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._reject(scope, receive, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem(413, f"request body exceeds {self.limit} bytes")
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass


def install(
    app: FastAPI, *, max_body_bytes: int, deadline_seconds: float = 0.0, strip_fields: tuple[str, ...] = ()
) -> None:
    """Errors as problem+json, and the guards from the outside in: the deadline, the body limit,
    text hygiene (`engram.runtime.guards`)."""
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    for exc_type in (
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        Unprocessable,
        InvalidEvent,
        TelemetryError,
        TenantRequired,
        RecallUnavailable,
        Exception,
    ):
        app.add_exception_handler(exc_type, _mapped)
    app.add_middleware(TextHygiene, strip=strip_fields)  # the last added runs first
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    if deadline_seconds > 0:
        app.add_middleware(Deadline, seconds=deadline_seconds)


# ---- dependencies (FastAPI `Annotated` style) ---------------------------------------------------


async def _services() -> Services:
    return await get_services()


ServicesDep = Annotated[Services, Depends(_services)]


async def _principal(
    services: ServicesDep,
    # described as the OpenAPI security schemes below, not as free header parameters
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    x_agent_key: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    return await services.auth.authenticate(authorization, x_agent_key)


CurrentPrincipal = Annotated[Principal, Depends(_principal)]


OpenApiPatch = Callable[[dict[str, Any]], None]


def document(app: FastAPI, *patches: OpenApiPatch) -> None:
    """The app's OpenAPI document as FastAPI generates it, plus the security schemes every
    function uses and `patches` (what a function's routes accept that the models cannot say)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            components = schema.setdefault("components", {})
            components["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT", "description": "a human's JWT"},
                "agentKey": {"type": "apiKey", "in": "header", "name": "X-Agent-Key", "description": "egk_..."},
            }
            for path, operations in schema.get("paths", {}).items():
                if path.startswith("/api/"):
                    for operation in operations.values():
                        operation.setdefault("security", [{"bearer": []}, {"agentKey": []}])
            for patch in patches:
                patch(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def health_routes(app: FastAPI, ready_checks: Callable[[], Awaitable[dict[str, bool]]] | None = None) -> None:
    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        try:
            services = await get_services()
            checks = await (ready_checks() if ready_checks else services.ready())
        except Exception as exc:
            return problem(503, f"not ready: {exc}", checks={})
        if all(checks.values()):
            return JSONResponse({"status": "ready", "checks": checks})
        failing = ", ".join(k for k, ok in checks.items() if not ok)
        return problem(503, f"not ready: {failing}", checks=checks)


def serve(app_path: str, *, graceful_seconds: int = 20) -> None:
    """Run an HTTP function: $PORT (Knative sets it), 127.0.0.1 unless HOST is set."""
    import os

    import uvicorn

    from engram.runtime.logs import configure_logging

    configure_logging()  # structlog and the standard loggers, both redacted
    uvicorn.run(
        app_path,
        host=os.environ.get("HOST", "127.0.0.1"),
        port=int(os.environ.get("PORT", "8080")),
        log_level=os.environ.get("ENGRAM_LOG_LEVEL", "info").lower(),
        proxy_headers=True,
        log_config=None,  # uvicorn's loggers go to the root handler, whose filter redacts (runtime/logs.py)
        timeout_graceful_shutdown=graceful_seconds,
    )


async def warm_embedder(services: Services) -> None:
    """Load an in-process embedding model in the background after start-up (TEI has nothing to load)."""
    warm = getattr(services.embedder, "warm", None)
    if warm is not None:
        await warm()


def function_app(
    title: str,
    description: str,
    *,
    name: str,
    warm: Callable[[Services], Awaitable[None]] | None = None,
    relay_outbox: bool = True,
    deadline_seconds: float = 15.0,
    strip_fields: tuple[str, ...] = (),
    companion: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None,
    ready_checks: Callable[[], Awaitable[dict[str, bool]]] | None = None,
) -> FastAPI:
    """A FastAPI app for function `name`: problem+json errors, body limit, /healthz, /readyz and
    /metrics, every request timed and traced (`engram.runtime.observability`).

    Services are built in the background at start-up (so /healthz answers at once) and closed
    at shutdown; `relay_outbox` runs the outbox relay in this process, `warm` does whatever else
    should happen before the first request (e.g. importing an SDK). A request whose answer has
    not started within `deadline_seconds` (`ENGRAM_HTTP_DEADLINE_SECONDS` overrides it) gets 503
    with `Retry-After`; `strip_fields` are the top-level body fields cleaned of unstorable text
    instead of refused. `companion` runs for the app's lifetime beside it (memory-mcp's MCP
    server), `ready_checks` replace the services' readiness checks of `/readyz`.
    """
    from engram.bootstrap import shutdown
    from engram.settings import get_settings

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async def start() -> None:
            with contextlib.suppress(Exception):
                services = await get_services()
                if relay_outbox:
                    services.start_outbox_relay()
                metrics.served()  # the cold start: from the process's start until its services are built
                if warm is not None:
                    await warm(services)
            settle_heap()

        task = asyncio.create_task(start())
        async with contextlib.AsyncExitStack() as stack:
            if companion is not None:
                await stack.enter_async_context(companion())
            yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await shutdown()

    tracing.setup(name)  # before the app: FastAPI's telemetry looks for the tracer provider
    app = FastAPI(title=title, version="0.1.0", lifespan=lifespan, description=description, telemetry=TELEMETRY)
    settings = get_settings()
    deadline = settings.engram_http_deadline_seconds
    install(
        app,
        max_body_bytes=settings.engram_max_body_bytes,
        deadline_seconds=deadline if deadline is not None else deadline_seconds,
        strip_fields=strip_fields,
    )
    document(app)
    health_routes(app, ready_checks)
    install_observability(app, name)
    return app
