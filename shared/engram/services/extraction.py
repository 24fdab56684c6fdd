"""extract-observation (R-5): domain events by YAML rules, manual marks, chat turns.

A batch is processed per tenant in one transaction: the inbox (`processed_events`) skips
events already applied, observations are written with one statement and `memory.extraction`
rows are written: one per chat extraction (its model, tokens and duration), one per trigger
and outcome for the rule-based ones of the batch. Re-publishing, redelivery and concurrent
workers therefore never create duplicates (R-5.4).

Change events are announced by redelivery, not by outbox rows (`Announce.redelivery`): the
inbox keeps what each event produced, so an event whose batch committed but was never acked
announces its observations again when it is redelivered (same revision = same event id, so
JetStream drops what did go out). That saves the outbox's insert and delete on the ingest path.

A chat turn's extraction status sits in its assistant message's `memory_trace` (R-4.4):
"queued" when the turn is written, "done" in the transaction that writes what was extracted,
"failed" with the reason when the extraction was refused or the runner gave up on it
(`gave_up`, after the last delivery). A session whose summary fails that way is `failed`.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import structlog
from cloudevents.http import CloudEvent
from pydantic import ValidationError

from engram.domain.deliveries import Batch, Delivery, EventMeta, Rejected
from engram.domain.erasure import given_before_erasure
from engram.domain.errors import InvalidEvent
from engram.domain.events import (
    CHAT_TURN_COMPLETED,
    OBSERVATION_MARKED,
    SESSION_ENDED,
    ChatTurnCompleted,
    ObservationMarked,
    SessionEnded,
    change_events,
    is_engram_type,
    parse_data,
)
from engram.domain.observation import ObservationDraft, Provenance, Source, TriggerSource, WriteOutcome
from engram.domain.rules import RuleSet, apply_rule, event_context
from engram.domain.telemetry import TelemetryRecord, record
from engram.ports import Announce, TenantTx, UnitOfWork
from engram.services.extraction_plan import Extracted, Planned
from engram.services.extraction_stats import ExtractionStats
from engram.services.memory import marked_draft

log = structlog.get_logger(__name__)

CONSUMER = "extract-observation"
SOURCE = "/engram/extract-observation"


@dataclass(frozen=True)
class DomainEvent:
    """A producer's event (CRM, orders, invoicing): mapped to observations by the YAML rules."""

    data: Any


ChatEvent = ChatTurnCompleted | SessionEnded
ExtractionInput = ObservationMarked | ChatTurnCompleted | SessionEnded | DomainEvent


def decode_extraction(event: CloudEvent) -> ExtractionInput:
    """The data of an event extract-observation handles (InvalidEvent for anything else)."""
    etype = event["type"]
    if etype == OBSERVATION_MARKED.type:
        marked = cast(ObservationMarked, parse_data(etype, event.get_data()))
        if not event.get("userid"):
            raise InvalidEvent("a marked observation needs the 'userid' extension")
        return marked
    if etype == CHAT_TURN_COMPLETED.type:
        turn = cast(ChatTurnCompleted, parse_data(etype, event.get_data()))
        if not event.get("userid"):
            raise InvalidEvent("a chat turn event needs the 'userid' extension")
        return turn
    if etype == SESSION_ENDED.type:
        return cast(SessionEnded, parse_data(etype, event.get_data()))
    if is_engram_type(etype):
        raise InvalidEvent(f"extract-observation does not handle {etype}")
    return DomainEvent(event.get_data())


# Chat extraction for one chat turn or ended session. It opens its own short transactions: none
# may stay open while a model answers.
ChatExtractor = Callable[[Delivery[ChatEvent]], Awaitable[Extracted]]


@dataclass
class Refused:
    """An extraction that was refused: an invalid event, or the model's output invalid twice (chat)."""

    reason: str
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: int = 0

    @classmethod
    def of(cls, exc: InvalidEvent) -> Refused:
        """What a refusal cost (a chat extraction's calls are kept on its error, R-5.5)."""
        return cls(
            str(exc),
            getattr(exc, "model", None),
            getattr(exc, "input_tokens", 0),
            getattr(exc, "output_tokens", 0),
            getattr(exc, "duration_ms", 0),
        )


def failed_record(tenant: str, trigger: str, refused: Refused, status: str = "failed") -> TelemetryRecord:
    """The `memory.extraction` row of an extraction that produced nothing (R-5.5)."""
    return record(
        tenant,
        "memory.extraction",
        {
            "trigger": trigger,
            "count": 0,
            "dedup_hits": 0,
            "model": refused.model,
            "input_tokens": refused.input_tokens,
            "output_tokens": refused.output_tokens,
            "duration_ms": refused.duration_ms,
            "status": status,
            "error": refused.reason[:2000],
        },
    )


@dataclass
class TenantWork:
    planned: list[Planned] = field(default_factory=list)
    unknown: int = 0
    invalid: list[str] = field(default_factory=list)
    invalid_chat: list[Refused] = field(default_factory=list)


def is_chat_event(event_type: str) -> bool:
    return event_type.startswith("io.engram.chat.") or event_type == SESSION_ENDED.type


def trigger_of(event_type: str) -> str:
    return "chat" if is_chat_event(event_type) else "manual" if event_type == OBSERVATION_MARKED.type else "hook"


def _uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None


def traced_ids(meta: EventMeta, data: Any) -> tuple[uuid.UUID | None, uuid.UUID | None]:
    """The assistant message (chat turn) and the session (ended session) whose state shows an
    extraction's end, from typed or raw data (a rejected event still names them)."""
    if isinstance(data, ChatTurnCompleted):
        return data.assistant_message_id, None
    if isinstance(data, SessionEnded):
        return None, data.session_id
    raw = data if isinstance(data, dict) else {}
    if meta.type == CHAT_TURN_COMPLETED.type:
        return _uuid(raw.get("assistant_message_id")), None
    if meta.type == SESSION_ENDED.type:
        return None, _uuid(raw.get("session_id"))
    return None, None


def domain_drafts(rules: RuleSet, delivery: Delivery[DomainEvent]) -> list[ObservationDraft]:
    data = delivery.data.data
    if not isinstance(data, dict):
        raise InvalidEvent("domain event data must be a JSON object")
    context = event_context(delivery.meta.attributes, data)
    said_at = delivery.meta.said_by(datetime.now(UTC))  # what the event reports happened then
    drafts = []
    for rule in rules.for_type(delivery.meta.type):
        rendered = apply_rule(rule, context)
        try:
            drafts.append(
                ObservationDraft(
                    tenant_id=delivery.tenant,
                    source=Source.system,
                    verified=False,
                    confidence=1.0,
                    trigger_source=TriggerSource.hook,
                    provenance=Provenance(source_event_id=delivery.meta.id),
                    said_at=said_at,
                    **rendered.model_dump(),
                )
            )
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise InvalidEvent(f"rule for {delivery.meta.type} produced an invalid observation: {problems}") from exc
    return drafts


class Extraction:
    def __init__(
        self,
        uow: UnitOfWork,
        rules: RuleSet,
        observation_types: frozenset[str],
        chat_extractor: ChatExtractor | None = None,
    ) -> None:
        self.uow = uow
        self.rules = rules
        self.observation_types = observation_types
        self.chat_extractor = chat_extractor

    def _plan(self, delivery: Delivery[Any], work: TenantWork) -> None:
        data = delivery.data
        if isinstance(data, ObservationMarked):
            if data.type not in self.observation_types:
                raise InvalidEvent(f"unknown observation type {data.type!r}")
            user = delivery.meta.user_id
            assert user is not None  # the decoder requires it
            try:
                said_at = delivery.meta.said_by(datetime.now(UTC))
                draft = marked_draft(delivery.tenant, user, data, delivery.meta.id, said_at)
            except ValidationError as exc:
                raise InvalidEvent(f"marked statement is not a valid observation: {exc.errors()[0]['msg']}") from exc
            work.planned.append(Planned(delivery, TriggerSource.manual, Extracted([draft])))
        elif not isinstance(data, DomainEvent):
            raise InvalidEvent(f"extract-observation does not handle {delivery.meta.type}")
        elif not self.rules.for_type(delivery.meta.type):
            work.unknown += 1  # acknowledged and counted
        else:
            work.planned.append(Planned(delivery, TriggerSource.hook, Extracted(domain_drafts(self.rules, delivery))))

    async def _extract(self, delivery: Delivery[ChatEvent], work: TenantWork) -> None:
        assert self.chat_extractor is not None
        try:
            work.planned.append(Planned(delivery, TriggerSource.chat, await self.chat_extractor(delivery)))
        except InvalidEvent as exc:
            delivery.poison(exc)
            work.invalid_chat.append(Refused.of(exc))
            await self._trace_failure(delivery.tenant, *traced_ids(delivery.meta, delivery.data), str(exc))
        except Exception as exc:
            delivery.retry(exc)

    async def handle(self, batch: Batch[ExtractionInput]) -> None:
        for tenant, deliveries in batch.by_tenant().items():
            work = TenantWork()
            try:  # what its user gave before an erasure is dropped before any work (no LLM call)
                deliveries = await self._not_erased(tenant, deliveries)
            except Exception as exc:
                for d in deliveries:
                    d.retry(exc)
                continue
            for d in deliveries:
                if self.chat_extractor is not None and isinstance(d.data, ChatTurnCompleted | SessionEnded):
                    await self._extract(cast(Delivery[ChatEvent], d), work)
                    continue
                try:
                    self._plan(d, work)
                except InvalidEvent as exc:
                    d.poison(exc)
                    work.invalid.append(str(exc))
            try:
                await self._apply(tenant, work)
            except Exception as exc:
                log.warning("extraction.tenant_batch_failed", tenant=tenant, error=str(exc))
                for p in work.planned:
                    p.delivery.retry(exc)

    async def _not_erased(self, tenant: str, deliveries: list[Delivery[Any]]) -> list[Delivery[Any]]:
        users = [d.meta.user_id for d in deliveries if d.meta.user_id]
        if not users:
            return deliveries
        async with self.uow.tenant(tenant) as tx:
            erased_at = await tx.erasures.hold(users)
        kept = []
        for d in deliveries:
            if given_before_erasure([d.meta.user_id], d.meta.occurred_at, erased_at):
                d.erased()
            else:
                kept.append(d)
        return kept

    async def rejected(self, items: Sequence[Rejected]) -> None:
        """Events refused before planning (no data model fits): their `memory.extraction` rows,
        and a chat turn's trace or session that says so."""
        by_tenant: dict[str, list[Rejected]] = defaultdict(list)
        for item in items:
            by_tenant[item.tenant].append(item)
        for tenant, refused in by_tenant.items():
            async with self.uow.tenant(tenant) as tx:
                await tx.telemetry.write(
                    [
                        failed_record(tenant, "chat" if is_chat_event(r.meta.type) else "hook", Refused(r.reason))
                        for r in refused
                    ]
                )
            for r in refused:
                if self.chat_extractor is not None and is_chat_event(r.meta.type):
                    await self._trace_failure(tenant, *traced_ids(r.meta, r.data), r.reason)

    async def _trace_failure(
        self, tenant: str, message_id: uuid.UUID | None, session_id: uuid.UUID | None, reason: str
    ) -> None:
        """A chat turn whose extraction ended without result says so in its trace; a session whose
        summary could not be made is `failed` (best effort: the event's own outcome, dead letter
        and telemetry do not depend on it)."""
        if message_id is None and session_id is None:
            return
        try:
            async with self.uow.tenant(tenant) as tx:
                if message_id is not None:
                    await tx.chats.fail_extraction(message_id, reason)
                if session_id is not None:
                    await tx.chats.fail_session(session_id)
        except Exception as exc:
            log.warning("extraction.trace_failed", message_id=message_id, session_id=session_id, error=str(exc))

    async def gave_up(self, delivery: Delivery[ExtractionInput], reason: str) -> None:
        """The runner dead-lettered an event after its last delivery failed as well (an outage
        that did not clear): a failed `memory.extraction` row (R-5.5) and, for a chat turn, its trace."""
        tenant = delivery.tenant
        trigger = trigger_of(delivery.meta.type)
        async with self.uow.tenant(tenant, consumer=CONSUMER) as tx:
            # stored, but its change events never went out (each redelivery replays them): the
            # extraction itself succeeded, its trace and session stay as they are
            stored = bool(await tx.inbox.seen([delivery.key]))
            if stored:
                failure = failed_record(
                    tenant, trigger, Refused(f"stored, but its change events were not published: {reason}"), "partial"
                )
            else:
                failure = failed_record(tenant, trigger, Refused(reason))
            await tx.telemetry.write([failure])
        if not stored:
            await self._trace_failure(tenant, *traced_ids(delivery.meta, delivery.data), reason)

    async def _apply(self, tenant: str, work: TenantWork) -> None:
        started = time.perf_counter()
        records: list[TelemetryRecord] = []
        async with self.uow.tenant(tenant, announce=Announce.redelivery, consumer=CONSUMER) as tx:
            if work.planned:
                stats = await self._write(tx, work.planned)
                records.extend(stats.records(tenant, int((time.perf_counter() - started) * 1000)))
            if work.unknown:
                records.append(
                    record(
                        tenant,
                        "memory.extraction",
                        {
                            "trigger": "hook",
                            "count": 0,
                            "dedup_hits": 0,
                            "duration_ms": 0,
                            "status": "skipped",
                            "error": f"{work.unknown} event(s) of types without a rule",
                        },
                    )
                )
            records.extend(failed_record(tenant, "hook", Refused(reason)) for reason in work.invalid)
            records.extend(failed_record(tenant, "chat", refused) for refused in work.invalid_chat)
            await tx.telemetry.write(records)

    async def _write(self, tx: TenantTx, planned: list[Planned]) -> ExtractionStats:
        """Write what the batch's new events produced, note them in the inbox, and announce
        it, together with what earlier attempts of redelivered events produced."""
        stats = ExtractionStats()
        # again under the users' erasure locks: an erasure since the check above wins (R-16.5)
        erased_at = await tx.erasures.hold(sorted({u for p in planned for u in p.users if u}))
        for p in planned:
            if given_before_erasure(p.users, p.delivery.meta.occurred_at, erased_at):
                p.delivery.erased()
        planned = [p for p in planned if not p.delivery.outcome]
        done = await tx.inbox.seen([p.key for p in planned])
        todo: list[Planned] = []
        taken: set[str] = set()
        for p in planned:
            if p.key in done or p.key in taken:  # redelivered, re-published or twice in the batch
                stats.duplicate(p)
                continue
            taken.add(p.key)
            todo.append(p)
        changes = await tx.observations.write_changes([d for p in todo for d in p.extracted.written])
        produced: dict[str, list[uuid.UUID]] = {}
        cursor = 0
        for p in todo:
            written = changes[cursor : cursor + len(p.extracted.written)]
            cursor += len(p.extracted.written)
            produced[p.key] = [c.id for c in written]
            mine, units = written[: len(p.extracted.drafts)], written[len(p.extracted.drafts) :]
            deduplicated = sum(1 for c in mine if c.outcome is WriteOutcome.deduplicated)
            units_changed = sum(1 for c in units if c.outcome is not WriteOutcome.deduplicated)
            stats.applied(p, len(mine) - deduplicated, deduplicated, units_changed)
            if p.extracted.message_id is not None:  # "done" commits with what it reports
                report: dict[str, Any] = {
                    "status": "done",
                    "count": len(mine) - deduplicated,
                    "dedup": deduplicated,
                    "model": p.extracted.model,
                }
                if p.extracted.proposals:
                    report["proposed"] = len(p.extracted.proposals)
                if units_changed:
                    report["units"] = units_changed
                await tx.chats.set_extraction(p.extracted.message_id, report)
        await tx.proposals.add([n for p in todo for n in p.extracted.proposals])
        await tx.inbox.record(produced)
        # an earlier attempt that committed but was never acked may not have announced its
        # changes: announce them again (same revision = same event id)
        replay = [i for ids in done.values() for i in ids]
        if replay:
            changes = [*changes, *await tx.observations.current(replay)]
        tx.emit(change_events(changes, SOURCE))
        return stats
