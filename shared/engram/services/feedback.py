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
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

import structlog
from cloudevents.http import CloudEvent
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engram.adapters.observations import ObservationStore
from engram.adapters.postgres import Database
from engram.domain.events import (
    FEEDBACK_RECORDED,
    OBSERVATION_UPDATED,
    FeedbackRecorded,
    InvalidEvent,
    new_event,
    observation_changed,
    parse_data,
)
from engram.domain.models import FeedbackKind
from engram.domain.scopes import Permission, Principal, Visibility
from engram.ports import EventBus
from engram.services import outbox
from engram.services.memory import NotFound, Unprocessable, require

log = structlog.get_logger(__name__)

CONSUMER = "record-feedback"
API_SOURCE = "/engram/memory-api"
WORKER_SOURCE = "/engram/record-feedback"

Outcome = BaseException | None


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

    def __init__(self, db: Database, bus: EventBus) -> None:
        self.db = db
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
            async with self.db.tenant(principal.tenant_id) as conn:
                obs = await ObservationStore(conn).get(data.observation_id)
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


@dataclass
class _Parsed:
    index: int
    key: str
    user_id: str | None
    data: FeedbackRecorded
    time: datetime | None


@dataclass
class _Delta:
    retrieved: int = 0
    cited: int = 0
    confirmed: int = 0
    rejected: int = 0
    human_confirmed: bool = False


@dataclass
class BatchReport:
    applied: int = 0
    duplicates: int = 0
    orphaned: int = 0  # feedback on an observation deleted in the meantime: acknowledged, no effect
    erased: int = 0  # given before its user's memory was erased: acknowledged, dropped
    verified: list[uuid.UUID] = field(default_factory=list)


def event_key(event: CloudEvent) -> str:
    return f"{event['source']}\x1f{event['id']}"


def _parse(index: int, event: CloudEvent) -> tuple[str, list[_Parsed]]:
    """The event as one item per observation: a search's `retrieved` event with `observation_ids`
    becomes one item per hit, each with a key of its own (claimed and counted like single events)."""
    tenant = event.get("tenantid")
    if not isinstance(tenant, str) or not tenant.strip():
        raise InvalidEvent("the 'tenantid' extension is required")
    if event["type"] != FEEDBACK_RECORDED.type:
        raise InvalidEvent(f"record-feedback does not handle {event['type']}")
    data = cast(FeedbackRecorded, parse_data(event["type"], event.get_data()))
    user = event.get("userid")
    user_id = str(user) if user else None
    if data.kind in (FeedbackKind.rejected, FeedbackKind.confirmed) and user_id is None:
        raise InvalidEvent(f"'{data.kind.value}' feedback needs the 'userid' extension")
    sent = event.get("time")
    try:
        at = datetime.fromisoformat(str(sent).replace("Z", "+00:00")) if sent else None
    except ValueError as exc:
        raise InvalidEvent(f"'time' is not an RFC 3339 timestamp: {sent!r}") from exc
    if at is not None and at.tzinfo is None:
        raise InvalidEvent(f"'time' needs a UTC offset: {sent!r}")
    key = event_key(event)
    if data.observation_ids is None:
        return tenant, [_Parsed(index, key, user_id, data, at)]
    return tenant, [
        _Parsed(
            index,
            f"{key}\x1f{observation_id}",
            user_id,
            data.model_copy(update={"observation_id": observation_id, "observation_ids": None}),
            at,
        )
        for observation_id in data.observation_ids
    ]


def _erased(p: _Parsed, erased_at: dict[str, datetime]) -> bool:
    """Given before its user's personal memory was erased (an event without a time counts as before)."""
    when = erased_at.get(p.user_id or "")
    return when is not None and (p.time is None or p.time <= when)


class FeedbackRecorder:
    """The worker side (record-feedback)."""

    def __init__(self, db: Database, bus: EventBus) -> None:
        self.db = db
        self.bus = bus
        self.last_report = BatchReport()

    async def handle_batch(self, events: Sequence[CloudEvent]) -> list[Outcome]:
        outcomes: list[Outcome] = [None] * len(events)
        tenants: dict[str, list[_Parsed]] = defaultdict(list)
        for i, event in enumerate(events):
            try:
                tenant, parsed = _parse(i, event)
                tenants[tenant].extend(parsed)
            except InvalidEvent as exc:
                outcomes[i] = exc
        report = BatchReport()
        for tenant, items in tenants.items():
            try:
                await self._apply(tenant, items, report)
            except Exception as exc:  # transient: the whole tenant batch is retried
                log.warning("feedback.tenant_batch_failed", tenant=tenant, error=str(exc))
                for p in items:
                    outcomes[p.index] = exc
        self.last_report = report
        return outcomes

    async def _apply(self, tenant: str, items: list[_Parsed], report: BatchReport) -> None:
        unique = {p.key: p for p in items}  # the same event twice in one fetch counts once
        report.duplicates += len(items) - len(unique)
        pending: list[outbox.Pending] = []
        async with self.db.tenant(tenant) as conn:
            claimed = {
                r["event_key"]
                for r in await conn.fetch(
                    "INSERT INTO processed_events (tenant_id, consumer, event_key)"
                    " SELECT $1, $2, k FROM unnest($3::text[]) AS k"
                    " ON CONFLICT DO NOTHING RETURNING event_key",
                    tenant,
                    CONSUMER,
                    list(unique),
                )
            }
            todo = [p for k, p in unique.items() if k in claimed]
            report.duplicates += len(unique) - len(todo)
            if not todo:
                return
            users = sorted({p.user_id for p in todo if p.user_id is not None})
            erased_at = {
                r["user_id"]: r["erased_at"]
                for r in await conn.fetch(
                    "SELECT user_id, erased_at FROM personal_data_erasures WHERE tenant_id = $1"
                    " AND user_id = ANY($2::text[])",
                    tenant,
                    users,
                )
            }
            if erased_at:
                before = len(todo)
                todo = [p for p in todo if not _erased(p, erased_at)]
                report.erased += before - len(todo)
            wanted = sorted({p.data.observation_id for p in todo if p.data.observation_id is not None})
            # lock the observations in id order (no deadlock between workers) and learn
            # which still exist and which are verified already
            rows = await conn.fetch(
                "SELECT id, user_id, verified FROM observations WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE",
                wanted,
            )
            existing = {r["id"]: r for r in rows}
            kept = [p for p in todo if p.data.observation_id is None or p.data.observation_id in existing]
            report.orphaned += len(todo) - len(kept)
            if len(kept) < len(todo):
                log.info("feedback.observation_gone", tenant=tenant, skipped=len(todo) - len(kept))
            await conn.execute(
                "INSERT INTO observation_feedback"
                " (tenant_id, observation_id, user_id, kind, rating, query_id, stream_origin)"
                " SELECT $1, o, u, k, r, q, s"
                " FROM unnest($2::uuid[], $3::text[], $4::text[], $5::smallint[], $6::uuid[], $7::text[])"
                " AS x(o, u, k, r, q, s)",
                tenant,
                [p.data.observation_id for p in kept],
                [p.user_id for p in kept],
                [p.data.kind.value for p in kept],
                [p.data.rating for p in kept],
                [p.data.query_id for p in kept],
                [p.data.stream_origin for p in kept],
            )
            deltas: dict[uuid.UUID, _Delta] = defaultdict(_Delta)
            for p in kept:
                if p.data.observation_id is None:
                    continue
                d = deltas[p.data.observation_id]
                kind = p.data.kind
                if kind is FeedbackKind.retrieved:
                    d.retrieved += 1
                elif kind is FeedbackKind.cited:
                    d.cited += 1
                elif kind is FeedbackKind.confirmed:
                    d.confirmed += 1
                    d.human_confirmed = d.human_confirmed or p.data.actor == "human"
                elif kind is FeedbackKind.rejected:
                    d.rejected += 1
            if deltas:
                ids = sorted(deltas)
                newly_verified = {i for i in ids if deltas[i].human_confirmed and not existing[i]["verified"]}
                updated = await conn.fetch(
                    "UPDATE observations o SET"
                    " relevance_count = o.relevance_count + d.retrieved,"
                    " cited_count = o.cited_count + d.cited,"
                    " confirmed_count = o.confirmed_count + d.confirmed,"
                    " rejected_count = o.rejected_count + d.rejected,"
                    " verified = o.verified OR d.verify,"
                    " updated_at = CASE WHEN d.verify AND NOT o.verified"
                    "   THEN greatest(clock_timestamp(), o.updated_at + interval '1 microsecond')"
                    "   ELSE o.updated_at END"
                    " FROM unnest($1::uuid[], $2::int[], $3::int[], $4::int[], $5::int[], $6::boolean[])"
                    "   AS d(id, retrieved, cited, confirmed, rejected, verify)"
                    " WHERE o.id = d.id"
                    " RETURNING o.id, o.updated_at",
                    ids,
                    [deltas[i].retrieved for i in ids],
                    [deltas[i].cited for i in ids],
                    [deltas[i].confirmed for i in ids],
                    [deltas[i].rejected for i in ids],
                    [i in newly_verified for i in ids],
                )
                revisions: dict[uuid.UUID, datetime] = {r["id"]: r["updated_at"] for r in updated}
                events = [
                    observation_changed(
                        OBSERVATION_UPDATED,
                        i,
                        revisions[i].isoformat(),
                        tenant_id=tenant,
                        source=WORKER_SOURCE,
                        user_id=existing[i]["user_id"],
                    )
                    for i in sorted(newly_verified)
                ]
                pending = await outbox.stage(conn, tenant, events)
                report.verified.extend(sorted(newly_verified))
            report.applied += len(kept)
        await outbox.publish(self.db, self.bus, pending)
