"""Permission-aware hybrid recall (R-7.1-R-7.3, R-7.5): implements `engram.ports.Recall`.

1. The caller's visibility (R-7.2) plus the observations they rejected become one filter that
   both index lists apply inside their search.
2. BM25 and kNN run concurrently (the query is embedded while BM25 runs) and are fused with
   reciprocal rank fusion (k = 60); a memory in another language than the query keeps only its
   kNN part (`ranking.cross_language_factor`).
3. The best candidates are read from PostgreSQL (visibility and "in force" checked again, so a
   stale index can never leak), boosted (priority, recency, relevance, verified, feedback,
   the stream's type boosts), each list's first hit kept in the top 2, its second in the top 4
   (`ranking.with_leg_floors`) and cut to the limit.
4. Hits on derived units count for their turns (`recall_plan.as_turns`); a question that names
   two things is also searched in parts, one that names a day within that day, a question to the
   assistant among its answers' passages alone, fused by RRF (`recall_plan.with_parts`); of two
   near-duplicate statements of one speaker, or two values of a fact of their life
   (`life_topics`), the later ranks first (`domain/recency`; statement units' stored vectors:
   pgvector, in the recall's transaction).
5. Every recall gets a `query_id` (or the one the query brings); a `retrieved` feedback event
   per returned observation is published in the background, never on the response path.

`search_many` plans several queries of one caller together (multi-stream recall): one
rejected-ids lookup, one embedding call for all distinct texts, one hydration. If that shared
search fails, each query is searched again on its own, so a failure fails only its own query.
With an index in the same PostgreSQL (pgvector) the rejected ids, the index's scan settings
and the BM25 statements run in one tenant transaction while the texts are embedded; the kNN
statements and the hydration follow in the same transaction if the embedding is ready by then,
else in a second one (a recall never holds a pooled connection while it waits for the model).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import structlog

from engram.domain.addressee import unasked_types
from engram.domain.errors import Unprocessable
from engram.domain.events import FEEDBACK_RECORDED, FeedbackRecorded, new_event
from engram.domain.models import FeedbackKind
from engram.domain.observation import Observation
from engram.domain.ranking import RRF_K, Fused
from engram.domain.recall import RecallQuery, RecallResult
from engram.domain.scopes import Permission, Principal, Visibility, require
from engram.domain.search import Ranked, SearchFilter, SearchPlan, Vector
from engram.instrumentation import metrics, tracing
from engram.ports import (
    BatchQueryEmbedder,
    Embedder,
    EventBus,
    SearchIndex,
    SharedDatabaseIndex,
    TenantSearch,
    TenantTx,
    UnitOfWork,
)
from engram.services.recall_plan import (
    CANDIDATES,
    MAX_LIMIT,
    Plan,
    groups,
    instant,
    merge_parts,
    shared_limit,
    shared_list,
    validate_query_text,
    with_parts,
)
from engram.services.recall_scoring import scored_hits, statement_vectors
from engram.services.recall_versions import conflict_partners, hydrate_as_of, with_partners

log = structlog.get_logger(__name__)

SOURCE = "/engram/recall"


class RecallService:
    def __init__(
        self,
        uow: UnitOfWork,
        index: SearchIndex,
        embedder: Embedder,
        bus: EventBus | None,
        *,
        candidates: int = CANDIDATES,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.uow = uow
        self.index = index
        self.embedder = embedder
        self.bus = bus
        self.candidates = candidates
        self.clock = clock  # when a recall looks: what is in force, and how recent each memory is
        self._pending: set[asyncio.Task[Any]] = set()

    async def search(self, principal: Principal, query: RecallQuery) -> RecallResult:
        [result] = await self.search_many(principal, [query])
        if isinstance(result, Exception):
            raise result
        return result

    def embed_ahead(self, texts: Sequence[str]) -> asyncio.Future[dict[str, Vector]]:
        """Start embedding the valid ones of `texts` now; hand the future to `search_many(ahead=)`.
        Chat-turn starts it before it prepares the turn, so the model runs meanwhile."""
        valid: list[str] = []
        for text in texts:
            with contextlib.suppress(Unprocessable):
                valid.append(validate_query_text(text, "query"))
        future = asyncio.ensure_future(self._embed(list(dict.fromkeys(valid))))
        # a turn that fails before its recall never awaits it: its error is read here, not lost
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        return future

    async def search_many(
        self,
        principal: Principal,
        queries: Sequence[RecallQuery],
        *,
        ahead: Awaitable[Mapping[str, Vector]] | None = None,
    ) -> list[RecallResult | Exception]:
        """Every query's result or its error, in order; timed and traced per query (its stream)."""
        started = time.time_ns()
        with tracing.span("recall", engram__recall__queries=len(queries)):
            try:
                return await self._search_parts(principal, queries, ahead)
            finally:
                ended = time.time_ns()
                for query in queries:
                    tracing.finished_span(
                        f"recall {query.stream_origin or query.mode}",
                        started,
                        ended,
                        engram__recall__mode=query.mode,
                        engram__recall__stream=query.stream_origin,
                    )
                    metrics.recalled(query.mode, query.stream_origin, (ended - started) / 1e9, principal.tenant_id)

    async def _search_parts(
        self,
        principal: Principal,
        queries: Sequence[RecallQuery],
        ahead: Awaitable[Mapping[str, Vector]] | None,
    ) -> list[RecallResult | Exception]:
        require(principal, Permission.read_observation)
        expanded, owners = with_parts(queries, self.clock())  # a question that names two things: its parts too
        results = merge_parts(queries, owners, await self._search_many(principal, expanded, ahead))
        for query, result in zip(queries, results, strict=True):
            if isinstance(result, RecallResult):
                self._report_retrieved(principal, result, query.stream_origin)
        return results

    async def _search_many(
        self, principal: Principal, queries: Sequence[RecallQuery], ahead: Awaitable[Mapping[str, Vector]] | None
    ) -> list[RecallResult | Exception]:
        now = self.clock()
        results: list[RecallResult | Exception | None] = [None] * len(queries)
        plans: dict[int, Plan] = {}
        for i, query in enumerate(queries):
            try:
                plans[i] = self._plan(principal, query, now)
            except Unprocessable as exc:
                results[i] = exc
        if plans:
            texts = list(dict.fromkeys(p.vector_text for p in plans.values() if p.wants_vector))
            embedding = asyncio.ensure_future(self._embed_using(texts, ahead)) if texts else None
            found: dict[int, dict[str, Observation] | BaseException]
            try:
                try:
                    together = await self._search(principal, list(plans.values()), embedding)
                    found = dict.fromkeys(plans, together)
                except Exception as exc:
                    if len(plans) == 1 or _everyones(exc):
                        raise
                    # the searches shared statements, so one query's failure failed them all:
                    # each query again on its own, and only the failing one fails
                    log.warning("recall.batch_failed", queries=len(plans), error=str(exc)[:500])
                    alone = await asyncio.gather(
                        *(self._search(principal, [plan], embedding) for plan in plans.values()),
                        return_exceptions=True,
                    )
                    found = dict(zip(plans, alone, strict=True))
            finally:
                if embedding is not None and not embedding.done():
                    embedding.cancel()
            for i, plan in plans.items():
                observations = found[i]
                if isinstance(observations, Exception):
                    results[i] = observations
                    continue
                if isinstance(observations, BaseException):  # cancelled: not a failure of this query
                    raise observations
                hits = with_partners(plan, scored_hits(plan, observations, plan.where.now), observations)
                results[i] = RecallResult(query_id=plan.query.query_id or uuid.uuid4(), hits=hits)
        return [r for r in results if r is not None]

    async def _search(
        self, principal: Principal, plans: list[Plan], embedding: asyncio.Future[dict[str, Vector]] | None
    ) -> dict[str, Observation]:
        if isinstance(self.index, SharedDatabaseIndex):
            return await self._search_shared(self.index, principal, plans, embedding)
        return await self._search_separate(principal, plans, embedding)

    def _plan(self, principal: Principal, query: RecallQuery, now: datetime) -> Plan:
        text = validate_query_text(query.text, "query")
        vector_text = text if query.vector_text is None else validate_query_text(query.vector_text, "vector_text")
        if not 1 <= query.limit <= MAX_LIMIT:
            raise Unprocessable("limit", f"limit must be between 1 and {MAX_LIMIT}")
        return Plan(
            query=query,
            text=text,
            vector_text=vector_text,
            visibility=Visibility.for_principal(principal, want_sensitive=query.want_sensitive),
            where=SearchFilter(
                now=instant(query, now),
                types=tuple(query.types),
                # an assistant's passages only for a question that asks the assistant; a query
                # that names its types gets what it names
                except_types=() if query.types else unasked_types(text),
                within=query.said_within,
            ),
            pool=max(self.candidates, query.limit * 2),
        )

    async def _embed_using(self, texts: list[str], ahead: Awaitable[Mapping[str, Vector]] | None) -> dict[str, Vector]:
        """The vectors of `texts`: those embedded ahead (if that worked), the rest now."""
        found: dict[str, Vector] = {}
        if ahead is not None:
            try:
                found = {t: v for t, v in (await ahead).items() if t in texts}
            except Exception:  # the search embeds the texts itself
                log.warning("recall.embed_ahead_failed", exc_info=True)
        missing = [t for t in texts if t not in found]
        if missing:
            found.update(await self._embed(missing))
        return found

    async def _embed(self, texts: list[str]) -> dict[str, Vector]:
        if not texts:
            return {}
        if isinstance(self.embedder, BatchQueryEmbedder):
            vectors = list(await self.embedder.embed_queries(texts))
        else:
            vectors = list(await asyncio.gather(*(self.embedder.embed_query(t) for t in texts)))
        return dict(zip(texts, vectors, strict=True))

    async def _search_shared(
        self,
        index: SharedDatabaseIndex,
        principal: Principal,
        plans: list[Plan],
        embedding: asyncio.Future[dict[str, Vector]] | None,
    ) -> dict[str, Observation]:
        """The searches in tenant transactions on the index's own PostgreSQL: one if the texts
        are embedded by the time BM25 is done, else a second one after the embedding, so no
        connection is held while a recall waits for the model (pool size vs. concurrency)."""
        tenant_id = principal.tenant_id
        limit = shared_limit(plans)
        async with self.uow.tenant(tenant_id) as tx:
            await _hide_rejected(tx, principal, plans)
            search = index.within(tx)

            async def lexical(vis: Visibility, text: str, where: SearchFilter, limit: int) -> list[Ranked]:
                return await search.lexical(vis, text, where, limit)

            # the texts are embedded meanwhile; BM25 runs before `prepare` turns on custom plans
            # for the kNN: its cached generic plan saves ~1 ms of planning per statement
            for group in groups([p for p in plans if p.wants_lexical], "text"):
                for plan, ranked in zip(group, await shared_list(group, group[0].text, lexical), strict=True):
                    plan.lexical = ranked
            if embedding is None or embedding.done():
                return await self._vector_and_hydrate(tx, search, plans, embedding, await search.prepare(limit))
        await embedding
        async with self.uow.tenant(tenant_id) as tx:
            search = index.within(tx)
            scan = await search.prepare(limit)  # scan settings are per transaction
            return await self._vector_and_hydrate(tx, search, plans, embedding, scan)

    async def _vector_and_hydrate(
        self,
        tx: TenantTx,
        search: TenantSearch,
        plans: list[Plan],
        embedding: asyncio.Future[dict[str, Vector]] | None,
        scan: SearchPlan,
    ) -> dict[str, Observation]:
        if embedding is not None:
            vectors = await embedding

            async def vector(vis: Visibility, text: str, where: SearchFilter, limit: int) -> list[Ranked]:
                return await search.vector(vis, vectors[text], where, limit, scan)

            for group in groups([p for p in plans if p.wants_vector], "vector_text"):
                for plan, ranked in zip(group, await shared_list(group, group[0].vector_text, vector), strict=True):
                    plan.vector = ranked
        for plan in plans:
            plan.fuse()
        found = await self._hydrate(tx, plans)
        await statement_vectors(search, plans, found)
        return found

    async def _search_separate(
        self,
        principal: Principal,
        plans: list[Plan],
        embedding: asyncio.Future[dict[str, Vector]] | None,
    ) -> dict[str, Observation]:
        """An index elsewhere (Elasticsearch): its lists run concurrently, then one hydration."""
        if principal.user_id is not None:
            async with self.uow.tenant(principal.tenant_id) as tx:
                await _hide_rejected(tx, principal, plans)
        server_fusion = getattr(self.index, "server_side_fusion", False)

        async def run(plan: Plan) -> None:
            if plan.query.mode == "hybrid" and server_fusion:
                assert embedding is not None
                vector = (await embedding)[plan.vector_text]
                by_server = await self.index.hybrid(  # type: ignore[attr-defined]
                    plan.visibility, plan.text, vector, plan.where, plan.pool
                )
                plan.fused = [Fused(r.id, 1.0 / (RRF_K + i), None, None) for i, r in enumerate(by_server, 1)]
                return
            lexical = (
                asyncio.ensure_future(self.index.lexical(plan.visibility, plan.text, plan.where, plan.pool))
                if plan.wants_lexical
                else None
            )
            try:
                if plan.wants_vector:
                    assert embedding is not None
                    vector = (await embedding)[plan.vector_text]
                    plan.vector = await self.index.vector(plan.visibility, vector, plan.where, plan.pool)
                plan.lexical = await lexical if lexical is not None else []
            finally:
                if lexical is not None and not lexical.done():
                    lexical.cancel()
            plan.fuse()

        await asyncio.gather(*(run(p) for p in plans))
        if not any(p.fused for p in plans):
            return {}
        async with self.uow.tenant(principal.tenant_id) as tx:
            return await self._hydrate(tx, plans)

    async def _hydrate(self, tx: TenantTx, plans: list[Plan]) -> dict[str, Observation]:
        """The fused candidates of all plans as stored now: visible and in force, else absent."""
        found: dict[str, Observation] = {}
        for plan in plans:
            if plan.query.as_of is not None:
                found.update(await hydrate_as_of(tx, plan))
        plans = [p for p in plans if p.query.as_of is None]
        ids = list(dict.fromkeys(f.id for p in plans for f in p.fused))
        if not ids:
            return found
        # the widest visibility of the plans (sensitive only if some plan may see it); each
        # plan checks its own visibility again in `_hits`
        widest = plans[0].visibility
        for plan in plans[1:]:
            if plan.visibility.include_sensitive:
                widest = plan.visibility
        found.update(await tx.observations.visible(ids, widest, plans[0].where.now))
        await conflict_partners(tx, plans, found)
        return found

    # ---- retrieved feedback, off the response path ------------------------------------

    def _report_retrieved(self, principal: Principal, result: RecallResult, stream_origin: str | None) -> None:
        """One `retrieved` event per search with every hit (the worker counts each observation)."""
        if self.bus is None or not result.hits:
            return
        event = new_event(
            FEEDBACK_RECORDED,
            FeedbackRecorded(
                kind=FeedbackKind.retrieved,
                observation_ids=[hit.observation.id for hit in result.hits],
                query_id=result.query_id,
                stream_origin=stream_origin,
                actor="system",  # recorded by recall itself, not given by the caller
            ),
            tenant_id=principal.tenant_id,
            source=SOURCE,
            user_id=principal.user_id,
            subject=f"query/{result.query_id}",
            # streams of one turn share the query id: the stream keeps their events apart
            event_id=f"retrieved:{result.query_id}:{stream_origin or ''}",
        )
        task = asyncio.create_task(self._publish([event]))
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


def _everyones(exc: Exception) -> bool:
    """A failure that would fail each query alone as well (no connection, a timeout): searching
    them one by one would only add load where there is too much already."""
    import asyncpg

    # OSError covers TimeoutError (asyncio's too) and ConnectionError
    return isinstance(exc, (OSError, asyncpg.InterfaceError, asyncpg.TooManyConnectionsError))


async def _hide_rejected(tx: TenantTx, principal: Principal, plans: Sequence[Plan]) -> None:
    """What the caller rejected is hidden from every plan's searches and hydration (R-7.5)."""
    hidden = await tx.feedback.rejected_ids(principal.user_id)
    if hidden:
        for plan in plans:
            plan.visibility = dataclasses.replace(plan.visibility, hidden_ids=plan.visibility.hidden_ids | hidden)
