"""The nightly consolidation sweep (R-15.1, source 003), per tenant:

1. every observation created or changed within `lookback` that consolidate-memory has not
   handled at its current revision (its worker was down, an event was dead-lettered, a
   keyed write made an old row current again) is consolidated now; what the worker did
   already is found in its inbox and skipped, so the model is not asked twice;
2. low-priority observations older than `digest_days` are grouped by audience and topic (their
   first tag or concept, else their type), and each group of at least `min_group` becomes one
   digest observation that supersedes them (an LLM writes it when one is configured, one call
   per group; offline it lists the sources' titles; the sources keep their full text). Memory
   units (an assistant's low-priority turns among them) are not digested (the store leaves
   them out of both scans).

A tenant that fails is reported and the others go on; the run's exit code says so.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import structlog

from engram.domain.consolidation import Decision, DecisionPath
from engram.domain.consolidation_plan import Step, digest_cutoff, digest_groups, offline_digest, topic_of
from engram.domain.telemetry import MemoryConsolidation, TelemetryRecord, record
from engram.ports import ConsolidationScan
from engram.services.consolidation import CONSUMER, Consolidator
from engram.services.consolidation_llm import Cost, JudgementFailed

log = structlog.get_logger(__name__)


@dataclass
class SweepReport:
    tenants: int = 0
    looked_at: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    digested: int = 0  # observations united in digests
    failed: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        return {
            "tenants": self.tenants,
            "looked_at": self.looked_at,
            "decisions": dict(self.decisions),
            "digested": self.digested,
            "failed_tenants": self.failed,
        }


class ConsolidationSweep:
    def __init__(
        self,
        consolidator: Consolidator,
        scan: ConsolidationScan | None,
        *,
        lookback: timedelta = timedelta(days=2),
        digest_days: int = 30,
        min_group: int = 3,
        per_tenant: int = 2_000,
    ) -> None:
        self.consolidator = consolidator
        self.scan = scan
        self.lookback = lookback
        self.digest_days = digest_days
        self.min_group = min_group
        self.per_tenant = per_tenant

    async def run(self, now: datetime | None = None, tenants: Sequence[str] | None = None) -> SweepReport:
        now = now or datetime.now(UTC)
        report = SweepReport()
        if tenants is None:
            if self.scan is None:
                raise RuntimeError("the sweep needs the database's tenant scan (or a list of tenants)")
            tenants = await self.scan.tenants(now - self.lookback, digest_cutoff(now, self.digest_days))
        for tenant in tenants:
            report.tenants += 1
            try:
                await self.tenant(tenant, now, report)
            except Exception as exc:  # one tenant's failure does not stop the others
                log.error("consolidation.sweep_failed", tenant=tenant, error=str(exc)[:500])
                report.failed.append(tenant)
        return report

    async def tenant(self, tenant: str, now: datetime, report: SweepReport) -> None:
        async with self.consolidator.uow.tenant(tenant) as tx:
            changed = await tx.consolidation.changed_since(now - self.lookback, self.per_tenant)
        for obs in changed:
            report.looked_at += 1
            outcome = await self.consolidator.consolidate(tenant, obs.id, trigger="sweep")
            for step in outcome.steps:
                report.decisions[step.decision.value] += 1
        await self.digest(tenant, now, report)

    async def digest(self, tenant: str, now: datetime, report: SweepReport) -> None:
        cutoff = digest_cutoff(now, self.digest_days)
        async with self.consolidator.uow.tenant(tenant) as tx:
            old = await tx.consolidation.low_priority(cutoff, self.per_tenant)
        for group in digest_groups(old, older_than=cutoff, min_size=self.min_group):
            started = time.perf_counter()
            cost, failure = None, None
            title = narrative = None
            judge = self.consolidator.judge
            if judge is not None and judge.available:
                try:
                    written, cost = await judge.digest(group, self.digest_days)
                    title, narrative = written.title, written.narrative
                except JudgementFailed as exc:  # the offline digest instead
                    cost, failure = exc.cost, str(exc)
            path = DecisionPath.llm if title else DecisionPath.rules
            reason = f"{len(group)} low-priority memories on '{topic_of(group[0])}' older than {self.digest_days} days"
            step = Step(
                Decision.digest,
                list(group),
                offline_digest(group, title=title, narrative=narrative),
                reason,
                path,
                cost.model if cost and title else None,
            )
            async with self.consolidator.uow.tenant(tenant, consumer=CONSUMER) as tx:
                applied = await self.consolidator.apply(tx, [step], "sweep", now)
                await tx.telemetry.write([self._telemetry(tenant, group[0].user_id, applied, cost, failure, started)])
            if applied:
                report.decisions[Decision.digest.value] += 1
                report.digested += len(group)

    @staticmethod
    def _telemetry(
        tenant: str, user: str | None, applied: list[Step], cost: Cost | None, failure: str | None, started: float
    ) -> TelemetryRecord:
        return record(
            tenant,
            "memory.consolidation",
            MemoryConsolidation(
                decision="digest",
                cluster_size=len(applied[0].sources) if applied else 0,
                path="llm" if cost is not None else "rules",
                trigger="sweep",
                model=cost.model if cost else None,
                input_tokens=cost.usage.input_tokens if cost else 0,
                output_tokens=cost.usage.output_tokens if cost else 0,
                duration_ms=int((time.perf_counter() - started) * 1000),
                status="failed" if failure else ("ok" if applied else "skipped"),
                error=failure[:2_000] if failure else None,
            ),
            user_id=user,
        )
