"""embed-index (R-6.3): keep the search index in step with PostgreSQL.

Events only say *which* observation changed; the worker reads the row as it is now and
indexes that, or removes the entry when the row is gone (for good) or no longer current
(superseded or retired by consolidation: withdrawn at its revision, so unmerge brings it back). Redelivery,
reordering and concurrent workers therefore converge on PostgreSQL's state (an older
revision never overwrites a newer one). A batch makes one embedding call for every text
not yet in the embedding cache (keyed by the hash of the embedded text and the model).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

import numpy as np
import structlog
from cloudevents.http import CloudEvent

from engram.domain.deliveries import Batch, Delivery
from engram.domain.errors import EmbeddingRejected, InvalidEvent
from engram.domain.events import (
    OBSERVATION_CREATED,
    OBSERVATION_DELETED,
    OBSERVATION_UPDATED,
    ObservationChanged,
    parse_data,
)
from engram.domain.observation import Observation
from engram.domain.plan_topics import PLAN_FLAG, flags_plan
from engram.domain.search import Vector, index_document, passage_text, text_hash
from engram.instrumentation import tracing
from engram.ports import Embedder, SearchIndex, UnitOfWork

log = structlog.get_logger(__name__)

CONSUMER = "embed-index"
HANDLED = frozenset({OBSERVATION_CREATED.type, OBSERVATION_UPDATED.type, OBSERVATION_DELETED.type})

Progress = Callable[[int, int], None]


@dataclass
class _TenantWork:
    events: list[tuple[Delivery[ObservationChanged] | None, str]] = field(default_factory=list)  # (event, id)
    live: dict[str, Observation] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)  # deleted rows
    withdrawn: dict[str, datetime] = field(default_factory=dict)  # rows no longer current, at their revision
    vectors: dict[str, Vector] = field(default_factory=dict)  # text hash -> vector
    failed: dict[str, str] = field(default_factory=dict)  # observation id -> reason


class Indexer:
    def __init__(self, uow: UnitOfWork, index: SearchIndex, embedder: Embedder) -> None:
        self.uow = uow
        self.index = index
        self.embedder = embedder

    # ---- event path -------------------------------------------------------------------------

    async def handle(self, batch: Batch[ObservationChanged]) -> None:
        work: dict[str, _TenantWork] = defaultdict(_TenantWork)
        for delivery in batch:
            work[delivery.tenant].events.append((delivery, str(delivery.data.observation_id)))
        if not work:
            return
        try:
            await self._load(work)
            await self._embed(work)
        except Exception as exc:  # the whole batch shares a transient failure (database, embedder)
            log.warning("indexing.batch_failed", error=str(exc))
            for delivery in batch:
                delivery.retry(exc)
            return
        for tenant, w in work.items():
            try:
                await self._apply(tenant, w)
            except Exception as exc:
                log.warning("indexing.tenant_failed", tenant=tenant, error=str(exc))
                for d, _ in w.events:
                    if d is not None:
                        d.retry(exc)
                continue
            for d, obs_id in w.events:
                if d is not None and obs_id in w.failed:
                    d.poison(f"observation {obs_id} cannot be embedded: {w.failed[obs_id]}")

    async def _load(self, work: dict[str, _TenantWork]) -> None:
        for tenant, w in work.items():
            ids = list(dict.fromkeys(obs_id for _, obs_id in w.events))
            async with self.uow.tenant(tenant) as tx:
                rows = await tx.observations.get_many([uuid.UUID(i) for i in ids])
            w.live = {str(o.id): o for o in rows if o.is_current}
            w.withdrawn = {str(o.id): o.updated_at for o in rows if not o.is_current}
            w.gone = set(ids) - set(w.live) - set(w.withdrawn)

    async def _embed(self, work: dict[str, _TenantWork]) -> None:
        """Cached vectors per tenant, then one embedding call for everything missing."""
        model = self.embedder.model
        missing: list[tuple[str, str, str]] = []  # (tenant, hash, text)
        for tenant, w in work.items():
            texts = {text_hash(model, passage_text(o)): passage_text(o) for o in w.live.values()}
            if not texts:
                continue
            async with self.uow.tenant(tenant) as tx:
                w.vectors = await tx.embeddings.cached(model, list(texts))
            missing.extend((tenant, h, t) for h, t in texts.items() if h not in w.vectors)
        if not missing:
            return
        unique = list(dict.fromkeys(t for _, _, t in missing))

        def fail(text: str, reason: str) -> None:
            for tenant, h, t in missing:
                if t == text:
                    for obs_id, obs in work[tenant].live.items():
                        if text_hash(model, passage_text(obs)) == h:
                            work[tenant].failed[obs_id] = reason

        try:
            vectors = await self.embedder.embed_passages(unique)
            by_text = dict(zip(unique, vectors, strict=True))
        except EmbeddingRejected:
            by_text = {}
            for text in unique:  # isolate what the service refuses; embed the rest
                try:
                    by_text[text] = (await self.embedder.embed_passages([text]))[0]
                except EmbeddingRejected as exc:
                    fail(text, str(exc))
        for text, vector in list(by_text.items()):
            if not np.all(np.isfinite(vector)):  # no index can store it: dead-lettered, not retried
                del by_text[text]
                fail(text, f"the embedder ({model}) returned a vector with a component that is not a finite number")
        fresh: dict[str, dict[str, Vector]] = defaultdict(dict)
        for tenant, h, t in missing:
            if t in by_text:
                work[tenant].vectors[h] = by_text[t]
                fresh[tenant][h] = by_text[t]
        for tenant, entries in fresh.items():
            await self._store(tenant, work[tenant], entries)

    async def _store(self, tenant: str, w: _TenantWork, entries: dict[str, Vector]) -> None:
        """Cache the fresh vectors of texts whose observation still exists, under the owners'
        erasure locks: a user erased while their text was being embedded leaves no cache row."""
        model = self.embedder.model
        async with self.uow.tenant(tenant) as tx:
            await tx.erasures.hold(sorted({o.user_id for o in w.live.values() if o.user_id}))
            alive = await tx.observations.get_many([o.id for o in w.live.values()])
            keep = {text_hash(model, passage_text(o)) for o in alive}
            await tx.embeddings.store(model, {h: v for h, v in entries.items() if h in keep})

    async def _apply(self, tenant: str, w: _TenantWork) -> None:
        model = self.embedder.model
        docs = []
        for obs_id, obs in w.live.items():
            if obs_id in w.failed:
                continue
            docs.append(index_document(obs, w.vectors[text_hash(model, passage_text(obs))]))
        with tracing.span("index.apply", engram__index__upserts=len(docs), engram__index__deletes=len(w.gone)):
            await self.index.upsert(tenant, docs)
            await self.index.delete(tenant, sorted(w.gone))
            await self.index.withdraw(tenant, w.withdrawn)

    # ---- rebuild ----------------------------------------------------------------------------

    async def reindex(self, tenant_id: str, *, batch_size: int = 256, progress: Progress | None = None) -> int:
        """Rebuild a tenant's index from PostgreSQL; entries of vanished observations are removed."""
        async with self.uow.tenant(tenant_id) as tx:
            ids = await tx.observations.live_ids()
        stale = await self.index.indexed_ids(tenant_id) - set(ids)
        await self.index.delete(tenant_id, sorted(stale))
        total = len(ids)
        if progress:
            progress(0, total)
        for start in range(0, total, batch_size):
            w = _TenantWork(events=[(None, i) for i in ids[start : start + batch_size]])
            work = {tenant_id: w}
            await self._load(work)
            await _flag_plans_of(self.uow, tenant_id, w)
            await self._embed(work)
            await self._apply(tenant_id, w)
            if progress:
                progress(min(total, start + batch_size), total)
        return total


async def _flag_plans_of(uow: UnitOfWork, tenant_id: str, w: _TenantWork) -> None:
    """Rows written before plans were flagged (migration 0019) get the flag a write gives them now,
    so the stable block reads them (`ObservationRepository.plans`)."""
    ids = [o.id for o in w.live.values() if flags_plan(o.user_id, o.type, o.title, o.narrative, o.tags)]
    if ids:
        async with uow.tenant(tenant_id) as tx:
            flagged = await tx.observations.flag(ids, PLAN_FLAG)
        log.info("reindex.plans_flagged", tenant=tenant_id, flagged=flagged)


def decode_change(event: CloudEvent) -> ObservationChanged:
    etype = event["type"]
    if etype not in HANDLED:
        raise InvalidEvent(f"embed-index does not handle {etype}")
    return cast(ObservationChanged, parse_data(etype, event.get_data()))
