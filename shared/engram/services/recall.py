"""Permission-aware hybrid recall (R-7.1-R-7.3, R-7.5): implements `engram.ports.Recall`.

1. The caller's visibility (R-7.2) plus the observations they rejected become one filter that
   both index lists apply inside their search.
2. BM25 and kNN run concurrently (the query is embedded while BM25 runs) and are fused with
   reciprocal rank fusion (k = 60); a memory in another language than the query keeps only its
   kNN part (`ranking.cross_language_factor`).
3. The best candidates are read from PostgreSQL (visibility and "in force" checked again, so a
   stale index can never leak), boosted (priority, recency, relevance, verified, feedback,
   the stream's type boosts) and cut to the limit.
4. Every recall gets a `query_id` (or the one the query brings); a `retrieved` feedback event
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
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import structlog

from engram.adapters.observations import live_sql, rejected_ids, to_observation, visibility_sql
from engram.adapters.postgres import Connection, Database
from engram.domain.dates import mentioned_dates
from engram.domain.events import FEEDBACK_RECORDED, FeedbackRecorded, new_event
from engram.domain.language import language_of
from engram.domain.models import FeedbackKind
from engram.domain.observation import Observation
from engram.domain.ranking import (
    RRF_K,
    Fused,
    boosted,
    boosts,
    cross_language_factor,
    date_support,
    memory_language,
    observation_time,
    padded_words,
    rrf_fuse,
    session_support,
    tag_support,
)
from engram.domain.recall import RecallQuery, RecallResult, SearchHit
from engram.domain.scopes import Permission, Principal, Visibility
from engram.domain.search import Ranked, SearchFilter, SearchPlan, Vector
from engram.ports import BatchQueryEmbedder, Embedder, EventBus, SearchIndex, SharedDatabaseIndex
from engram.services.memory import Unprocessable, require

log = structlog.get_logger(__name__)

SOURCE = "/engram/recall"
MAX_QUERY_CHARS = 2_000
MAX_LIMIT = 100
# Candidates per list: at least this many, and twice the hits asked for. Fusion works on each
# list's head; deep ranks (the kNN list above all, whose cosine scores sit in a narrow band)
# mostly add noise to RRF. LoCoMo dev, hybrid: limit 5 recall@5 0.704 with 10 candidates, 0.695
# with 12, 0.678 with 20; limit 8 recall@8 0.757 with 16, 0.760 with 20 (nDCG@10 0.602 / 0.596).
CANDIDATES = 10
MAX_SHARED = 200  # the longest list one shared search of several streams asks for
SHARED_SLACK = 2  # a shared search asks for this many times the sum of the streams' pools
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


@dataclass
class _Plan:
    """One valid query of a `search_many` call and what the searches found for it."""

    query: RecallQuery
    text: str  # BM25
    vector_text: str  # kNN
    visibility: Visibility
    where: SearchFilter
    pool: int
    lexical: list[Ranked] = field(default_factory=list)
    vector: list[Ranked] = field(default_factory=list)
    fused: list[Fused] = field(default_factory=list)

    def fuse(self) -> None:
        self.fused = rrf_fuse([r.id for r in self.lexical], [r.id for r in self.vector])[: self.pool]

    @property
    def wants_lexical(self) -> bool:
        return self.query.mode in ("hybrid", "lexical")

    @property
    def wants_vector(self) -> bool:
        return self.query.mode in ("hybrid", "vector")


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
        require(principal, Permission.read_observation)
        now = datetime.now(UTC)
        results: list[RecallResult | Exception | None] = [None] * len(queries)
        plans: dict[int, _Plan] = {}
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
                result = RecallResult(
                    query_id=plan.query.query_id or uuid.uuid4(), hits=self._hits(plan, observations, now)
                )
                results[i] = result
                self._report_retrieved(principal, result, plan.query.stream_origin)
        return [r for r in results if r is not None]

    async def _search(
        self, principal: Principal, plans: list[_Plan], embedding: asyncio.Future[dict[str, Vector]] | None
    ) -> dict[str, Observation]:
        if isinstance(self.index, SharedDatabaseIndex):
            return await self._search_shared(self.index, principal, plans, embedding)
        return await self._search_separate(principal, plans, embedding)

    def _plan(self, principal: Principal, query: RecallQuery, now: datetime) -> _Plan:
        text = validate_query_text(query.text, "query")
        vector_text = text if query.vector_text is None else validate_query_text(query.vector_text, "vector_text")
        if not 1 <= query.limit <= MAX_LIMIT:
            raise Unprocessable("limit", f"limit must be between 1 and {MAX_LIMIT}")
        return _Plan(
            query=query,
            text=text,
            vector_text=vector_text,
            visibility=Visibility.for_principal(principal, want_sensitive=query.want_sensitive),
            where=SearchFilter(now=now, types=tuple(query.types)),
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
        plans: list[_Plan],
        embedding: asyncio.Future[dict[str, Vector]] | None,
    ) -> dict[str, Observation]:
        """The searches in tenant transactions on the index's own PostgreSQL: one if the texts
        are embedded by the time BM25 is done, else a second one after the embedding, so no
        connection is held while a recall waits for the model (pool size vs. concurrency)."""
        tenant_id = principal.tenant_id
        limit = shared_limit(plans)
        async with self.db.tenant(tenant_id) as conn:
            await _hide_rejected(conn, principal, plans)

            async def lexical(vis: Visibility, text: str, where: SearchFilter, limit: int) -> list[Ranked]:
                return await index.lexical_in(conn, vis, text, where, limit)

            # the texts are embedded meanwhile; BM25 runs before `prepare` turns on custom plans
            # for the kNN: its cached generic plan saves ~1 ms of planning per statement
            for group in _groups([p for p in plans if p.wants_lexical], "text"):
                for plan, ranked in zip(group, await _shared_list(group, group[0].text, lexical), strict=True):
                    plan.lexical = ranked
            if embedding is None or embedding.done():
                scan = await index.prepare(conn, tenant_id, limit)
                return await self._vector_and_hydrate(index, conn, plans, embedding, scan)
        await embedding
        async with self.db.tenant(tenant_id) as conn:
            scan = await index.prepare(conn, tenant_id, limit)  # scan settings are per transaction
            return await self._vector_and_hydrate(index, conn, plans, embedding, scan)

    async def _vector_and_hydrate(
        self,
        index: SharedDatabaseIndex,
        conn: Connection,
        plans: list[_Plan],
        embedding: asyncio.Future[dict[str, Vector]] | None,
        scan: SearchPlan,
    ) -> dict[str, Observation]:
        if embedding is not None:
            vectors = await embedding

            async def vector(vis: Visibility, text: str, where: SearchFilter, limit: int) -> list[Ranked]:
                return await index.vector_in(conn, vis, vectors[text], where, limit, scan)

            for group in _groups([p for p in plans if p.wants_vector], "vector_text"):
                for plan, ranked in zip(group, await _shared_list(group, group[0].vector_text, vector), strict=True):
                    plan.vector = ranked
        for plan in plans:
            plan.fuse()
        return await self._hydrate(conn, plans)

    async def _search_separate(
        self,
        principal: Principal,
        plans: list[_Plan],
        embedding: asyncio.Future[dict[str, Vector]] | None,
    ) -> dict[str, Observation]:
        """An index elsewhere (Elasticsearch): its lists run concurrently, then one hydration."""
        if principal.user_id is not None:
            async with self.db.tenant(principal.tenant_id) as conn:
                await _hide_rejected(conn, principal, plans)
        server_fusion = getattr(self.index, "server_side_fusion", False)

        async def run(plan: _Plan) -> None:
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
        async with self.db.tenant(principal.tenant_id) as conn:
            return await self._hydrate(conn, plans)

    async def _hydrate(self, conn: Connection, plans: list[_Plan]) -> dict[str, Observation]:
        """The fused candidates of all plans as stored now: visible and in force, else absent."""
        ids = list(dict.fromkeys(f.id for p in plans for f in p.fused))
        if not ids:
            return {}
        # the widest visibility of the plans (sensitive only if some plan may see it); each
        # plan checks its own visibility again in `_hits`
        widest = plans[0].visibility
        for plan in plans[1:]:
            if plan.visibility.include_sensitive:
                widest = plan.visibility
        params: list[Any] = [[uuid.UUID(i) for i in ids]]
        vis = visibility_sql(widest, params, "o")
        params.append(plans[0].where.now)
        live = live_sql(f"${len(params)}", "o")
        # a join on the primary key, one probe per id: `id = ANY(...)` under the kNN's custom
        # plans walked the tenant's whole (tenant_id, created_at) index instead (1.5 vs 0.2 ms)
        rows = await conn.fetch(
            f"SELECT o.* FROM unnest($1::uuid[]) AS wanted(id) JOIN observations o ON o.id = wanted.id"
            f" WHERE {vis} AND {live}",
            *params,
        )
        return {str(r["id"]): to_observation(r) for r in rows}

    def _hits(self, plan: _Plan, found: dict[str, Observation], now: datetime) -> list[SearchHit]:
        query = plan.query
        hits = []
        visible: list[tuple[Fused, Observation]] = []
        for f in plan.fused:
            obs = found.get(f.id)
            if obs is None or (query.types and obs.type not in query.types) or not plan.visibility.allows(obs):
                continue
            visible.append((f, obs))
        # the language gate, session, date and tag support are part of fusion (hybrid only), from
        # what this caller may see
        hybrid = query.mode == "hybrid"
        language = language_of(plan.text) if hybrid else None
        gate = {
            f.id: cross_language_factor(f, language, memory_language(obs))
            for f, obs in visible
            if language and f.lexical_rank
        }
        fused = [(f.id, f.rrf * gate.get(f.id, 1.0), obs.provenance.session_id) for f, obs in visible]
        support = session_support(fused) if hybrid else {}
        dates = mentioned_dates(plan.text) if hybrid else ()
        query_words = padded_words(plan.text) if hybrid else ""
        for f, obs in visible:
            applied = boosts(obs, now, query.type_boosts)
            if gate.get(f.id, 1.0) != 1.0:
                applied["cross_language"] = round(gate[f.id], 6)
            if support.get(f.id, 1.0) != 1.0:
                applied["session"] = round(support[f.id], 6)
            if dates and (on_day := date_support(observation_time(obs), dates)) != 1.0:
                applied["date"] = on_day
            if hybrid and obs.tags and (named := tag_support(obs.tags, query_words)) != 1.0:
                applied["tag"] = named
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
        """One `retrieved` event per search with every hit (the worker counts each observation):
        per hit it was 18 events per chat turn, ~2 ms of CPU on the turn's event loop."""
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


def shared_limit(plans: Sequence[_Plan]) -> int:
    """How long a list one search shared by several plans asks for: twice the sum of their pools.
    A plan's types can be a minority among the best entries of the union (vectors cluster by
    type); with just the sum, 9 of 10 chat turns of the chat bench needed a second kNN search."""
    return min(MAX_SHARED, SHARED_SLACK * sum(p.pool for p in plans))


def _groups(plans: Sequence[_Plan], side: Literal["text", "vector_text"]) -> list[list[_Plan]]:
    """Plans that search the same text (BM25: `text`, kNN: `vector_text`) with the same
    visibility (streams of one turn)."""
    groups: dict[tuple[str, Visibility], list[_Plan]] = {}
    for plan in plans:
        groups.setdefault((getattr(plan, side), plan.visibility), []).append(plan)
    return list(groups.values())


async def _shared_list(
    group: list[_Plan],
    text: str,
    search: Callable[[Visibility, str, SearchFilter, int], Awaitable[list[Ranked]]],
) -> list[list[Ranked]]:
    """One ranked list per plan of a group, from one search where possible.

    The group searches once over the union of its plans' types for `shared_limit` entries;
    each plan keeps the entries of its own types, in order, up to its pool. A list score does
    not depend on the type filter, so this is the plan's own list unless the shared list was
    cut before the plan had its pool: then (and for entries without a type) the plan searches
    on its own. Three streams of a chat turn cost one statement instead of three.
    """
    first = group[0]
    if len(group) == 1:
        return [await search(first.visibility, text, first.where, first.pool)]
    union: tuple[str, ...] = ()
    if all(p.query.types for p in group):
        union = tuple(dict.fromkeys(t for p in group for t in p.query.types))
    limit = shared_limit(group)
    shared = await search(first.visibility, text, SearchFilter(now=first.where.now, types=union), limit)
    complete = len(shared) < limit  # nothing was cut: every matching entry is in the list
    lists = []
    for plan in group:
        types = set(plan.query.types)
        own = [r for r in shared if not types or r.type in types][: plan.pool]
        if any(r.type is None for r in shared) or (len(own) < plan.pool and not complete):
            own = await search(plan.visibility, text, plan.where, plan.pool)
        lists.append(own)
    return lists


async def _hide_rejected(conn: Connection, principal: Principal, plans: Sequence[_Plan]) -> None:
    """What the caller rejected is hidden from every plan's searches and hydration (R-7.5)."""
    hidden = await rejected_ids(conn, principal.user_id)
    if hidden:
        for plan in plans:
            plan.visibility = dataclasses.replace(plan.visibility, hidden_ids=plan.visibility.hidden_ids | hidden)
