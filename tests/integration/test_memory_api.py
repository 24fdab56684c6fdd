"""memory-api over HTTP: remember, list, mark, domain events, and bad input as problem+json."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.conftest import JWT_SECRET, eventually

PROBLEM = "application/problem+json"


def assert_problem(r: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["title"] and body["detail"]
    if field is not None:
        assert body["field"] == field, body
    return body


async def test_remember_user_is_verified_agent_is_not(api: Any, auth: Any, tenant: str, services: Any) -> None:
    r = await api.post("/api/ai/memory", headers=auth(tenant), json={"title": "Alice likes tea", "type": "preference"})
    assert r.status_code == 201, r.text
    obs = r.json()["observation"]
    assert obs["verified"] is True and obs["confidence"] == 1.0 and obs["source"] == "user"
    assert obs["user_id"] == "alice" and obs["scope"] == "private"

    from engram.services.auth import create_agent_key

    key = await create_agent_key(
        services.uow,
        tenant_id=tenant,
        name="bot",
        user_id="alice",
        teams=[],
        permissions=["create:AiObservation", "read:AiObservation"],
    )
    r = await api.post(
        "/api/ai/memory",
        headers={"X-Agent-Key": key.secret},
        json={"title": "Alice probably prefers mornings", "type": "preference"},
    )
    assert r.status_code == 201, r.text
    obs = r.json()["observation"]
    assert obs["verified"] is False and obs["confidence"] == pytest.approx(0.7) and obs["source"] == "agent"


async def test_dedup_and_key_upsert_over_http(api: Any, auth: Any, tenant: str) -> None:
    body = {"title": "Office in Berlin", "type": "fact"}
    first = await api.post("/api/ai/memory", headers=auth(tenant), json=body)
    again = await api.post("/api/ai/memory", headers=auth(tenant), json={**body, "title": "office in  BERLIN"})
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["outcome"] == "deduplicated"
    assert again.json()["observation"]["id"] == first.json()["observation"]["id"]
    keyed = {"title": "Project Atlas: phase 1", "type": "project", "key": "project:atlas"}
    a = await api.post("/api/ai/memory", headers=auth(tenant), json=keyed)
    b = await api.post("/api/ai/memory", headers=auth(tenant), json={**keyed, "title": "Project Atlas: phase 2"})
    assert b.json()["outcome"] == "updated"
    assert b.json()["observation"]["id"] == a.json()["observation"]["id"]
    assert b.json()["observation"]["created_at"] == a.json()["observation"]["created_at"]


async def test_list_filters_pages_and_visibility(api: Any, auth: Any, tenant: str) -> None:
    for i in range(5):
        await api.post("/api/ai/memory", headers=auth(tenant), json={"title": f"note {i}", "tags": ["Batch"]})
    await api.post(
        "/api/ai/memory",
        headers=auth(tenant, teams=["sales"]),
        json={"title": "sales team note", "scope": "team", "team_ids": ["sales"]},
    )
    page1 = (await api.get("/api/ai/memory?size=2&tag=batch", headers=auth(tenant))).json()
    page3 = (await api.get("/api/ai/memory?size=2&page=3&tag=batch", headers=auth(tenant))).json()
    assert page1["total"] == 5 and len(page1["items"]) == 2 and len(page3["items"]) == 1
    bob = (await api.get("/api/ai/memory", headers=auth(tenant, "bob"))).json()
    assert bob["total"] == 0  # alice's private notes are hers
    bob_in_sales = (await api.get("/api/ai/memory", headers=auth(tenant, "bob", teams=["sales"]))).json()
    assert [o["title"] for o in bob_in_sales["items"]] == ["sales team note"]


async def test_list_goes_on_after_a_page_and_counts_up_to_a_cap(
    api: Any, auth: Any, tenant: str, services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(7):
        await api.post("/api/ai/memory", headers=auth(tenant), json={"title": f"entry {i}"})
    numbered = [(await api.get(f"/api/ai/memory?size=3&page={n}", headers=auth(tenant))).json() for n in (1, 2, 3)]
    assert [p["total"] for p in numbered] == [7, 7, 7] and all(p["total_exact"] for p in numbered)
    assert [len(p["items"]) for p in numbered] == [3, 3, 1] and numbered[2]["next"] is None
    walked, after = [], None
    while True:
        query = "size=3" + (f"&after={after}" if after else "")
        body = (await api.get(f"/api/ai/memory?{query}", headers=auth(tenant))).json()
        walked += [o["id"] for o in body["items"]]
        after = body["next"]
        if after is None:
            break
    assert walked == [o["id"] for p in numbered for o in p["items"]]  # the same list, however it is paged
    second = (await api.get(f"/api/ai/memory?size=2&page=2&after={numbered[0]['next']}", headers=auth(tenant))).json()
    assert [o["id"] for o in second["items"]] == walked[5:7]  # pages count from the mark

    monkeypatch.setattr(services.memory, "total_cap", 5)
    capped = (await api.get("/api/ai/memory?size=2", headers=auth(tenant))).json()
    assert capped["total"] == 5 and capped["total_exact"] is False and len(capped["items"]) == 2
    assert assert_problem(await api.get("/api/ai/memory?after=not-a-mark", headers=auth(tenant)), 422, "query.after")


async def test_domain_event_over_http_becomes_one_visible_observation(
    api: Any, auth: Any, tenant: str, other_tenant: str, workers: Any
) -> None:
    headers = {
        **auth(tenant),
        "ce-specversion": "1.0",
        "ce-id": "ord-1",
        "ce-source": "/orders",
        "ce-type": "com.example.orders.order.completed.v1",
        "Content-Type": "application/json",
    }
    data = json.dumps({"order_id": "5001", "customer_name": "Müller GmbH", "total": "99.00"})
    for _ in range(2):
        r = await api.post("/api/ai/events", headers=headers, content=data)
        assert r.status_code == 202, r.text
    assert r.json()["duplicate"] is True
    # structured mode is accepted too
    structured = {
        "specversion": "1.0",
        "id": "ord-2",
        "source": "/orders",
        "type": "com.example.orders.order.completed.v1",
        "data": {"order_id": "5002", "customer_name": "Schmidt AG", "total": "10.00"},
    }
    r = await api.post(
        "/api/ai/events",
        headers={**auth(tenant), "Content-Type": "application/cloudevents+json"},
        content=json.dumps(structured),
    )
    assert r.status_code == 202, r.text

    async def listed() -> Any:
        body = (await api.get("/api/ai/memory", headers=auth(tenant, "bob"))).json()
        return body if body["total"] == 2 else None

    body = await eventually(listed)
    titles = sorted(o["title"] for o in body["items"])
    assert titles == ["Order 5001 for Müller GmbH completed", "Order 5002 for Schmidt AG completed"]
    other = (await api.get("/api/ai/memory", headers=auth(other_tenant))).json()
    assert other["total"] == 0
    obs_id = body["items"][0]["id"]
    assert (await api.get(f"/api/ai/memory/{obs_id}", headers=auth(tenant, "bob"))).status_code == 200
    assert_problem(await api.get(f"/api/ai/memory/{obs_id}", headers=auth(other_tenant)), 404)


async def test_mark_publishes_and_worker_stores_verified(api: Any, auth: Any, tenant: str, workers: Any) -> None:
    r = await api.post(
        "/api/ai/memory/mark",
        headers=auth(tenant),
        json={"text": "Rechnungen an Müller gehen ab 2027 quartalsweise raus.", "type": "decision"},
    )
    assert r.status_code == 202, r.text

    async def stored() -> Any:
        body = (await api.get("/api/ai/memory?type=decision", headers=auth(tenant))).json()
        return body["items"] if body["total"] else None

    (obs,) = await eventually(stored)
    assert obs["verified"] and obs["trigger_source"] == "manual"


async def test_no_write_path_plants_memory_in_another_team(api: Any, auth: Any, tenant: str) -> None:
    """alice (team sales) cannot put a team memory into team hr: not by remember, not by marking
    over HTTP, not by a mark sent through /api/ai/events (R-16.4)."""
    alice = auth(tenant, "alice", teams=["sales"])
    team_hr = {"scope": "team", "team_ids": ["hr"]}
    body = assert_problem(await api.post("/api/ai/memory", headers=alice, json={"title": "x", **team_hr}), 403)
    assert "hr" in body["detail"]
    r = await api.post("/api/ai/memory/mark", headers=alice, json={"text": "HR: all raises are frozen", **team_hr})
    assert "hr" in assert_problem(r, 403)["detail"]
    r = await api.post(
        "/api/ai/events",
        headers={
            **alice,
            "ce-specversion": "1.0",
            "ce-id": "mark-hr-1",
            "ce-source": "/ui",
            "ce-type": "io.engram.observation.marked.v1",
            "Content-Type": "application/json",
        },
        content=json.dumps({"text": "HR: all raises are frozen", **team_hr}).encode(),
    )
    assert "hr" in assert_problem(r, 403)["detail"]
    sensitive = {"text": "salary of bob", "scope": "sensitive"}
    assert_problem(await api.post("/api/ai/memory/mark", headers=alice, json=sensitive), 403)
    # her own team is fine
    r = await api.post(
        "/api/ai/memory/mark", headers=alice, json={"text": "Sales: Q3 push", "scope": "team", "team_ids": ["sales"]}
    )
    assert r.status_code == 202, r.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body.title"),
        ({"title": 42}, "body.title"),
        ({"title": "x", "tags": "not-a-list"}, "body.tags"),
        ({"title": "x", "priority": "urgent"}, "body.priority"),
        ({"title": "x", "confidence": 3}, "body.confidence"),
        ({"title": "x", "unexpected": 1}, "body.unexpected"),
        ({"title": "x", "type": "martian"}, "type"),
        ({"title": "x", "scope": "team"}, "team_ids"),
        # a time without a zone is no instant (and was a 500 beside an expires_at with one)
        ({"title": "x", "valid_from": "2026-01-01T00:00:00", "expires_at": "2026-02-01T00:00:00Z"}, "body.valid_from"),
        ({"title": "x", "said_at": "2026-01-01T00:00:00"}, "body.said_at"),
    ],
)
async def test_bad_remember_bodies_are_422_problems(api: Any, auth: Any, tenant: str, body: Any, field: str) -> None:
    assert_problem(await api.post("/api/ai/memory", headers=auth(tenant), json=body), 422, field)


async def test_an_import_of_history_says_when_each_statement_was_made(api: Any, auth: Any, tenant: str) -> None:
    """`said_at` orders what was said: the statement of 5 May stays, the one of 3 May sent after
    it does not replace it; a time after now counts as now."""
    keyed = {"type": "fact", "key": "home"}
    may5 = {**keyed, "title": "Lives in Kiel", "said_at": "2026-05-05T09:00:00+02:00"}
    may3 = {**keyed, "title": "Lives in Bonn", "said_at": "2026-05-03T09:00:00Z"}
    first = await api.post("/api/ai/memory", headers=auth(tenant), json=may5)
    assert first.status_code == 201 and first.json()["observation"]["said_at"].startswith("2026-05-05T07:00:00")
    late = await api.post("/api/ai/memory", headers=auth(tenant), json=may3)
    assert late.status_code == 200 and late.json()["outcome"] == "deduplicated"
    assert late.json()["observation"]["title"] == "Lives in Kiel"
    ahead = await api.post(
        "/api/ai/memory", headers=auth(tenant), json={"title": "x", "said_at": "2999-01-01T00:00:00Z"}
    )
    assert ahead.status_code == 201 and ahead.json()["observation"]["said_at"] < "2999"


async def test_malformed_json_and_oversize_body(api: Any, auth: Any, tenant: str) -> None:
    r = await api.post(
        "/api/ai/memory", headers={**auth(tenant), "Content-Type": "application/json"}, content=b"{not json"
    )
    assert_problem(r, 422)
    r = await api.post(
        "/api/ai/memory",
        headers={**auth(tenant), "Content-Type": "application/json"},
        content=b'{"title": "' + b"x" * 2_000_000 + b'"}',
    )
    assert_problem(r, 413)


async def test_authentication_failures(api: Any, auth: Any, token: Any, tenant: str) -> None:
    assert_problem(await api.get("/api/ai/memory"), 401)
    assert_problem(await api.get("/api/ai/memory", headers={"Authorization": "Bearer not.a.jwt"}), 401)
    expired = token(tenant, now=time.time() - 7200, ttl_seconds=60)
    body = assert_problem(await api.get("/api/ai/memory", headers={"Authorization": f"Bearer {expired}"}), 401)
    assert "expired" in body["detail"]
    import jwt

    forged = jwt.encode(
        {"sub": "a", "tenant_id": tenant, "exp": time.time() + 60},
        "a-wrong-secret-that-is-long-enough-for-hs256",
        algorithm="HS256",
    )
    assert_problem(await api.get("/api/ai/memory", headers={"Authorization": f"Bearer {forged}"}), 401)
    no_tenant = jwt.encode({"sub": "a", "exp": time.time() + 60}, JWT_SECRET, algorithm="HS256")
    assert_problem(await api.get("/api/ai/memory", headers={"Authorization": f"Bearer {no_tenant}"}), 401)
    assert_problem(await api.get("/api/ai/memory", headers={"X-Agent-Key": "egk_unknown"}), 401)
    assert_problem(await api.get("/api/ai/memory", headers=auth(tenant, permissions=[])), 403)


async def test_bad_events(api: Any, auth: Any, tenant: str, other_tenant: str) -> None:
    base = {
        **auth(tenant),
        "ce-specversion": "1.0",
        "ce-id": "e1",
        "ce-source": "/crm",
        "ce-type": "com.example.crm.customer.created.v1",
        "Content-Type": "application/json",
    }
    assert_problem(await api.post("/api/ai/events", headers=base, content=b""), 422, "body")
    assert_problem(await api.post("/api/ai/events", headers={**base, "ce-tenantid": other_tenant}, content=b"{}"), 403)
    assert_problem(
        await api.post(
            "/api/ai/events", headers={**base, "ce-type": "io.engram.observation.created.v1"}, content=b"{}"
        ),
        422,
    )
    assert_problem(await api.post("/api/ai/events", headers=base, content=b"[1, 2]"), 422)
    no_zone = {**base, "ce-time": "2026-05-04T10:00:00"}
    assert_problem(await api.post("/api/ai/events", headers=no_zone, content=b"{}"), 422, "body.time")
    assert_problem(
        await api.post(
            "/api/ai/events",
            headers={**auth(tenant), "Content-Type": "application/json"},
            content=b'{"just": "json"}',
        ),
        422,
    )
    assert_problem(await api.post("/api/ai/events", headers={**base, "ce-bad_name": "x"}, content=b"{}"), 422)
    r = await api.post(
        "/api/ai/events",
        headers={**base, "ce-type": "io.engram.observation.marked.v1"},
        content=json.dumps({"text": ""}).encode(),
    )
    assert_problem(r, 422)


async def test_ids_and_query_params_are_validated(api: Any, auth: Any, tenant: str) -> None:
    assert_problem(await api.get("/api/ai/memory/not-a-uuid", headers=auth(tenant)), 422, "path.observation_id")
    assert_problem(await api.get("/api/ai/memory?size=100000", headers=auth(tenant)), 422, "query.size")
    assert_problem(await api.get("/api/ai/memory?scope=galaxy", headers=auth(tenant)), 422, "query.scope")
    assert_problem(await api.get(f"/api/ai/memory/{'0' * 8}-0000-0000-0000-{'0' * 12}", headers=auth(tenant)), 404)


async def test_health(api: Any) -> None:
    assert (await api.get("/healthz")).json() == {"status": "ok"}
    r = await api.get("/readyz")
    assert r.status_code == 200 and r.json()["checks"] == {"postgres": True, "nats": True, "schema": True}
