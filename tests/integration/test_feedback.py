"""Feedback (R-9) through the memory API and the record-feedback worker, on real PostgreSQL and NATS.

Effects are read back through `GET /api/ai/memory/{id}`: counters, `verified` only after a
human confirmation, and the feedback rows recall reads (a user's `rejected` rows hide that
observation from that user's recall; ranking tests run once recall exists, see the report).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from engram.adapters.postgres import Database, _init_connection
from engram.adapters.unit_of_work import PgUnitOfWork
from engram.domain.errors import InvalidEvent
from engram.domain.events import FEEDBACK_RECORDED, OBSERVATION_UPDATED, FeedbackRecorded, new_event
from engram.services.feedback import FeedbackRecorder
from functions.record_feedback.main import WORKER
from tests.conftest import deliver, eventually
from tests.events import published

PROBLEM = "application/problem+json"


async def remember(api: Any, headers: dict[str, str], title: str, **body: Any) -> dict[str, Any]:
    r = await api.post("/api/ai/memory", headers=headers, json={"title": title, **body})
    assert r.status_code in (200, 201), r.text
    obs: dict[str, Any] = r.json()["observation"]
    return obs


async def feedback(api: Any, headers: dict[str, str], **body: Any) -> Any:
    return await api.post("/api/ai/memory/feedback", headers=headers, json=body)


async def rows(db: Any, tenant: str, obs_id: str | None = None) -> list[dict[str, Any]]:
    async with db.tenant(tenant) as conn:
        found = await conn.fetch(
            "SELECT observation_id, user_id, kind, rating, query_id, stream_origin FROM observation_feedback"
            " WHERE ($1::uuid IS NULL OR observation_id = $1::uuid) ORDER BY id",
            obs_id,
        )
    return [dict(r.items()) for r in found]


def event(tenant: str, user: str | None, **data: Any) -> Any:
    return new_event(FEEDBACK_RECORDED, FeedbackRecorded(**data), tenant_id=tenant, source="/test", user_id=user)


async def test_feedback_changes_counters_and_a_human_confirmation_verifies(
    api: Any, auth: Any, tenant: str, services: Any, workers: Any, db: Any
) -> None:
    from engram.services.auth import create_agent_key

    alice = auth(tenant)
    agent_key = await create_agent_key(
        services.uow,
        tenant_id=tenant,
        name="bot",
        user_id="alice",
        teams=[],
        permissions=["create:AiObservation", "read:AiObservation", "create:AiObservationFeedback"],
    )
    agent = {"X-Agent-Key": agent_key.secret}
    obs = await remember(api, agent, "Alice's customer Müller pays late", scope="public")
    assert obs["verified"] is False
    oid = obs["id"]

    for kind in ("retrieved", "retrieved", "retrieved", "cited"):
        r = await feedback(api, agent, kind=kind, observation_id=oid)
        assert r.status_code == 202 and r.json()["status"] == "accepted", r.text
    r = await feedback(api, agent, kind="confirmed", observation_id=oid)  # an agent confirms: not verified
    assert r.status_code == 202

    async def state() -> dict[str, Any]:
        body: dict[str, Any] = (await api.get(f"/api/ai/memory/{oid}", headers=alice)).json()
        return body

    await eventually(lambda: _counted(state, relevance=3, cited=1, confirmed=1))
    assert (await state())["verified"] is False

    assert (await feedback(api, alice, kind="confirmed", observation_id=oid)).status_code == 202
    final = await eventually(lambda: _counted(state, relevance=3, cited=1, confirmed=2))
    assert final["verified"] is True and final["updated_at"] > obs["updated_at"]
    kinds = [(r["kind"], r["user_id"]) for r in await rows(db, tenant, oid)]
    assert kinds.count(("retrieved", "alice")) == 3 and kinds.count(("confirmed", "alice")) == 2

    # the index hears about the new verified state: one observation.updated for this revision
    updates = [
        e for e in await published(services, OBSERVATION_UPDATED.subject) if e["subject"] == f"observation/{oid}"
    ]
    assert any(e["id"].endswith(final["updated_at"].replace("Z", "+00:00")) for e in updates), updates


async def _counted(state: Any, *, relevance: int, cited: int, confirmed: int) -> dict[str, Any] | None:
    body: dict[str, Any] = await state()
    ok = (body["relevance_count"], body["cited_count"], body["confirmed_count"]) == (relevance, cited, confirmed)
    return body if ok else None


async def test_rejection_is_recorded_per_user_and_counted(
    api: Any, auth: Any, tenant: str, workers: Any, db: Any
) -> None:
    obs = await remember(api, auth(tenant), "The Hamburg office closes at 6 pm", scope="public")
    oid = obs["id"]
    assert (await feedback(api, auth(tenant, "bob"), kind="rejected", observation_id=oid)).status_code == 202
    assert (await feedback(api, auth(tenant, "carol"), kind="cited", observation_id=oid)).status_code == 202

    async def done() -> bool:
        return len(await rows(db, tenant, oid)) == 2

    await eventually(done)
    body = (await api.get(f"/api/ai/memory/{oid}", headers=auth(tenant))).json()
    assert body["rejected_count"] == 1 and body["cited_count"] == 1 and body["verified"] is True  # alice stored it
    rejected = [r for r in await rows(db, tenant, oid) if r["kind"] == "rejected"]
    assert [r["user_id"] for r in rejected] == ["bob"]  # what recall excludes for bob, and only for bob


async def test_a_rating_per_query_and_stream(api: Any, auth: Any, tenant: str, workers: Any, db: Any) -> None:
    query = str(uuid.uuid4())
    r = await feedback(api, auth(tenant), kind="rated", rating=4, query_id=query, stream_origin="facts")
    assert r.status_code == 202, r.text

    async def stored() -> list[dict[str, Any]]:
        return [x for x in await rows(db, tenant) if x["kind"] == "rated"]

    found = await eventually(stored)
    assert found == [
        {
            "observation_id": None,
            "user_id": "alice",
            "kind": "rated",
            "rating": 4,
            "query_id": uuid.UUID(query),
            "stream_origin": "facts",
        }
    ]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"kind": "rated", "query_id": "00000000-0000-0000-0000-000000000001"}, 422, "rating"),
        ({"kind": "rated", "rating": 6, "query_id": "00000000-0000-0000-0000-000000000001"}, 422, "body.rating"),
        ({"kind": "rated", "rating": 3}, 422, "rating"),
        ({"kind": "cited"}, 422, "observation_id"),
        ({"kind": "loved", "observation_id": "00000000-0000-0000-0000-000000000001"}, 422, "body.kind"),
        ({"kind": "cited", "observation_id": "00000000-0000-0000-0000-000000000001"}, 404, None),
        ({"kind": "cited", "observation_id": "00000000-0000-0000-0000-000000000001", "extra": 1}, 422, "body.extra"),
    ],
)
async def test_bad_feedback_is_a_problem(
    api: Any, auth: Any, tenant: str, body: dict[str, Any], status: int, field: str | None
) -> None:
    r = await feedback(api, auth(tenant), **body)
    assert r.status_code == status and r.headers["content-type"].startswith(PROBLEM), r.text
    if field:
        assert r.json()["field"] == field


async def test_feedback_needs_permission_and_a_visible_observation(
    api: Any, auth: Any, tenant: str, other_tenant: str, services: Any
) -> None:
    from engram.services.auth import create_agent_key

    private = await remember(api, auth(tenant), "Alice's private note")
    r = await feedback(
        api, auth(tenant, permissions=["read:AiObservation"]), kind="cited", observation_id=private["id"]
    )
    assert r.status_code == 403
    for headers in (auth(tenant, "bob"), auth(other_tenant)):  # not visible: not found, existence not leaked
        assert (await feedback(api, headers, kind="cited", observation_id=private["id"])).status_code == 404
    userless = await create_agent_key(
        services.uow, tenant_id=tenant, name="ops", user_id=None, teams=[], permissions=["manage:all"]
    )
    public = await remember(api, auth(tenant), "Tenant-wide fact", scope="public")
    r = await feedback(api, {"X-Agent-Key": userless.secret}, kind="rejected", observation_id=public["id"])
    assert r.status_code == 422 and r.json()["field"] == "kind"


async def test_a_batch_is_idempotent_and_updates_each_observation_once(
    api: Any, auth: Any, tenant: str, services: Any, stack: dict[str, str]
) -> None:
    """Called directly (no worker), with a query log on the real connection."""
    a = (await remember(api, auth(tenant), "Fact A", scope="public"))["id"]
    b = (await remember(api, auth(tenant), "Fact B", scope="public"))["id"]
    statements: list[str] = []

    async def init(conn: asyncpg.Connection) -> None:
        await _init_connection(conn)
        conn.add_query_logger(lambda q: statements.append(q.query))

    pool = await asyncpg.create_pool(stack["database_url"], min_size=1, max_size=2, init=init)
    recorder = FeedbackRecorder(PgUnitOfWork(Database(pool), services.bus))
    try:
        events = (
            [event(tenant, f"u{i}", kind="retrieved", observation_id=a) for i in range(20)]
            + [event(tenant, "u1", kind="cited", observation_id=a)] * 2  # the same event twice in one fetch
            + [event(tenant, f"u{i}", kind="retrieved", observation_id=b) for i in range(5)]
            + [
                event(tenant, "u1", kind="rejected", observation_id=b),
                event(tenant, "boss", kind="confirmed", observation_id=b, actor="human"),
            ]
        )
        assert await deliver(services, WORKER, events, handler=recorder.handle) == [None] * len(events)
        updates = [s for s in statements if s.lstrip().upper().startswith("UPDATE OBSERVATIONS")]
        assert len(updates) == 1  # one statement for the batch, touching each observation once
        assert recorder.last_report.applied == 28 and recorder.last_report.duplicates == 1

        # redelivery of the whole batch: acknowledged, nothing applied twice
        assert await deliver(services, WORKER, events, handler=recorder.handle) == [None] * len(events)
        assert recorder.last_report.applied == 0
        # two workers with the same new batch at the same time: the inbox claim lets one apply it
        more = [event(tenant, f"v{i}", kind="retrieved", observation_id=a) for i in range(10)]
        both = await asyncio.gather(
            deliver(services, WORKER, more, handler=recorder.handle), deliver(services, WORKER, more)
        )
        assert both == [[None] * 10] * 2
    finally:
        await pool.close()
    obs_a = (await api.get(f"/api/ai/memory/{a}", headers=auth(tenant))).json()
    obs_b = (await api.get(f"/api/ai/memory/{b}", headers=auth(tenant))).json()
    assert (obs_a["relevance_count"], obs_a["cited_count"]) == (30, 1)
    assert (obs_b["relevance_count"], obs_b["rejected_count"], obs_b["confirmed_count"]) == (5, 1, 1)
    async with services.db.tenant(tenant) as conn:
        assert await conn.fetchval("SELECT count(*) FROM observation_feedback") == 38


async def test_a_search_reports_its_hits_in_one_retrieved_event(
    api: Any, auth: Any, tenant: str, services: Any, db: Any
) -> None:
    """Recall sends one `retrieved` event per search; the worker counts each hit like a single event."""
    a = (await remember(api, auth(tenant), "Hit A", scope="public"))["id"]
    b = (await remember(api, auth(tenant), "Hit B", scope="public"))["id"]
    gone = str(uuid.uuid4())  # deleted since the search: acknowledged, no effect
    query_id = uuid.uuid4()
    search = event(
        tenant,
        "alice",
        kind="retrieved",
        observation_ids=[a, b, gone],
        query_id=query_id,
        stream_origin="facts",
        actor="system",
    )
    single = event(tenant, "alice", kind="retrieved", observation_id=a)
    recorder = services.feedback_recorder
    assert await deliver(services, WORKER, [search, single], handler=recorder.handle) == [None, None]
    assert (recorder.last_report.applied, recorder.last_report.orphaned) == (3, 1)
    assert await deliver(services, WORKER, [search], handler=recorder.handle) == [
        None
    ]  # redelivered: each hit was claimed already
    assert (recorder.last_report.applied, recorder.last_report.duplicates) == (0, 3)
    obs_a = (await api.get(f"/api/ai/memory/{a}", headers=auth(tenant))).json()
    obs_b = (await api.get(f"/api/ai/memory/{b}", headers=auth(tenant))).json()
    assert (obs_a["relevance_count"], obs_b["relevance_count"]) == (2, 1)
    assert [(r["kind"], r["query_id"], r["stream_origin"]) for r in await rows(db, tenant, b)] == [
        ("retrieved", query_id, "facts")
    ]


async def test_invalid_and_orphaned_feedback(api: Any, auth: Any, tenant: str, services: Any) -> None:
    gone = (await remember(api, auth(tenant), "Soon deleted", scope="public"))["id"]
    async with services.db.tenant(tenant) as conn:
        await conn.execute("DELETE FROM observations WHERE id = $1", uuid.UUID(gone))
    no_tenant = event(tenant, "u", kind="cited", observation_id=gone)
    del no_tenant["tenantid"]
    bad_shape = new_event(FEEDBACK_RECORDED, {"kind": "rated"}, tenant_id=tenant, source="/test", user_id="u")
    reject_without_user = event(tenant, None, kind="rejected", observation_id=gone)
    wrong_type = new_event(
        "io.engram.session.ended.v1", {"session_id": str(uuid.uuid4())}, tenant_id=tenant, source="/t"
    )
    orphan = event(tenant, "u", kind="cited", observation_id=gone)
    outcomes = await deliver(services, WORKER, [no_tenant, bad_shape, reject_without_user, wrong_type, orphan])
    assert all(isinstance(o, InvalidEvent) for o in outcomes[:4]), outcomes
    assert "rating" in str(outcomes[1]) and "userid" in str(outcomes[2])
    assert outcomes[4] is None  # acknowledged: the observation is gone, so there is nothing to count
    assert services.feedback_recorder.last_report.orphaned == 1


async def test_the_cloud_event_function_maps_poison_to_4xx(services: Any, tenant: str) -> None:
    import httpx
    from cloudevents.conversion import to_binary
    from functions_framework import create_app

    app = create_app(target="record_feedback", source="functions/record_feedback/main.py")
    bad = new_event(FEEDBACK_RECORDED, {"kind": "cited"}, tenant_id=tenant, source="/test", user_id="u")
    good = event(tenant, "u", kind="rated", rating=5, query_id=uuid.uuid4())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fn") as client:
        headers, body = to_binary(bad)
        assert (await client.post("/", headers=headers, content=body)).status_code == 422
        headers, body = to_binary(good)
        assert (await client.post("/", headers=headers, content=body)).status_code == 200
