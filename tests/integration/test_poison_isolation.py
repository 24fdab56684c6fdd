"""A bad event fails alone, on the real PostgreSQL and JetStream (R-16.1, issue 16 "Done when"):
a NUL-bearing event between 20 good ones is dead-lettered at its first delivery with its reason
and counted in telemetry, and the 20 become observations within 5 s; a data error PostgreSQL
raises (text hygiene bypassed) is found by the runtime and fails alone too."""

from __future__ import annotations

import time
from typing import Any

from cloudevents.http import CloudEvent

from engram.domain.deliveries import Batch, Delivery
from engram.domain.errors import Poison
from engram.runtime.isolation import isolate
from engram.runtime.worker import meta_of
from engram.services.extraction import DomainEvent
from tests.conftest import eventually
from tests.integration.test_extraction import count, customer_event


async def dead_letter(services: Any, durable: str, event_id: str, timeout: float = 10.0) -> Any:
    """The dead letter of `event_id` on `dlq.engram.<durable>` (an ephemeral consumer of it)."""
    js = services.bus.js
    sub = await js.pull_subscribe(f"dlq.engram.{durable}.>", stream="ENGRAM_DLQ")
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                msgs = await sub.fetch(500, timeout=1)
            except Exception:
                continue
            for m in msgs:
                if m.headers.get("ce-id") == event_id:
                    return m
        raise AssertionError(f"no dead letter for {event_id}")
    finally:
        await sub.unsubscribe()


async def test_a_nul_event_between_twenty_good_ones(services: Any, workers: Any, tenant: str) -> None:
    good = [
        customer_event(tenant, f"{tenant}-good-{i}", customer_id=str(3000 + i), name=f"Kunde {i}") for i in range(20)
    ]
    bad = customer_event(tenant, f"{tenant}-bad-nul", customer_id="3999", name="Bad\u0000Name")
    started = time.monotonic()
    for e in [*good[:10], bad, *good[10:]]:
        await services.bus.publish(e)
    await eventually(lambda: _twenty(services, tenant), timeout=5.0)
    elapsed = time.monotonic() - started
    assert elapsed < 5.0, elapsed
    letter = await dead_letter(services, "extract-observation", f"{tenant}-bad-nul")
    assert letter.headers["Engram-Dlq-Deliveries"] == "1"  # at its first delivery
    assert "data.name" in letter.headers["Engram-Dlq-Reason"] and "U+0000" in letter.headers["Engram-Dlq-Reason"]
    assert letter.headers["ce-tenantid"] == tenant  # the original headers
    assert b"\\u0000" in letter.data  # the original payload, untouched

    async def counted() -> Any:
        async with services.db.tenant(tenant) as conn:
            return await conn.fetchrow(
                "SELECT metadata FROM ai_events WHERE event_name = 'event.dead_lettered' AND metadata->>'eventId' = $1",
                f"{tenant}-bad-nul",
            )

    row = await eventually(counted)
    assert row["metadata"]["consumer"] == "extract-observation" and row["metadata"]["poison"] is True


async def _twenty(services: Any, tenant: str) -> bool:
    return await count(services.db, tenant) == 20


def _delivery(tenant: str, event: CloudEvent) -> Delivery[Any]:
    return Delivery(tenant, DomainEvent(event.get_data()), meta_of(event))


async def test_a_data_error_raised_by_postgresql_fails_alone(services: Any, tenant: str) -> None:
    """Without the decoder's text check, PostgreSQL itself refuses the NUL: the runtime bisects
    the tenant's group and only that event is poison; its neighbours are applied at once."""
    events = [
        customer_event(tenant, f"{tenant}-n-{i}", customer_id=str(4000 + i), name=f"Firma {i}") for i in range(12)
    ]
    events.insert(7, customer_event(tenant, f"{tenant}-n-bad", customer_id="4999", name="Evil\u0000Corp"))
    batch = Batch([_delivery(tenant, e) for e in events])
    handler = services.extraction.handle
    await handler(batch)
    assert all(d.failed for d in batch)  # one transaction per tenant: all of them rolled back
    calls = await isolate(handler, batch.deliveries, "extract-observation")
    poisoned = [d.meta.id for d in batch if isinstance(d.outcome, Poison)]
    assert poisoned == [f"{tenant}-n-bad"]
    assert "data error" in str(batch.deliveries[7].outcome)
    assert [d.meta.id for d in batch if d.outcome is not None] == [f"{tenant}-n-bad"]
    assert await count(services.db, tenant) == 12
    assert calls <= 10
