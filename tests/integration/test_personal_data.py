"""A user's personal memory (R-11.3): JSON Lines export and erasure through the memory API.

After erasure nothing of the user is left in PostgreSQL, and one `observation.deleted`
event per observation is on the stream: what the embed-index worker (retrieval branch)
applies to drop the index entries.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from engram.adapters.chats import PgChatStore
from engram.domain.events import FEEDBACK_RECORDED, OBSERVATION_DELETED, FeedbackRecorded, new_event
from engram.services.auth import create_agent_key
from functions.record_feedback.main import WORKER as FEEDBACK_WORKER
from tests.conftest import ALL_PERMISSIONS, deliver, eventually
from tests.events import published

PROBLEM = "application/problem+json"
ADMIN = [*ALL_PERMISSIONS, "manage:AiObservation"]


async def remember(api: Any, headers: dict[str, str], title: str, **body: Any) -> str:
    r = await api.post("/api/ai/memory", headers=headers, json={"title": title, **body})
    assert r.status_code in (200, 201), r.text
    return str(r.json()["observation"]["id"])


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


async def seed(api: Any, auth: Any, tenant: str, workers: Any, db: Any) -> dict[str, Any]:
    alice, bob = auth(tenant, "alice", teams=["sales"]), auth(tenant, "bob", teams=["sales"])
    mine = [
        await remember(api, alice, "Alice prefers tea", type="preference"),
        await remember(api, alice, "Sales meets on Mondays", scope="team", team_ids=["sales"]),
        await remember(api, alice, "Alice's public tip: use the staging VPN", scope="public"),
    ]
    bobs = await remember(api, bob, "Bob's public note about invoices", scope="public")
    tenant_wide = await remember(
        api, auth(tenant, permissions=ADMIN), "Company holiday on May 1", owner="tenant", scope="public"
    )
    for body, headers in [
        ({"kind": "cited", "observation_id": bobs}, alice),  # alice's feedback on bob's observation
        ({"kind": "rejected", "observation_id": tenant_wide}, alice),
        ({"kind": "rated", "rating": 2, "query_id": str(uuid.uuid4()), "stream_origin": "facts"}, alice),
        ({"kind": "confirmed", "observation_id": mine[2]}, bob),  # bob's feedback on alice's observation
        ({"kind": "cited", "observation_id": bobs}, bob),
    ]:
        r = await api.post("/api/ai/memory/feedback", headers=headers, json=body)
        assert r.status_code == 202, r.text

    async def applied() -> bool:
        async with db.tenant(tenant) as conn:
            return bool(await conn.fetchval("SELECT count(*) FROM observation_feedback") == 5)

    await eventually(applied)
    history = {user: await conversation(db, tenant, user) for user in ("alice", "bob")}
    return {"mine": mine, "bobs": bobs, "tenant_wide": tenant_wide, "alice": alice, "bob": bob, "history": history}


async def conversation(db: Any, tenant: str, user: str) -> dict[str, str]:
    """A chat of the user with two messages, its session with a summary, and two telemetry events."""
    chat, session = uuid.uuid4(), uuid.uuid4()
    async with db.tenant(tenant) as conn:
        assert await PgChatStore(conn, tenant).create_chat(chat, user, "Tea") is not None
        await conn.execute(
            "INSERT INTO sessions (id, tenant_id, user_id, chat_id, user_prompt) VALUES ($1, $2, $3, $4, 'tea?')",
            session,
            tenant,
            user,
            chat,
        )
        for role, who, text in (("user", user, f"{user} asks about tea"), ("assistant", None, "Green tea.")):
            await conn.execute(
                "INSERT INTO chat_messages (id, tenant_id, chat_id, session_id, user_id, role, content)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7)",
                uuid.uuid4(),
                tenant,
                chat,
                session,
                who,
                role,
                text,
            )
        await conn.execute(
            "INSERT INTO summaries (id, tenant_id, session_id, user_id, request) VALUES ($1, $2, $3, $4, 'tea')",
            uuid.uuid4(),
            tenant,
            session,
            user,
        )
        for name in ("chat.turn_completed", "chat.tool_used"):
            await conn.execute(
                "INSERT INTO ai_events (tenant_id, event_name, user_id, chat_id, metadata)"
                " VALUES ($1, $2, $3, $4, '{}')",
                tenant,
                name,
                user,
                chat,
            )
    return {"chat": str(chat), "session": str(session)}


PERSONAL_TABLES = (
    ("observations", "user_id"),
    ("observation_feedback", "user_id"),
    ("chats", "user_id"),
    ("chat_messages", "user_id"),
    ("sessions", "user_id"),
    ("summaries", "user_id"),
    ("ai_events", "user_id"),
    ("ai_events_hourly_users", "user_id"),
    ("ai_events_daily_users", "user_id"),
)


async def rows_naming(db: Any, tenant: str, user: str) -> dict[str, int]:
    async with db.tenant(tenant) as conn:
        counts = {
            table: int(await conn.fetchval(f"SELECT count(*) FROM {table} WHERE {column} = $1", user))
            for table, column in PERSONAL_TABLES
        }
        counts["messages in the user's chats"] = int(
            await conn.fetchval(
                "SELECT count(*) FROM chat_messages m JOIN chats c ON c.id = m.chat_id WHERE c.user_id = $1", user
            )
        )
    return counts


async def test_export_is_json_lines_of_own_observations_and_feedback(
    api: Any, auth: Any, tenant: str, workers: Any, db: Any
) -> None:
    s = await seed(api, auth, tenant, workers, db)
    r = await api.get("/api/ai/memory/export", headers=s["alice"])
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    assert "attachment" in r.headers["content-disposition"] and "alice" in r.headers["content-disposition"]
    records = lines(r.text)
    assert records[0]["record"] == "export" and records[0]["user_id"] == "alice" and records[0]["tenant_id"] == tenant
    observations = [x for x in records if x["record"] == "observation"]
    assert sorted(o["id"] for o in observations) == sorted(s["mine"])
    assert all(o["user_id"] == "alice" and o["tenant_id"] == tenant for o in observations)
    feedback = [x for x in records if x["record"] == "feedback"]
    assert sorted(f["kind"] for f in feedback) == ["cited", "rated", "rejected"]  # only what alice gave
    (chat,) = [x for x in records if x["record"] == "chat"]
    assert chat["id"] == s["history"]["alice"]["chat"] and chat["user_id"] == "alice"
    messages = [x for x in records if x["record"] == "message"]
    assert sorted(m["content"] for m in messages) == ["Green tea.", "alice asks about tea"]  # her chat, both sides
    (session,) = [x for x in records if x["record"] == "session"]
    (summary,) = [x for x in records if x["record"] == "summary"]
    assert session["id"] == summary["session_id"] == s["history"]["alice"]["session"]
    assert all("tenant_id" not in x or x["record"] in ("export", "observation") for x in records)
    assert records[-1] == {
        "record": "end",
        "observations": 3,
        "feedback": 3,
        "chats": 1,
        "messages": 2,
        "sessions": 1,
        "summaries": 1,
        "proposals": 0,
        "telemetry_events": 2,
        "archived_telemetry_events": 0,  # no archive configured here (tests/integration/test_retention.py)
    }
    events = [x for x in records if x["record"] == "telemetry_event"]
    assert len(events) == 2 and all(e["event_name"] and isinstance(e["metadata"], dict) for e in events)


async def test_export_of_another_user_needs_the_admin_permission(
    api: Any, auth: Any, tenant: str, other_tenant: str, services: Any
) -> None:
    await remember(api, auth(tenant, "bob"), "Bob's note")
    denied = await api.get("/api/ai/memory/export?user=bob", headers=auth(tenant, "alice"))
    assert denied.status_code == 403 and denied.headers["content-type"].startswith(PROBLEM)
    admin = await api.get("/api/ai/memory/export?user=bob", headers=auth(tenant, "alice", permissions=ADMIN))
    assert admin.status_code == 200 and lines(admin.text)[-1]["observations"] == 1
    elsewhere = await api.get("/api/ai/memory/export?user=bob", headers=auth(other_tenant, "alice", permissions=ADMIN))
    assert lines(elsewhere.text)[-1] == {  # tenant-scoped
        "record": "end",
        "observations": 0,
        "feedback": 0,
        "chats": 0,
        "messages": 0,
        "sessions": 0,
        "summaries": 0,
        "proposals": 0,
        "telemetry_events": 0,
        "archived_telemetry_events": 0,
    }
    no_read = await api.get("/api/ai/memory/export", headers=auth(tenant, "bob", permissions=["create:AiObservation"]))
    assert no_read.status_code == 403
    userless = await create_agent_key(
        services.uow, tenant_id=tenant, name="ops", user_id=None, teams=[], permissions=["read:AiObservation"]
    )
    r = await api.get("/api/ai/memory/export", headers={"X-Agent-Key": userless.secret})
    assert r.status_code == 422 and r.json()["field"] == "user"


async def test_erasure_leaves_nothing_of_the_user(
    api: Any, auth: Any, tenant: str, workers: Any, db: Any, services: Any
) -> None:
    s = await seed(api, auth, tenant, workers, db)
    r = await api.delete("/api/ai/memory?user=alice", headers=s["alice"])
    assert r.status_code == 200, r.text
    # alice's 3 observations; her 3 feedback rows plus bob's confirmation on her observation;
    # her chat with both its messages, her session with its summary, her 2 telemetry events
    assert r.json() == {
        "user_id": "alice",
        "observations": 3,
        "feedback": 4,
        "index_entries": 3,
        "chats": 1,
        "messages": 2,
        "sessions": 1,
        "summaries": 1,
        "telemetry_events": 2,
        "archived_events": 0,  # no archive configured here (test_retention covers the archive)
        "embedding_cache": 3,  # the vectors of her 3 texts
        "outbox_events": 0,
        "stream_messages": 3,  # her mark, chat turn and feedback events, purged from ENGRAM
        "dead_letters": 0,
    }
    assert set((await rows_naming(db, tenant, "alice")).values()) == {0}  # nothing names alice any more
    bob_left = await rows_naming(db, tenant, "bob")
    assert bob_left["chats"] == bob_left["sessions"] == bob_left["summaries"] == 1 and bob_left["ai_events"] == 2
    assert bob_left["messages in the user's chats"] == 2 and bob_left["ai_events_daily_users"] == 1

    async with db.tenant(tenant) as conn:
        assert await conn.fetchval("SELECT count(*) FROM observations WHERE user_id = 'alice'") == 0
        assert await conn.fetchval("SELECT count(*) FROM observation_feedback WHERE user_id = 'alice'") == 0
        left = {str(x["id"]) for x in await conn.fetch("SELECT id FROM observations")}
        assert left == {s["bobs"], s["tenant_wide"]}  # other people's and tenant-wide memories stay
        feedback_left = await conn.fetch("SELECT user_id, kind, observation_id FROM observation_feedback")
        assert [(f["user_id"], f["kind"], str(f["observation_id"])) for f in feedback_left] == [
            ("bob", "cited", s["bobs"])
        ]
        assert await conn.fetchval("SELECT count(*) FROM outbox") == 0  # every deletion event went out

    deleted = {e["subject"] for e in await published(services, OBSERVATION_DELETED.subject) if e["tenantid"] == tenant}
    assert deleted == {f"observation/{i}" for i in s["mine"]}
    # nothing of alice stays in the search index either
    indexed = await services.index.indexed_ids(tenant)
    assert not set(s["mine"]) & set(indexed)
    assert {s["bobs"], s["tenant_wide"]} <= set(indexed)

    export = await api.get("/api/ai/memory/export", headers=s["alice"])
    assert {k: v for k, v in lines(export.text)[-1].items() if k != "record"} == dict.fromkeys(
        (
            "observations",
            "feedback",
            "chats",
            "messages",
            "sessions",
            "summaries",
            "proposals",
            "telemetry_events",
            "archived_telemetry_events",
        ),
        0,
    )
    again = await api.delete("/api/ai/memory?user=alice", headers=s["alice"])
    assert again.json() == {
        "user_id": "alice",
        **dict.fromkeys(("observations", "feedback", "index_entries", "chats", "messages", "sessions", "summaries"), 0),
        "telemetry_events": 0,
        "archived_events": 0,
        **dict.fromkeys(("embedding_cache", "outbox_events", "stream_messages", "dead_letters"), 0),
    }

    # feedback alice gave before the erasure but still in flight is dropped; later feedback counts
    def cited(at: datetime) -> Any:
        data = FeedbackRecorded(kind="cited", observation_id=uuid.UUID(s["bobs"]), actor="human")
        return new_event(FEEDBACK_RECORDED, data, tenant_id=tenant, source="/t", user_id="alice", time=at.isoformat())

    in_flight, later = cited(datetime.now(UTC) - timedelta(seconds=30)), cited(datetime.now(UTC) + timedelta(seconds=1))
    outcomes = await deliver(services, FEEDBACK_WORKER, [in_flight, later])
    assert [type(o).__name__ if o else None for o in outcomes] == ["Erased", None]  # acked, and deleted from NATS
    assert services.feedback_recorder.last_report.erased == 1
    async with db.tenant(tenant) as conn:
        assert await conn.fetchval("SELECT count(*) FROM observation_feedback WHERE user_id = 'alice'") == 1


async def test_erasure_permissions_and_parameters(api: Any, auth: Any, tenant: str) -> None:
    bobs = await remember(api, auth(tenant, "bob"), "Bob's private note")
    denied = await api.delete("/api/ai/memory?user=bob", headers=auth(tenant, "alice"))
    assert denied.status_code == 403 and denied.headers["content-type"].startswith(PROBLEM)
    missing = await api.delete("/api/ai/memory", headers=auth(tenant, "bob"))
    assert missing.status_code == 422 and missing.json()["field"] == "query.user"
    no_delete = await api.delete(
        "/api/ai/memory?user=bob", headers=auth(tenant, "bob", permissions=["read:AiObservation"])
    )
    assert no_delete.status_code == 403
    still = await api.get(f"/api/ai/memory/{bobs}", headers=auth(tenant, "bob"))
    assert still.status_code == 200
    admin = await api.delete("/api/ai/memory?user=bob", headers=auth(tenant, "alice", permissions=ADMIN))
    assert admin.json()["observations"] == 1
    assert (await api.get(f"/api/ai/memory/{bobs}", headers=auth(tenant, "bob"))).status_code == 404


async def test_erasure_says_503_when_the_archive_cannot_be_scrubbed_and_a_retry_finishes(
    api: Any, auth: Any, tenant: str, services: Any, monkeypatch: Any
) -> None:
    from engram.domain.errors import ArchiveError

    calls: list[tuple[str, str]] = []

    class Failing:
        async def scrub_user(self, tenant_id: str, user_id: str) -> int:
            calls.append((tenant_id, user_id))
            if len(calls) == 1:
                raise ArchiveError("s3 down")
            return 7

    monkeypatch.setattr(services.personal_data, "archive", Failing())
    headers = auth(tenant, "carol")
    await remember(api, headers, "Carol likes tea")
    r = await api.delete("/api/ai/memory?user=carol", headers=headers)
    assert r.status_code == 503 and r.headers["content-type"] == "application/problem+json"
    assert "database part is erased" in r.json()["detail"] and "ask for the erasure again" in r.json()["detail"]
    again = await api.delete("/api/ai/memory?user=carol", headers=headers)
    assert again.status_code == 200 and again.json()["observations"] == 0 and again.json()["archived_events"] == 7
    assert calls == [(tenant, "carol"), (tenant, "carol")]


async def test_export_says_503_when_the_archive_cannot_be_listed(
    api: Any, auth: Any, tenant: str, services: Any, monkeypatch: Any
) -> None:
    from engram.domain.errors import ArchiveError

    class Unreachable:
        async def archived_keys(self, tenant_id: str) -> list[str]:
            raise ArchiveError("s3 down")

    monkeypatch.setattr(services.personal_data, "archive", Unreachable())
    r = await api.get("/api/ai/memory/export", headers=auth(tenant, "dora"))
    assert r.status_code == 503 and r.headers["content-type"] == "application/problem+json"
    assert "s3 down" in r.json()["detail"] and "incomplete" in r.json()["detail"]
