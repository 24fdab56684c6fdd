"""Bulk loading of `bench.recall_latency`'s corpora with COPY (1k to 1M observations per tenant).

The observations are the bench's generated German/English notes (`bench.recall_latency.drafts`);
they are written with `COPY` into `observations`, and the index side is built by the same SQL
the pgvector adapter uses for one batch: documents with their BM25 length from PostgreSQL's
stemmers, postings with their precomputed impact (`pgvector_writes.INSERT_POSTINGS`), per-tenant statistics
and document frequencies by the tables' own triggers. Vectors come from the static model
lifted to 384 dims (`ProjectedStatic`), as before.

Writing through the observation store and `Indexer` costs ~7 ms per observation on this
machine (100k in 727 s), mostly inserting one vector at a time into the HNSW graph; a million
would take two hours. Here a tenant of 50k or more gets its HNSW graph after its load (one
index build, the way a restore or a first bulk import would), a smaller one before (its
vectors go into its graph one by one, as embed-index does).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from engram.adapters.pgvector_writes import BODY_WEIGHT, INSERT_POSTINGS
from engram.adapters.postgres import Database
from engram.domain.language import detect_language, search_config
from engram.domain.observation import ObservationDraft

CHUNK = 20_000
LONG = 24 * 3600.0  # seconds a statement may take (asyncpg's timeout=None means the pool's 60 s)

_OBS_COLUMNS = (
    "id",
    "tenant_id",
    "user_id",
    "team_ids",
    "type",
    "title",
    "narrative",
    "tags",
    "content_hash",
    "priority",
    "source",
    "verified",
    "scope",
    "trigger_source",
    "created_at",
    "updated_at",
)

_STAGE = """
CREATE UNLOGGED TABLE IF NOT EXISTS bench_stage (
  id uuid PRIMARY KEY, title text NOT NULL, body text NOT NULL, language text NOT NULL, embedding real[] NOT NULL
) WITH (autovacuum_enabled = false)
"""

_DOCUMENTS_FROM_STAGE = f"""
INSERT INTO search_documents (observation_id, tenant_id, user_id, team_ids, scope, type, valid_from, expires_at,
                              revision, doc_length, language, dims, embedding)
SELECT o.id, o.tenant_id, o.user_id, o.team_ids, o.scope, o.type, o.valid_from, o.expires_at, o.updated_at,
       round(coalesce((SELECT sum(cardinality(t.positions))
                       FROM unnest(to_tsvector(b.language::regconfig, b.title)) t), 0)
           + {BODY_WEIGHT} * coalesce((SELECT sum(cardinality(t.positions))
                                       FROM unnest(to_tsvector(b.language::regconfig, b.body)) t), 0))::integer,
       b.language, $1::integer, b.embedding::halfvec
FROM bench_stage b JOIN observations o ON o.id = b.id
"""

Embed = Callable[[Sequence[str]], Any]
MakeDrafts = Callable[[str, int, random.Random, int], list[ObservationDraft]]  # tenant, count, rng, first number


def _row(draft: ObservationDraft, rng: random.Random, at: datetime) -> tuple[Any, ...]:
    return (
        uuid.UUID(int=rng.getrandbits(128), version=4),
        draft.tenant_id,
        draft.user_id,
        list(draft.team_ids),
        draft.type,
        draft.title,
        draft.narrative,
        list(draft.tags),
        draft.content_hash,
        draft.priority.value,
        draft.source.value,
        draft.verified,
        draft.scope.value,
        draft.trigger_source.value,
        at,
        at,
    )


def single(tenant: str, size: int, seed: int, make: MakeDrafts) -> Iterator[list[ObservationDraft]]:
    """One tenant's corpus in chunks (a million drafts at once would not fit in memory)."""
    rng = random.Random(seed + size)
    for start in range(0, size, CHUNK):
        yield make(tenant, min(CHUNK, size - start), rng, start)


def interleaved(
    sizes: dict[str, int], seed: int, make: MakeDrafts, block: int = 100
) -> Iterator[list[ObservationDraft]]:
    """Many tenants' corpora, `block` observations of each in turn: their rows spread over the
    whole table the way a shared database fills up, not one tenant after the other."""
    rngs = {t: random.Random(seed + i) for i, t in enumerate(sizes)}
    left = dict(sizes)
    chunk: list[ObservationDraft] = []
    while left:
        for tenant in list(left):
            n = min(block, left[tenant])
            chunk.extend(make(tenant, n, rngs[tenant], sizes[tenant] - left[tenant]))
            left[tenant] -= n
            if not left[tenant]:
                del left[tenant]
            if len(chunk) >= CHUNK:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


async def bulk_load(
    db: Database,
    chunks: Iterable[list[ObservationDraft]],
    total: int,
    embed: Embed,
    dims: int,
    *,
    log: Callable[[str], None],
) -> float:
    """COPY the drafts and index them (documents, postings, statistics); seconds taken."""
    rng = random.Random(total)
    at = datetime(2026, 11, 1, tzinfo=UTC)
    started = time.perf_counter()
    async with db.system() as conn:
        await conn.execute(_STAGE)
    done = 0
    for chunk in chunks:
        rows = [_row(d, rng, at) for d in chunk]
        headlines = ["\n".join(p for p in [d.title, *d.tags] if p) for d in chunk]
        bodies = [d.narrative for d in chunk]
        passages = ["\n".join(p for p in [d.title, d.narrative, *d.tags] if p) for d in chunk]
        vectors = await embed(passages)
        languages = [search_config(detect_language(f"{h}\n{b}")) for h, b in zip(headlines, bodies, strict=True)]
        stage = [
            (r[0], h, b, lang, v.tolist())
            for r, h, b, lang, v in zip(rows, headlines, bodies, languages, vectors, strict=True)
        ]
        async with db.system() as conn:
            # on a loaded machine a chunk's statements can take minutes
            await conn.copy_records_to_table("observations", records=rows, columns=_OBS_COLUMNS, timeout=LONG)
            await conn.execute("TRUNCATE bench_stage", timeout=LONG)
            await conn.copy_records_to_table("bench_stage", records=stage, timeout=LONG)
            await conn.execute(_DOCUMENTS_FROM_STAGE, dims, timeout=LONG)
            by_tenant: dict[str, list[int]] = {}
            for i, d in enumerate(chunk):
                by_tenant.setdefault(d.tenant_id, []).append(i)
            for tenant, members in sorted(by_tenant.items()):
                await conn.execute(
                    INSERT_POSTINGS,
                    tenant,
                    [rows[i][0] for i in members],
                    [headlines[i] for i in members],
                    [bodies[i] for i in members],
                    timeout=LONG,
                )
        before, done = done, done + len(chunk)
        if done // 100_000 != before // 100_000 or done == total:
            log(f"  loaded {done}/{total} in {time.perf_counter() - started:.0f} s")
    async with db.system() as conn:
        await conn.execute("DROP TABLE IF EXISTS bench_stage")
    return time.perf_counter() - started
