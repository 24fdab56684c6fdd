"""Bounded growth (R-16.2): the workers prune the inbox and the embedding cache.

Rules (README, "Bounded growth"):
- `processed_events` of a consumer: an entry is deleted `ENGRAM_INBOX_RETENTION_HOURS` (24 h)
  after its event was applied. It only has to outlive the redelivery horizon
  (`engram.domain.topology.redelivery_horizon_seconds`: the duplicate window plus
  `max_deliver` x (`ack_wait` + the longest backoff), about 25 minutes for extract-observation);
  a shorter setting is used as given, with a warning, because a redelivery after it would
  be applied again.
- `embedding_cache`: an entry not used for `ENGRAM_EMBEDDING_CACHE_DAYS` (30) is deleted; a
  batch that finds an entry marks it used (at most once a day), so a text still being indexed
  keeps its vector. Pruned vectors are computed again when needed.

Each worker prunes its own consumer's inbox every `ENGRAM_PRUNE_INTERVAL_SECONDS`, in
statements of at most `batch` rows (short locks); embed-index also prunes the cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog

from engram.domain.topology import redelivery_horizon_seconds
from engram.ports import Maintenance

log = structlog.get_logger(__name__)

CACHE_OWNER = "embed-index"


@dataclass(frozen=True)
class Pruned:
    inbox: int = 0
    embedding_cache: int = 0


class Pruning:
    def __init__(
        self,
        maintenance: Maintenance,
        *,
        inbox_retention: timedelta,
        cache_retention: timedelta,
        batch: int = 5_000,
    ) -> None:
        self.maintenance = maintenance
        self.inbox_retention = inbox_retention
        self.cache_retention = cache_retention
        self.batch = batch

    def check(self, consumer: str) -> None:
        horizon = timedelta(seconds=redelivery_horizon_seconds(consumer))
        if self.inbox_retention < horizon:
            log.warning(
                "pruning.inbox_retention_below_horizon",
                consumer=consumer,
                retention_s=self.inbox_retention.total_seconds(),
                horizon_s=horizon.total_seconds(),
                hint="a redelivery after the retention would be applied again",
            )

    async def _drain(self, prune: Callable[[int], Awaitable[int]]) -> int:
        total = 0
        while True:
            deleted = await prune(self.batch)
            total += deleted
            if deleted < self.batch:
                return total

    async def run_once(self, consumer: str, now: datetime | None = None) -> Pruned:
        now = now or datetime.now(UTC)
        inbox_cutoff, cache_cutoff = now - self.inbox_retention, now - self.cache_retention
        inbox = await self._drain(lambda n: self.maintenance.prune_inbox(consumer, inbox_cutoff, n))
        cache = 0
        if consumer == CACHE_OWNER:
            cache = await self._drain(lambda n: self.maintenance.prune_embedding_cache(cache_cutoff, n))
        if inbox or cache:
            log.info("pruning.done", consumer=consumer, inbox=inbox, embedding_cache=cache)
        return Pruned(inbox, cache)

    async def forever(self, consumer: str, interval: float) -> None:
        self.check(consumer)
        while True:
            try:
                await self.run_once(consumer)
            except Exception as exc:  # the database may be down: the next round tries again
                log.warning("pruning.failed", consumer=consumer, error=str(exc))
            await asyncio.sleep(interval)
