"""A bad event fails alone (R-16.1): the worker runtime finds the event at fault in a tenant
group, applies its neighbours in the same delivery, and dead-letters it at once when its data
is at fault. Classification of failures: data, outage, unknown."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import pytest
from cloudevents.http import CloudEvent

from engram.adapters.failures import failure_kind
from engram.domain.deliveries import Batch, classify, occurrence_time
from engram.domain.errors import InvalidEvent, Poison, Transient
from engram.runtime.worker import Worker


class FakeDataError(Exception):
    """What asyncpg raises for `\\u0000 cannot be converted to text` (SQLSTATE 22P05)."""

    sqlstate = "22P05"


class FakeTooManyConnections(Exception):
    sqlstate = "53300"


class TenantDatabase:
    """A handler that applies each tenant's group in one 'transaction': a group holding an
    event PostgreSQL would refuse fails as a whole, like the real services do."""

    def __init__(self, *, outage: bool = False, refuse: str = "bad", unknown: str = "weird") -> None:
        self.applied: dict[str, list[str]] = defaultdict(list)
        self.calls = 0
        self.outage = outage
        self.refuse = refuse
        self.unknown = unknown

    async def handle(self, batch: Batch[str]) -> None:
        self.calls += 1
        for tenant, deliveries in batch.by_tenant().items():
            try:
                if self.outage:
                    raise ConnectionRefusedError("connection refused")
                if any(self.refuse in d.data for d in deliveries):
                    raise FakeDataError("invalid byte sequence for encoding UTF8: 0x00")
                if any(self.unknown in d.data for d in deliveries):
                    raise KeyError("something odd")
            except Exception as exc:
                for d in deliveries:
                    d.retry(exc)
                continue
            self.applied[tenant].extend(d.data for d in deliveries)


def event(tenant: str, text: str, i: int) -> CloudEvent:
    return CloudEvent(
        {"id": f"e-{tenant}-{i}", "source": "/crm", "type": "com.example.thing.v1", "tenantid": tenant}, {"t": text}
    )


WORKER: Worker[str] = Worker(durable="test", decode=lambda e: str(e.get_data()["t"]), handler=lambda s: s)


async def test_one_bad_event_among_twenty_fails_alone_and_its_neighbours_are_applied() -> None:
    db = TenantDatabase()
    events = [event("t1", f"good {i}", i) for i in range(10)]
    events.append(event("t1", "bad", 10))
    events += [event("t1", f"good {i}", i) for i in range(11, 21)]
    events += [event("t2", "other tenant", 0)]
    outcomes = await WORKER.run(db.handle, events)
    assert [type(o) for i, o in enumerate(outcomes) if i != 10] == [type(None)] * 21
    assert isinstance(outcomes[10], Poison) and "data error" in str(outcomes[10])
    assert sorted(db.applied["t1"]) == sorted(f"good {i}" for i in range(21) if i != 10)
    assert db.applied["t2"] == ["other tenant"]
    assert db.calls <= 1 + 2 * 5 + 2  # bisection: about 2 log2(n) extra calls


async def test_two_bad_events_are_both_found() -> None:
    db = TenantDatabase()
    events = [event("t1", "bad" if i in (3, 17) else f"good {i}", i) for i in range(40)]
    outcomes = await WORKER.run(db.handle, events)
    assert [i for i, o in enumerate(outcomes) if isinstance(o, Poison)] == [3, 17]
    assert len(db.applied["t1"]) == 38


async def test_a_lone_data_error_is_poison_at_the_first_delivery() -> None:
    db = TenantDatabase()
    outcomes = await WORKER.run(db.handle, [event("t1", "bad", 0)])
    assert isinstance(outcomes[0], Poison)
    assert db.calls == 1


async def test_an_outage_is_retried_without_searching() -> None:
    db = TenantDatabase(outage=True)
    outcomes = await WORKER.run(db.handle, [event("t1", f"good {i}", i) for i in range(16)])
    assert all(isinstance(o, Transient) for o in outcomes)
    assert db.calls == 1  # the dependency is not hammered


async def test_an_unknown_error_is_isolated_and_retried_alone() -> None:
    db = TenantDatabase()
    events = [event("t1", "weird" if i == 5 else f"good {i}", i) for i in range(12)]
    outcomes = await WORKER.run(db.handle, events)
    assert isinstance(outcomes[5], Transient) and not isinstance(outcomes[5], Poison)
    assert sum(o is None for o in outcomes) == 11  # its neighbours are applied now


async def test_a_handler_that_raises_for_the_whole_batch_is_searched_too() -> None:
    async def whole(batch: Batch[str]) -> None:
        if any("bad" in d.data for d in batch):
            raise FakeDataError("value out of range")

    outcomes = await WORKER.run(whole, [event("t1", "bad" if i == 2 else "ok", i) for i in range(8)])
    assert [i for i, o in enumerate(outcomes) if o is not None] == [2]
    assert isinstance(outcomes[2], Poison)


async def test_a_neighbour_of_another_tenant_is_not_blamed() -> None:
    """A failure that spans tenants (one handler step for the whole batch) does not make the
    single event of another tenant poison: it is tried alone first."""

    async def whole(batch: Batch[str]) -> None:
        if any("bad" in d.data for d in batch):
            raise FakeDataError("value out of range")

    events = [event("t1", "bad", 0), event("t2", "fine", 1)]
    outcomes = await WORKER.run(whole, events)
    assert isinstance(outcomes[0], Poison)
    assert outcomes[1] is None


async def test_unstorable_text_in_an_event_is_refused_before_the_handler() -> None:
    db = TenantDatabase()
    bad = CloudEvent(
        {"id": "nul", "source": "/crm", "type": "com.example.thing.v1", "tenantid": "t1"},
        {"t": "x", "name": "Bad\u0000Name"},
    )
    surrogate = CloudEvent(
        {"id": "sur", "source": "/crm", "type": "com.example.thing.v1", "tenantid": "t1", "subject": "a\ud83d"},
        {"t": "y"},
    )
    outcomes = await WORKER.run(db.handle, [bad, surrogate, event("t1", "good", 0)])
    assert isinstance(outcomes[0], InvalidEvent) and "data.name" in str(outcomes[0]) and "U+0000" in str(outcomes[0])
    assert isinstance(outcomes[1], InvalidEvent) and "subject" in str(outcomes[1])
    assert outcomes[2] is None and db.applied["t1"] == ["good"]


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (FakeDataError("x"), "data"),
        (type("E", (Exception,), {"sqlstate": "23502"})("not null"), "data"),
        (type("E", (Exception,), {"sqlstate": "23505"})("unique"), "unknown"),
        (FakeTooManyConnections("too many"), "outage"),
        (type("E", (Exception,), {"sqlstate": "57P01"})("admin shutdown"), "outage"),
        (type("E", (Exception,), {"sqlstate": "40001"})("serialization"), "outage"),
        (ConnectionRefusedError(), "outage"),
        (TimeoutError(), "outage"),
        (UnicodeEncodeError("utf-8", "\ud83d", 0, 1, "surrogates not allowed"), "data"),
        (OverflowError("int too big"), "data"),
        (KeyError("x"), "unknown"),
        (Transient("the bus is down"), "outage"),
    ],
)
def test_failure_kinds(error: Exception, kind: str) -> None:
    assert failure_kind(error) == kind
    wrapped = classify(error)  # what a service's `delivery.retry(exc)` keeps: the cause decides
    assert failure_kind(wrapped) == kind


def test_real_driver_errors_are_classified() -> None:
    import asyncpg
    import nats.errors

    assert failure_kind(asyncpg.exceptions.CharacterNotInRepertoireError("x")) == "data"
    assert failure_kind(asyncpg.exceptions.UntranslatableCharacterError("x")) == "data"
    assert failure_kind(asyncpg.exceptions.NumericValueOutOfRangeError("x")) == "data"
    assert failure_kind(asyncpg.exceptions.CheckViolationError("x")) == "data"
    assert failure_kind(asyncpg.exceptions.TooManyConnectionsError("x")) == "outage"
    assert failure_kind(asyncpg.exceptions.ConnectionDoesNotExistError("x")) == "outage"
    assert failure_kind(asyncpg.exceptions.InterfaceError("connection is closed")) == "outage"
    assert failure_kind(nats.errors.NoRespondersError()) == "outage"
    assert failure_kind(nats.errors.ConnectionClosedError()) == "outage"


@pytest.mark.parametrize(
    ("time", "expected"),
    [
        ("2018-04-05T17:31:00Z", datetime(2018, 4, 5, 17, 31, tzinfo=UTC)),
        ("2018-04-05t17:31:00.123456789+02:00", datetime(2018, 4, 5, 15, 31, 0, 123456, tzinfo=UTC)),
        ("2018-04-05 17:31:00-00:30", datetime(2018, 4, 5, 18, 1, tzinfo=UTC)),
        (None, None),
    ],
)
def test_an_events_time_is_when_the_occurrence_happened(time: str | None, expected: datetime | None) -> None:
    assert occurrence_time(time) == expected


async def test_an_event_whose_time_is_no_rfc3339_timestamp_is_refused_alone() -> None:
    db = TenantDatabase()
    events = [event("t1", "good 0", 0), event("t1", "good 1", 1)]
    events[1]["time"] = "2018-04-05T17:31:00"  # no offset: a local time of an unknown place
    outcomes = await WORKER.run(db.handle, events)
    assert outcomes[0] is None and isinstance(outcomes[1], InvalidEvent)
    assert "time" in str(outcomes[1]) and "RFC 3339" in str(outcomes[1])
    assert db.applied["t1"] == ["good 0"]
    for bad in ("2018-04-31T17:31:00Z", "tomorrow", "2018-04-05T25:00:00Z"):
        with pytest.raises(InvalidEvent, match="time"):
            occurrence_time(bad)
