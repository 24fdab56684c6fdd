"""Erasure that holds (R-16.5): erase a user while their events are queued and in flight, then
drain: nothing of that user is left in PostgreSQL, the index, the streams or the cache."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from cloudevents.http import CloudEvent

from engram.domain.events import CHAT_TURN_COMPLETED, FEEDBACK_RECORDED, OBSERVATION_MARKED, new_event
from engram.domain.subjects import dead_letter_user_filters, user_filters
from tests.conftest import eventually
from tests.integration.test_personal_data import rows_naming

USER, OTHER = "erin@example.com", "frank"
MARKS, TURNS = 40, 20


def marks(tenant: str, user: str, n: int, at: str) -> list[CloudEvent]:
    return [
        new_event(
            OBSERVATION_MARKED,
            {"text": f"{user} keeps note {i}: the Lehmann contract renews in March", "type": "note"},
            tenant_id=tenant,
            source="/engram/memory-api",
            user_id=user,
            time=at,
        )
        for i in range(n)
    ]


def turns(tenant: str, user: str, n: int, at: str) -> list[CloudEvent]:
    return [
        new_event(
            CHAT_TURN_COMPLETED,
            {
                "chat_id": str(uuid.uuid4()),
                "user_message": f"Merk dir: mein Lieblingskunde ist Lehmann KG (Nummer {i}).",
                "assistant_message": "Notiert.",
            },
            tenant_id=tenant,
            source="/engram/chat-turn",
            user_id=user,
            time=at,
        )
        for i in range(n)
    ]


async def drained(services: Any) -> bool:
    for durable in ("extract-observation", "embed-index", "record-feedback"):
        info = await services.bus.js.consumer_info("ENGRAM", durable)
        if info.num_pending or info.num_ack_pending:
            return False
    return True


async def stored_subjects(services: Any, tenant: str, user: str) -> dict[str, int]:
    """Messages still stored under the user's subjects, per stream."""
    found: dict[str, int] = {}
    for stream, filters in (
        ("ENGRAM", user_filters(tenant, user)),
        ("ENGRAM_DLQ", dead_letter_user_filters("dlq.engram", tenant, user)),
    ):
        for f in filters:
            info = await services.bus.js.stream_info(stream, subjects_filter=f)
            found[stream] = found.get(stream, 0) + sum((info.state.subjects or {}).values())
    return found


async def test_erasure_under_load_leaves_nothing_of_the_user(
    api: Any, auth: Any, services: Any, workers: Any, db: Any, tenant: str
) -> None:
    erin = auth(tenant, USER, permissions=["read:AiObservation", "create:AiObservation", "delete:AiObservation"])
    for i in range(5):
        r = await api.post("/api/ai/memory", headers=erin, json={"title": f"Erin's remembered fact {i}"})
        assert r.status_code == 201, r.text
    before = new_event("x.y.v1", {}, tenant_id=tenant, source="/t")["time"]  # everything below is given now
    queued = marks(tenant, USER, MARKS, before) + turns(tenant, USER, TURNS, before)
    late = marks(tenant, USER, 5, before)  # given before the erasure, published after it (a slow relay)
    control = marks(tenant, OTHER, 5, before)
    bus = services.bus
    await bus.publish_many(queued[: len(queued) // 2] + control)

    async def keep_publishing() -> None:
        for event in queued[len(queued) // 2 :]:
            await bus.publish(event)
            await asyncio.sleep(0.002)

    publisher = asyncio.create_task(keep_publishing())
    await asyncio.sleep(0.05)  # the workers are busy with the first half
    started = time.perf_counter()
    r = await api.delete(f"/api/ai/memory?user={USER}", headers=erin)
    erase_ms = (time.perf_counter() - started) * 1000
    assert r.status_code == 200, r.text
    answer = r.json()
    await publisher
    await bus.publish_many(late)
    obs = await api.get("/api/ai/memory", headers=erin)
    feedback = new_event(
        FEEDBACK_RECORDED,
        {"kind": "cited", "observation_id": str(uuid.uuid4())},
        tenant_id=tenant,
        source="/engram/memory-api",
        user_id=USER,
        time=before,
    )
    await bus.publish(feedback)
    await eventually(lambda: drained(services), timeout=60, interval=0.2)

    # PostgreSQL: no row names the user; no outbox row, no cached vector, no index entry of theirs
    assert set((await rows_naming(db, tenant, USER)).values()) == {0}, await rows_naming(db, tenant, USER)
    assert obs.json()["total"] == 0
    async with db.tenant(tenant) as conn:
        assert await conn.fetchval("SELECT count(*) FROM search_documents WHERE user_id = $1", USER) == 0
        assert await conn.fetchval("SELECT count(*) FROM outbox WHERE subject LIKE '%erin%'") == 0
        texts = await conn.fetchval("SELECT count(*) FROM embedding_cache")
        others = await conn.fetchval("SELECT count(*) FROM observations")
    assert texts == others  # only the other user's vectors are cached (the cache is per text)
    # the streams: nothing stored under the user's subjects, also no dead letter
    assert await stored_subjects(services, tenant, USER) == {"ENGRAM": 0, "ENGRAM_DLQ": 0}
    # the other user is untouched
    frank = auth(tenant, OTHER)
    assert (await api.get("/api/ai/memory", headers=frank)).json()["total"] == len(control)
    assert answer["observations"] >= 5 and answer["stream_messages"] >= 1
    print(f"erasure under load: {erase_ms:.0f} ms, answer {answer}")  # noqa: T201 - the closing note quotes it
