"""Every worker counts its dead letters in telemetry and in the metrics (R-3.4, R-17.1).

Each worker's declaration runs on a durable of its own (its consumer's settings, filtered to this
test's tenant) so the session's workers consuming the real durables do not take the messages.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

import pytest
from prometheus_client import REGISTRY

from engram.adapters.nats_binding import to_nats_binary
from engram.adapters.nats_bus import _consumer_config
from engram.domain.events import new_event
from engram.domain.subjects import subject_of
from engram.domain.topology import consumer
from engram.runtime.jetstream import PullRunner
from functions.consolidate_memory.main import WORKER as CONSOLIDATE_MEMORY
from functions.embed_index.main import WORKER as EMBED_INDEX
from functions.extract_observation.main import WORKER as EXTRACT_OBSERVATION
from functions.record_feedback.main import WORKER as RECORD_FEEDBACK
from tests.conftest import eventually

# an event type each worker consumes, and the subject family it arrives on
WORKERS = [
    (EXTRACT_OBSERVATION, "io.engram.chat.turn.completed.v1", "chat"),
    (EMBED_INDEX, "io.engram.observation.updated.v1", "observation"),
    (RECORD_FEEDBACK, "io.engram.feedback.recorded.v1", "feedback"),
    (CONSOLIDATE_MEMORY, "io.engram.observation.created.v1", "observation"),
]


async def dead_letter_rows(services: Any, tenant: str, durable: str) -> int:
    async with services.db.tenant(tenant) as conn:
        found = await conn.fetchval(
            "SELECT count(*) FROM ai_events WHERE event_name = 'event.dead_lettered' AND metadata->>'consumer' = $1",
            durable,
        )
    return int(found)


@pytest.mark.parametrize(("worker", "event_type", "family"), WORKERS, ids=[w.durable for w, _, _ in WORKERS])
async def test_a_poison_event_is_counted_in_telemetry_and_metrics(
    services: Any, tenant: str, worker: Any, event_type: str, family: str
) -> None:
    js = services.nats.js
    spec = dataclasses.replace(
        consumer(worker.durable),
        durable=f"{worker.durable}-{uuid.uuid4().hex[:8]}",
        filter_subjects=(f"engram.{family}.{tenant}.>",),
    )
    await js.add_consumer(spec.stream, _consumer_config(spec))
    # a subject attribute like the real events' (other tests read every observation event's)
    event = new_event(
        event_type,
        {"not": "its data"},
        tenant_id=tenant,
        source="/tests",
        user_id="alice",
        subject=f"observation/{uuid.uuid4()}",
    )
    headers, body = to_nats_binary(event)
    await js.publish(subject_of(event_type, tenant, "alice", event.get_data()), body, headers=headers)

    runner = PullRunner(
        js,
        spec,
        worker.batch_handler(services._current()),
        fetch_timeout=0.2,
        on_dead_letter=worker.dead_letter_hook(services._current()),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    try:
        await eventually(lambda: runner.stats.dead_lettered == 1, timeout=20)
    finally:
        stop.set()
        await task
        await js.delete_consumer(spec.stream, spec.durable)
    assert runner.stats.acked == 0
    labels = {"consumer": spec.durable, "poison": "true", "tenant": ""}  # no tenant label by default
    assert REGISTRY.get_sample_value("engram_worker_dead_lettered_total", labels) == 1.0
    assert REGISTRY.get_sample_value("engram_worker_fetched_total", {"consumer": spec.durable}) == 1.0
    # the telemetry row names the worker (the session's own durable may have counted one too)
    assert await eventually(lambda: dead_letter_rows(services, tenant, worker.durable)) >= 1
