"""Text hygiene at every HTTP edge (R-16.1): a NUL or a lone surrogate is a 422 problem naming
the field, never a 500; chat-turn's free-text `message` is cleaned instead (README, "Bad input")."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"title": "Bad\\u0000Name"}', "body.title"),
        ('{"title": "ok", "tags": ["fine", "x\\u0000"]}', "body.tags.1"),
        ('{"title": "lone \\ud83d surrogate"}', "body.title"),
    ],
)
async def test_remember_refuses_unstorable_text(api: Any, auth: Any, tenant: str, body: str, field: str) -> None:
    r = await api.post("/api/ai/memory", content=body, headers={**auth(tenant), "Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["field"] == field


async def test_a_valid_surrogate_pair_is_stored(api: Any, auth: Any, tenant: str) -> None:
    r = await api.post(
        "/api/ai/memory",
        content='{"title": "smile \\ud83d\\ude00"}',
        headers={**auth(tenant), "Content-Type": "application/json"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["observation"]["title"] == "smile \U0001f600"


async def test_a_nul_in_a_query_string_is_a_422(api: Any, auth: Any, tenant: str) -> None:
    r = await api.delete("/api/ai/memory?user=al%00ice", headers=auth(tenant))
    assert r.status_code == 422 and r.json()["field"] == "query.user"
    r = await api.get("/api/ai/memory/recall?q=hello%00", headers=auth(tenant))
    assert r.status_code == 422 and r.json()["field"] == "query.q"


async def test_recall_with_a_long_query_and_a_negative_limit_is_a_422(api: Any, auth: Any, tenant: str) -> None:
    r = await api.get("/api/ai/memory/recall", params={"q": "ü" * 9_000, "limit": -1_000_000}, headers=auth(tenant))
    assert r.status_code == 422, r.text
    assert r.json()["field"].startswith("query.")


async def test_a_domain_cloud_event_with_a_nul_is_a_422(api: Any, auth: Any, tenant: str) -> None:
    event = {
        "specversion": "1.0",
        "id": f"nul-{uuid.uuid4()}",
        "source": "/crm",
        "type": "com.example.crm.customer.created.v1",
        "data": {"customer_id": "1", "name": "Bad\u0000Name"},
    }
    r = await api.post(
        "/api/ai/events",
        content=json.dumps(event),
        headers={**auth(tenant, permissions=["create:AiEvent"]), "Content-Type": "application/cloudevents+json"},
    )
    assert r.status_code == 422 and r.json()["field"] == "body.data.name", r.text
    event["type"] = False  # type: ignore[assignment]
    event["data"] = {}
    r = await api.post(
        "/api/ai/events",
        content=json.dumps(event),
        headers={**auth(tenant, permissions=["create:AiEvent"]), "Content-Type": "application/cloudevents+json"},
    )
    assert r.status_code == 422, r.text


async def test_a_chat_message_is_cleaned_not_refused(chat_api: Any, auth: Any, tenant: str) -> None:
    r = await chat_api.post(
        f"/api/ai/chats/{uuid.uuid4()}/turns",
        content='{"message": "Hallo\\u0000 Welt \\ud83d, wie geht es dir heute so?"}',
        headers={**auth(tenant), "Content-Type": "application/json"},
    )
    assert r.status_code == 200, r.text
