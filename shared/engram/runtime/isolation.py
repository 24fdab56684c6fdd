"""A bad event fails alone (R-16.1): find the event at fault when a tenant's group fails.

Services apply a batch per tenant in one transaction, so one event whose data PostgreSQL
refuses rolls back its whole tenant group. After the handler ran, `isolate` looks at the
deliveries that failed with anything but an outage (`engram.adapters.failures`): per tenant,
it runs the handler again on each half of the failed group, and again on each half of a half
that fails, down to single events. Halves that succeed are applied in this same delivery;
an event that fails alone with a data error is poison (dead-lettered now, at its first
delivery), one that fails alone with an unknown error is retried alone with backoff. A half
that fails with an outage stops the search: its events are retried later, the dependency
is not hammered. One bad event among n costs about 2 log2(n) extra handler calls.

Handlers are idempotent (inboxes, key upserts, the index converging on PostgreSQL), and a
failed tenant transaction rolled back, so running a subset again applies each event once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from engram.adapters.failures import failure_kind
from engram.domain.deliveries import Batch, Delivery, reason
from engram.domain.errors import InvalidEvent, Poison, Transient

log = structlog.get_logger(__name__)

Handler = Callable[[Batch[Any]], Awaitable[None]]

MAX_HANDLER_CALLS = 64  # per fetch: a pathological batch is left to the retries, not searched forever


def suspect(delivery: Delivery[Any]) -> bool:
    """Failed, not as poison, and not because a dependency is down: maybe this event's fault."""
    outcome = delivery.outcome
    return isinstance(outcome, Transient) and failure_kind(outcome) != "outage"


def _poison(delivery: Delivery[Any]) -> None:
    outcome = delivery.outcome
    assert outcome is not None
    poison = InvalidEvent(f"data error: {reason(outcome)}")
    poison.__cause__ = outcome
    delivery.outcome = poison


class _Search:
    def __init__(self, handler: Handler, consumer: str) -> None:
        self.handler = handler
        self.consumer = consumer
        self.calls = 0

    async def run(self, group: list[Delivery[Any]], *, alone: bool) -> None:
        """`group` failed together (not by an outage): settle each of its events. `alone`: the
        group is one event that already failed while its neighbours did not."""
        if len(group) == 1 and not alone:
            if self.calls >= MAX_HANDLER_CALLS:
                return
            await self.attempt(group)
            alone = True
        if len(group) == 1:
            if suspect(group[0]):
                self.settle_alone(group[0])
            return
        middle = len(group) // 2
        for half in (group[:middle], group[middle:]):
            if self.calls >= MAX_HANDLER_CALLS:
                return  # the rest stay as they are: retried with backoff
            await self.attempt(half)
            failed = [d for d in half if suspect(d)]
            if failed:
                await self.run(failed, alone=len(failed) < len(half) or len(half) == 1)

    async def attempt(self, deliveries: list[Delivery[Any]]) -> None:
        """The handler on these deliveries alone, their outcomes fresh."""
        self.calls += 1
        for d in deliveries:
            d.outcome = None
        try:
            await self.handler(Batch(list(deliveries)))
        except Exception as exc:
            for d in deliveries:
                d.retry(exc)

    def settle_alone(self, delivery: Delivery[Any]) -> None:
        """An event that fails on its own: poison if its data is at fault, else retried later."""
        outcome = delivery.outcome
        if outcome is None or isinstance(outcome, Poison):
            return
        if failure_kind(outcome) == "data":
            _poison(delivery)
            log.warning(
                "worker.poison_isolated",
                consumer=self.consumer,
                event_id=delivery.meta.id,
                tenant=delivery.tenant,
                error=reason(outcome),
            )


async def isolate(handler: Handler, deliveries: Sequence[Delivery[Any]], consumer: str) -> int:
    """Settle the suspect deliveries of a batch the handler has run on; the handler calls it took."""
    search = _Search(handler, consumer)
    groups: dict[str, list[Delivery[Any]]] = {}
    for d in deliveries:
        if suspect(d):
            groups.setdefault(d.tenant, []).append(d)
    alone = len(deliveries) == 1  # the handler saw nothing else
    for group in groups.values():
        await search.run(group, alone=alone)
    return search.calls
