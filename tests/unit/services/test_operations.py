"""The operations use cases on fakes (engram.services.operations): replay, purge, tenants."""

from __future__ import annotations

import io
import json
from typing import Any

from engram.domain.dead_letters import DeadLetterFilter
from engram.services.indexing import Indexer
from engram.services.operations import DeadLetterOps, TenantOps
from tests.fakes import FakeBus, FakeEmbedder, FakeSearchIndex, InMemoryUnitOfWork
from tests.fakes.operations import FakeArchive, FakeDeadLetters, FakeStreams, FakeTenantData
from tests.unit.test_dead_letters import letter


async def test_replay_republishes_the_original_and_deletes_the_dead_letter() -> None:
    queue = FakeDeadLetters([letter(1), letter(2, tenant="other", **{"ce-id": "evt-2"})])
    bus = FakeBus()
    ops = DeadLetterOps(queue, bus)
    selected = [d async for d in ops.select(DeadLetterFilter(tenant="acme"))]
    assert [d.seq for d in selected] == [1]
    report = await ops.replay(selected)
    assert [d.seq for d in report.replayed] == [1] and not report.failed
    [sent] = bus.stored
    assert sent.subject == selected[0].original_subject and sent.body == b"{}"
    assert sent.headers["ce-id"] == "evt-1" and "Engram-Dlq-Reason" not in sent.headers
    assert set(queue.letters) == {2}  # the replayed one is gone, the other stays


async def test_a_replay_that_fails_keeps_the_dead_letter() -> None:
    queue = FakeDeadLetters([letter(1)])
    bus = FakeBus()
    bus.fail()
    done: list[tuple[int, int | None]] = []
    report = await DeadLetterOps(queue, bus).replay([letter(1)], progress=lambda n, t: done.append((n, t)))
    assert list(report.failed) == [1] and not report.replayed
    assert set(queue.letters) == {1} and done == [(1, 1)]


async def test_replayed_twice_it_is_stored_once() -> None:
    queue = FakeDeadLetters([letter(1)])
    bus = FakeBus()
    ops = DeadLetterOps(queue, bus)
    first = await ops.replay([letter(1)], keep=True)
    second = await ops.replay([letter(1)], keep=True)
    assert (first.duplicates, second.duplicates) == (0, 1) and len(bus.stored) == 1
    assert set(queue.letters) == {1}  # kept


async def test_select_stops_at_the_limit_and_purge_deletes() -> None:
    queue = FakeDeadLetters([letter(i, **{"ce-id": f"e{i}"}) for i in range(1, 6)])
    ops = DeadLetterOps(queue, FakeBus())
    few = [d async for d in ops.select(DeadLetterFilter(consumer="extract-observation"), limit=2)]
    assert [d.seq for d in few] == [1, 2]
    assert queue.scanned == ["dlq.engram.extract-observation.>"]
    assert await ops.purge(few) == 2 and set(queue.letters) == {3, 4, 5}
    assert await ops.purge(few) == 0  # gone already


def _tenant_ops(data: FakeTenantData, index: Any = None, archive: bool = True) -> TenantOps:
    uow = InMemoryUnitOfWork()
    index = index or FakeSearchIndex()
    indexer = Indexer(uow, index, FakeEmbedder())
    return TenantOps(data, index, indexer, FakeStreams(data.calls), FakeArchive(data.calls) if archive else None)


async def test_export_writes_one_json_object_a_row() -> None:
    data = FakeTenantData(
        {"acme": {"observations": [{"tenant_id": "acme", "id": 1}], "chats": [{"tenant_id": "acme"}]}}
    )
    out = io.StringIO()
    done: list[int] = []
    written = await _tenant_ops(data).export("acme", out, progress=lambda n, t: done.append(n))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert written == {"chats": 1, "observations": 1} and done == [1, 2]
    assert lines[1] == {"table": "observations", "row": {"tenant_id": "acme", "id": 1}}


async def test_delete_removes_the_index_rows_archives_and_messages_in_that_order() -> None:
    data = FakeTenantData({"acme": {"observations": [{}, {}]}, "beta": {"observations": [{}]}})

    class RecordingIndex(FakeSearchIndex):
        async def drop_tenant(self, tenant_id: str) -> None:
            data.calls.append("index")
            await super().drop_tenant(tenant_id)

    deleted = await _tenant_ops(data, RecordingIndex()).delete("acme")
    assert data.calls == ["index", "rows", "archive", "streams"]
    assert deleted.rows == {"observations": 2} and deleted.archives == 3
    assert deleted.messages == {"ENGRAM": 2, "ENGRAM_DLQ": 1}
    assert [t.tenant_id for t in await data.tenants()] == ["beta"]
    without_archive = await _tenant_ops(FakeTenantData({"x": {}}), archive=False).delete("x")
    assert without_archive.archives == 0


async def test_reindex_all_takes_only_tenants_with_observations() -> None:
    data = FakeTenantData({"acme": {"observations": [{}]}, "beta": {"chats": [{}]}, "gamma": {"observations": []}})
    done: list[tuple[int, int | None]] = []
    assert await _tenant_ops(data).reindex_all(progress=lambda n, t: done.append((n, t))) == {"acme": 0}
    assert done == [(1, 1)]
