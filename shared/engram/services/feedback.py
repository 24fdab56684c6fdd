"""Feedback (R-9): the memory API publishes it, the record-feedback worker applies it.

The worker processes a batch per tenant in one transaction:
- it claims each event in the inbox (`processed_events`) first, with ON CONFLICT DO NOTHING,
  so redelivery, re-publishing and a concurrent worker never apply an event twice;
- it writes one `observation_feedback` row per event (what recall reads: a user's
  `rejected` rows hide that observation from that user);
- it folds the counters of the whole batch into one UPDATE that touches every observation
  once: `relevance_count` +1 per retrieved, `cited_count`, `confirmed_count`,
  `rejected_count`; `verified` becomes true only when a human confirmed (R-12.1), and then
  an `observation.updated` event goes through the outbox so the index learns it.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

import structlog
from cloudevents.http import CloudEvent
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engram.domain.deliveries import Batch, Delivery
from engram.domain.erasure import given_before_erasure
from engram.domain.errors import InvalidEvent, NotFound, Unprocessable
from engram.domain.events import (
    FEEDBACK_RECORDED,
    OBSERVATION_UPDATED,
    FeedbackRecorded,
    new_event,
    observation_changed,
    parse_data,
)
from engram.domain.models import FeedbackCounts, FeedbackKind, FeedbackRow
from engram.domain.scopes import Permission, Principal, Visibility, require
from engram.ports import EventBus, TenantTx, UnitOfWork

log = structlog.get_logger(__name__)

CONSUMER = "record-feedback"
API_SOURCE = "/engram/memory-api"
WORKER_SOURCE = "/engram/record-feedback"


class FeedbackRequest(BaseModel):
    """`POST /api/ai/memory/feedback`: feedback on one observation, or a 1..5 rating of a query."""

    model_config = ConfigDict(extra="forbid")

    kind: FeedbackKind
    observation_id: uuid.UUID | None = None
    rating: int | None = Field(default=None, ge=1, le=5)
    query_id: uuid.UUID | None = None
    stream_origin: str | None = Field(default=None, min_length=1, max_length=64)


class FeedbackService:
    """The API side: check, then publish `feedback.recorded` (the worker applies it)."""

    def __init__(self, uow: UnitOfWork, bus: EventBus) -> None:
        self.uow = uow
        self.bus = bus

    async def submit(self, principal: Principal, body: FeedbackRequest) -> str:
        require(principal, Permission.create_feedback)
        try:
            data = FeedbackRecorded(
                kind=body.kind,
                observation_id=body.observation_id,
                rating=body.rating,
                query_id=body.query_id,
                stream_origin=body.stream_origin,
                actor="human" if principal.is_human else "agent",
            )
        except ValidationError as exc:
            missing = "rating" if body.kind is FeedbackKind.rated else "observation_id"
            raise Unprocessable(missing, exc.errors()[0]["msg"].removeprefix("Value error, ")) from exc
        if body.kind in (FeedbackKind.rejected, FeedbackKind.confirmed) and principal.user_id is None:
            raise Unprocessable("kind", f"'{body.kind.value}' is a user's judgement; this agent key acts for no user")
        if data.observation_id is not None:
            async with self.uow.tenant(principal.tenant_id) as tx:
                obs = await tx.observations.get(data.observation_id)
            if obs is None or not Visibility.for_principal(principal, want_sensitive=True).allows(obs):
                raise NotFound(f"observation {data.observation_id} not found")
        subject = f"observation/{data.observation_id}" if data.observation_id else f"query/{data.query_id}"
        event = new_event(
            FEEDBACK_RECORDED,
            data,
            tenant_id=principal.tenant_id,
            source=API_SOURCE,
            user_id=principal.user_id,
            subject=subject,
        )
        await self.bus.publish(event)
        return str(event["id"])


def decode_feedback(event: CloudEvent) -> FeedbackRecorded:
    """A `feedback.recorded` event's data; when it was given is its delivery's `meta.occurred_at`
    (the worker refuses a `time` that is no timestamp)."""
    if event["type"] != FEEDBACK_RECORDED.type:
        raise InvalidEvent(f"record-feedback does not handle {event['type']}")
    data = cast(FeedbackRecorded, parse_data(event["type"], event.get_data()))
    if data.kind in (FeedbackKind.rejected, FeedbackKind.confirmed) and not event.get("userid"):
        raise InvalidEvent(f"'{data.kind.value}' feedback needs the 'userid' extension")
    return data


@dataclass
class _Item:
    """Feedback on one observation (or one rating) with the inbox key it is claimed under."""

    key: str
    user_id: str | None
    data: FeedbackRecorded
    time: datetime | None


@dataclass
class BatchReport:
    applied: int = 0
    duplicates: int = 0
    orphaned: int = 0  # feedback on an observation deleted in the meantime: acknowledged, no effect
    erased: int = 0  # given before its user's memory was erased: acknowledged, dropped
    verified: list[uuid.UUID] = field(default_factory=list)


def _items(delivery: Delivery[FeedbackRecorded]) -> list[_Item]:
    """The event as one item per observation: a search's `retrieved` event with `observation_ids`
    becomes one item per hit, each with a key of its own (claimed and counted like single events)."""
    data, user_id, key, at = delivery.data, delivery.meta.user_id, delivery.key, delivery.meta.occurred_at
    if data.observation_ids is None:
        return [_Item(key, user_id, data, at)]
    return [
        _Item(
            f"{key}\x1f{observation_id}",
            user_id,
            data.model_copy(update={"observation_id": observation_id, "observation_ids": None}),
            at,
        )
        for observation_id in data.observation_ids
    ]


def _erased(item: _Item, erased_at: dict[str, datetime]) -> bool:
    """Given before its user's personal memory was erased (an event without a time counts as before)."""
    when = erased_at.get(item.user_id or "")
    return when is not None and (item.time is None or item.time <= when)


def _counts(items: list[_Item], targets: set[uuid.UUID]) -> tuple[dict[uuid.UUID, FeedbackCounts], set[uuid.UUID]]:
    """The counters the items add per observation, and the observations a human confirmed."""
    counts: dict[uuid.UUID, FeedbackCounts] = defaultdict(FeedbackCounts)
    confirmed_by_human: set[uuid.UUID] = set()
    for item in items:
        obs_id = item.data.observation_id
        if obs_id is None or obs_id not in targets:
            continue
        c = counts[obs_id]
        kind = item.data.kind
        if kind is FeedbackKind.retrieved:
            c.retrieved += 1
        elif kind is FeedbackKind.cited:
            c.cited += 1
        elif kind is FeedbackKind.confirmed:
            c.confirmed += 1
            if item.data.actor == "human":
                confirmed_by_human.add(obs_id)
        elif kind is FeedbackKind.rejected:
            c.rejected += 1
    return counts, confirmed_by_human


class FeedbackRecorder:
    """The worker side (record-feedback)."""

    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow
        self.last_report = BatchReport()

    async def handle(self, batch: Batch[FeedbackRecorded]) -> None:
        report = BatchReport()
        for tenant, deliveries in batch.by_tenant().items():
            try:
                await self._apply(tenant, deliveries, report)
            except Exception as exc:  # transient: the whole tenant batch is retried
                log.warning("feedback.tenant_batch_failed", tenant=tenant, error=str(exc))
                for d in deliveries:
                    d.retry(exc)
        self.last_report = report

    async def _apply(self, tenant: str, deliveries: list[Delivery[FeedbackRecorded]], report: BatchReport) -> None:
        items = [item for d in deliveries for item in _items(d)]
        unique = {item.key: item for item in items}  # the same event twice in one fetch counts once
        report.duplicates += len(items) - len(unique)
        async with self.uow.tenant(tenant, consumer=CONSUMER) as tx:
            claimed = await tx.inbox.claim(list(unique))
            todo = [item for k, item in unique.items() if k in claimed]
            report.duplicates += len(unique) - len(todo)
            if not todo:
                return
            # the tombstones, read under the users' erasure locks (engram.domain.erasure)
            erased_at = await tx.erasures.hold([d.meta.user_id for d in deliveries if d.meta.user_id])
            if erased_at:
                before = len(todo)
                todo = [item for item in todo if not _erased(item, erased_at)]
                report.erased += before - len(todo)
                for d in deliveries:
                    if given_before_erasure([d.meta.user_id], d.meta.occurred_at, erased_at):
                        d.erased()  # acknowledged and deleted from the stream
            await self._count(tx, tenant, todo, report)

    async def _count(self, tx: TenantTx, tenant: str, todo: list[_Item], report: BatchReport) -> None:
        # lock the observations (no deadlock between workers) and learn which still exist and
        # which are verified already
        existing = await tx.observations.lock(
            sorted({item.data.observation_id for item in todo if item.data.observation_id is not None})
        )
        kept = [item for item in todo if item.data.observation_id is None or item.data.observation_id in existing]
        report.orphaned += len(todo) - len(kept)
        if len(kept) < len(todo):
            log.info("feedback.observation_gone", tenant=tenant, skipped=len(todo) - len(kept))
        await tx.feedback.add(
            [
                FeedbackRow(
                    item.data.observation_id,
                    item.user_id,
                    item.data.kind,
                    item.data.rating,
                    item.data.query_id,
                    item.data.stream_origin,
                )
                for item in kept
            ]
        )
        counts, confirmed_by_human = _counts(kept, set(existing))
        newly_verified = {i for i in confirmed_by_human if not existing[i].verified}
        for i in newly_verified:
            counts[i].verify = True
        revisions = await tx.observations.count_feedback(counts)
        tx.emit(
            observation_changed(
                OBSERVATION_UPDATED,
                i,
                revisions[i].isoformat(),
                tenant_id=tenant,
                source=WORKER_SOURCE,
                user_id=existing[i].user_id,
            )
            for i in sorted(newly_verified)
        )
        report.verified.extend(sorted(newly_verified))
        report.applied += len(kept)
