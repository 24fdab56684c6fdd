"""Bounded growth (R-16.2): the inbox is pruned by age per consumer, the embedding cache by last
use; an entry a batch still finds is marked used and stays."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from engram.adapters.maintenance import PgMaintenance
from engram.adapters.tenant_stores import PgEmbeddingCache
from engram.domain.topology import redelivery_horizon_seconds
from engram.services.pruning import Pruning


async def test_the_inbox_and_the_cache_are_pruned(db: Any, tenant: str) -> None:
    now = datetime.now(UTC)
    async with db.system() as conn:
        await conn.execute(
            "INSERT INTO processed_events (tenant_id, consumer, event_key, processed_at)"
            " SELECT $1, c, k, $2 FROM unnest($3::text[], $4::text[]) AS x(c, k)",
            tenant,
            now - timedelta(hours=30),
            ["record-feedback", "record-feedback", "extract-observation"],
            ["old-1", "old-2", "old-other-consumer"],
        )
        await conn.execute(
            "INSERT INTO processed_events (tenant_id, consumer, event_key) VALUES ($1, 'record-feedback', 'new')",
            tenant,
        )
        await conn.execute(
            "INSERT INTO embedding_cache (tenant_id, model, text_hash, embedding, used_at) VALUES"
            " ($1, 'm', 'stale', '[1,0]', $2), ($1, 'm', 'hit', '[0,1]', $2), ($1, 'm', 'fresh', '[1,1]', now())",
            tenant,
            now - timedelta(days=40),
        )
    async with db.tenant(tenant) as conn:  # a batch finds 'hit': it is marked used now
        found = await PgEmbeddingCache(conn, tenant).cached("m", ["hit"])
    assert np.allclose(found["hit"], [0, 1])
    pruning = Pruning(
        PgMaintenance(db), inbox_retention=timedelta(hours=24), cache_retention=timedelta(days=30), batch=1
    )
    feedback = await pruning.run_once("record-feedback")
    index = await pruning.run_once("embed-index")
    assert feedback.inbox >= 2 and feedback.embedding_cache == 0
    assert index.embedding_cache >= 1
    async with db.system() as conn:
        keys = {
            r["event_key"]
            for r in await conn.fetch("SELECT event_key FROM processed_events WHERE tenant_id = $1", tenant)
        }
        cached = {
            r["text_hash"]
            for r in await conn.fetch("SELECT text_hash FROM embedding_cache WHERE tenant_id = $1", tenant)
        }
    assert keys == {"new", "old-other-consumer"}  # another consumer prunes its own
    assert cached == {"hit", "fresh"}


def test_the_default_retention_outlives_the_redelivery_horizon() -> None:
    from engram.settings import Settings

    horizon = max(redelivery_horizon_seconds(d) for d in ("extract-observation", "embed-index", "record-feedback"))
    assert 20 * 60 < horizon < 30 * 60  # duplicate window + 8 x (ack wait + longest backoff)
    assert Settings().engram_inbox_retention_hours * 3600 > horizon
