"""extract-observation: rules, marks, idempotency under re-publishing and redelivery."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from cloudevents.http import CloudEvent

from engram.adapters.nats_binding import to_nats_binary
from engram.domain.errors import InvalidEvent
from engram.domain.events import OBSERVATION_CREATED, OBSERVATION_MARKED, new_event, subject_for
from functions.extract_observation.main import WORKER
from tests.conftest import deliver, eventually
from tests.events import published


def customer_event(tenant: str, event_id: str, **data: Any) -> CloudEvent:
    payload = {"customer_id": "1001", "name": "Müller Maschinenbau GmbH", "city": "Stuttgart", **data}
    return new_event(
        "com.example.crm.customer.created.v1",
        payload,
        tenant_id=tenant,
        source="/crm",
        event_id=event_id,
        time="2026-05-04T10:00:00+00:00",
    )


async def count(db: Any, tenant: str, sql: str = "SELECT count(*) FROM observations") -> int:
    async with db.tenant(tenant) as conn:
        return int(await conn.fetchval(sql))


async def test_same_event_three_times_plus_redelivery_gives_one_observation(
    services: Any, workers: Any, tenant: str
) -> None:
    event = customer_event(tenant, "evt-1")
    for _ in range(3):
        await services.bus.publish(event)
    # a producer retry after the duplicate window: same CloudEvent id, new NATS message id
    headers, body = to_nats_binary(event)
    headers["Nats-Msg-Id"] = "retry-after-window"
    await services.bus.js.publish(subject_for(event), body, headers=headers)
    await eventually(lambda: count(db=services.db, tenant=tenant, sql="SELECT count(*) FROM processed_events"))
    # a forced redelivery: the worker crashed after commit, before its ack
    assert await deliver(services, WORKER, [event]) == [None]
    await eventually(lambda: workers["extract-observation"].stats.acked >= 2)
    assert await count(services.db, tenant) == 1
    assert await count(services.db, tenant, "SELECT count(*) FROM processed_events") == 1
    async with services.db.tenant(tenant) as conn:
        row = await conn.fetchrow("SELECT * FROM observations")
        telemetry = await conn.fetch("SELECT metadata FROM ai_events WHERE event_name = 'memory.extraction'")
    assert row["title"] == "Customer Müller Maschinenbau GmbH was created"
    assert row["trigger_source"] == "hook" and row["source"] == "system" and row["user_id"] is None
    assert row["source_event_id"] == "evt-1"
    assert sum(t["metadata"]["count"] for t in telemetry) == 1
    assert sum(t["metadata"]["dedupHits"] for t in telemetry) >= 1


async def test_keyed_rule_updates_instead_of_duplicating(services: Any, workers: Any, tenant: str) -> None:
    await services.bus.publish(customer_event(tenant, "c-1", city="Stuttgart"))
    await eventually(lambda: count(services.db, tenant))
    await services.bus.publish(customer_event(tenant, "c-2", city="Berlin"))
    await eventually(
        lambda: count(services.db, tenant, "SELECT count(*) FROM observations WHERE narrative LIKE '%Berlin%'")
    )
    assert await count(services.db, tenant) == 1


async def test_a_late_event_never_replaces_what_a_later_one_said(services: Any, tenant: str) -> None:
    """The event of 3 May arrives after the one of 5 May (a redelivery after an outage, a replayed
    dead letter): the row keeps 5 May's value and is dated by it, not by when it was written."""
    later = customer_event(tenant, "c-5may", city="Berlin")
    later["time"] = "2026-05-05T08:00:00Z"
    late = customer_event(tenant, "c-3may", city="Hamburg")
    late["time"] = "2026-05-03T08:00:00.123456789+02:00"  # RFC 3339 allows nanoseconds and any offset
    assert await deliver(services, WORKER, [later]) == [None]
    assert await deliver(services, WORKER, [late]) == [None]
    async with services.db.tenant(tenant) as conn:
        rows = await conn.fetch("SELECT narrative, said_at, created_at FROM observations")
    [row] = rows
    assert "Berlin" in row["narrative"] and row["said_at"] == datetime(2026, 5, 5, 8, tzinfo=UTC)
    assert row["created_at"] > row["said_at"]
    # a clock ahead of ours says nothing happened in the future: said when it arrived
    ahead = customer_event(tenant, "c-ahead", customer_id="3003", name="Zukunft AG")
    ahead["time"] = (datetime.now(UTC) + timedelta(days=30)).isoformat()
    assert await deliver(services, WORKER, [ahead]) == [None]
    async with services.db.tenant(tenant) as conn:
        said = await conn.fetchval("SELECT said_at FROM observations WHERE narrative LIKE '%Zukunft%'")
    assert said <= datetime.now(UTC)


async def test_an_event_whose_time_is_no_timestamp_is_dead_lettered_at_once(services: Any, tenant: str) -> None:
    for bad in ("yesterday", "2026-05-04T10:00:00", "2026-02-30T10:00:00Z"):
        event = customer_event(tenant, f"t-{bad}")
        event["time"] = bad
        [outcome] = await deliver(services, WORKER, [event])
        assert isinstance(outcome, InvalidEvent) and "time" in str(outcome) and bad in str(outcome)
    assert await count(services.db, tenant) == 0


async def test_unknown_types_are_acknowledged_and_counted(services: Any, workers: Any, tenant: str) -> None:
    await services.bus.publish(new_event("com.example.nothing.v1", {"x": 1}, tenant_id=tenant, source="/x"))
    await eventually(
        lambda: count(services.db, tenant, "SELECT count(*) FROM ai_events WHERE metadata->>'status' = 'skipped'")
    )
    assert await count(services.db, tenant) == 0


async def test_poison_domain_event_is_dead_lettered_and_counted(services: Any, workers: Any, tenant: str) -> None:
    before = workers["extract-observation"].stats.dead_lettered
    bad = customer_event(tenant, "bad-1", name=None)  # the rule needs data.name
    good = customer_event(tenant, "good-1", customer_id="2002", name="Schmidt AG")
    await services.bus.publish(bad)
    await services.bus.publish(good)
    await eventually(lambda: count(services.db, tenant))
    await eventually(lambda: workers["extract-observation"].stats.dead_lettered > before)
    async with services.db.tenant(tenant) as conn:
        failed = await conn.fetchval("SELECT metadata->>'error' FROM ai_events WHERE metadata->>'status' = 'failed'")
    assert "data.name" in failed


async def test_marked_statement_becomes_verified_user_observation(services: Any, workers: Any, tenant: str) -> None:
    chat = uuid.uuid4()
    event = new_event(
        OBSERVATION_MARKED,
        {
            "text": "Wir stellen ab Januar auf quartalsweise Abrechnung um.",
            "chat_id": str(chat),
            "type": "decision",
        },
        tenant_id=tenant,
        source="/test",
        user_id="alice",
        time="2026-05-04T10:00:00Z",  # when it was marked, however late the worker gets to it
    )
    await services.bus.publish(event)
    await eventually(lambda: count(services.db, tenant))
    async with services.db.tenant(tenant) as conn:
        row = await conn.fetchrow("SELECT * FROM observations")
    assert row["verified"] and row["source"] == "user" and row["trigger_source"] == "manual"
    assert row["user_id"] == "alice" and row["scope"] == "private" and row["type"] == "decision"
    assert row["confidence"] == 1.0 and row["said_at"] == datetime(2026, 5, 4, 10, tzinfo=UTC)


async def test_observation_created_events_are_published_for_indexing(services: Any, workers: Any, tenant: str) -> None:
    js = services.bus.js
    sub = await js.pull_subscribe("engram.observation.*.*.created", stream="ENGRAM")
    await services.bus.publish(customer_event(tenant, "idx-1"))
    await eventually(lambda: count(services.db, tenant))
    seen = []
    while True:
        msgs = await sub.fetch(100, timeout=5)
        seen.extend(m for m in msgs if m.headers.get("ce-tenantid") == tenant)
        for m in msgs:
            await m.ack()
        if seen:
            break
    await sub.unsubscribe()
    assert seen[0].headers["ce-type"] == "io.engram.observation.created.v1"
    assert await count(services.db, tenant, "SELECT count(*) FROM outbox") == 0


async def test_a_redelivered_event_announces_its_observation_again_under_the_same_event_id(
    services: Any, tenant: str
) -> None:
    """The replay of what an earlier attempt produced repeats its announcement (`created` for a row
    still as inserted), so JetStream drops it instead of delivering a second change event."""
    event = customer_event(tenant, "again-1")
    assert await deliver(services, WORKER, [event]) == [None]
    assert await deliver(services, WORKER, [event]) == [None]  # redelivered: its ack was lost
    async with services.db.tenant(tenant) as conn:
        obs_id = await conn.fetchval("SELECT id FROM observations")
    announced = [
        e for e in await published(services, "engram.observation.>") if e["subject"] == f"observation/{obs_id}"
    ]
    assert [e["type"] for e in announced] == [OBSERVATION_CREATED.type]
