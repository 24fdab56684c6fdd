"""Operations on a running deployment (R-3.4, R-4.6, R-6.3): dead letters, tenants, reindexing.

- `DeadLetterOps`: list, show, replay and purge dead letters, selected by consumer, event type,
  tenant and reason. A replay republishes the original message (its payload and original
  headers) on its original subject and then deletes the dead letter; it is applied once: the
  replay's message id (`replay:<consumer>:<dead letter seq>`) makes a second replay inside the
  duplicate window a no-op, and every consumer's inbox skips an event id it applied before. An
  event that fails again is dead-lettered again, as a new dead letter with its new reason.
- `TenantOps`: the tenants with their row counts, an all-tenant reindex, a tenant's export
  (JSON Lines of every row) and its deletion: index documents, rows, archive objects and the
  messages on its subjects in every stream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import IO

import structlog

from engram.domain.dead_letters import DeadLetter, DeadLetterFilter
from engram.ports import EventBus, SearchIndex
from engram.ports.operations import DeadLetterQueue, StreamPurge, TenantArchive, TenantData, TenantRows
from engram.services.indexing import Indexer

log = structlog.get_logger(__name__)

Progress = Callable[[int, int | None], None]  # (done, total if known)


@dataclass
class Replayed:
    replayed: list[DeadLetter] = field(default_factory=list)
    duplicates: int = 0  # JetStream had it already (replayed within the duplicate window)
    failed: dict[int, str] = field(default_factory=dict)  # dead letter seq -> why it was not republished


class DeadLetterOps:
    def __init__(self, queue: DeadLetterQueue, bus: EventBus) -> None:
        self.queue = queue
        self.bus = bus

    async def select(self, which: DeadLetterFilter, *, limit: int | None = None) -> AsyncIterator[DeadLetter]:
        found = 0
        async for letter in self.queue.scan(which.subject):
            if which.matches(letter):
                yield letter
                found += 1
                if limit is not None and found >= limit:
                    return

    async def show(self, seq: int) -> DeadLetter | None:
        return await self.queue.get(seq)

    async def replay(
        self, letters: list[DeadLetter], *, keep: bool = False, progress: Progress | None = None
    ) -> Replayed:
        """Republish each on its original subject with its original headers; the dead letter is
        deleted once JetStream stored the replay (kept with `keep`)."""
        report = Replayed()
        for done, letter in enumerate(letters, 1):
            try:
                published = await self.bus.publish_raw(
                    letter.original_subject, letter.replay_headers(), letter.body, event_id=letter.event_id
                )
            except Exception as exc:  # the dead letter stays; the operator sees why
                report.failed[letter.seq] = str(exc) or type(exc).__name__
                log.warning("dlq.replay_failed", seq=letter.seq, error=report.failed[letter.seq])
            else:
                report.replayed.append(letter)
                report.duplicates += int(published.duplicate)
                if not keep:
                    await self.queue.remove(letter.seq)
                log.info("dlq.replayed", seq=letter.seq, subject=letter.original_subject, event_id=letter.event_id)
            if progress:
                progress(done, len(letters))
        return report

    async def purge(self, letters: list[DeadLetter], *, progress: Progress | None = None) -> int:
        removed = 0
        for done, letter in enumerate(letters, 1):
            removed += int(await self.queue.remove(letter.seq))
            if progress:
                progress(done, len(letters))
        return removed


@dataclass
class TenantDeleted:
    tenant_id: str
    rows: dict[str, int]
    index_dropped: bool
    archives: int
    messages: dict[str, int]


class TenantOps:
    def __init__(
        self,
        data: TenantData,
        index: SearchIndex,
        indexing: Indexer,
        streams: StreamPurge,
        archive: TenantArchive | None = None,
    ) -> None:
        self.data = data
        self.index = index
        self.indexing = indexing
        self.streams = streams
        self.archive = archive

    async def tenants(self) -> list[TenantRows]:
        return await self.data.tenants()

    async def reindex_all(self, *, batch_size: int = 256, progress: Progress | None = None) -> dict[str, int]:
        """Rebuild every tenant's index that has observations; observations indexed per tenant."""
        tenants = [t.tenant_id for t in await self.data.tenants() if t.rows.get("observations")]
        done: dict[str, int] = {}
        for i, tenant in enumerate(tenants, 1):
            done[tenant] = await self.indexing.reindex(tenant, batch_size=batch_size)
            if progress:
                progress(i, len(tenants))
        return done

    async def export(self, tenant_id: str, out: IO[str], *, progress: Progress | None = None) -> dict[str, int]:
        """One JSON object a line: `{"table": ..., "row": {...}}` for every row of the tenant
        (streamed: memory stays flat however large the tenant; the rows are not counted first)."""
        written: dict[str, int] = {}
        async for table, row in self.data.export(tenant_id):
            out.write(f'{{"table":{json.dumps(table)},"row":{row}}}\n')
            written[table] = written.get(table, 0) + 1
            if progress:
                progress(sum(written.values()), None)
        return written

    async def delete(self, tenant_id: str) -> TenantDeleted:
        """Everything of the tenant, the index first (a search finds nothing the rows no longer
        back), then the rows, the archive objects, and the messages on its subjects."""
        await self.index.drop_tenant(tenant_id)
        rows = await self.data.delete(tenant_id)
        archives = await self.archive.delete_tenant(tenant_id) if self.archive is not None else 0
        messages = await self.streams.purge_tenant(tenant_id)
        log.info("tenant.deleted", tenant=tenant_id, rows=sum(rows.values()), archives=archives, messages=messages)
        return TenantDeleted(tenant_id, rows, True, archives, messages)
