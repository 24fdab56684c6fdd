"""Permission-aware hybrid recall (R-7.1-R-7.3, R-7.5): implements `engram.ports.Recall`.

1. The caller's visibility (R-7.2) plus the observations they rejected become one filter that
   both index lists apply inside their search.
2. BM25 and kNN run concurrently (the query is embedded while BM25 runs) and are fused with
   reciprocal rank fusion (k = 60).
3. The best candidates are read from PostgreSQL (visibility and "in force" checked again, so a
   stale index can never leak), boosted (priority, recency, relevance, verified, feedback,
   the stream's type boosts) and cut to the limit.
4. Every recall gets a `query_id`; a `retrieved` feedback event per returned observation is
   published in the background, never on the response path.
"""

from __future__ import annotations

import asyncio
import unicodedata
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import structlog

from engram.adapters.observations import live_sql, to_observation, visibility_sql
from engram.adapters.postgres import Database
from engram.domain.events import FEEDBACK_RECORDED, FeedbackRecorded, new_event
from engram.domain.models import FeedbackKind
from engram.domain.observation import Observation
from engram.domain.ranking import RRF_K, Fused, boosted, boosts, rrf_fuse
from engram.domain.recall import RecallQuery, RecallResult, SearchHit
from engram.domain.scopes import Permission, Principal, Visibility
from engram.domain.search import Ranked, SearchFilter
from engram.ports import Embedder, EventBus, SearchIndex
from engram.services.memory import Unprocessable, require

log = structlog.get_logger(__name__)

SOURCE = "/engram/recall"
MAX_QUERY_CHARS = 2_000
MAX_LIMIT = 100
# Candidates per list: fusion works on each list's head. Deep ranks of a list (the kNN list
# above all, whose cosine scores sit in a narrow band) mostly add noise to RRF.
CANDIDATES = 20
_ALLOWED_CONTROLS = {"\t", "\n", "\r"}


def validate_query_text(text: str, field: str = "q") -> str:
    """A recall query: 1..2000 characters of text, no control characters. Returns it trimmed."""
    if not isinstance(text, str) or not text.strip():
        raise Unprocessable(field, "the query is empty")
    if len(text) > MAX_QUERY_CHARS:
        raise Unprocessable(field, f"the query has {len(text)} characters; at most {MAX_QUERY_CHARS} are allowed")
    bad = next((ch for ch in text if unicodedata.category(ch) == "Cc" and ch not in _ALLOWED_CONTROLS), None)
    if bad is not None:
        raise Unprocessable(field, f"the query contains the control character U+{ord(bad):04X}")
    return " ".join(text.split())


class RecallService:
    def __init__(
        self,
        db: Database,
        index: SearchIndex,
        embedder: Embedder,
        bus: EventBus | None,
        *,
        candidates: int = CANDIDATES,
    ) -> None:
        self.db = db
        self.index = index
        self.embedder = embedder
        self.bus = bus
        self.candidates = candidates
        self._pending: set[asyncio.Task[Any]] = set()

    async def search(self, principal: Principal, query: RecallQuery) -> RecallResult:
        require(principal, Permission.read_observation)
        text = validate_query_text(query.text, "query")
        if not 1 <= query.limit <= MAX_LIMIT:
            raise Unprocessable("limit", f"limit must be between 1 and {MAX_LIMIT}")
        now = datetime.now(UTC)
        embedding_task = (
            asyncio.ensure_future(self.embedder.embed_query(text)) if query.mode in ("hybrid", "vector") else None
        )
        try:
            visibility = await self._visibility(principal, query.want_sensitive)
            where = SearchFilter(now=now, types=tuple(query.types))
            pool = max(self.candidates, query.limit * 2)
            server_fusion = query.mode == "hybrid" and getattr(self.index, "server_side_fusion", False)
            lexical_task = (
                asyncio.ensure_future(self.index.lexical(visibility, text, where, pool))
                if query.mode in ("hybrid", "lexical") and not server_fusion
                else None
            )
            vector: list[Ranked] = []
            if server_fusion:
                assert embedding_task is not None
                fused_by_server = await self.index.hybrid(  # type: ignore[attr-defined]
                    visibility, text, await embedding_task, where, pool
                )
                ranked = [Fused(r.id, 1.0 / (RRF_K + i), None, None) for i, r in enumerate(fused_by_server, 1)]
                hits = await self._hits(visibility, ranked, query, now)
                result = RecallResult(query_id=uuid.uuid4(), hits=hits)
                self._report_retrieved(principal, result, query.stream_origin)
                return result
            if embedding_task is not None:
                vector = await self.index.vector(visibility, await embedding_task, where, pool)
            lexical = await lexical_task if lexical_task is not None else []
        finally:
            if embedding_task is not None and not embedding_task.done():
                embedding_task.cancel()
        fused = rrf_fuse([r.id for r in lexical], [r.id for r in vector])[:pool]
        hits = await self._hits(visibility, fused, query, now)
        result = RecallResult(query_id=uuid.uuid4(), hits=hits)
        self._report_retrieved(principal, result, query.stream_origin)
        return result

    async def _visibility(self, principal: Principal, want_sensitive: bool) -> Visibility:
        base = Visibility.for_principal(principal, want_sensitive=want_sensitive)
        if principal.user_id is None:
            return base
        async with self.db.tenant(principal.tenant_id) as conn:
            rows = await conn.fetch(
                "SELECT DISTINCT observation_id FROM observation_feedback"
                " WHERE user_id = $1 AND kind = 'rejected' AND observation_id IS NOT NULL",
                principal.user_id,
            )
        if not rows:
            return base
        return Visibility(
            tenant_id=base.tenant_id,
            user_id=base.user_id,
            teams=base.teams,
            include_sensitive=base.include_sensitive,
            hidden_ids=frozenset(str(r["observation_id"]) for r in rows),
        )

    async def _hits(
        self, visibility: Visibility, fused: Sequence[Fused], query: RecallQuery, now: datetime
    ) -> list[SearchHit]:
        if not fused:
            return []
        params: list[Any] = [[uuid.UUID(f.id) for f in fused]]
        vis = visibility_sql(visibility, params)
        params.append(now)
        live = live_sql(f"${len(params)}")
        async with self.db.tenant(visibility.tenant_id) as conn:
            rows = await conn.fetch(
                f"SELECT * FROM observations WHERE id = ANY($1::uuid[]) AND {vis} AND {live}", *params
            )
        by_id: dict[str, Observation] = {str(r["id"]): to_observation(r) for r in rows}
        hits = []
        for f in fused:
            obs = by_id.get(f.id)
            if obs is None or (query.types and obs.type not in query.types):
                continue
            applied = boosts(obs, now, query.type_boosts)
            hits.append(
                SearchHit(
                    observation=obs,
                    score=boosted(f.rrf, applied),
                    lexical_rank=f.lexical_rank,
                    vector_rank=f.vector_rank,
                    boosts=applied,
                    stream_origin=query.stream_origin,
                )
            )
        hits.sort(key=lambda h: -h.score)
        return hits[: query.limit]

    # ---- retrieved feedback, off the response path ------------------------------------

    def _report_retrieved(self, principal: Principal, result: RecallResult, stream_origin: str | None) -> None:
        if self.bus is None or not result.hits:
            return
        events = [
            new_event(
                FEEDBACK_RECORDED,
                FeedbackRecorded(
                    kind=FeedbackKind.retrieved,
                    observation_id=hit.observation.id,
                    query_id=result.query_id,
                    stream_origin=stream_origin,
                    actor="system",  # recorded by recall itself, not given by the caller
                ),
                tenant_id=principal.tenant_id,
                source=SOURCE,
                user_id=principal.user_id,
                subject=f"observation/{hit.observation.id}",
                event_id=f"retrieved:{result.query_id}:{hit.observation.id}",
            )
            for hit in result.hits
        ]
        task = asyncio.create_task(self._publish(events))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _publish(self, events: list[Any]) -> None:
        assert self.bus is not None
        try:
            await self.bus.publish_many(events)
        except Exception as exc:  # feedback is best effort; recall has already answered
            log.warning("recall.feedback_publish_failed", count=len(events), error=str(exc))

    async def drain(self) -> None:
        """Wait for feedback still being published (shutdown, tests)."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
