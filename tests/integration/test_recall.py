"""Recall end to end (R-7): the memory API, embed-index on JetStream, visibility, lifecycle, feedback."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.adapters.observations import PgObservationStore
from engram.domain.observation import ObservationDraft, Scope
from engram.domain.recall import RecallQuery
from engram.domain.scopes import Permission, Principal, Visibility
from tests.conftest import ALL_PERMISSIONS, eventually, zone_where
from tests.integration.test_memory_api import assert_problem

READ = frozenset({Permission.read_observation.value})


async def remember(api: Any, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    r = await api.post("/api/ai/memory", headers=headers, json=body)
    assert r.status_code in (200, 201), r.text
    return dict(r.json()["observation"])


async def recall_text(api: Any, headers: dict[str, str], q: str, **params: Any) -> str:
    r = await api.get("/api/ai/memory/recall", params={"q": q, **params}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    assert uuid.UUID(r.headers["x-engram-query-id"])
    return str(r.text)


async def search_ids(api: Any, headers: dict[str, str], q: str, **body: Any) -> list[str]:
    r = await api.post("/api/ai/memory/search", headers=headers, json={"query": q, **body})
    assert r.status_code == 200, r.text
    return [h["observation"]["id"] for h in r.json()["hits"]]


async def indexed(services: Any, tenant: str, obs_id: str) -> bool:
    return obs_id in await services.index.indexed_ids(tenant)


async def test_recall_text_and_search_explanation(
    api: Any, auth: Any, tenant: str, services: Any, workers: Any
) -> None:
    a = await remember(
        api,
        auth(tenant),
        title="Invoices to Zephyr GmbH go out quarterly",
        type="decision",
        tags=["billing"],
        priority="high",
    )
    b = await remember(api, auth(tenant), title="Zephyr GmbH prefers e-mail over phone", type="preference")
    for o in (a, b):
        await eventually(lambda o=o: indexed(services, tenant, o["id"]))
    text = await recall_text(api, auth(tenant), "Zephyr invoices")
    assert text.startswith("Relevant memories (2):")
    assert "[decision] Invoices to Zephyr GmbH go out quarterly [high]" in text and "tags: billing" in text
    r = await api.post("/api/ai/memory/search", headers=auth(tenant), json={"query": "quarterly invoices Zephyr"})
    body = r.json()
    assert uuid.UUID(body["query_id"])
    first = body["hits"][0]
    assert first["observation"]["id"] == a["id"]
    explanation = first["explanation"]
    assert explanation["lexical_rank"] == 1 and explanation["vector_rank"] is not None
    assert explanation["boosts"]["priority"] > 1.0 and explanation["fused"] > 0
    assert first["score"] == pytest.approx(
        explanation["fused"] * __import__("math").prod(explanation["boosts"].values()), rel=1e-6
    )
    # a stream's type filter runs inside the search
    assert await search_ids(api, auth(tenant), "Zephyr", types=["preference"]) == [b["id"]]
    assert await search_ids(api, auth(tenant), "Zephyr", mode="lexical", limit=1) == [a["id"]]


async def test_delete_scope_change_and_expiry(api: Any, auth: Any, tenant: str, services: Any, workers: Any) -> None:
    gone = await remember(api, auth(tenant), title="Temporary wifi password is plum42", scope="public")
    shared = await remember(api, auth(tenant), title="Roadmap draft for Kestrel", key="roadmap", type="project")
    soon = await remember(
        api,
        auth(tenant),
        title="Parking at Falcon garage this week",
        expires_at=(datetime.now(UTC) + timedelta(seconds=3)).isoformat(),
    )
    for o in (gone, shared, soon):
        await eventually(lambda o=o: indexed(services, tenant, o["id"]))
    bob = auth(tenant, "bob")
    assert gone["id"] in await search_ids(api, bob, "wifi password plum42")

    # delete: gone from recall at once (index row removed in the same transaction), and via the event
    r = await api.delete(f"/api/ai/memory/{gone['id']}", headers=auth(tenant))
    assert r.status_code == 204, r.text
    assert gone["id"] not in await search_ids(api, bob, "wifi password plum42")
    assert_problem(await api.get(f"/api/ai/memory/{gone['id']}", headers=auth(tenant)), 404)
    assert_problem(await api.delete(f"/api/ai/memory/{gone['id']}", headers=auth(tenant)), 404)
    assert not await indexed(services, tenant, gone["id"])

    # scope change: private -> public becomes visible to bob once the update is indexed
    assert shared["id"] not in await search_ids(api, bob, "Kestrel roadmap")
    await remember(api, auth(tenant), title="Roadmap draft for Kestrel", key="roadmap", type="project", scope="public")

    async def bob_sees() -> bool:
        return shared["id"] in await search_ids(api, bob, "Kestrel roadmap")

    await eventually(bob_sees)

    # expiry: listed as expiring, then hidden from recall without any event
    r = await api.get("/api/ai/memory/expiring", params={"within": "7d"}, headers=auth(tenant))
    assert r.status_code == 200 and [o["id"] for o in r.json()["items"]] == [soon["id"]]
    assert soon["id"] in await search_ids(api, auth(tenant), "parking Falcon garage")
    await asyncio.sleep(3.2)
    assert soon["id"] not in await search_ids(api, auth(tenant), "parking Falcon garage")
    assert (await api.get("/api/ai/memory/expiring", headers=auth(tenant))).json()["items"] == []


async def test_delete_publishes_event_and_needs_ownership(
    api: Any, auth: Any, tenant: str, services: Any, workers: Any
) -> None:
    public = await remember(api, auth(tenant), title="Office closes at six", scope="public")
    await eventually(lambda: indexed(services, tenant, public["id"]))
    assert_problem(await api.delete(f"/api/ai/memory/{public['id']}", headers=auth(tenant, "bob")), 403)
    sub = await services.bus.js.pull_subscribe("engram.observation.*.*.deleted", stream="ENGRAM")
    r = await api.delete(f"/api/ai/memory/{public['id']}", headers=auth(tenant))
    assert r.status_code == 204

    async def deleted_event() -> Any:
        try:
            msgs = await sub.fetch(50, timeout=0.5)
        except Exception:
            return None
        for m in msgs:
            if public["id"].encode() in m.data:
                return m
        return None

    msg = await eventually(deleted_event)
    assert msg.headers["ce-type"] == "io.engram.observation.deleted.v1" and msg.headers["ce-tenantid"] == tenant
    await sub.unsubscribe()


async def test_rejected_is_hidden_for_that_user_only(
    api: Any, auth: Any, tenant: str, services: Any, workers: Any
) -> None:
    o = await remember(api, auth(tenant), title="Canteen serves Quokka curry on Mondays", scope="public")
    await eventually(lambda: indexed(services, tenant, o["id"]))
    async with services.db.tenant(tenant) as conn:
        await conn.execute(
            "INSERT INTO observation_feedback (tenant_id, observation_id, user_id, kind)"
            " VALUES ($1, $2, 'bob', 'rejected')",
            tenant,
            uuid.UUID(o["id"]),
        )
    assert o["id"] not in await search_ids(api, auth(tenant, "bob"), "Quokka curry")
    assert o["id"] in await search_ids(api, auth(tenant, "carol"), "Quokka curry")


async def test_retrieved_feedback_events(tenant: str, services: Any, workers: Any) -> None:
    principal = Principal(tenant_id=tenant, user_id="alice", permissions=READ)
    async with services.db.tenant(tenant) as conn:
        (w,) = await PgObservationStore(conn).write_many(
            [ObservationDraft(tenant_id=tenant, user_id="alice", title="Ibis project kickoff", type="project")]
        )
    await services.indexing.reindex(tenant)
    sub = await services.bus.js.pull_subscribe("engram.feedback.>", stream="ENGRAM")
    result = await services.recall.search(
        principal, RecallQuery("Ibis kickoff", types=("project",), type_boosts={"project": 1.3}, stream_origin="facts")
    )
    assert [h.observation.id for h in result.hits] == [w.observation.id]
    assert result.hits[0].stream_origin == "facts" and result.hits[0].boosts["type"] == 1.3
    await services.recall.drain()

    async def mine() -> Any:
        try:
            msgs = await sub.fetch(100, timeout=0.5)
        except TimeoutError:  # not delivered yet: ask again (nats-py raises its own or asyncio's)
            return None
        return [m for m in msgs if str(result.query_id).encode() in m.data] or None

    (msg,) = await eventually(mine)
    data = json.loads(msg.data)
    assert data == {  # one event per search, with every hit
        "kind": "retrieved",
        "observation_id": None,
        "observation_ids": [str(w.observation.id)],
        "rating": None,
        "query_id": str(result.query_id),
        "stream_origin": "facts",
        "actor": "system",
    }
    assert msg.headers["ce-type"] == "io.engram.feedback.recorded.v1"
    assert msg.headers["ce-tenantid"] == tenant and msg.headers["ce-userid"] == "alice"
    await sub.unsubscribe()
    assert (await services.recall.search(principal, RecallQuery("Ibis", types=("fact",)))).hits == []


async def test_verify_is_human_only(api: Any, auth: Any, tenant: str, other_tenant: str, services: Any) -> None:
    from engram.services.auth import create_agent_key

    key = await create_agent_key(
        services.uow,
        tenant_id=tenant,
        name="bot",
        user_id="alice",
        teams=[],
        permissions=["create:AiObservation", "read:AiObservation", "update:AiObservation"],
    )
    agent = {"X-Agent-Key": key.secret}
    o = await remember(api, agent, title="Alice may prefer the blue theme")
    assert o["verified"] is False
    assert_problem(await api.post(f"/api/ai/memory/{o['id']}/verify", headers=agent), 403)
    r = await api.post(f"/api/ai/memory/{o['id']}/verify", headers=auth(tenant))
    assert r.status_code == 200 and r.json()["verified"] is True
    again = await api.post(f"/api/ai/memory/{o['id']}/verify", headers=auth(tenant))
    assert again.status_code == 200 and again.json()["updated_at"] == r.json()["updated_at"]
    assert_problem(await api.post(f"/api/ai/memory/{o['id']}/verify", headers=auth(other_tenant)), 404)


@pytest.mark.parametrize(
    ("method", "path", "kw", "status", "field"),
    [
        ("get", "/api/ai/memory/recall", {"params": {"q": ""}}, 422, "query.q"),
        ("get", "/api/ai/memory/recall", {"params": {"q": "x" * 60_000}}, 422, "query.q"),  # httpx caps URLs at 64 KiB
        ("get", "/api/ai/memory/recall", {"params": {"q": "bad\x07bell"}}, 422, "query.q"),
        ("get", "/api/ai/memory/recall", {"params": {"q": "ok", "limit": 0}}, 422, "query.limit"),
        ("get", "/api/ai/memory/recall", {"params": {"q": "ok", "sensitive": "true"}}, 403, None),
        ("post", "/api/ai/memory/search", {"json": {"query": ""}}, 422, "body.query"),
        ("post", "/api/ai/memory/search", {"json": {"query": "x" * 100_000}}, 422, "body.query"),
        ("post", "/api/ai/memory/search", {"json": {"query": "nul\x00here"}}, 422, "body.query"),
        ("post", "/api/ai/memory/search", {"json": {"query": "ok", "mode": "magic"}}, 422, "body.mode"),
        (
            "post",
            "/api/ai/memory/search",
            {"json": {"query": "ok", "time_zone": "Mars/Olympus"}},
            422,
            "body.time_zone",
        ),
        ("get", "/api/ai/memory/expiring", {"params": {"within": "soon"}}, 422, "query.within"),
        ("delete", "/api/ai/memory/not-a-uuid", {}, 422, "path.observation_id"),
    ],
)
async def test_bad_queries_are_problems(
    api: Any, auth: Any, tenant: str, method: str, path: str, kw: dict[str, Any], status: int, field: str | None
) -> None:
    r = await getattr(api, method)(path, headers=auth(tenant), **kw)
    assert_problem(r, status, field)


async def test_without_a_recall_service_recall_and_search_answer_503(
    api: Any, auth: Any, tenant: str, services: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(services._current(), "recall", None)  # the Services object itself
    for r in (
        await api.get("/api/ai/memory/recall?q=tea", headers=auth(tenant)),
        await api.post("/api/ai/memory/search", json={"query": "tea"}, headers=auth(tenant)),
    ):
        problem = assert_problem(r, 503)
        assert "not configured" in problem["detail"] and problem["title"] == "Recall Unavailable"  # as chat-turn


async def test_other_tenants_ids_are_not_found(api: Any, auth: Any, tenant: str, other_tenant: str) -> None:
    o = await remember(api, auth(tenant), title="Secret plan Osprey", scope="public")
    assert_problem(await api.delete(f"/api/ai/memory/{o['id']}", headers=auth(other_tenant)), 404)
    assert "Osprey" not in await recall_text(api, auth(other_tenant), "Secret plan Osprey")
    assert_problem(await api.get("/api/ai/memory/recall", params={"q": "x"}), 401)


async def test_the_profile_is_the_callers_own_preferences_and_identity(
    api: Any, auth: Any, tenant: str, other_tenant: str
) -> None:
    """GET /api/ai/memory/profile: the chat's stable memory block, for any assistant."""
    await remember(api, auth(tenant), title="Alice has a dog called Biscuit", type="identity")
    await remember(api, auth(tenant), title="Alice prefers short answers", type="preference")
    sensitive = auth(tenant, permissions=[*ALL_PERMISSIONS, Permission.view_sensitive.value])
    await remember(api, sensitive, title="Alice's allergy to sesame", type="identity", scope="sensitive")
    await remember(api, auth(tenant, "bob"), title="Bob prefers long answers", type="preference", scope="public")
    await remember(api, auth(tenant), title="Invoices go out quarterly", type="decision")
    r = await api.get("/api/ai/memory/profile", headers=sensitive)  # never sensitive, even for those who may see it
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.text.index("short answers") < r.text.index("Biscuit")  # the newest first
    assert "sesame" not in r.text and "Bob" not in r.text and "quarterly" not in r.text
    assert r.headers["x-engram-profile-entries"] == "2"
    empty = await api.get("/api/ai/memory/profile", headers=auth(other_tenant))
    assert empty.status_code == 200 and empty.text == "" and empty.headers["x-engram-profile-entries"] == "0"
    assert_problem(await api.get("/api/ai/memory/profile"), 401)
    assert_problem(await api.get("/api/ai/memory/profile", headers=auth(tenant, permissions=[])), 403)


async def test_the_profile_holds_the_callers_plans_still_ahead(api: Any, auth: Any, tenant: str) -> None:
    """An appointment is there until its day has passed, however much the user told since; one that
    moved is there once, at its new day; a trip changed in words of an identity replaces the one
    booked before; one called off is gone. Priority first: a critical fact, the plans (the soonest
    first), the other facts."""
    now = datetime.now(UTC)
    day = lambda days: f"{(now + timedelta(days=days)):%d %B}"  # noqa: E731 - a plan's day as the user says it
    alice = auth(tenant)
    await remember(api, alice, title="Alice prefers short answers", type="preference")
    await remember(api, alice, title="Alice never takes calls before 9", type="preference", priority="critical")
    first = f"My dentist appointment is on {day(10)}."
    await remember(api, alice, title=first, type="event", said_at=(now - timedelta(hours=2)).isoformat())
    moved = f"The dentist moved my appointment to {day(20)}."
    await remember(api, alice, title=moved, type="event", said_at=(now - timedelta(hours=1)).isoformat())
    await remember(api, alice, title=f"I'm seeing my doctor on {day(5)}.", type="event")
    await remember(api, alice, title=f"My doctor's check-up is on {day(12)}.", type="event")
    await remember(api, alice, title=f"I cancelled my doctor's check-up on {day(12)}.", type="event")  # gone
    await remember(api, alice, title=f"My doctor's appointment was on {day(-3)}, last week.", type="event")
    await remember(api, alice, title="Invoice 42 is due on 3 March.", type="event")  # a date, no plan
    await remember(api, auth(tenant, "bob"), title=f"Bob's dentist appointment is on {day(4)}.", type="event")
    lisbon = f"We booked a holiday in Lisbon for {now + timedelta(days=40):%B}."
    await remember(api, alice, title=lisbon, type="event", said_at=(now - timedelta(hours=2)).isoformat())
    crete = f"Since we changed our plans, we're going to Crete in {now + timedelta(days=80):%B} instead"
    await remember(api, alice, title=crete, type="identity")  # a change of the user's life, and a plan
    await remember(api, alice, title=f"Anna turns forty on {day(-30)}.", type="event")  # back next year
    for n in range(35):  # more dated statements since than the profile reads plans
        await remember(api, alice, title=f"Invoice {n} is due on {day(n)}.", type="event")
    r = await api.get("/api/ai/memory/profile", headers=alice)
    assert r.status_code == 200, r.text
    assert "short answers" in r.text and "doctor on" in r.text and "moved my appointment" in r.text
    assert first not in r.text and "was on" not in r.text and "Invoice" not in r.text and "Bob" not in r.text
    assert "Crete" in r.text and "Lisbon" not in r.text and "Anna turns forty" in r.text and "check-up" not in r.text
    order = ["before 9", "doctor on", "moved my appointment", "Crete", "Anna turns forty", "short answers"]
    assert sorted(order, key=r.text.index) == order
    assert r.headers["x-engram-profile-entries"] == "6"


async def test_the_days_shown_are_the_users_in_the_time_zone_they_name(
    api: Any, auth: Any, tenant: str, services: Any, workers: Any
) -> None:
    """ "Tomorrow" is the day after the user's today: Kiritimati (UTC+14) and Pago Pago (UTC-11)
    are 25 hours apart, so one statement means two different days to them, and its date ("as
    of") differs too. Without a zone named, the one the user named last in a chat turn counts. A
    zone that is no IANA name is refused by field."""
    alice = auth(tenant)
    told = await remember(api, alice, title="My dentist appointment is tomorrow.", type="event")
    await eventually(lambda: indexed(services, tenant, told["id"]))
    now = datetime.now(UTC)
    for zone in ("Pacific/Kiritimati", "Pacific/Pago_Pago"):
        today = now.astimezone(ZoneInfo(zone)).date()
        day = today + timedelta(days=1)
        r = await api.get("/api/ai/memory/profile", params={"time_zone": zone}, headers=alice)
        assert r.status_code == 200, r.text
        assert f"(day: {day.isoformat()}, {day:%A})" in r.text and f"as of {today.isoformat()}" in r.text, zone
        found = await api.get("/api/ai/memory/recall", params={"q": "dentist", "time_zone": zone}, headers=alice)
        assert found.status_code == 200 and f"(day: {day.isoformat()}," in found.text, zone
    # named in a chat turn (`TurnRequest.time_zone`): the zone of every call that names none after it
    async with services.uow.tenant(tenant) as tx:
        chat_id = uuid.uuid4()
        await tx.chats.create_chat(chat_id, "alice", "on the atoll")
        await tx.chats.set_time_zone(chat_id, "Pacific/Kiritimati")
    there = now.astimezone(ZoneInfo("Pacific/Kiritimati")).date() + timedelta(days=1)
    r = await api.get("/api/ai/memory/profile", headers=alice)
    assert f"(day: {there.isoformat()}, {there:%A})" in r.text
    found = await api.get("/api/ai/memory/recall", params={"q": "dentist"}, headers=alice)
    assert f"(day: {there.isoformat()}," in found.text
    named = await api.get("/api/ai/memory/profile", params={"time_zone": "Pacific/Pago_Pago"}, headers=alice)
    assert f"(day: {there.isoformat()}," not in named.text  # a zone named beats the one kept
    for path, query in (("/api/ai/memory/profile", {}), ("/api/ai/memory/recall", {"q": "dentist"})):
        wrong = await api.get(path, params={**query, "time_zone": "+01:00"}, headers=alice)
        assert_problem(wrong, 422)
        assert wrong.json()["field"] == "query.time_zone" and "IANA name" in wrong.text


# ---- as a property: never a forbidden hit, every visible exact match found -------------

USERS = ["u1", "u2", "u3"]
TEAMS = ["t1", "t2"]

observation_specs = st.lists(
    st.tuples(
        st.sampled_from([*USERS, None]),
        st.sampled_from(list(Scope)),
        st.lists(st.sampled_from(TEAMS), max_size=2, unique=True),
    ),
    min_size=1,
    max_size=8,
)
callers = st.tuples(
    st.sampled_from([*USERS, "u4"]),
    st.lists(st.sampled_from(TEAMS), max_size=2, unique=True),
    st.booleans(),  # holds view:SensitiveAiMemory
    st.booleans(),  # asks for sensitive
)


def valid_spec(user: str | None, scope: Scope, teams: list[str]) -> tuple[str | None, Scope, list[str]]:
    if scope is Scope.private and user is None:
        return user, Scope.public, teams
    if scope is Scope.team and not teams:
        return user, scope, ["t1"]
    return user, scope, teams


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=observation_specs, who=st.lists(callers, min_size=1, max_size=3))
async def test_recall_never_leaks_and_finds_every_visible_exact_match(services: Any, specs: Any, who: Any) -> None:
    tenant = f"t-prop-{uuid.uuid4().hex[:10]}"
    drafts = []
    for i, spec in enumerate(specs):
        user, scope, teams = valid_spec(*spec)
        drafts.append(
            ObservationDraft(
                tenant_id=tenant,
                user_id=user,
                scope=scope,
                team_ids=teams,
                title=f"codeword{i}x shared memo",
                narrative=f"entry number {i}",
            )
        )
    async with services.db.tenant(tenant) as conn:
        written = await PgObservationStore(conn).write_many(drafts)
    await services.indexing.reindex(tenant)
    stored = {w.observation.id: w.observation for w in written}
    for user, teams, may_sensitive, wants_sensitive in who:
        perms = READ | ({Permission.view_sensitive.value} if may_sensitive else frozenset())
        principal = Principal(tenant_id=tenant, user_id=user, teams=frozenset(teams), permissions=perms)
        visibility = Visibility.for_principal(principal, want_sensitive=wants_sensitive)
        broad = await services.recall.search(
            principal, RecallQuery("shared memo", limit=50, want_sensitive=wants_sensitive)
        )
        assert all(visibility.allows(h.observation) for h in broad.hits)
        for obs in stored.values():
            exact = await services.recall.search(
                principal, RecallQuery(obs.title.split()[0], limit=5, want_sensitive=wants_sensitive)
            )
            ids = [h.observation.id for h in exact.hits]
            assert all(visibility.allows(stored[i]) for i in ids)
            if visibility.allows(obs):
                assert ids and ids[0] == obs.id
            else:
                assert obs.id not in ids
    await services.recall.drain()


async def kickoff(services: Any, tenant: str, name: str, place: str) -> tuple[Any, Any]:
    """Alice's project and fact about a kickoff, written and indexed (one per stream type)."""
    async with services.db.tenant(tenant) as conn:
        project, fact = await PgObservationStore(conn).write_many(
            [
                ObservationDraft(tenant_id=tenant, user_id="alice", title=f"{name} project kickoff", type="project"),
                ObservationDraft(tenant_id=tenant, user_id="alice", title=f"{name} kickoff is in {place}", type="fact"),
            ]
        )
    await services.indexing.reindex(tenant)
    return project, fact


async def test_search_many_plans_streams_together(tenant: str, services: Any, workers: Any) -> None:
    """Multi-stream recall's batch path: one shared query id, per-stream events, a bad query fails alone."""
    principal = Principal(tenant_id=tenant, user_id="alice", permissions=READ)
    project, fact = await kickoff(services, tenant, "Heron", "Lisbon")
    shared = uuid.uuid4()
    sub = await services.bus.js.pull_subscribe("engram.feedback.>", stream="ENGRAM")
    projects, facts, empty = await services.recall.search_many(
        principal,
        [
            RecallQuery("Heron kickoff", types=("project",), stream_origin="projects", query_id=shared),
            RecallQuery("Heron kickoff", types=("fact",), stream_origin="facts", query_id=shared),
            RecallQuery("   ", stream_origin="broken", query_id=shared),
        ],
    )
    assert not isinstance(projects, Exception) and not isinstance(facts, Exception)
    assert [h.observation.id for h in projects.hits] == [project.observation.id]
    assert [h.observation.id for h in facts.hits] == [fact.observation.id]
    assert projects.query_id == facts.query_id == shared
    assert isinstance(empty, Exception) and "query" in str(empty)
    # each stream reports its own retrieved event under the shared query id
    await services.recall.drain()

    found: set[tuple[str, str]] = set()

    async def mine() -> Any:  # a fetch may bring one event and the next none (a timeout): keep what came
        try:
            msgs = await sub.fetch(100, timeout=0.5)
        except TimeoutError:
            msgs = []
        found.update(
            (json.loads(m.data)["stream_origin"], *json.loads(m.data)["observation_ids"])
            for m in msgs
            if str(shared).encode() in m.data
        )
        return found if len(found) == 2 else None

    assert await eventually(mine) == {("projects", str(project.observation.id)), ("facts", str(fact.observation.id))}
    await sub.unsubscribe()


async def test_a_query_that_fails_inside_a_shared_search_fails_alone(
    tenant: str, services: Any, workers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams share statements (one transaction, shared lists); when one stream's own statement
    fails, the others still answer (R-7.4): the batch is searched again query by query."""
    principal = Principal(tenant_id=tenant, user_id="alice", permissions=READ)
    project, fact = await kickoff(services, tenant, "Osprey", "Porto")
    index = services.recall.index
    lexical_in = index.lexical_in
    searched: list[str] = []

    async def failing_for_risk(conn: Any, visibility: Any, text: str, *args: Any, **kwargs: Any) -> Any:
        searched.append(text)
        if "risk" in text:  # the risk stream's own BM25 text (its template adds words)
            raise RuntimeError("statement timeout")
        return await lexical_in(conn, visibility, text, *args, **kwargs)

    monkeypatch.setattr(index, "lexical_in", failing_for_risk)
    projects, risky, facts = await services.recall.search_many(
        principal,
        [
            RecallQuery("Osprey kickoff", types=("project",), stream_origin="projects"),
            RecallQuery("Osprey kickoff risk", types=("mistake",), stream_origin="risk"),
            RecallQuery("Osprey kickoff", types=("fact",), stream_origin="facts"),
        ],
    )
    assert isinstance(risky, RuntimeError) and "statement timeout" in str(risky)
    assert not isinstance(projects, Exception) and not isinstance(facts, Exception)
    assert [h.observation.id for h in projects.hits] == [project.observation.id]
    assert [h.observation.id for h in facts.hits] == [fact.observation.id]
    # first together (the shared text, then the risk text failed), then each query alone
    assert searched.count("Osprey kickoff risk") == 2 and searched.count("Osprey kickoff") >= 3


async def test_term_statistics_follow_the_postings(tenant: str, services: Any, workers: Any) -> None:
    """BM25 document frequencies come from `search_term_stats`, kept by triggers: always equal to a count."""
    async with services.db.tenant(tenant) as conn:
        written = await PgObservationStore(conn).write_many(
            [
                ObservationDraft(tenant_id=tenant, user_id="alice", title=f"Kestrel invoice {i} for Bremen")
                for i in range(5)
            ]
        )
    await services.indexing.reindex(tenant)

    async def mismatches() -> list[Any]:
        async with services.db.system() as conn:
            return list(
                await conn.fetch(
                    "SELECT coalesce(c.term, s.term) AS term, c.n, s.doc_freq FROM"
                    " (SELECT term, count(*) AS n FROM search_terms WHERE tenant_id = $1 GROUP BY term) c"
                    " FULL JOIN (SELECT term, doc_freq FROM search_term_stats WHERE tenant_id = $1 AND doc_freq > 0) s"
                    " ON s.term = c.term WHERE c.n IS DISTINCT FROM s.doc_freq",
                    tenant,
                )
            )

    async with services.db.system() as conn:
        kestrel = await conn.fetchval(
            "SELECT doc_freq FROM search_term_stats WHERE tenant_id = $1 AND term = 'kestrel'", tenant
        )
    assert kestrel == 5 and await mismatches() == []
    await services.index.delete(tenant, [str(w.observation.id) for w in written[:2]])
    assert await mismatches() == []
    await services.indexing.reindex(tenant)  # re-indexing rewrites postings: counts stay exact
    assert await mismatches() == []


async def test_streams_sharing_one_search_find_what_each_finds_alone(tenant: str, services: Any, workers: Any) -> None:
    """Streams with one text share a candidate search over their types' union; each stream's hits
    equal those of its own search, also for a rare type that the shared list cut off."""
    principal = Principal(tenant_id=tenant, user_id="alice", permissions=READ)
    drafts = [
        ObservationDraft(tenant_id=tenant, user_id="alice", title=f"Osprey invoice {i} was paid", type="fact")
        for i in range(90)
    ]
    drafts += [
        ObservationDraft(tenant_id=tenant, user_id="alice", title=f"Osprey invoice {i} was sent twice", type="mistake")
        for i in range(3)
    ]
    drafts += [
        ObservationDraft(tenant_id=tenant, user_id="alice", title=f"Osprey invoices go out on day {i}", type="decision")
        for i in range(25)
    ]
    async with services.db.tenant(tenant) as conn:
        await PgObservationStore(conn).write_many(drafts)
    await services.indexing.reindex(tenant)
    queries = [
        RecallQuery("Osprey invoice", limit=10, types=("fact",), stream_origin="facts"),
        RecallQuery("Osprey invoice", limit=10, types=("mistake",), stream_origin="risk"),
        RecallQuery("Osprey invoice", limit=10, types=("decision", "fact"), stream_origin="decisions"),
        RecallQuery("Osprey invoice", limit=10, stream_origin="everything"),
    ]
    together = await services.recall.search_many(principal, queries)
    for query, shared in zip(queries, together, strict=True):
        assert not isinstance(shared, Exception)
        alone = await services.recall.search(principal, query)
        assert [h.observation.id for h in shared.hits] == [h.observation.id for h in alone.hits], query.stream_origin
        assert all(not query.types or h.observation.type in query.types for h in shared.hits)
    assert len(together[1].hits) == 3  # type: ignore[union-attr]
    await services.recall.drain()


class GatedEmbedder:
    """Embeds with the real (static) embedder, but only once the test opens the gate."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dimensions = inner.dimensions
        self.model = inner.model
        self.gate = asyncio.Event()
        self.called = asyncio.Event()

    async def embed_passages(self, texts: Any) -> Any:
        return await self.inner.embed_passages(texts)

    async def embed_query(self, text: str) -> Any:
        self.called.set()
        await self.gate.wait()
        return await self.inner.embed_query(text)


async def test_recall_holds_no_connection_while_the_model_is_busy(
    stack: dict[str, str], tenant: str, services: Any, workers: Any
) -> None:
    """Concurrent recalls waiting for the embedding model must not starve the connection pool."""
    from engram.adapters.postgres import Database
    from engram.adapters.unit_of_work import PgUnitOfWork
    from engram.services.recall import RecallService

    async with services.db.tenant(tenant) as conn:
        (w,) = await PgObservationStore(conn).write_many(
            [ObservationDraft(tenant_id=tenant, user_id="alice", title="Plover audit is due in March")]
        )
    await services.indexing.reindex(tenant)
    db = await Database.connect(stack["database_url"], max_size=2)
    embedder = GatedEmbedder(services.embedder)
    recall = RecallService(PgUnitOfWork(db, None), type(services.index)(db, services.index.dimensions), embedder, None)
    principal = Principal(tenant_id=tenant, user_id="alice", permissions=READ)
    searches = [asyncio.ensure_future(recall.search(principal, RecallQuery("Plover audit"))) for _ in range(4)]
    try:
        await embedder.called.wait()

        async def released() -> bool | None:  # BM25 done, every connection back in the pool
            return db.pool.get_idle_size() == db.pool.get_size() or None

        await eventually(released, timeout=5)
    finally:
        embedder.gate.set()
        results = await asyncio.gather(*searches, return_exceptions=True)
        await db.close()
    for result in results:
        assert not isinstance(result, BaseException)
        assert [h.observation.id for h in result.hits] == [w.observation.id]


class CountingEmbedder:
    """The real (static) embedder, counting the query texts it is asked for."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dimensions = inner.dimensions
        self.model = inner.model
        self.asked: list[str] = []

    async def embed_passages(self, texts: Any) -> Any:
        return await self.inner.embed_passages(texts)

    async def embed_query(self, text: str) -> Any:
        self.asked.append(text)
        return await self.inner.embed_query(text)


async def counted_recall_of_one(services: Any, tenant: str, title: str) -> tuple[Any, Any, CountingEmbedder, Principal]:
    """One indexed observation of alice's and a recall service whose embedder counts its texts."""
    from engram.services.recall import RecallService

    async with services.db.tenant(tenant) as conn:
        (written,) = await PgObservationStore(conn).write_many(
            [ObservationDraft(tenant_id=tenant, user_id="alice", title=title)]
        )
    await services.indexing.reindex(tenant)
    embedder = CountingEmbedder(services.embedder)
    recall = RecallService(services.uow, services.index, embedder, None)
    return written, recall, embedder, Principal(tenant_id=tenant, user_id="alice", permissions=READ)


async def test_vectors_embedded_ahead_are_used_and_a_failed_ahead_is_not_fatal(
    tenant: str, services: Any, workers: Any
) -> None:
    w, recall, embedder, principal = await counted_recall_of_one(services, tenant, "Heron contract renews in June")
    queries = [RecallQuery("Heron contract", types=("fact",)), RecallQuery("Heron contract", types=("note",))]

    ahead = recall.embed_ahead(["Heron contract", "", "x" * 20_000])  # invalid texts are left out
    assert set(await ahead) == {"Heron contract"}
    assert embedder.asked == ["Heron contract"]
    together = await recall.search_many(principal, queries, ahead=ahead)
    assert embedder.asked == ["Heron contract"]  # the search used the vector made ahead
    assert [h.observation.id for h in together[1].hits] == [w.observation.id]  # type: ignore[union-attr]

    async def broken() -> dict[str, Any]:
        raise RuntimeError("model crashed")

    again = await recall.search_many(principal, queries, ahead=broken())
    assert embedder.asked == ["Heron contract"] * 2  # embedded by the search itself
    assert [h.observation.id for h in again[1].hits] == [w.observation.id]  # type: ignore[union-attr]
    other = recall.embed_ahead(["something else"])
    await recall.search_many(principal, queries, ahead=other)
    assert embedder.asked[-2:] == ["something else", "Heron contract"]  # only the missing text
    await recall.drain()


async def test_hybrid_recall_lifts_memories_of_a_session_with_other_good_matches(
    tenant: str, services: Any, workers: Any
) -> None:
    from engram.domain.observation import Provenance

    strong, weak = uuid.uuid4(), uuid.uuid4()
    titles = {
        "Kestrel rollout planned for Monday": strong,
        "Kestrel rollout needs a database migration": strong,
        "Kestrel rollout owner is Dana": weak,
        "Kestrel rollout mentioned in passing": None,
    }
    async with services.db.tenant(tenant) as conn:
        await PgObservationStore(conn).write_many(
            [
                ObservationDraft(tenant_id=tenant, user_id="alice", title=t, provenance=Provenance(session_id=s))
                for t, s in titles.items()
            ]
        )
    await services.indexing.reindex(tenant)
    principal = Principal(tenant_id=tenant, user_id="alice", permissions=READ)
    hybrid = await services.recall.search(principal, RecallQuery("Kestrel rollout", limit=10))
    support = {h.observation.title: h.boosts.get("session") for h in hybrid.hits}
    assert len(support) == 4
    assert support["Kestrel rollout mentioned in passing"] is None  # no session, no support
    top = max(v for v in support.values() if v is not None)
    assert top == pytest.approx(1.15) and support["Kestrel rollout planned for Monday"] == top
    assert support["Kestrel rollout needs a database migration"] == top
    assert 1.0 < support["Kestrel rollout owner is Dana"] < top  # a session of one match: less support
    lexical = await services.recall.search(principal, RecallQuery("Kestrel rollout", limit=10, mode="lexical"))
    assert all("session" not in h.boosts for h in lexical.hits)  # single lists stay as they are
    await services.recall.drain()


async def alices_dated(services: Any, tenant: str, *memories: tuple[str, datetime]) -> Principal:
    """Alice's memories (title, valid from), indexed; the principal that reads them."""
    async with services.db.tenant(tenant) as conn:
        await PgObservationStore(conn).write_many(
            [ObservationDraft(tenant_id=tenant, user_id="alice", title=t, valid_from=at) for t, at in memories]
        )
    await services.indexing.reindex(tenant)
    return Principal(tenant_id=tenant, user_id="alice", permissions=READ)


async def test_a_query_that_names_a_day_lifts_the_memories_of_that_day(
    tenant: str, services: Any, workers: Any
) -> None:
    june_3 = datetime(2023, 6, 3, 14, 0, tzinfo=UTC)
    principal = await alices_dated(
        services,
        tenant,
        ("Osprey budget review, first round", june_3),
        ("Osprey budget review, second round with the budget numbers of the Osprey review", june_3 + timedelta(days=7)),
    )
    for question in ("What came out of the Osprey budget review on 3 June 2023?", "Osprey Budget am 3. Juni 2023?"):
        result = await services.recall.search(principal, RecallQuery(question, limit=2))
        assert [h.observation.valid_from for h in result.hits] == [june_3, june_3 + timedelta(days=7)], question
        assert result.hits[0].boosts["date"] == 2.0 and "date" not in result.hits[1].boosts
    undated = await services.recall.search(principal, RecallQuery("Osprey budget review", limit=2))
    assert all("date" not in h.boosts for h in undated.hits)
    await services.recall.drain()


async def test_recall_looks_at_memory_at_its_clocks_time(tenant: str, services: Any, workers: Any) -> None:
    """The clock decides what is in force and how recent a memory is (a bench asks a week after a
    conversation, as its user would; the real clock is years later, where nothing is recent)."""
    from engram.services.recall import RecallService

    march = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
    principal = await alices_dated(
        services, tenant, ("Heron rollout plan", march), ("Heron rollout plan, later", march + timedelta(days=60))
    )
    at = march + timedelta(days=7)
    recall = RecallService(services.uow, services.index, services.recall.embedder, None, clock=lambda: at)
    week_after = await recall.search(principal, RecallQuery("Heron rollout plan", limit=2))
    # the later memory is not yet in force; the first is a week old: 1 + 0.15 x 0.5^(7/30)
    assert [h.observation.valid_from for h in week_after.hits] == [march]
    assert week_after.hits[0].boosts["recency"] == pytest.approx(1 + 0.15 * 0.5 ** (7 / 30), abs=1e-4)
    now = await services.recall.search(principal, RecallQuery("Heron rollout plan", limit=2))
    assert len(now.hits) == 2 and all(h.boosts["recency"] < 1.0001 for h in now.hits)
    await recall.drain()
    await services.recall.drain()


async def test_a_memory_tagged_with_a_name_the_query_says_gets_tag_support(
    tenant: str, services: Any, workers: Any
) -> None:
    async with services.db.tenant(tenant) as conn:
        await PgObservationStore(conn).write_many(
            [
                ObservationDraft(tenant_id=tenant, user_id="alice", title="Prefers invoices by mail", tags=["melanie"]),
                ObservationDraft(
                    tenant_id=tenant, user_id="alice", title="Prefers invoices by mail, always", tags=["bob"]
                ),
            ]
        )
    await services.indexing.reindex(tenant)
    principal = Principal(tenant_id=tenant, user_id="alice", permissions=READ)
    result = await services.recall.search(principal, RecallQuery("How does Melanie want her invoices?", limit=2))
    assert [h.observation.tags for h in result.hits] == [["melanie"], ["bob"]]
    assert result.hits[0].boosts["tag"] == 1.1 and "tag" not in result.hits[1].boosts
    await services.recall.drain()


async def test_a_query_can_search_the_knn_side_with_a_text_of_its_own(tenant: str, services: Any, workers: Any) -> None:
    """`vector_text`: BM25 searches `text`, kNN `vector_text` (a stream's template expands BM25 only)."""
    w, recall, embedder, principal = await counted_recall_of_one(
        services, tenant, "Kestrel warehouse lease ends in March"
    )
    (result,) = await recall.search_many(
        principal, [RecallQuery("Kestrel lease risk problem", vector_text="When does the Kestrel lease end?")]
    )
    assert embedder.asked == ["When does the Kestrel lease end?"]  # only the kNN text is embedded
    (hit,) = result.hits  # type: ignore[union-attr]
    assert hit.observation.id == w.observation.id and hit.lexical_rank == 1 and hit.vector_rank == 1
    (bad,) = await recall.search_many(principal, [RecallQuery("Kestrel", vector_text="   ")])
    from engram.domain.errors import Unprocessable

    assert isinstance(bad, Unprocessable) and bad.field == "vector_text"


async def test_yesterday_is_the_users_day_in_their_time_zone(
    api: Any, auth: Any, tenant: str, services: Any, workers: Any
) -> None:
    """What was said twelve hours ago was yesterday where it is morning now, and today where it
    is evening: "yesterday" in the zone the search names finds it in the first case only."""
    alice = auth(tenant)
    now = datetime.now(UTC)

    morning, evening = zone_where(now, range(1, 11)), zone_where(now, range(13, 23))
    told = await remember(
        api, alice, title="Our neighbour's cat is called Pixel.", said_at=(now - timedelta(hours=12)).isoformat()
    )
    others = [await remember(api, alice, title=f"Tell me again about idea {n}, did I tell you?") for n in range(6)]
    for obs in [told, *others]:
        await eventually(lambda o=obs: indexed(services, tenant, o["id"]))
    question = "What did I tell you yesterday?"
    assert told["id"] in (await search_ids(api, alice, question, limit=3, time_zone=morning))[:2], morning
    assert told["id"] not in (await search_ids(api, alice, question, limit=3, time_zone=evening))[:2], evening


async def test_a_question_about_yesterday_finds_what_was_told_that_day(
    api: Any, auth: Any, tenant: str, services: Any, workers: Any
) -> None:
    """ "What did I tell you yesterday?" shares no word with what was told: recall also searches
    the memories of that day alone (`decomposition.day_windows`, `dates.past_span`), so they
    reach the top, what was told a week earlier does not. A memory with no valid-from time (a
    "remember this" note, a fact told in a chat) is in the day it was said."""
    alice = auth(tenant)
    now = datetime.now(UTC)
    told = {
        "yesterday": await remember(
            api,
            alice,
            title="The plumber fixes the boiler next Tuesday.",
            valid_from=(now - timedelta(days=1)).isoformat(),
        ),
        "a week ago": await remember(
            api, alice, title="The plumber cleaned the gutters.", valid_from=(now - timedelta(days=8)).isoformat()
        ),
        "said yesterday": await remember(
            api, alice, title="Our neighbour's cat is called Pixel.", said_at=(now - timedelta(days=1)).isoformat()
        ),
    }
    for n in range(12):  # other memories, said today, that share the question's words
        told[f"today {n}"] = await remember(api, alice, title=f"Tell me again about idea {n}, did I tell you?")
    for obs in told.values():
        await eventually(lambda o=obs: indexed(services, tenant, o["id"]))
    question = {"query": "What did I tell you yesterday?", "limit": 5}
    r = await api.post("/api/ai/memory/search", headers=alice, json=question)
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    ids = [h["observation"]["id"] for h in hits]
    # the window's list weighs as the question's: yesterday's memory shares the top with its best match
    yesterdays = {told["yesterday"]["id"], told["said yesterday"]["id"]}
    assert yesterdays <= set(ids) and yesterdays & set(ids[:2]), [h["observation"]["title"] for h in hits]
    assert told["a week ago"]["id"] not in ids
    found = next(h for h in hits if h["observation"]["id"] == told["yesterday"]["id"])
    assert "parts" in found["explanation"]["boosts"]
    undated = await search_ids(api, alice, "What did I tell you?", limit=5)
    assert not yesterdays & set(undated[:2])  # without the day named, the words win
    # eight days ago is always in last week (Monday to Sunday, a day either side, never today)
    week = await search_ids(api, alice, "Worüber haben wir letzte Woche gesprochen?", limit=6)
    assert told["a week ago"]["id"] in week
