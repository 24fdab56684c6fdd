"""The MCP server with the SDK's real client over both transports (issue 20, R-1.3).

Streamable HTTP: `python -m functions.memory_mcp` served by uvicorn on a free port, as its own
bus user (memory-mcp). stdio: `engram mcp` as a subprocess. Both on the session's embedded
PostgreSQL and NATS; the event workers run in this process (indexing, feedback).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from engram.development.embedded import free_port
from engram.domain.scopes import Principal
from engram.services.auth import create_agent_key
from tests.conftest import ALL_PERMISSIONS, JWT_SECRET, eventually

REPO = Path(__file__).resolve().parents[2]
TOOLS = {"remember", "recall", "profile", "search", "mark", "feedback", "forget", "expiring"}
AGENT_PERMISSIONS = [
    "read:AiObservation",
    "create:AiObservation",
    "delete:AiObservation",
    "create:AiObservationFeedback",
]


def _env(stack: dict[str, str], **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
        "DATABASE_URL": stack["database_url"],
        "NATS_URL": stack["nats_url"],
        "ENGRAM_NATS_USER": "memory-mcp",  # its own bus user: the test fails if it lacks a permission
        "ENGRAM_NATS_SEED_FILE": str(Path(stack["nats_dir"]) / "credentials" / "memory-mcp.nk"),
        "ENGRAM_JWT_SECRET": JWT_SECRET,
        "ENGRAM_EMBEDDER": os.environ.get("ENGRAM_EMBEDDER", "static"),
        "ENGRAM_LOG_LEVEL": "WARNING",
        **extra,
    }


@pytest.fixture(scope="module")
def mcp_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("memory-mcp") / "memory-mcp.log"


@pytest.fixture(scope="module")
def mcp_url(stack: dict[str, str], services: Any, mcp_log: Path) -> Iterator[str]:
    port = free_port()
    with open(mcp_log, "wb") as log:  # at DEBUG: the most there is to leak (test_no_secret_or_body_is_logged)
        proc = subprocess.Popen(
            [sys.executable, "-m", "functions.memory_mcp"],
            cwd=REPO,
            env=_env(stack, PORT=str(port), ENGRAM_LOG_LEVEL="DEBUG"),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert proc.poll() is None, mcp_log.read_text(errors="replace")[-2000:]
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        else:
            raise TimeoutError("memory-mcp did not become ready")
        yield f"{base}/mcp"
    finally:
        proc.terminate()
        proc.wait(20)


@contextlib.asynccontextmanager
async def over_http(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as c,
    ):
        yield c


def over_stdio(stack: dict[str, str], *args: str, **env: str) -> Client:
    command = str(Path(sys.executable).parent / "engram")
    return Client(StdioServerParameters(command=command, args=["mcp", *args], env=_env(stack, **env), cwd=REPO))


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, text(result)
    data = result.structured_content
    assert isinstance(data, dict)
    return data


async def searched(client: Client, query: str, wanted: str) -> dict[str, Any]:
    """Search until `wanted` is indexed (embed-index runs in this process)."""

    async def found() -> dict[str, Any] | None:
        hits = structured(await client.call_tool("search", {"query": query}))["hits"]
        return next((h for h in hits if h["observation"]["id"] == wanted), None)

    hit = await eventually(found, timeout=20)
    assert hit is not None, f"{wanted} was never found"
    return hit


async def test_every_tool_and_resource_over_streamable_http(
    mcp_url: str, workers: Any, auth: Any, tenant: str, services: Any
) -> None:
    async with over_http(mcp_url, auth(tenant, "alice", teams=["sales"])) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        assert "'team'" in (tools["remember"].description or "") and "(unverified)" in (
            tools["recall"].description or ""
        )
        assert tools["forget"].annotations is not None and tools["forget"].annotations.destructive_hint

        stored = structured(
            await client.call_tool(
                "remember",
                {
                    "title": "Lehmann GmbH pays invoices late",
                    "narrative": "Usually 30 days after the due date.",
                    "scope": "team",
                    "team_ids": ["sales"],
                    "tags": ["customer"],
                },
            )
        )
        obs = stored["observation"]
        assert stored["outcome"] == "created" and obs["verified"] and not obs["unverified"] and obs["scope"] == "team"
        hit = await searched(client, "Lehmann invoices", obs["id"])
        assert hit["score"] > 0

        recalled = text(await client.call_tool("recall", {"query": "When does Lehmann pay?"}))
        assert "Lehmann GmbH pays invoices late" in recalled and "(unverified)" not in recalled
        assert "query_id: " in recalled and obs["id"] in recalled

        accepted = structured(await client.call_tool("feedback", {"kind": "cited", "observation_id": obs["id"]}))
        assert accepted["status"] == "accepted"
        marked = structured(await client.call_tool("mark", {"text": "Lehmann wants invoices as PDF", "tags": ["x"]}))
        assert marked["status"] == "accepted" and marked["id"]

        soon = (datetime.now(UTC) + timedelta(days=2)).isoformat()
        offer = structured(
            await client.call_tool("remember", {"title": "Spring offer for Lehmann", "expires_at": soon})
        )
        dog = structured(
            await client.call_tool(
                "remember",
                {"title": "Alice has a dog, Biscuit", "type": "identity", "said_at": "2026-03-01T12:00:00+01:00"},
            )
        )
        assert dog["observation"]["said_at"].startswith("2026-03-01T11:00:00")  # an import of history
        naive = await client.call_tool("remember", {"title": "Alice sings", "said_at": "2026-03-01T12:00:00"})
        assert naive.is_error and "invalid argument 'said_at'" in text(naive)  # a time without a zone is no instant
        profile = text(await client.call_tool("profile", {}))
        assert "Alice has a dog, Biscuit" in profile and dog["observation"]["id"] in profile
        assert "Lehmann" not in profile  # a team's fact is no part of a user's profile

        expiring = structured(await client.call_tool("expiring", {"within": "7d"}))
        assert [i["id"] for i in expiring["items"]] == [offer["observation"]["id"]]

        read = await client.read_resource(f"engram://observations/{obs['id']}")
        assert json.loads(read.contents[0].text)["title"] == "Lehmann GmbH pays invoices late"  # type: ignore[union-attr]
        history = json.loads(
            (await client.read_resource(f"engram://observations/{obs['id']}/history")).contents[0].text
        )  # type: ignore[union-attr]
        assert [v["status"] for v in history["versions"]] == ["current"]
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert templates == {"engram://observations/{observation_id}", "engram://observations/{observation_id}/history"}

        forgotten = structured(await client.call_tool("forget", {"observation_id": obs["id"]}))
        assert forgotten == {"id": obs["id"], "title": "Lehmann GmbH pays invoices late", "status": "deleted"}
        with pytest.raises(MCPError, match="not found"):
            await client.read_resource(f"engram://observations/{obs['id']}")
    async with services.db.tenant(tenant) as conn:  # the mark went over the bus and was extracted
        await eventually(lambda: conn.fetchval("SELECT count(*) FROM observations WHERE title LIKE '%PDF%'"))


async def test_errors_are_mcp_errors_with_a_clear_message(mcp_url: str, auth: Any, tenant: str) -> None:
    async with over_http(mcp_url, auth(tenant, "alice", teams=["sales"])) as client:
        bad = await client.call_tool("remember", {"title": "x", "scope": "galaxy"})
        assert bad.is_error and "scope" in text(bad)
        missing = await client.call_tool("remember", {"narrative": "no title"})
        assert missing.is_error and "title" in text(missing)
        team = await client.call_tool("remember", {"title": "Budget", "scope": "team", "team_ids": ["finance"]})
        assert team.is_error and "forbidden" in text(team) and "finance" in text(team)
        sensitive = await client.call_tool("recall", {"query": "salary", "sensitive": True})
        assert sensitive.is_error and "forbidden" in text(sensitive) and "view:SensitiveAiMemory" in text(sensitive)
        unknown = await client.call_tool("forget", {"observation_id": str(uuid.uuid4())})
        assert unknown.is_error and "not found" in text(unknown)
        window = await client.call_tool("expiring", {"within": "soon"})
        assert window.is_error and "invalid argument 'within'" in text(window)
        # a zone is checked when named, also for a query that names no day
        for tool in ("recall", "search"):
            zone = await client.call_tool(tool, {"query": "invoices", "time_zone": "Mars/Olympus"})
            assert zone.is_error and "invalid argument 'time_zone'" in text(zone), tool
        rated = await client.call_tool("feedback", {"kind": "rated"})
        assert rated.is_error and "rating" in text(rated)
        with pytest.raises(MCPError, match="not found"):
            await client.read_resource(f"engram://observations/{uuid.uuid4()}")
        with pytest.raises(MCPError, match="UUID"):
            await client.read_resource("engram://observations/not-an-id")
    # no or bad credentials: 401 problem+json before the MCP layer; unstorable text: 422 naming the field
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient() as http:
        r = await http.post(mcp_url, json=call, headers=accept)
        assert r.status_code == 401 and r.headers["content-type"].startswith("application/problem+json")
        assert "missing credentials" in r.json()["detail"]
        r = await http.post(mcp_url, json=call, headers={**accept, "X-Agent-Key": "egk_" + "x" * 40})
        assert r.status_code == 401 and "unknown or revoked agent key" in r.json()["detail"]
        nul = {**call, "method": "tools/call", "params": {"name": "remember", "arguments": {"title": "a\u0000b"}}}
        r = await http.post(mcp_url, json=nul, headers={**accept, **auth(tenant, "alice")})
        assert r.status_code == 422 and r.json()["field"] == "body.params.arguments.title"


async def test_an_agent_key_over_stdio_stores_unverified_and_cannot_verify(
    stack: dict[str, str], services: Any, workers: Any, tenant: str, mcp_url: str, auth: Any
) -> None:
    key = await create_agent_key(
        services.uow, tenant_id=tenant, name="ide-agent", user_id="alice", teams=[], permissions=AGENT_PERMISSIONS
    )
    async with over_stdio(stack, ENGRAM_AGENT_KEY=key.secret) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        stored = structured(await client.call_tool("remember", {"title": "Alice prefers short answers"}))
        obs = stored["observation"]
        assert not obs["verified"] and obs["unverified"] and obs["source"] == "agent"
        assert obs["confidence"] == pytest.approx(0.7)
        await searched(client, "short answers", obs["id"])
        assert "Alice prefers short answers (unverified)" in text(
            await client.call_tool("recall", {"query": "answers"})
        )

        marked = await client.call_tool("mark", {"text": "remember this"})
        assert marked.is_error and "forbidden" in text(marked) and "human" in text(marked)
        nul = await client.call_tool("remember", {"title": "a\u0000b"})
        assert nul.is_error and "invalid argument 'title'" in text(nul)
        confirmed = structured(await client.call_tool("feedback", {"kind": "confirmed", "observation_id": obs["id"]}))
        assert confirmed["status"] == "accepted"

        async def counted() -> Any:
            async with services.db.tenant(tenant) as conn:
                return await conn.fetchrow(
                    "SELECT confirmed_count, verified FROM observations WHERE id = $1 AND confirmed_count > 0",
                    uuid.UUID(obs["id"]),
                )

        row = await eventually(counted, timeout=20)
        assert row["confirmed_count"] == 1 and row["verified"] is False  # counted, verifies nothing
        read = json.loads((await client.read_resource(f"engram://observations/{obs['id']}")).contents[0].text)  # type: ignore[union-attr]
        assert read["verified"] is False and read["source"] == "agent"

        admin = Principal(tenant_id=tenant, user_id="root", permissions=frozenset({"manage:AiObservation"}))
        await services.agent_keys.revoke(admin, key.id)
        revoked = await client.call_tool("recall", {"query": "answers"})
        assert revoked.is_error and "not authenticated" in text(revoked)  # from the next call on

    # the same confirmation from a person verifies: the check above can fail
    async with over_http(mcp_url, auth(tenant, "alice")) as person:
        structured(await person.call_tool("feedback", {"kind": "confirmed", "observation_id": obs["id"]}))

    async def verified() -> bool:
        async with services.db.tenant(tenant) as conn:
            return bool(await conn.fetchval("SELECT verified FROM observations WHERE id = $1", uuid.UUID(obs["id"])))

    assert await eventually(verified, timeout=20)


async def test_stdio_as_a_local_user(stack: dict[str, str], tenant: str) -> None:
    args = ("--tenant", tenant, "--user", "bob", *(f"--permission={p}" for p in ALL_PERMISSIONS))
    async with over_stdio(stack, *args) as client:
        stored = structured(await client.call_tool("remember", {"title": "Bob's desk is in room 4"}))
        assert stored["observation"]["verified"] and stored["observation"]["user_id"] == "bob"
        marked = structured(await client.call_tool("mark", {"text": "Bob moves to room 5 in May"}))
        assert marked["status"] == "accepted"
        other = await client.call_tool("remember", {"title": "x", "owner": "tenant", "scope": "public"})
        assert other.is_error and "forbidden" in text(other)


async def test_no_secret_or_body_is_logged(mcp_url: str, mcp_log: Path, token: Any, services: Any, tenant: str) -> None:
    """R-12.3: memory-mcp runs at DEBUG; its log holds neither the JWT, the agent key nor what was stored."""
    jwt = token(tenant, "alice")
    key = await create_agent_key(
        services.uow, tenant_id=tenant, name="log", user_id="alice", teams=[], permissions=AGENT_PERMISSIONS
    )
    body = f"the vault code is {uuid.uuid4().hex}"
    async with over_http(mcp_url, {"Authorization": f"Bearer {jwt}"}) as client:
        structured(await client.call_tool("remember", {"title": "vault", "narrative": body}))
        assert (await client.call_tool("remember", {"title": body, "scope": "galaxy"})).is_error
    async with over_http(mcp_url, {"X-Agent-Key": key.secret}) as client:
        structured(await client.call_tool("recall", {"query": body}))
    logged = await asyncio.to_thread(mcp_log.read_text, errors="replace")
    assert "DEBUG" in logged or "debug" in logged  # it did log at DEBUG
    for secret in (jwt, key.secret, body, body.rsplit(" ", 1)[1]):
        assert secret not in logged


def test_engram_mcp_without_credentials_says_what_it_needs(stack: dict[str, str]) -> None:
    command = str(Path(sys.executable).parent / "engram")
    env = _env(stack)
    done = subprocess.run(
        [command, "mcp"], env=env, capture_output=True, timeout=60, cwd=REPO, stdin=subprocess.DEVNULL
    )
    assert done.returncode != 0 and b"--agent-key" in done.stderr and done.stdout == b""
