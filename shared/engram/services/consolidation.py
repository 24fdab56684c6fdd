"""consolidate-memory (R-15.1, R-15.2): memory that heals itself; nothing is deleted.

For each new or changed observation (`observation.created/updated`, or the nightly sweep):

1. read it and its candidates: current observations of the same audience (tenant, owner,
   scope, teams) and type that share a fact with it, the most recent ones, and its nearest
   neighbours in the search index;
2. compare it with each (rules in `engram.domain.consolidation` on `k=v` facts, the words the
   candidates share or swap, and passage vectors from the embedding cache, the indexer's, so
   nothing is embedded twice);
3. ask the LLM path about the similar pairs the rules left open: one call for the cluster, at
   background priority, only when a model is configured;
4. apply the steps (`engram.domain.consolidation_plan`) in one tenant transaction that locks
   the rows, checks they are still current, and claims the event in the consumer's inbox:
   consolidated observations are written, sources get `superseded_by`/`valid_to`, conflicts
   are linked, every decision is recorded with its reason, and the changes go out through the
   outbox (the index follows). A redelivered event finds its claim and does nothing.

Pairs a person separated (an undone consolidation) are never consolidated again. Memory units
(turns of a conversation and what is derived from them, `observation.is_unit_key`) are neither
consolidated nor candidates: they record what was said when, and recall ranks the newer
statement first itself (`recall_scoring.later_statements_first`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, cast

import structlog
from cloudevents.http import CloudEvent

from engram.domain.consolidation import (
    DEFAULT_THRESHOLDS,
    Decision,
    Pool,
    Thresholds,
    Verdict,
    audience,
    decide,
)
from engram.domain.consolidation_history import ConsolidationRecord
from engram.domain.consolidation_plan import Step, feedback_sums, plan
from engram.domain.deliveries import Batch
from engram.domain.errors import InvalidEvent
from engram.domain.events import (
    OBSERVATION_CREATED,
    OBSERVATION_UPDATED,
    ObservationChanged,
    change_events,
    observation_changed,
    parse_data,
)
from engram.domain.facts import Reading
from engram.domain.models import FeedbackCounts
from engram.domain.observation import Change, Observation, ObservationDraft, Scope, WriteOutcome, is_unit_key
from engram.domain.scopes import Visibility
from engram.domain.search import SearchFilter, Vector, passage_text, text_hash
from engram.domain.telemetry import MemoryConsolidation, TelemetryRecord, record
from engram.ports import Embedder, SearchIndex, TenantTx, UnitOfWork
from engram.services.consolidation_llm import ConsolidationJudge, Cost, JudgementFailed

log = structlog.get_logger(__name__)

CONSUMER = "consolidate-memory"
SOURCE = "/engram/consolidate-memory"
HANDLED = frozenset({OBSERVATION_CREATED.type, OBSERVATION_UPDATED.type})
Trigger = Literal["event", "sweep", "human"]


def decode_consolidation(event: CloudEvent) -> ObservationChanged:
    etype = event["type"]
    if etype not in HANDLED:
        raise InvalidEvent(f"consolidate-memory does not handle {etype}")
    return cast(ObservationChanged, parse_data(etype, event.get_data()))


def cosine_of(a: Vector, b: Vector) -> float:
    """Cosine of two unit vectors (numpy is imported here, on first use, not at start-up)."""
    import numpy as np

    return float(np.dot(a, b))


def inbox_key(observation_id: uuid.UUID, revision: datetime) -> str:
    """One consolidation per revision of an observation, whichever way it came (event or sweep)."""
    return f"{observation_id}@{revision.isoformat()}"


@dataclass(frozen=True)
class Limits:
    recent: int = 40  # the newest observations of the audience looked at
    related: int = 40  # those sharing a fact
    neighbours: int = 20  # nearest in the search index
    ask: int = 6  # open candidates shown to the model in its one call


@dataclass
class Outcome:
    """What one consolidation did (the sweep and the benchmark count these)."""

    steps: list[Step]
    skipped: str | None = None

    def decided(self, decision: Decision) -> int:
        return sum(1 for s in self.steps if s.decision is decision)


class Consolidator:
    def __init__(
        self,
        uow: UnitOfWork,
        embedder: Embedder,
        index: SearchIndex | None = None,
        judge: ConsolidationJudge | None = None,
        *,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        limits: Limits | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.uow = uow
        self.embedder = embedder
        self.index = index
        self.judge = judge
        self.thresholds = thresholds
        self.limits = limits or Limits()
        self._clock = clock or (lambda: datetime.now(UTC))

    def now(self) -> datetime:
        return self._clock()

    # ---- the event path -----------------------------------------------------------------------

    async def handle(self, batch: Batch[ObservationChanged]) -> None:
        """One observation at a time, in batch order: each decision changes what the next sees."""
        for delivery in batch:
            try:
                await self.consolidate(delivery.tenant, delivery.data.observation_id, trigger="event")
            except Exception as exc:  # this event only; its neighbours go on
                log.warning("consolidation.failed", tenant=delivery.tenant, error=str(exc)[:500])
                delivery.retry(exc)

    async def consolidate(self, tenant: str, observation_id: uuid.UUID, *, trigger: Trigger) -> Outcome:
        started = time.perf_counter()
        async with self.uow.tenant(tenant, consumer=CONSUMER) as tx:
            obs = await tx.observations.get(observation_id)
            now = self.now()
            if obs is None or not obs.is_live(now):
                return Outcome([], "not current")
            if is_unit_key(obs.key):  # a record of what was said, not a statement of the current fact
                return Outcome([], "memory unit")
            key = inbox_key(obs.id, obs.updated_at)
            if await tx.inbox.seen([key]):
                return Outcome([], "done before")
            found = await tx.consolidation.candidates(obs, recent=self.limits.recent, related=self.limits.related)
        vectors = await self._vectors(tenant, [obs])
        nearest = await self._neighbours(obs, vectors[obs.id], now)
        async with self.uow.tenant(tenant) as tx:
            candidates = await self._screen(tx, obs, found, nearest, now)
        vectors.update(await self._vectors(tenant, candidates))
        verdicts = await self._verdicts(obs, candidates, vectors)
        cost: Cost | None = None
        merged_text: tuple[str, str] | None = None
        failure: str | None = None
        open_ones = self._open(obs, candidates, verdicts, vectors)
        if open_ones and self.judge is not None and self.judge.available:
            try:
                judgement = await self.judge.judge(obs, open_ones)
                verdicts.update(judgement.verdicts)
                cost, merged_text = judgement.cost, judgement.merged_text
            except JudgementFailed as exc:  # one call per cluster: the rules' verdicts stand
                cost, failure = exc.cost, str(exc)
                log.info("consolidation.llm_failed", tenant=tenant, error=failure[:300])
        steps = plan(
            obs,
            [(c, verdicts[c.id]) for c in candidates],
            now,
            merged_text=merged_text,
            model=cost.model if cost else None,
        )
        async with self.uow.tenant(tenant, consumer=CONSUMER) as tx:
            if not await tx.inbox.claim([key]):
                return Outcome([], "done concurrently")
            applied = await self.apply(tx, steps, trigger, now)
            if applied or cost is not None:
                await tx.telemetry.write([self._telemetry(tx.tenant_id, obs, applied, trigger, cost, failure, started)])
        return Outcome(applied)

    async def _neighbours(self, obs: Observation, vector: Vector, now: datetime) -> list[uuid.UUID]:
        """The nearest observations in the search index (of every audience the owner sees)."""
        if self.index is None or not self.limits.neighbours:
            return []
        visibility = Visibility(
            obs.tenant_id, obs.user_id, frozenset(obs.team_ids), include_sensitive=obs.scope is Scope.sensitive
        )
        try:
            ranked = await self.index.vector(
                visibility, vector, SearchFilter(now=now, types=(obs.type,)), self.limits.neighbours
            )
        except Exception as exc:  # the index is a helper here: the store's candidates suffice
            log.info("consolidation.neighbours_unavailable", error=str(exc)[:300])
            return []
        return [uuid.UUID(r.id) for r in ranked if r.id != str(obs.id)]

    async def _screen(
        self,
        tx: TenantTx,
        obs: Observation,
        found: Sequence[Observation],
        nearest: Sequence[uuid.UUID],
        now: datetime,
    ) -> list[Observation]:
        """Candidates of the same audience and still in force, without pairs a person separated."""
        by_id = {c.id: c for c in found}
        missing = [i for i in nearest if i not in by_id]
        if missing:
            by_id.update({r.id: r for r in await tx.observations.get_many(missing)})
        separated = await tx.consolidation.separated([obs.id, *by_id])
        kept = [
            c
            for c in by_id.values()
            if c.id != obs.id
            and not is_unit_key(c.key)
            and audience(c) == audience(obs)
            and c.is_live(now)
            and not any({obs.id, c.id} <= apart for apart in separated)
        ]
        return sorted(kept, key=lambda c: (c.created_at, c.id.int))

    async def _vectors(self, tenant: str, observations: Sequence[Observation]) -> dict[uuid.UUID, Vector]:
        """Passage vectors from the embedding cache (what embed-index stored), the rest embedded
        now, outside any transaction, and cached."""
        if not observations:
            return {}
        model = self.embedder.model
        texts = {o.id: passage_text(o) for o in observations}
        hashes = {i: text_hash(model, t) for i, t in texts.items()}
        async with self.uow.tenant(tenant) as tx:
            cached = await tx.embeddings.cached(model, list(set(hashes.values())))
        missing = list(dict.fromkeys(texts[i] for i, h in hashes.items() if h not in cached))
        if missing:
            fresh = dict(zip(missing, await self.embedder.embed_passages(missing), strict=True))
            entries = {text_hash(model, t): v for t, v in fresh.items()}
            cached.update(entries)
            async with self.uow.tenant(tenant) as tx:
                await tx.embeddings.store(model, entries)
        return {i: cached[h] for i, h in hashes.items()}

    async def _verdicts(
        self, obs: Observation, candidates: Sequence[Observation], vectors: dict[uuid.UUID, Vector]
    ) -> dict[uuid.UUID, Verdict]:
        mine = Reading(obs)
        readings = {c.id: Reading(c) for c in candidates}
        pool = Pool.of([mine, *readings.values()])
        return {
            c.id: decide(mine, readings[c.id], cosine_of(vectors[obs.id], vectors[c.id]), pool, self.thresholds)
            for c in candidates
        }

    def _open(
        self,
        obs: Observation,
        candidates: Sequence[Observation],
        verdicts: dict[uuid.UUID, Verdict],
        vectors: dict[uuid.UUID, Vector],
    ) -> list[Observation]:
        """Similar candidates the rules could not decide: what the model is asked about."""
        scored = [
            (cosine_of(vectors[obs.id], vectors[c.id]), c)
            for c in candidates
            if not verdicts[c.id].acts and not verdicts[c.id].certain
        ]
        scored = [(s, c) for s, c in scored if s >= self.thresholds.ask_model]
        scored.sort(key=lambda sc: -sc[0])
        return [c for _, c in scored[: self.limits.ask]]

    # ---- applying the steps ----------------------------------------------------------------------

    async def apply(self, tx: TenantTx, steps: Sequence[Step], trigger: Trigger, now: datetime) -> list[Step]:
        """Each step whose observations are all still current (others wait for their own event)."""
        involved = {m for s in steps for m in s.members}
        current = await tx.consolidation.lock_current(sorted(involved, key=lambda i: i.int))
        actor = CONSUMER if trigger == "event" else "sweep"
        changes: list[Change] = []
        applied: list[Step] = []
        for step in steps:
            if any(m not in current for m in step.members):
                continue
            result_id = await self._result(tx, step, changes)
            if step.decision is Decision.conflict:
                a, b = step.sources
                await tx.consolidation.link(a.id, b.id)
            else:
                assert result_id is not None
                for source in step.sources:
                    at = step.valid_to.get(source.id, now)
                    revised = await tx.consolidation.supersede([source.id], result_id, at)
                    changes.extend(
                        Change(i, tx.tenant_id, source.user_id, WriteOutcome.updated, r) for i, r in revised.items()
                    )
                    current.pop(source.id, None)
            await tx.consolidation.record(self._record(tx.tenant_id, step, result_id, actor, now))
            applied.append(step)
        tx.emit(change_events(changes, SOURCE))
        return applied

    async def _result(self, tx: TenantTx, step: Step, changes: list[Change]) -> uuid.UUID | None:
        """The observation a step's sources are superseded by (a draft is written first)."""
        if isinstance(step.result, Observation):
            return step.result.id
        if not isinstance(step.result, ObservationDraft):
            return None
        [written] = await tx.observations.write_many([step.result])
        step.result = written.observation
        if written.outcome is WriteOutcome.created:
            sums = feedback_sums(step.sources)
            if sums != FeedbackCounts():
                await tx.observations.count_feedback({written.observation.id: sums})
            changes.append(written.change)
        return written.observation.id

    @staticmethod
    def _record(tenant: str, step: Step, result_id: uuid.UUID | None, actor: str, now: datetime) -> ConsolidationRecord:
        sources = [s.id for s in step.sources]
        newest = max(step.sources, key=lambda s: (s.created_at, s.id.int)).id
        return ConsolidationRecord(
            id=uuid.uuid4(),
            tenant_id=tenant,
            decision=cast(Literal["duplicate", "update", "conflict", "digest"], step.decision.value),
            anchor_id=result_id or newest,
            result_id=result_id,
            source_ids=sources,
            reason=step.reason,
            path=step.path.value,
            model=step.model,
            actor=actor,
            created_at=now,
        )

    @staticmethod
    def _telemetry(
        tenant: str,
        obs: Observation,
        applied: Sequence[Step],
        trigger: Trigger,
        cost: Cost | None,
        failure: str | None,
        started: float,
    ) -> TelemetryRecord:
        decision = applied[0].decision.value if applied else "unrelated"
        size = len({m for s in applied for m in s.members} | {obs.id})
        return record(
            tenant,
            "memory.consolidation",
            MemoryConsolidation(
                decision=cast(Literal["duplicate", "update", "conflict", "digest", "unrelated"], decision),
                cluster_size=size,
                path="llm" if cost is not None else "rules",
                trigger=trigger,
                model=cost.model if cost else None,
                input_tokens=cost.usage.input_tokens if cost else 0,
                output_tokens=cost.usage.output_tokens if cost else 0,
                duration_ms=int((time.perf_counter() - started) * 1000),
                status="failed" if failure else "ok",
                error=failure[:2_000] if failure else None,
            ),
            user_id=obs.user_id,
        )


def restored_events(changes: Sequence[Change]) -> list[CloudEvent]:
    """observation.updated for rows a person brought back (or retired): the index follows."""
    return [
        observation_changed(
            OBSERVATION_UPDATED, c.id, c.revision.isoformat(), tenant_id=c.tenant_id, source=SOURCE, user_id=c.user_id
        )
        for c in changes
    ]
