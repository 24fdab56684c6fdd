"""Agent keys: list, revoke and rotate over HTTP (`manage:AiObservation`) and from the command
line; a revoked key is refused from the next request on (R-12.1)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from engram.services.auth import create_agent_key

ADMIN = ["manage:AiObservation", "read:AiObservation"]


async def issue(services: Any, tenant: str, name: str = "crm-bot") -> Any:
    return await create_agent_key(
        services.uow, tenant_id=tenant, name=name, user_id="alice", teams=["sales"], permissions=["read:AiObservation"]
    )


async def test_list_revoke_rotate_over_http(api: Any, auth: Any, services: Any, tenant: str, other_tenant: str) -> None:
    key = await issue(services, tenant)
    await issue(services, other_tenant, "not-yours")
    agent = {"X-Agent-Key": key.secret}
    assert (await api.get("/api/ai/memory", headers=agent)).status_code == 200  # resolved (and, before, cached)

    admin = auth(tenant, "root", permissions=ADMIN)
    listed = (await api.get("/api/ai/agent-keys", headers=admin)).json()
    assert [(k["id"], k["name"], k["user_id"]) for k in listed] == [(str(key.id), "crm-bot", "alice")]
    assert "secret" not in listed[0] and "key_hash" not in listed[0]
    assert (await api.get("/api/ai/agent-keys", headers=auth(tenant))).status_code == 403  # not an admin

    r = await api.post(f"/api/ai/agent-keys/{key.id}/rotate", headers=admin)
    assert r.status_code == 200, r.text
    rotated = r.json()
    assert rotated["revoked"]["revoked_at"] and rotated["secret"].startswith("egk_")
    assert (await api.get("/api/ai/memory", headers=agent)).status_code == 401  # the very next request
    fresh = {"X-Agent-Key": rotated["secret"]}
    assert (await api.get("/api/ai/memory", headers=fresh)).status_code == 200
    new = next(k for k in (await api.get("/api/ai/agent-keys", headers=admin)).json() if k["id"] == rotated["id"])
    assert (new["name"], new["teams"], new["permissions"]) == ("crm-bot", ["sales"], ["read:AiObservation"])

    r = await api.post(f"/api/ai/agent-keys/{rotated['id']}/revoke", headers=admin)
    assert r.status_code == 200 and r.json()["revoked_at"]
    assert (await api.get("/api/ai/memory", headers=fresh)).status_code == 401
    assert (await api.post(f"/api/ai/agent-keys/{key.id}/rotate", headers=admin)).status_code == 422  # revoked
    everything = (await api.get("/api/ai/agent-keys?include_revoked=true", headers=admin)).json()
    assert len(everything) == 2 and all(k["revoked_at"] for k in everything)
    # another tenant's key is not found, not revoked
    others = await issue(services, other_tenant, "theirs")
    assert (await api.post(f"/api/ai/agent-keys/{others.id}/revoke", headers=admin)).status_code == 404
    assert (await api.get("/api/ai/memory", headers={"X-Agent-Key": others.secret})).status_code == 200


async def test_the_command_line_revokes_for_every_process(api: Any, services: Any, tenant: str) -> None:
    key = await issue(services, tenant)
    agent = {"X-Agent-Key": key.secret}
    assert (await api.get("/api/ai/memory", headers=agent)).status_code == 200

    def engram(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "engram.operations.cli", "agent-key", *args, "--tenant", tenant],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert str(key.id) in engram("list")
    assert "revoked" in engram("revoke", str(key.id))
    assert (await api.get("/api/ai/memory", headers=agent)).status_code == 401  # another process revoked it
    assert str(key.id) not in engram("list") and str(key.id) in engram("list", "--all")
