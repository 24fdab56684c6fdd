"""One contract, two observation stores: the same scenarios on PostgreSQL (`PgUnitOfWork`) and on
the in-memory fake (`tests.fakes.InMemoryUnitOfWork`), so the unit tests' fake keeps the real
write semantics, visibility and ordering."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram.domain.models import FeedbackCounts, FeedbackKind, FeedbackRow
from engram.domain.observation import ObservationDraft, Priority, Provenance, Scope, WriteOutcome
from engram.domain.paging import PageMark
from engram.domain.plan_topics import PLAN_FLAG
from engram.domain.scopes import Visibility
from tests.fakes import FakeBus, InMemoryUnitOfWork

created, updated, deduplicated = WriteOutcome.created, WriteOutcome.updated, WriteOutcome.deduplicated


@pytest.fixture(params=["postgres", "memory"])
def uow(request: pytest.FixtureRequest) -> Any:
    if request.param == "postgres":
        return request.getfixturevalue("services").uow
    return InMemoryUnitOfWork(FakeBus())


def draft(tenant: str, title: str, **kw: Any) -> ObservationDraft:
    kw.setdefault("user_id", "alice")
    return ObservationDraft(tenant_id=tenant, title=title, **kw)


def seeing(tenant: str, user: str | None = "alice", **kw: Any) -> Visibility:
    return Visibility(tenant_id=tenant, user_id=user, teams=kw.pop("teams", frozenset()), include_sensitive=False, **kw)


async def write(uow: Any, tenant: str, *drafts: ObservationDraft) -> list[Any]:
    async with uow.tenant(tenant) as tx:
        return list(await tx.observations.write_many(list(drafts)))


async def test_idempotent_writes(uow: Any, tenant: str) -> None:
    session = uuid.uuid4()
    (a,) = await write(
        uow, tenant, draft(tenant, "Lives in Stuttgart", key="city", provenance=Provenance(session_id=session))
    )
    (b,) = await write(uow, tenant, draft(tenant, "Lives in Berlin", key="city", confidence=0.7))
    (c,) = await write(uow, tenant, draft(tenant, "Lives in Berlin", key="city", confidence=0.7))
    assert [w.outcome for w in (a, b, c)] == [created, updated, deduplicated]
    assert b.observation.id == a.observation.id and b.observation.provenance.session_id == session
    assert b.observation.created_at == a.observation.created_at < b.observation.updated_at == c.observation.updated_at
    assert b.observation.confidence == pytest.approx(0.7) and b.observation.confidence != 0.7  # `real`
    plain, again, bobs, keyed = await write(
        uow,
        tenant,
        draft(tenant, "Prefers e-mail"),
        draft(tenant, " prefers E-MAIL "),
        draft(tenant, "Prefers e-mail", user_id="bob"),
        draft(tenant, "Lives in Berlin", key="home"),  # its content is stored under the "city" row
    )
    assert [w.outcome for w in (plain, again, bobs, keyed)] == [created, created, created, deduplicated]
    assert again.observation.id == plain.observation.id and bobs.observation.id != plain.observation.id
    assert keyed.observation.id == a.observation.id
    # one content hash for a keyless and a keyed draft of one batch: a unique violation, then in turns
    k1, k2, x, y = await write(
        uow, tenant, draft(tenant, "C"), draft(tenant, "C", key="c"), draft(tenant, "X"), draft(tenant, "X")
    )
    assert [w.outcome for w in (k1, k2, x, y)] == [created, deduplicated, created, deduplicated]  # in turns
    assert k2.observation.id == k1.observation.id and x.observation.id == y.observation.id
    async with uow.tenant(tenant) as tx:
        ids = [a.observation.id, plain.observation.id, uuid.uuid4()]
        current = {c.id: c for c in await tx.observations.current(ids)}
    assert len(current) == 2 and current[a.observation.id].outcome is updated
    assert current[plain.observation.id].outcome is created
    assert current[a.observation.id].revision == b.observation.updated_at


async def test_said_at_orders_keyed_writes_and_the_profile(uow: Any, tenant: str) -> None:
    """A keyed write never replaces what was said after it (a late or replayed event); without
    `said_at` on both sides the last write wins, as before. The profile's newest is the newest said."""
    monday, tuesday, wednesday = (datetime(2026, 3, d, 9, tzinfo=UTC) for d in (2, 3, 4))
    (a,) = await write(uow, tenant, draft(tenant, "Lives in Hamburg", key="city", said_at=tuesday))
    (late,) = await write(uow, tenant, draft(tenant, "Lives in Berlin", key="city", said_at=monday))
    assert late.outcome is deduplicated and late.observation.id == a.observation.id
    assert late.observation.title == "Lives in Hamburg" and late.observation.said_at == tuesday
    (later,) = await write(uow, tenant, draft(tenant, "Lives in Kiel", key="city", said_at=wednesday))
    assert later.outcome is updated and (later.observation.title, later.observation.said_at) == (
        "Lives in Kiel",
        wednesday,
    )
    (unsaid,) = await write(uow, tenant, draft(tenant, "Lives in Bonn", key="city"))  # a person's own write
    assert unsaid.outcome is updated and unsaid.observation.title == "Lives in Bonn"
    assert unsaid.observation.said_at == wednesday and unsaid.observation.said == wednesday
    # written in the order Tuesday, Monday: the profile lists Tuesday's first
    await write(uow, tenant, draft(tenant, "Drives a Golf", type="identity", said_at=tuesday))
    await write(uow, tenant, draft(tenant, "Drives a Polo", type="identity", said_at=monday))
    async with uow.tenant(tenant) as tx:
        profile = await tx.observations.profile(seeing(tenant), types=["identity"], now=datetime.now(UTC), limit=10)
    assert [o.title for o in profile] == ["Drives a Golf", "Drives a Polo"]
    assert [o.holds_from for o in profile] == [tuesday, monday]


async def test_visible_reads(uow: Any, tenant: str) -> None:
    now = datetime.now(UTC)
    written = await write(
        uow,
        tenant,
        draft(tenant, "mine", tags=["Billing"]),
        draft(tenant, "bob's", user_id="bob"),
        draft(tenant, "bob's team", user_id="bob", scope=Scope.team, team_ids=["sales"]),
        draft(tenant, "public", user_id="bob", scope=Scope.public),
        draft(tenant, "secret", scope=Scope.sensitive),
        draft(tenant, "expiring", expires_at=now + timedelta(hours=1)),
        draft(tenant, "expired", expires_at=now - timedelta(hours=1)),
        draft(tenant, "not yet", valid_from=now + timedelta(hours=1)),
    )
    ids = {w.observation.title: w.observation.id for w in written}
    async with uow.tenant(tenant) as tx:
        obs = tx.observations

        async def titles(vis: Visibility, **kw: Any) -> list[str]:
            found, total = await obs.list_visible(vis, now=now, limit=50, offset=0, **kw)
            assert total == len(found)
            return sorted(o.title for o in found)

        assert await titles(seeing(tenant)) == ["expiring", "mine", "public"]
        assert await titles(seeing(tenant, "bob", teams=frozenset({"x"}))) == ["bob's", "bob's team", "public"]
        assert await titles(seeing(tenant, "carol", teams=frozenset({"sales"}))) == ["bob's team", "public"]
        assert await titles(seeing(tenant, hidden_ids=frozenset({str(ids["mine"])}))) == ["expiring", "public"]
        assert await titles(seeing(tenant), include_expired=True, tags=["billing"]) == ["mine"]
        assert await titles(seeing(tenant), include_expired=True) == [
            "expired",
            "expiring",
            "mine",
            "not yet",
            "public",
        ]
        assert await titles(seeing(tenant), source="user", verified=False, scope="public") == ["public"]
        found = await obs.visible([str(i) for i in ids.values()], seeing(tenant), now)
        assert sorted(o.title for o in found.values()) == ["expiring", "mine", "public"]
        soon = await obs.expiring(seeing(tenant), now=now, until=now + timedelta(days=1), limit=5)
        assert [o.title for o in soon] == ["expiring"]
        page, total = await obs.list_visible(seeing(tenant), now=now, limit=2, offset=1, include_expired=True)
        assert total == 5 and len(page) == 2


async def test_list_pages_after_a_mark_and_a_count_that_stops(uow: Any, tenant: str) -> None:
    await write(uow, tenant, *(draft(tenant, f"first batch {i}") for i in range(7)))
    await write(uow, tenant, *(draft(tenant, f"second batch {i}") for i in range(5)))
    await write(uow, tenant, draft(tenant, "bob's", user_id="bob"))  # not alice's to see
    now = datetime.now(UTC)
    async with uow.tenant(tenant) as tx:
        obs = tx.observations
        whole, total = await obs.list_visible(seeing(tenant), now=now, limit=50)
        assert total == 12 and [o.title.split()[0] for o in whole] == ["second"] * 5 + ["first"] * 7
        assert len({o.created_at for o in whole[5:]}) == 1  # one transaction, one time: the id orders them

        walked: list[Any] = []
        mark = None
        while True:
            page, counted = await obs.list_visible(seeing(tenant), now=now, limit=5, after=mark)
            assert counted == 12  # the whole list's, wherever the page starts
            walked += page
            if len(page) < 5:
                break
            mark = PageMark(page[-1].created_at, page[-1].id)
        assert [o.id for o in walked] == [o.id for o in whole]

        # an offset counts from the mark; a mark after the last row, or before the first, is an end or the top
        at = whole[6]
        page, _ = await obs.list_visible(
            seeing(tenant), now=now, limit=3, offset=2, after=PageMark(at.created_at, at.id)
        )
        assert [o.id for o in page] == [o.id for o in whole[9:12]]
        last = whole[-1]
        assert (await obs.list_visible(seeing(tenant), now=now, limit=5, after=PageMark(last.created_at, last.id)))[
            0
        ] == []
        top = PageMark(now + timedelta(days=1), uuid.UUID(int=0))
        assert [o.id for o in (await obs.list_visible(seeing(tenant), now=now, limit=50, after=top))[0]] == [
            o.id for o in whole
        ]

        page, counted = await obs.list_visible(seeing(tenant), now=now, limit=2, count_up_to=5)
        assert counted == 5 and len(page) == 2
        _, counted = await obs.list_visible(seeing(tenant), now=now, limit=2, types=["note"], count_up_to=12)
        assert counted == 12


async def test_profile_and_known(uow: Any, tenant: str) -> None:
    for title, kw in [
        ("normal, oldest", {}),
        ("critical", {"priority": Priority.critical}),
        ("normal, newer", {}),
        ("rejected", {"priority": Priority.high}),
        ("sensitive", {"scope": Scope.sensitive}),
        ("bob's", {"user_id": "bob", "scope": Scope.public}),
    ]:
        await write(uow, tenant, draft(tenant, title, type="preference", **kw))
    # newest, but a memory unit (what was said): never offered to the extraction model to update
    await write(uow, tenant, draft(tenant, "a turn", type="context", key="turn:chat-1:m1"))
    async with uow.tenant(tenant) as tx:
        found, _ = await tx.observations.list_visible(
            seeing(tenant), now=datetime.now(UTC), limit=10, offset=0, types=["preference"]
        )
        rejected = next(o for o in found if o.title == "rejected")
        await tx.feedback.add([FeedbackRow(rejected.id, "alice", FeedbackKind.rejected)])
    async with uow.tenant(tenant) as tx:
        vis = Visibility(tenant_id=tenant, user_id="alice", teams=frozenset(), include_sensitive=True)
        profile = await tx.observations.profile(vis, types=["preference"], now=datetime.now(UTC), limit=10)
        assert [o.title for o in profile] == ["critical", "normal, newer", "normal, oldest"]
        assert [k.title for k in await tx.observations.known("alice", 2)] == ["rejected", "normal, newer"]
        assert await tx.feedback.rejected_ids("alice") == {str(rejected.id)}
        await tx.observations.delete(rejected.id)
        assert await tx.feedback.rejected_ids("alice") == frozenset()  # its feedback went with it


async def test_plans_are_the_callers_statements_that_tell_one_newest_first(uow: Any, tenant: str) -> None:
    """However much the user said since: the profile's plans are not picked among their newest events."""
    now = datetime.now(UTC)
    said = lambda hours: now - timedelta(hours=hours)  # noqa: E731
    await write(
        uow,
        tenant,
        draft(tenant, "My dentist appointment is on 12 May.", type="event", said_at=said(50)),
        draft(tenant, "We're flying to Lisbon in April.", type="event", said_at=said(40)),
        draft(tenant, "Since we changed our plans, we're going to Crete in August", type="identity", said_at=said(30)),
        draft(tenant, "My doctor's appointment is on 3 June.", type="event", scope=Scope.sensitive, said_at=said(20)),
        draft(tenant, "Bob's dentist appointment is on 4 May.", type="event", user_id="bob", scope=Scope.public),
        *(draft(tenant, f"Invoice {n} is due on 3 March.", type="event", said_at=said(n / 10)) for n in range(40)),
    )
    async with uow.tenant(tenant) as tx:
        plans = await tx.observations.plans(seeing(tenant), types=["event", "identity"], now=now, limit=10)
        assert [o.title.split(",")[0] for o in plans] == [
            "Since we changed our plans",
            "We're flying to Lisbon in April.",
            "My dentist appointment is on 12 May.",
        ]
        events = await tx.observations.plans(seeing(tenant), types=["event"], now=now, limit=1)
        assert [o.title for o in events] == ["We're flying to Lisbon in April."]
        # a row written before the flag existed (0019) is read once it has it (`Indexer.reindex`)
        (old,) = await tx.observations.write_many(
            [draft(tenant, "My vet appointment is on 2 May.", type="event").model_copy(update={"tags": ["chat"]})]
        )
        assert old.observation.tags == ["chat"]
        assert await tx.observations.flag([old.observation.id, uuid.uuid4()], PLAN_FLAG) == 1
        assert await tx.observations.flag([old.observation.id], PLAN_FLAG) == 0  # once
        (flagged,) = await tx.observations.get_many([old.observation.id])
        assert flagged.tags == ["chat", PLAN_FLAG] and flagged.updated_at == old.observation.updated_at
        found = await tx.observations.plans(seeing(tenant), types=["event"], now=now, limit=10)
        assert "My vet appointment is on 2 May." in [o.title for o in found]


async def test_counters_verification_and_locks(uow: Any, tenant: str) -> None:
    a, b = (w.observation for w in await write(uow, tenant, draft(tenant, "A"), draft(tenant, "B", verified=True)))
    gone = uuid.uuid4()
    async with uow.tenant(tenant) as tx:
        locked = await tx.observations.lock([b.id, gone, a.id])
        assert set(locked) == {a.id, b.id} and locked[b.id].verified and not locked[a.id].verified
        revisions = await tx.observations.count_feedback(
            {
                a.id: FeedbackCounts(retrieved=2, confirmed=1, verify=True),
                b.id: FeedbackCounts(cited=1),
                gone: FeedbackCounts(),
            }
        )
        assert set(revisions) == {a.id, b.id} and revisions[a.id] > a.updated_at and revisions[b.id] == b.updated_at
        assert await tx.observations.verify(a.id) is None and await tx.observations.verify(b.id) is None
    async with uow.tenant(tenant) as tx:
        (sa,) = await tx.observations.get_many([a.id])
        assert (sa.relevance_count, sa.confirmed_count, sa.verified, sa.updated_at) == (2, 1, True, revisions[a.id])
        (c,) = await tx.observations.write_many([draft(tenant, "C", confidence=0.5)])
        verified = await tx.observations.verify(c.observation.id)
        assert verified is not None and verified.confidence == 1.0 and verified.updated_at > c.observation.updated_at
        assert sorted(await tx.observations.live_ids()) == sorted(str(i) for i in (a.id, b.id, c.observation.id))


async def test_chats_sessions_messages_and_summaries(uow: Any, tenant: str) -> None:
    from engram.domain.models import SessionStatus
    from engram.ports import NewMessage

    chat_id, answer = uuid.uuid4(), uuid.uuid4()
    async with uow.tenant(tenant) as tx:
        chats = tx.chats
        chat = await chats.create_chat(chat_id, "alice", "Billing")
        assert chat is not None and chat.kind == "ai" and await chats.create_chat(chat_id, "bob", "again") is None
        session = await chats.create_session("alice", chat_id, "How do we bill?", {"turns": 0, "keep": "me"})
        at = datetime.now(UTC)
        await chats.record_turn(
            chat_id,
            session.id,
            "alice",
            [
                NewMessage(uuid.uuid4(), "user", "How do we bill?"),
                NewMessage(
                    answer, "assistant", "Quarterly.", model="m", memory_trace={"extraction": {"status": "queued"}}
                ),
            ],
            at,
            metadata={"turns": 1},
        )
        active, history = await chats.session_and_history(chat_id, 1)
        assert active is not None and active.id == session.id and active.metadata == {"turns": 1, "keep": "me"}
        assert [(m.role, m.content) for m in history] == [("assistant", "Quarterly.")]
        await chats.fail_extraction(answer, "model down")
        await chats.set_extraction(answer, {"status": "done", "count": 1})
        await chats.fail_extraction(answer, "a late report")  # never overwrites "done"
        (user_msg, assistant) = await chats.session_messages(session.id)
        assert user_msg.created_at == at and assistant.memory_trace["extraction"] == {"status": "done", "count": 1}
        assert await chats.end_idle_sessions([session.id], at - timedelta(hours=1)) == []  # touched since
        assert await chats.end_session(session.id) and not await chats.end_session(session.id)
        first = await chats.save_summary(session.id, "alice", dict.fromkeys(_FIELDS, "v1"), "offline")
        second = await chats.save_summary(session.id, "alice", dict.fromkeys(_FIELDS, "v2"), "m")
        assert second.id == first.id and second.learned == "v2" and second.generated_by_model == "m"
        await chats.fail_session(session.id)  # it has its summary: stays completed
        ended = await chats.get_session(session.id)
        assert ended is not None and ended.status is SessionStatus.completed
        assert await chats.active_session(chat_id) is None


_FIELDS = ("request", "investigated", "learned", "completed", "next_steps", "notes")


async def test_the_users_time_zone_is_the_one_they_named_last(uow: Any, tenant: str) -> None:
    from engram.ports import NewMessage

    berlin, new_york = uuid.uuid4(), uuid.uuid4()
    async with uow.tenant(tenant) as tx:
        await tx.chats.create_chat(berlin, "alice", "at home")
        assert await tx.chats.user_time_zone("alice") is None  # a chat that named no zone
        await tx.chats.set_time_zone(berlin, "Europe/Berlin")
        chat = await tx.chats.lock_chat(berlin)
        assert chat is not None and chat.time_zone == "Europe/Berlin" and chat.time_zone_at is not None
        assert await tx.chats.user_time_zone("alice") == "Europe/Berlin"
    async with uow.tenant(tenant) as tx:  # later: another chat names another zone
        await tx.chats.create_chat(new_york, "alice", "travelling")
        await tx.chats.set_time_zone(new_york, "America/New_York")
        await tx.chats.create_chat(uuid.uuid4(), "alice", "no zone named")  # newest, but names none
        assert await tx.chats.user_time_zone("alice") == "America/New_York"
        assert await tx.chats.user_time_zone("bob") is None
    async with uow.tenant(tenant) as tx:  # a turn in the Berlin chat names nothing: New York stays
        session = await tx.chats.create_session("alice", berlin, "back home", {})
        turn = [NewMessage(uuid.uuid4(), "user", "back home")]
        await tx.chats.record_turn(berlin, session.id, "alice", turn, datetime.now(UTC))
        assert await tx.chats.user_time_zone("alice") == "America/New_York"
    async with uow.tenant(tenant) as tx:  # naming Berlin again does
        await tx.chats.set_time_zone(berlin, "Europe/Berlin")
        assert await tx.chats.user_time_zone("alice") == "Europe/Berlin"
        exported = [c["time_zone"] async for c in tx.personal.history("chats", "alice")]
        assert sorted(z for z in exported if z) == ["America/New_York", "Europe/Berlin"]
        await tx.personal.erase("alice")
    async with uow.tenant(tenant) as tx:  # the zone is the user's personal data: erased with the chats
        assert await tx.chats.user_time_zone("alice") is None


async def test_telemetry_aggregates(uow: Any, tenant: str) -> None:
    from engram.domain.periods import Granularity, Window
    from engram.domain.telemetry import EventFilter, Metric, TelemetryRecord, validate_metadata

    start = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)

    def turn(minutes: int, user: str, cost: float, **kw: Any) -> TelemetryRecord:
        meta = {
            "model": "m",
            "input_tokens": 100,
            "output_tokens": 10,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cost_usd": cost,
            "duration_ms": 5,
            "rag_hits": 0,
            **kw,
        }
        return TelemetryRecord(
            tenant,
            "chat.turn_completed",
            validate_metadata("chat.turn_completed", meta),
            user,
            None,
            start + timedelta(minutes=minutes),
        )

    def tool(minutes: int, name: str, success: bool) -> TelemetryRecord:
        meta = validate_metadata("chat.tool_used", {"tool_name": name, "duration_ms": 7, "success": success})
        return TelemetryRecord(tenant, "chat.tool_used", meta, "alice", None, start + timedelta(minutes=minutes))

    records = [
        turn(0, "alice", 0.5, cache_read_input_tokens=100),
        turn(45, "bob", 1.5),
        turn(70, "alice", 0.25),
        tool(10, "search_memory", True),
        tool(80, "search_memory", False),
        tool(81, "consult_advisor", True),
        tool(115, "search_memory", True),  # an hour without turns
        turn(600, "alice", 9.0),  # outside the window
    ]
    async with uow.tenant(tenant) as tx:
        await tx.telemetry.write(records)
    window = Window(start, start + timedelta(hours=2))
    async with uow.tenant(tenant) as tx:
        t = tx.telemetry
        totals = await t.totals(window)
        assert (totals["events"], totals["turns"], totals["tool_calls"], totals["errors"]) == (7, 3, 4, 0)
        assert float(totals["cost_usd"]) == pytest.approx(2.25) and totals["input_tokens"] == 300
        assert totals["cache_read"] == 100
        assert await t.count(window, EventFilter()) == 7
        assert await t.count(window, EventFilter(event_name="chat.tool_used", user_id="alice")) == 4
        events = await t.events(window, EventFilter(user_id="bob"), limit=5, offset=0)
        assert [(e["event_name"], e["metadata"]["costUsd"]) for e in events] == [("chat.turn_completed", 1.5)]
        series = await t.series(Metric.turns, Granularity.hour, window)
        assert {k.hour: v for k, v in series.items()} == {9: 1, 10: 2, 11: None}
        rate = await t.series(Metric.cache_hit_rate, Granularity.day, window)
        assert list(rate.values()) == [pytest.approx(100 / 400)]
        tools = await t.top_tools(window, 5)
        assert [(r["tool_name"], r["calls"], r["successes"]) for r in tools] == [
            ("search_memory", 3, 2),
            ("consult_advisor", 1, 1),
        ]
        users = await t.top_users(window, 5)
        assert [(u["user_id"], float(u["cost_usd"]), u["turns"], u["events"]) for u in users] == [
            ("bob", 1.5, 1, 1),
            ("alice", 0.75, 2, 6),
        ]


async def test_personal_data_export_and_erasure(uow: Any, tenant: str) -> None:
    from engram.domain.telemetry import record
    from engram.ports import NewMessage

    mine, public = (
        w.observation for w in await write(uow, tenant, draft(tenant, "A"), draft(tenant, "B", scope=Scope.public))
    )
    bobs = (await write(uow, tenant, draft(tenant, "Bob's", user_id="bob", scope=Scope.public)))[0].observation
    chat_id = uuid.uuid4()
    async with uow.tenant(tenant) as tx:
        await tx.feedback.add(
            [FeedbackRow(bobs.id, "alice", FeedbackKind.cited), FeedbackRow(public.id, "bob", FeedbackKind.cited)]
        )
        await tx.chats.create_chat(chat_id, "alice", "mine")
        session = await tx.chats.create_session("alice", chat_id, "hi", {})
        messages = [NewMessage(uuid.uuid4(), "user", "hi"), NewMessage(uuid.uuid4(), "assistant", "hello")]
        await tx.chats.record_turn(chat_id, session.id, "alice", messages, datetime.now(UTC))
        await tx.chats.save_summary(session.id, "alice", dict.fromkeys(_FIELDS, "x"), "offline")
        meta = {"tool_name": "search_memory", "duration_ms": 1, "success": True}
        await tx.telemetry.write([record(tenant, "chat.tool_used", meta, user_id="alice", chat_id=chat_id)])
    async with uow.tenant(tenant) as tx:
        p = tx.personal
        assert sorted(o.title for o in [o async for o in p.observations("alice")]) == ["A", "B"]
        assert [f["observation_id"] for f in [f async for f in p.feedback("alice")]] == [bobs.id]
        assert [m["content"] for m in [m async for m in p.history("messages", "alice")]] == ["hi", "hello"]
        assert len([s async for s in p.history("summaries", "alice")]) == 1
        assert [t["event_name"] for t in [t async for t in p.telemetry("alice")]] == ["chat.tool_used"]
        erased = await p.erase("alice")
    assert erased.feedback == 2  # alice's own, and bob's on alice's observation
    assert erased.history == {"messages": 2, "summaries": 1, "sessions": 1, "chats": 1, "telemetry_events": 1}
    assert sorted(i for i, _ in erased.observations) == sorted([mine.id, public.id])
    async with uow.tenant(tenant) as tx:
        assert set(await tx.erasures.hold(["alice", "bob"])) == {"alice"}
        assert await tx.observations.live_ids() == [str(bobs.id)]
