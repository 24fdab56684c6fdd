"""telemetry-query over HTTP (R-10) on real PostgreSQL: the permission gate, exact figures from
rollups plus raw edges, validation, pagination edges, tenant scoping; typed writes (R-4.5)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from engram.domain import telemetry
from engram.domain.errors import TelemetryError
from engram.domain.telemetry import TELEMETRY_EVENTS, TelemetryRecord
from tests.conftest import write_telemetry

PROBLEM = "application/problem+json"
DEVTOOLS = ["view:FE_DevTools"]
ROLLUPS = ("ai_events_hourly", "ai_events_hourly_users", "ai_events_daily_users", "ai_events_hourly_tools")
ROUTES = [
    "/api/ai/telemetry/overview",
    "/api/ai/telemetry/events",
    "/api/ai/telemetry/timeseries",
    "/api/ai/telemetry/top-tools",
    "/api/ai/telemetry/top-users",
]


@pytest.fixture(scope="session")
async def tq(services: Any) -> AsyncIterator[Any]:
    import httpx

    from functions.telemetry_query.main import app

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://telemetry-query") as client:
        yield client


def turn(cost: float, inp: int, out: int, cache_read: int = 0, cache_creation: int = 0) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-6",
        "input_tokens": inp,
        "output_tokens": out,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_creation,
        "cost_usd": cost,
        "duration_ms": 900,
        "rag_hits": 3,
    }


def tool(name: str, ms: int, ok: bool) -> dict[str, Any]:
    return {"tool_name": name, "duration_ms": ms, "success": ok}


async def write(db: Any, tenant: str, rows: list[tuple[str, dict[str, Any], str | None, datetime]]) -> None:
    records = [
        TelemetryRecord(tenant, name, telemetry.record(tenant, name, meta).metadata, user_id=user, created_at=at)
        for name, meta, user, at in rows
    ]
    async with db.tenant(tenant) as conn:
        await write_telemetry(conn, records)


def ago(**kw: float) -> datetime:
    return datetime.now(UTC) - timedelta(**kw)


@pytest.fixture
async def filled(db: Any, tenant: str) -> dict[str, Any]:
    """A tenant with events inside and outside each period, off and on hour boundaries."""
    chat = uuid.uuid4()
    rows: list[tuple[str, dict[str, Any], str | None, datetime]] = [
        # within the last hour
        ("chat.turn_completed", turn(0.25, 1000, 200, cache_read=3000, cache_creation=0), "alice", ago(minutes=10)),
        ("chat.turn_completed", turn(0.05, 500, 100), "bob", ago(minutes=40)),
        ("chat.tool_used", tool("search", 120, True), "alice", ago(minutes=12)),
        ("chat.error", {"stage": "llm", "error_type": "overloaded", "message": "busy"}, "bob", ago(minutes=20)),
        # within 24 hours
        ("chat.turn_completed", turn(1.00, 4000, 800, cache_creation=1000), "alice", ago(hours=5, minutes=17)),
        ("chat.tool_used", tool("search", 80, False), "bob", ago(hours=3)),
        ("chat.tool_used", tool("calendar", 300, True), "alice", ago(hours=7, minutes=30)),
        ("chat.ptl_recovery", {"model": "m", "dropped_messages": 4, "succeeded": True}, "alice", ago(hours=22)),
        # within 7 days
        ("chat.turn_completed", turn(2.00, 100, 100), "carol", ago(days=3)),
        ("chat.tool_used", tool("calendar", 100, True), "carol", ago(days=4)),
        # within 30 days
        ("chat.turn_completed", turn(4.00, 100, 100), "dave", ago(days=20)),
        # outside every period
        ("chat.turn_completed", turn(100.0, 1, 1), "eve", ago(days=45)),
    ]
    await write(db, tenant, rows)
    await write(
        db,
        tenant,
        [
            (
                "memory.extraction",
                {"trigger": "chat", "count": 2, "dedup_hits": 0, "duration_ms": 5, "status": "ok"},
                None,
                ago(minutes=5),
            )
        ],
    )
    async with db.tenant(tenant) as conn:
        await conn.execute(
            "INSERT INTO ai_events (tenant_id, event_name, user_id, chat_id, metadata, created_at)"
            " VALUES ($1, 'chat.tool_used', 'alice', $2, $3, now() - interval '2 minutes')",
            tenant,
            chat,
            {"toolName": "search", "durationMs": 40, "success": True},
        )
    return {"chat": chat}


async def test_every_route_needs_devtools_permission(tq: Any, auth: Any, tenant: str) -> None:
    for route in ROUTES:
        anonymous = await tq.get(route)
        assert anonymous.status_code == 401 and anonymous.headers["content-type"].startswith(PROBLEM)
        denied = await tq.get(route, headers=auth(tenant, permissions=["read:AiEvent", "read:AiObservation"]))
        assert denied.status_code == 403, (route, denied.text)
        assert denied.headers["content-type"].startswith(PROBLEM)
        assert "view:FE_DevTools" in denied.json()["detail"]
        allowed = await tq.get(route, headers=auth(tenant, permissions=DEVTOOLS))
        assert allowed.status_code == 200, (route, allowed.text)
    manage_all = await tq.get(ROUTES[0], headers=auth(tenant, permissions=["manage:all"]))
    assert manage_all.status_code == 200


async def test_overview_is_exact_per_period(tq: Any, auth: Any, tenant: str, filled: dict[str, Any]) -> None:
    h = auth(tenant, permissions=DEVTOOLS)
    hour = (await tq.get("/api/ai/telemetry/overview?period=1h", headers=h)).json()
    assert hour["turns"] == 2 and hour["errors"] == 1 and hour["ptl_count"] == 0 and hour["tool_calls"] == 2
    assert hour["cost_usd"] == pytest.approx(0.30)
    assert hour["tokens"] == {"input": 1500, "output": 300, "cache_read": 3000, "cache_creation": 0, "total": 4800}
    assert hour["cache_hit_rate"] == pytest.approx(3000 / 4500, abs=1e-6)
    assert hour["events"] == 6  # 2 turns, 2 tool calls, 1 error, 1 extraction

    day = (await tq.get("/api/ai/telemetry/overview?period=24h", headers=h)).json()
    assert day["turns"] == 3 and day["ptl_count"] == 1 and day["tool_calls"] == 4
    assert day["cost_usd"] == pytest.approx(1.30)
    assert day["tokens"]["total"] == 4800 + 4000 + 800 + 1000
    assert day["cache_hit_rate"] == pytest.approx(3000 / (5500 + 3000 + 1000), abs=1e-6)

    week = (await tq.get("/api/ai/telemetry/overview?period=7d", headers=h)).json()
    month = (await tq.get("/api/ai/telemetry/overview?period=30d", headers=h)).json()
    assert week["turns"] == 4 and week["cost_usd"] == pytest.approx(3.30)
    assert month["turns"] == 5 and month["cost_usd"] == pytest.approx(7.30)  # day 45 is outside


async def test_overview_of_an_empty_tenant_is_zero(tq: Any, auth: Any, tenant: str) -> None:
    body = (await tq.get("/api/ai/telemetry/overview?period=30d", headers=auth(tenant, permissions=DEVTOOLS))).json()
    assert body["turns"] == 0 and body["events"] == 0 and body["cost_usd"] == 0
    assert body["cache_hit_rate"] is None


async def test_other_tenants_are_invisible(
    tq: Any, auth: Any, tenant: str, other_tenant: str, filled: dict[str, Any]
) -> None:
    h = auth(other_tenant, permissions=DEVTOOLS)
    assert (await tq.get("/api/ai/telemetry/overview?period=30d", headers=h)).json()["events"] == 0
    assert (await tq.get("/api/ai/telemetry/events?period=30d", headers=h)).json()["total"] == 0
    assert (await tq.get("/api/ai/telemetry/top-users?period=30d", headers=h)).json()["items"] == []
    assert (await tq.get("/api/ai/telemetry/top-tools?period=30d", headers=h)).json()["items"] == []


@pytest.mark.parametrize(
    ("query", "field", "allowed"),
    [
        ("overview?period=2h", "query.period", ["1h", "24h", "7d", "30d"]),
        ("events?period=week", "query.period", ["1h", "24h", "7d", "30d"]),
        ("timeseries?granularity=week", "query.granularity", ["hour", "day"]),
        ("timeseries?metric=revenue", "query.metric", ["turns", "cost", "tokens", "cache_hit_rate"]),
        ("top-tools?period=", "query.period", ["1h", "24h", "7d", "30d"]),
        ("events?eventName=chat.made_up", "query.eventName", sorted(TELEMETRY_EVENTS)),
    ],
)
async def test_bad_parameters_are_422_with_the_allowed_values(
    tq: Any, auth: Any, tenant: str, query: str, field: str, allowed: list[str]
) -> None:
    r = await tq.get(f"/api/ai/telemetry/{query}", headers=auth(tenant, permissions=DEVTOOLS))
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM), r.text
    body = r.json()
    assert body["field"] == field
    for value in allowed:
        assert f"'{value}'" in body["detail"] or value in body["detail"], (value, body["detail"])


@pytest.mark.parametrize(
    "query",
    [
        "events?size=0",
        "events?size=201",
        "events?page=0",
        "top-users?limit=0",
        "top-tools?limit=101",
        "events?chatId=x",
    ],
)
async def test_size_and_limit_bounds(tq: Any, auth: Any, tenant: str, query: str) -> None:
    r = await tq.get(f"/api/ai/telemetry/{query}", headers=auth(tenant, permissions=DEVTOOLS))
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM), r.text


async def test_events_pagination_and_filters(tq: Any, auth: Any, tenant: str, filled: dict[str, Any]) -> None:
    h = auth(tenant, permissions=DEVTOOLS)
    url = "/api/ai/telemetry/events?period=24h"
    first = (await tq.get(f"{url}&size=4", headers=h)).json()
    assert first["total"] == 10 and len(first["items"]) == 4 and first["page"] == 1
    times = [i["created_at"] for i in first["items"]]
    assert times == sorted(times, reverse=True)  # newest first
    last = (await tq.get(f"{url}&size=4&page=3", headers=h)).json()
    assert len(last["items"]) == 2 and last["total"] == 10  # the last page is partial
    beyond = (await tq.get(f"{url}&size=4&page=4", headers=h)).json()
    assert beyond["items"] == [] and beyond["total"] == 10
    seen = set()
    for page in (1, 2, 3):
        seen |= {i["id"] for i in (await tq.get(f"{url}&size=4&page={page}", headers=h)).json()["items"]}
    assert len(seen) == 10  # pages neither overlap nor skip

    tools = (await tq.get(f"{url}&eventName=chat.tool_used", headers=h)).json()
    assert tools["total"] == 4 and {i["event_name"] for i in tools["items"]} == {"chat.tool_used"}
    assert tools["items"][0]["metadata"] == {"toolName": "search", "durationMs": 40, "success": True}
    bob = (await tq.get(f"{url}&userId=bob", headers=h)).json()
    assert bob["total"] == 3 and {i["user_id"] for i in bob["items"]} == {"bob"}
    bob_tools = (await tq.get(f"{url}&userId=bob&eventName=chat.tool_used", headers=h)).json()
    assert bob_tools["total"] == 1
    chat = (await tq.get(f"{url}&chatId={filled['chat']}", headers=h)).json()
    assert chat["total"] == 1 and chat["items"][0]["chat_id"] == str(filled["chat"])


async def test_events_of_an_empty_tenant(tq: Any, auth: Any, tenant: str) -> None:
    body = (
        await tq.get("/api/ai/telemetry/events?period=1h&page=1", headers=auth(tenant, permissions=DEVTOOLS))
    ).json()
    assert body == {"items": [], "page": 1, "size": 50, "total": 0, "period": "1h"}


async def test_timeseries_buckets_and_values(tq: Any, auth: Any, tenant: str, filled: dict[str, Any]) -> None:
    h = auth(tenant, permissions=DEVTOOLS)
    hourly = (await tq.get("/api/ai/telemetry/timeseries?metric=turns&period=24h&granularity=hour", headers=h)).json()
    assert len(hourly["points"]) in (24, 25)  # 25 when the window starts mid-hour
    assert sum(p["value"] for p in hourly["points"]) == 3
    ts = [p["t"] for p in hourly["points"]]
    assert ts == sorted(ts) and all(t.endswith(":00:00Z") for t in ts)

    daily = (await tq.get("/api/ai/telemetry/timeseries?metric=cost&period=30d&granularity=day", headers=h)).json()
    assert len(daily["points"]) in (30, 31)
    assert sum(p["value"] for p in daily["points"]) == pytest.approx(7.30)
    assert all(p["t"].endswith("T00:00:00Z") for p in daily["points"])

    rate = (
        await tq.get("/api/ai/telemetry/timeseries?metric=cache_hit_rate&period=24h&granularity=day", headers=h)
    ).json()
    values = [p["value"] for p in rate["points"] if p["value"] is not None]
    assert values and all(0 <= v <= 1 for v in values)

    empty = (
        await tq.get(
            "/api/ai/telemetry/timeseries?metric=errors&period=1h", headers=auth(f"{tenant}-x", permissions=DEVTOOLS)
        )
    ).json()
    assert all(p["value"] == 0 for p in empty["points"]) and len(empty["points"]) in (1, 2)


async def test_top_tools_and_users(tq: Any, auth: Any, tenant: str, filled: dict[str, Any]) -> None:
    h = auth(tenant, permissions=DEVTOOLS)
    tools = (await tq.get("/api/ai/telemetry/top-tools?period=24h", headers=h)).json()["items"]
    assert [t["tool_name"] for t in tools] == ["search", "calendar"]
    search = tools[0]
    assert search["calls"] == 3 and search["avg_duration_ms"] == pytest.approx((120 + 80 + 40) / 3)
    assert search["success_rate"] == pytest.approx(2 / 3, abs=1e-6)
    assert tools[1] == {"tool_name": "calendar", "calls": 1, "avg_duration_ms": 300.0, "success_rate": 1.0}

    users = (await tq.get("/api/ai/telemetry/top-users?period=30d", headers=h)).json()["items"]
    assert [u["user_id"] for u in users] == ["dave", "carol", "alice", "bob"]  # by cost, eve is too old
    assert users[2]["cost_usd"] == pytest.approx(1.25) and users[2]["turns"] == 2
    limited = (await tq.get("/api/ai/telemetry/top-users?period=30d&limit=2", headers=h)).json()["items"]
    assert [u["user_id"] for u in limited] == ["dave", "carol"]


async def test_rollups_equal_the_raw_rows_after_inserts_and_deletes(
    db: Any, tenant: str, filled: dict[str, Any]
) -> None:
    compare = """
    SELECT (SELECT coalesce(sum(events), 0) FROM ai_events_hourly WHERE tenant_id = $1),
           (SELECT count(*) FROM ai_events WHERE tenant_id = $1),
           (SELECT coalesce(sum(cost_usd), 0) FROM ai_events_hourly WHERE tenant_id = $1),
           (SELECT coalesce(sum((metadata->>'costUsd')::float8), 0) FROM ai_events WHERE tenant_id = $1),
           (SELECT coalesce(sum(calls), 0) FROM ai_events_hourly_tools WHERE tenant_id = $1),
           (SELECT coalesce(sum(events), 0) FROM ai_events_hourly_users WHERE tenant_id = $1),
           (SELECT count(*) FROM ai_events WHERE tenant_id = $1 AND user_id IS NOT NULL),
           (SELECT coalesce(sum(events), 0) FROM ai_events_daily_users WHERE tenant_id = $1)
    """
    async with db.tenant(tenant) as conn:
        r = await conn.fetchrow(compare, tenant)
        assert r[0] == r[1] == 14 and r[2] == pytest.approx(r[3]) and r[4] == 5 and r[5] == r[6] == r[7] == 13
        await conn.execute("DELETE FROM ai_events WHERE tenant_id = $1 AND user_id IN ('alice', 'eve')", tenant)
        r = await conn.fetchrow(compare, tenant)
        assert r[0] == r[1] == 7 and r[2] == pytest.approx(r[3]) and r[4] == 2 and r[5] == r[6] == r[7] == 6
        await conn.execute("DELETE FROM ai_events WHERE tenant_id = $1", tenant)
        for table in ROLLUPS:
            assert await conn.fetchval(f"SELECT count(*) FROM {table} WHERE tenant_id = $1", tenant) == 0


async def test_rollups_are_tenant_isolated(db: Any, tenant: str, other_tenant: str, filled: dict[str, Any]) -> None:
    async with db.tenant(other_tenant) as conn:
        for table in ROLLUPS:
            assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0  # RLS, no tenant filter
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO ai_events_hourly (tenant_id, bucket, event_name) VALUES ($1, now(), 'x')", tenant
                )


async def test_ai_events_are_append_only(db: Any, tenant: str, filled: dict[str, Any]) -> None:
    async with db.tenant(tenant) as conn:
        with pytest.raises(asyncpg.FeatureNotSupportedError, match="append-only"):
            async with conn.transaction():
                await conn.execute("UPDATE ai_events SET event_name = 'chat.error' WHERE tenant_id = $1", tenant)


async def test_unknown_or_malformed_telemetry_is_rejected_and_nothing_is_stored(db: Any, tenant: str) -> None:
    good = telemetry.record(tenant, "chat.tool_used", {"tool_name": "search", "duration_ms": 5, "success": True})
    bad_batches = [
        [good, TelemetryRecord(tenant, "chat.made_up", {})],
        [good, TelemetryRecord(tenant, "chat.tool_used", {"toolName": "x", "durationMs": -1, "success": True})],
        [TelemetryRecord(tenant, "chat.tool_used", {"toolName": "x", "durationMs": 1, "success": True, "apiKey": "s"})],
        [TelemetryRecord("", "chat.tool_used", {"toolName": "x", "durationMs": 1, "success": True})],
    ]
    for batch in bad_batches:
        with pytest.raises(TelemetryError):
            async with db.tenant(tenant) as conn:
                await write_telemetry(conn, batch)
    with pytest.raises(TelemetryError, match="unknown telemetry event"):
        telemetry.record(tenant, "chat.made_up", {})
    async with db.tenant(tenant) as conn:
        assert await conn.fetchval("SELECT count(*) FROM ai_events") == 0
        await write_telemetry(conn, [good])
        assert await conn.fetchval("SELECT metadata FROM ai_events") == {
            "toolName": "search",
            "durationMs": 5,
            "success": True,
        }
