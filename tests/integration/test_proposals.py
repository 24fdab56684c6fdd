"""Memory proposals end to end on the local stack (issue 20): chat-turn over HTTP, the real
extract-observation worker with the scripted model, PostgreSQL and NATS. Sensitive, team-wide
and uncertain findings are proposed instead of stored; the chat's user sees them in the next
turn's answer, approves (stored through the one write rule, verified) or rejects them, and
`io.engram.chat.approval_decision.v1` goes out; undecided ones expire."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from engram.domain.observation import is_unit_key
from engram.services.proposals import expire_proposals
from tests.anthropic_server import AnthropicServer, tool_use
from tests.conftest import ALL_PERMISSIONS, eventually
from tests.fakes import FakeRecall
from tests.integration.test_chat_extraction import marked, turn

SENSITIVE = "view:SensitiveAiMemory"
PERMISSIONS = [*ALL_PERMISSIONS, SENSITIVE]


async def proposal_rows(services: Any, tenant: str) -> list[Any]:
    async with services.db.tenant(tenant) as conn:
        return list(await conn.fetch("SELECT * FROM memory_proposals ORDER BY created_at, id"))


async def observation_rows(services: Any, tenant: str) -> list[Any]:
    """What extraction stored or approval added; not the memory units of the chat's messages."""
    async with services.db.tenant(tenant) as conn:
        rows = list(await conn.fetch("SELECT * FROM observations ORDER BY created_at"))
    return [r for r in rows if not is_unit_key(r["key"])]


def decide(chat_id: str, proposal_id: str) -> str:
    return f"/api/ai/chats/{chat_id}/proposals/{proposal_id}"


async def propose(
    services: Any, chat_api: httpx.AsyncClient, anthropic: AnthropicServer, headers: dict[str, str], tenant: str
) -> tuple[str, dict[str, Any]]:
    """A turn whose extraction finds one plain, one sensitive, one team and one uncertain item;
    the next turn's answer lists the three proposals. (chat id, proposals by reason)"""
    marker = f"Projekt-{uuid.uuid4().hex[:8]}"
    extracted = {
        "language": "de",
        "observations": [
            {"type": "decision", "title": f"{marker} startet im März"},
            {"type": "fact", "title": f"Alice ist wegen {marker} krankgeschrieben", "sensitive": True},
            {"type": "decision", "title": f"Das Team liefert {marker} in Sprints", "team": True},
            {"type": "fact", "title": f"{marker} hat vielleicht ein Budget von 40k", "confidence": 0.3},
        ],
    }
    marked(anthropic, marker, tool_use("record_observations", extracted))
    chat_id = uuid.uuid4()
    await turn(chat_api, headers, chat_id, f"Notiz zu {marker}: Start im März, Lieferung in Sprints.")
    found = await eventually(lambda: _three(services, tenant), timeout=20)
    assert {r["reason"] for r in found} == {"sensitive", "team", "low_confidence"}
    (stored,) = await observation_rows(services, tenant)
    assert stored["title"] == f"{marker} startet im März" and stored["scope"] == "private"
    body = await turn(chat_api, headers, chat_id, "Danke!")
    by_reason = {p["reason"]: p for p in body["proposals"]}
    assert set(by_reason) == {"sensitive", "team", "low_confidence"}
    return str(chat_id), by_reason


async def _three(services: Any, tenant: str) -> list[Any] | None:
    found = await proposal_rows(services, tenant)
    return found if len(found) == 3 else None


async def test_findings_that_need_a_person_are_proposed_and_approved_or_rejected(
    services: Any,
    workers: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    headers = auth(tenant, teams=["sales"], permissions=PERMISSIONS)
    chat_id, proposals = await propose(services, chat_api, anthropic, headers, tenant)
    team = proposals["team"]
    assert team["scope"] == "team" and team["team_ids"] == ["sales"] and team["status"] == "pending"
    assert proposals["sensitive"]["scope"] == "sensitive"
    assert proposals["low_confidence"]["confidence"] == 0.3
    listed = await chat_api.get(f"/api/ai/chats/{chat_id}/proposals", headers=headers)
    assert listed.status_code == 200 and {p["id"] for p in listed.json()} == {p["id"] for p in proposals.values()}

    approved = await chat_api.post(decide(chat_id, team["id"]), json={"decision": "approve"}, headers=headers)
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "approved" and approved.json()["observation_id"]
    stored = [o for o in await observation_rows(services, tenant) if str(o["id"]) == approved.json()["observation_id"]]
    assert stored[0]["scope"] == "team" and list(stored[0]["team_ids"]) == ["sales"]
    assert stored[0]["verified"] is True and stored[0]["confidence"] == 1.0

    rejected = await chat_api.post(
        decide(chat_id, proposals["low_confidence"]["id"]), json={"decision": "reject"}, headers=headers
    )
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert rejected.json()["observation_id"] is None
    again = await chat_api.post(decide(chat_id, team["id"]), json={"decision": "reject"}, headers=headers)
    assert again.status_code == 409 and again.headers["content-type"] == "application/problem+json"
    remaining = await chat_api.get(f"/api/ai/chats/{chat_id}/proposals", headers=headers)
    assert [p["reason"] for p in remaining.json()] == ["sensitive"]

    # an ephemeral consumer from the stream's start (deliver all): made now, it is not idle-deleted
    sub = await services.bus.js.pull_subscribe("engram.chat.*.*.approval_decision", stream="ENGRAM")
    decisions: list[dict[str, Any]] = []
    while len(decisions) < 2:
        for m in await sub.fetch(10, timeout=5):
            await m.ack()
            if m.headers.get("ce-tenantid") == tenant:
                assert m.headers["ce-type"] == "io.engram.chat.approval_decision.v1"
                decisions.append(json.loads(m.data))
    assert {(d["decision"], d["reason"]) for d in decisions} == {("approved", "team"), ("rejected", "low_confidence")}
    assert {d["observation_id"] for d in decisions} == {approved.json()["observation_id"], None}
    await sub.unsubscribe()
    async with services.db.tenant(tenant) as conn:
        telemetry = await conn.fetch("SELECT metadata FROM ai_events WHERE event_name = 'chat.approval_decision'")
    assert sorted(r["metadata"]["decision"] for r in telemetry) == ["approved", "rejected"]


async def test_only_the_chats_user_decides_under_the_one_write_rule(
    services: Any,
    workers: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    chat_id, proposals = await propose(
        services, chat_api, anthropic, auth(tenant, teams=["sales"], permissions=PERMISSIONS), tenant
    )
    team, sensitive = proposals["team"]["id"], proposals["sensitive"]["id"]
    bob = await chat_api.post(decide(chat_id, team), json={"decision": "approve"}, headers=auth(tenant, "bob"))
    assert bob.status_code == 404  # not bob's chat: not even its proposals exist for him
    other_tenant = await chat_api.post(decide(chat_id, team), json={"decision": "approve"}, headers=auth("elsewhere"))
    assert other_tenant.status_code == 404
    # alice has left the team since: she cannot approve a memory into it
    left = await chat_api.post(
        decide(chat_id, team), json={"decision": "approve"}, headers=auth(tenant, permissions=PERMISSIONS)
    )
    assert left.status_code == 403 and "sales" in left.json()["detail"]
    no_sensitive = ALL_PERMISSIONS
    refused = await chat_api.post(
        decide(chat_id, sensitive), json={"decision": "approve"}, headers=auth(tenant, permissions=no_sensitive)
    )
    assert refused.status_code == 403 and SENSITIVE in refused.json()["detail"]
    bad = await chat_api.post(decide(chat_id, team), json={"decision": "maybe"}, headers=auth(tenant))
    assert bad.status_code == 422 and "body.decision" in bad.text
    assert bad.headers["content-type"] == "application/problem+json"
    assert all(r["status"] == "pending" for r in await proposal_rows(services, tenant))


async def test_undecided_proposals_expire(
    services: Any,
    api: httpx.AsyncClient,
    workers: Any,
    llm: Any,
    fake_recall: FakeRecall,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    auth: Any,
    tenant: str,
) -> None:
    headers = auth(tenant, teams=["sales"], permissions=PERMISSIONS)
    chat_id, proposals = await propose(services, chat_api, anthropic, headers, tenant)
    async with services.db.tenant(tenant) as conn:
        await conn.execute(
            "UPDATE memory_proposals SET expires_at = now() - interval '1 minute' WHERE id = $1",
            uuid.UUID(proposals["team"]["id"]),
        )
    late = await chat_api.post(decide(chat_id, proposals["team"]["id"]), json={"decision": "approve"}, headers=headers)
    assert late.status_code == 409 and "expired" in late.json()["detail"]
    assert await expire_proposals(services.maintenance, now=datetime.now(UTC) + timedelta(seconds=1)) >= 1
    statuses = {str(r["id"]): r["status"] for r in await proposal_rows(services, tenant)}
    assert statuses[proposals["team"]["id"]] == "expired" and statuses[proposals["sensitive"]["id"]] == "pending"
    listed = await chat_api.get(f"/api/ai/chats/{chat_id}/proposals", headers=headers)
    assert proposals["team"]["id"] not in {p["id"] for p in listed.json()}
    # the user's proposals are part of their personal data
    export = await api.get("/api/ai/memory/export", headers=headers)
    records = [json.loads(line) for line in export.text.splitlines() if line]
    assert sorted(r["status"] for r in records if r["record"] == "memory_proposal") == ["expired", "pending", "pending"]
    assert records[-1]["proposals"] == 3
