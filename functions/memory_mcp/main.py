"""memory-mcp (R-1.3): Engram's memory as an MCP server for agent clients, Streamable HTTP at `/mcp`.

Thin: the tools and resources are `engram.runtime.mcp_server` (memory-api's services, the same
authorization), the transport `engram.runtime.mcp_http`. Send `Authorization: Bearer <JWT>` or
`X-Agent-Key: egk_...` with every request. `/healthz` and `/readyz` as in every HTTP function;
`/readyz` also waits for the MCP server (built in the background after start-up).
"""

from __future__ import annotations

from starlette.routing import Route

from engram.bootstrap import get_services
from engram.runtime.http import function_app, warm_embedder
from engram.runtime.mcp_http import PATH, McpEndpoint

endpoint = McpEndpoint()


async def ready() -> dict[str, bool]:
    checks = await (await get_services()).ready()
    return {**checks, "mcp": endpoint.ready}


app = function_app(
    "Engram MCP server",
    "Remember, recall, search, mark, feedback, forget and expiring as MCP tools (Streamable HTTP at /mcp).",
    name="memory-mcp",
    warm=warm_embedder,  # recall and search embed their query: load the model before the first one
    companion=endpoint.running,
    ready_checks=ready,
)
app.router.routes.append(Route(PATH, endpoint, include_in_schema=False))  # the SDK's ASGI app, all methods
