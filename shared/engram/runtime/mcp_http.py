"""The MCP server over Streamable HTTP (`/mcp`), inside an HTTP function (memory-mcp).

Stateless and JSON-answering: every POST is answered by whichever pod gets it (Knative scales
the function to zero and out again, so no session may live in one process). The caller sends
the same credentials as to memory-api, `Authorization: Bearer <JWT>` or `X-Agent-Key: egk_...`
(or `Authorization: AgentKey egk_...`): a request without valid ones is answered 401
problem+json before it reaches the MCP layer, and every tool call resolves them again (a key
revoked in between is refused).

The MCP SDK costs about 0.4 s to import (its protocol models), so the server is built in a worker
thread after start-up: `/healthz` answers at once, `/readyz` reports `mcp` ready once the server
runs, and a request that arrives before waits for it (503 with Retry-After after `wait_seconds`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import structlog
from starlette.types import Receive, Scope, Send

from engram.adapters.failures import failure_kind
from engram.bootstrap import get_services
from engram.domain.errors import Unauthorized
from engram.domain.scopes import Principal
from engram.runtime.guards import RETRY_AFTER_SECONDS
from engram.runtime.problems import problem

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

log = structlog.get_logger(__name__)

PATH = "/mcp"


def _credentials_of(headers: Mapping[str, str] | None) -> tuple[str | None, str | None]:
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    return lowered.get("authorization"), lowered.get("x-agent-key")


async def principal_from_headers(ctx: Context) -> Principal:
    """The caller of one tool call: the HTTP headers of the request that carried it."""
    authorization, agent_key = _credentials_of(ctx.headers)
    return await (await get_services()).auth.authenticate(authorization, agent_key)


def _build_manager(host: str) -> StreamableHTTPSessionManager:
    """Import the SDK, build the server and its stateless Streamable HTTP session manager (a thread)."""
    from mcp.server.transport_security import TransportSecuritySettings

    from engram.runtime.mcp_server import build_server

    server = build_server(principal_from_headers)
    # DNS-rebinding protection where a browser could reach us: a loopback listener (`make run`)
    loopback = host in ("127.0.0.1", "localhost", "::1")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=loopback,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"] if loopback else [],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"] if loopback else [],
    )
    server.streamable_http_app(
        streamable_http_path=PATH, stateless_http=True, json_response=True, transport_security=security, host=host
    )
    return server.session_manager


class McpEndpoint:
    """The ASGI endpoint at `/mcp`: authenticate, wait for the server, hand the request to the SDK."""

    def __init__(self, *, wait_seconds: float = 10.0, host: str | None = None) -> None:
        self.wait_seconds = wait_seconds
        self.host = host or os.environ.get("HOST", "127.0.0.1")
        self._manager: StreamableHTTPSessionManager | None = None
        self._ready = asyncio.Event()
        self.failed: str | None = None

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self._manager is not None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """For the app's lifetime: build the server in the background, run its session manager."""
        stop = asyncio.Event()

        async def run() -> None:
            try:
                manager = await asyncio.to_thread(_build_manager, self.host)
                async with manager.run():
                    self._manager = manager
                    self._ready.set()
                    await stop.wait()
            except Exception as exc:  # reported by /readyz and to every request, never a silent hang
                self.failed = f"{type(exc).__name__}: {exc}"
                log.exception("mcp.start_failed", error=self.failed)
                self._ready.set()

        task = asyncio.create_task(run())
        try:
            yield
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, 10)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = await self._refusal(scope)
        if refusal is None:
            try:
                await asyncio.wait_for(self._ready.wait(), self.wait_seconds)
            except TimeoutError:
                refusal = _unavailable("the MCP server is still starting")
        if refusal is None and self._manager is None:
            refusal = _unavailable(f"the MCP server did not start: {self.failed}")
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        assert self._manager is not None
        await self._manager.handle_request(scope, receive, send)

    async def _refusal(self, scope: Scope) -> Any:
        """401 problem+json without valid credentials; 503 when what checks them is down."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        authorization, agent_key = _credentials_of(headers)
        try:
            await (await get_services()).auth.authenticate(authorization, agent_key)
        except Unauthorized as exc:
            return problem(401, str(exc))
        except Exception as exc:
            if failure_kind(exc) != "outage":
                raise
            return _unavailable("a dependency is unavailable; retry later")
        return None


def _unavailable(detail: str) -> Any:
    response = problem(503, detail, title="Service Unavailable")
    response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
