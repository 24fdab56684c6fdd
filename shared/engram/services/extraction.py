"""extract-observation (R-5): domain events by YAML rules, manual marks, chat turns.

A batch is processed per tenant in one transaction: the inbox (`processed_events`) skips
events already applied, observations are written with one statement, their change events
go to the outbox, and `memory.extraction` rows are written: one per chat extraction (its model,
tokens and duration), one per trigger and outcome for the rule-based ones of the batch.
Re-publishing, redelivery and concurrent workers therefore never create duplicates (R-5.4).

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
from typing import Protocol, cast

import structlog
from cloudevents.http import CloudEvent
from pydantic import ValidationError

from engram.adapters.chats import ChatStore
from engram.adapters.observations import Change, ObservationStore
from engram.adapters.postgres import Connection, Database
from engram.domain.events import (
    CHAT_TURN_COMPLETED,
    OBSERVATION_MARKED,
    SESSION_ENDED,
    InvalidEvent,
    ObservationMarked,
    is_engram_type,
    parse_data,
)
from engram.domain.observation import (
    ObservationDraft,
    Provenance,
    Source,
    TriggerSource,
    WriteOutcome,
)
from engram.domain.rules import RuleSet, apply_rule, event_context
from engram.ports import EventBus
from engram.services import telemetry
from engram.services.memory import change_events, marked_draft

log = structlog.get_logger(__name__)

CONSUMER = "extract-observation"
SOURCE = "/engram/extract-observation"

Outcome = BaseException | None


@dataclass
class Planned:
    index: int
    key: str
    trigger: TriggerSource
    drafts: list[ObservationDraft]
    model: str | None = None  # chat extraction: the LLM that extracted
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: int = 0
    message_id: uuid.UUID | None = None  # chat turn: the assistant message whose trace shows the status


@dataclass
class Refused:
    """An extraction that was refused: an invalid event, or the model's output invalid twice (chat)."""

    reason: str
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: int = 0


def failed_record(tenant: str, trigger: str, refused: Refused, status: str = "failed") -> telemetry.TelemetryRecord:
    """The `memory.extraction` row of an extraction that produced nothing (R-5.5)."""
    return telemetry.record(
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
class TenantBatch:
    planned: list[Planned] = field(default_factory=list)
    unknown: int = 0
    invalid: list[str] = field(default_factory=list)
    invalid_chat: list[Refused] = field(default_factory=list)


class ChatExtraction(Protocol):
    """What a chat extractor may return instead of a plain list: drafts plus call metadata."""

    drafts: list[ObservationDraft]
    model: str | None
    input_tokens: int
    output_tokens: int
    duration_ms: int
    message_id: uuid.UUID | None


# A chat extractor returns drafts for one chat event (chat turns and ended sessions). It opens
# its own short transactions on the database: none may stay open while a model answers.
ChatExtractor = Callable[[Database, CloudEvent], Awaitable[list[ObservationDraft] | ChatExtraction]]


def _id_in(event: CloudEvent, event_type: str, field_name: str) -> uuid.UUID | None:
    if event["type"] != event_type:
        return None
    data = event.get_data()
    raw = data.get(field_name) if isinstance(data, dict) else None
    try:
        return uuid.UUID(str(raw)) if raw else None
    except ValueError:
        return None


def assistant_message_id(event: CloudEvent) -> uuid.UUID | None:
    """The assistant message of a `chat.turn.completed` event (whose trace shows the extraction)."""
    return _id_in(event, CHAT_TURN_COMPLETED.type, "assistant_message_id")


def ended_session_id(event: CloudEvent) -> uuid.UUID | None:
    """The session of a `session.ended` event (failed when its summary cannot be made)."""
    return _id_in(event, SESSION_ENDED.type, "session_id")


async def applied(conn: Connection, event: CloudEvent) -> bool:
    """Whether `event` was applied already (the inbox, `processed_events`)."""
    found = await conn.fetchval(
        "SELECT 1 FROM processed_events WHERE consumer = $1 AND event_key = $2", CONSUMER, event_key(event)
    )
    return bool(found)


def is_chat_event(event_type: str) -> bool:
    return event_type.startswith("io.engram.chat.") or event_type == SESSION_ENDED.type


def event_key(event: CloudEvent) -> str:
    return f"{event['source']}\x1f{event['id']}"


def tenant_of(event: CloudEvent) -> str:
    tenant = event.get("tenantid")
    if not isinstance(tenant, str) or not tenant.strip():
        raise InvalidEvent("the 'tenantid' extension is required")
    return tenant


def domain_drafts(rules: RuleSet, event: CloudEvent, tenant_id: str) -> list[ObservationDraft]:
    data = event.get_data()
    if not isinstance(data, dict):
        raise InvalidEvent("domain event data must be a JSON object")
    context = event_context(event.get_attributes(), data)
    drafts = []
    for rule in rules.for_type(event["type"]):
        rendered = apply_rule(rule, context)
        try:
            drafts.append(
                ObservationDraft(
                    tenant_id=tenant_id,
                    source=Source.system,
                    verified=False,
                    confidence=1.0,
                    trigger_source=TriggerSource.hook,
                    provenance=Provenance(source_event_id=str(event["id"])),
                    **rendered.model_dump(),
                )
            )
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise InvalidEvent(f"rule for {event['type']} produced an invalid observation: {problems}") from exc
    return drafts


class Extraction:
    def __init__(
        self,
        db: Database,
        bus: EventBus,
        rules: RuleSet,
        observation_types: frozenset[str],
        chat_extractor: ChatExtractor | None = None,
    ) -> None:
        self.db = db
        self.bus = bus
        self.rules = rules
        self.observation_types = observation_types
        self.chat_extractor = chat_extractor

    def _plan(self, index: int, event: CloudEvent, tenant: str, batch: TenantBatch) -> None:
        etype = event["type"]
        if etype == OBSERVATION_MARKED.type:
            data = cast(ObservationMarked, parse_data(etype, event.get_data()))
            user = event.get("userid")
            if not user:
                raise InvalidEvent("a marked observation needs the 'userid' extension")
            if data.type not in self.observation_types:
                raise InvalidEvent(f"unknown observation type {data.type!r}")
            try:
                draft = marked_draft(tenant, str(user), data, str(event["id"]))
            except ValidationError as exc:
                raise InvalidEvent(f"marked statement is not a valid observation: {exc.errors()[0]['msg']}") from exc
            batch.planned.append(Planned(index, event_key(event), TriggerSource.manual, [draft]))
        elif is_engram_type(etype):
            raise InvalidEvent(f"extract-observation does not handle {etype}")
        elif not self.rules.for_type(etype):
            batch.unknown += 1  # acknowledged and counted
        else:
            batch.planned.append(
                Planned(index, event_key(event), TriggerSource.hook, domain_drafts(self.rules, event, tenant))
            )

    async def handle_batch(self, events: Sequence[CloudEvent]) -> list[Outcome]:
        outcomes: list[Outcome] = [None] * len(events)
        tenants: dict[str, TenantBatch] = defaultdict(TenantBatch)
        chat_events: list[tuple[int, str, CloudEvent]] = []
        for i, event in enumerate(events):
            try:
                tenant = tenant_of(event)
                if self.chat_extractor is not None and is_chat_event(event["type"]):
                    chat_events.append((i, tenant, event))
                    continue
                self._plan(i, event, tenant, tenants[tenant])
            except InvalidEvent as exc:
                outcomes[i] = exc
                tenant_value = event.get("tenantid")
                if isinstance(tenant_value, str) and tenant_value:
                    tenants[tenant_value].invalid.append(str(exc))
        for i, tenant, event in chat_events:
            try:
                result = await self.chat_extractor(self.db, event)  # type: ignore[misc]
                if isinstance(result, list):
                    planned = Planned(i, event_key(event), TriggerSource.chat, result)
                else:
                    planned = Planned(
                        i,
                        event_key(event),
                        TriggerSource.chat,
                        result.drafts,
                        result.model,
                        result.input_tokens,
                        result.output_tokens,
                        result.duration_ms,
                        result.message_id,
                    )
                tenants[tenant].planned.append(planned)
            except InvalidEvent as exc:
                outcomes[i] = exc
                tenants[tenant].invalid_chat.append(
                    Refused(
                        str(exc),
                        getattr(exc, "model", None),
                        getattr(exc, "input_tokens", 0),
                        getattr(exc, "output_tokens", 0),
                        getattr(exc, "duration_ms", 0),
                    )
                )
                await self._trace_failure(tenant, event, str(exc))
            except Exception as exc:
                outcomes[i] = exc
        for tenant, batch in tenants.items():
            try:
                await self._apply(tenant, batch)
            except Exception as exc:
                log.warning("extraction.tenant_batch_failed", tenant=tenant, error=str(exc))
                for p in batch.planned:
                    outcomes[p.index] = exc
        return outcomes

    async def _trace_failure(self, tenant: str, event: CloudEvent, reason: str) -> None:
        """A chat turn whose extraction ended without result says so in its trace; a session whose
        summary could not be made is `failed` (best effort: the event's own outcome, dead letter
        and telemetry do not depend on it)."""
        message_id = assistant_message_id(event)
        session_id = ended_session_id(event)
        if message_id is None and session_id is None:
            return
        try:
            async with self.db.tenant(tenant) as conn:
                store = ChatStore(conn)
                if message_id is not None:
                    await store.fail_extraction(message_id, reason)
                if session_id is not None:
                    await store.fail_session(session_id)
        except Exception as exc:
            log.warning("extraction.trace_failed", event_id=event["id"], error=str(exc))

    async def gave_up(self, event: CloudEvent, reason: str) -> None:
        """The runner dead-lettered `event` after its last delivery failed as well (an outage that
        did not clear): a failed `memory.extraction` row (R-5.5) and, for a chat turn, its trace."""
        tenant = event.get("tenantid")
        if not isinstance(tenant, str) or not tenant:
            return
        etype = event["type"]
        trigger = "chat" if is_chat_event(etype) else "manual" if etype == OBSERVATION_MARKED.type else "hook"
        async with self.db.tenant(tenant) as conn:
            # stored, but its change events never went out (each redelivery replays them): the
            # extraction itself succeeded, its trace and session stay as they are
            stored = await applied(conn, event)
            if stored:
                failure = failed_record(
                    tenant, trigger, Refused(f"stored, but its change events were not published: {reason}"), "partial"
                )
            else:
                failure = failed_record(tenant, trigger, Refused(reason))
            await telemetry.write(conn, [failure])
        if not stored:
            await self._trace_failure(tenant, event, reason)

    async def _apply(self, tenant: str, batch: TenantBatch) -> None:
        started = time.perf_counter()
        records: list[telemetry.TelemetryRecord] = []
        changes: list[Change] = []
        async with self.db.tenant(tenant) as conn:
            if batch.planned:
                rows = await conn.fetch(
                    "SELECT event_key, produced FROM processed_events"
                    " WHERE consumer = $1 AND event_key = ANY($2::text[])",
                    CONSUMER,
                    [p.key for p in batch.planned],
                )
                done = {r["event_key"]: list(r["produced"]) for r in rows}
                todo: list[Planned] = []
                repeated: list[Planned] = []  # the same event twice in one batch: applied once
                taken: set[str] = set()
                for p in batch.planned:
                    if p.key in done:
                        continue
                    if p.key in taken:
                        repeated.append(p)
                    else:
                        taken.add(p.key)
                        todo.append(p)
                written = await ObservationStore(conn).write_changes([d for p in todo for d in p.drafts])
                changes.extend(written)
                # one row per chat extraction (a model call each), one per trigger for the others
                stats: dict[tuple[TriggerSource, str], dict[str, int]] = defaultdict(
                    lambda: {"count": 0, "dedup": 0, "input_tokens": 0, "output_tokens": 0, "llm_ms": 0}
                )
                models: dict[tuple[TriggerSource, str], str] = {}

                def row(p: Planned) -> tuple[TriggerSource, str]:
                    return (p.trigger, p.key if p.trigger is TriggerSource.chat else "")

                for p in batch.planned:
                    if p.key in done:  # redelivered or re-published: already applied
                        stats[row(p)]["dedup"] += 1
                for p in repeated:
                    stats[row(p)]["dedup"] += 1
                produced: list[str] = []
                cursor = 0
                traces = ChatStore(conn)
                for p in todo:
                    if p.model:
                        models.setdefault(row(p), p.model)
                    mine_stats = stats[row(p)]
                    mine_stats["input_tokens"] += p.input_tokens
                    mine_stats["output_tokens"] += p.output_tokens
                    mine_stats["llm_ms"] += p.duration_ms
                    mine = written[cursor : cursor + len(p.drafts)]
                    cursor += len(p.drafts)
                    produced.append(",".join(str(c.id) for c in mine))
                    deduplicated = sum(1 for c in mine if c.outcome is WriteOutcome.deduplicated)
                    mine_stats["dedup"] += deduplicated
                    mine_stats["count"] += len(mine) - deduplicated
                    if p.message_id is not None:  # "done" commits with what it reports
                        await traces.set_extraction(
                            p.message_id,
                            {
                                "status": "done",
                                "count": len(mine) - deduplicated,
                                "dedup": deduplicated,
                                "model": p.model,
                            },
                        )
                if todo:
                    await conn.execute(
                        "INSERT INTO processed_events (tenant_id, consumer, event_key, produced)"
                        " SELECT $1, $2, k, string_to_array(p, ',')::uuid[]"
                        " FROM unnest($3::text[], $4::text[]) AS x(k, p)"
                        " ON CONFLICT DO NOTHING",
                        tenant,
                        CONSUMER,
                        [p.key for p in todo],
                        produced,
                    )
                # An earlier attempt that committed but was never acked may not have announced its
                # changes: announce them again (same revision = same event id, so JetStream drops
                # what did go out). This is why the workers need no outbox.
                replay = [i for ids in done.values() for i in ids]
                if replay:
                    rows = await conn.fetch(
                        "SELECT id, user_id, updated_at FROM observations WHERE id = ANY($1::uuid[])", replay
                    )
                    changes.extend(
                        Change(r["id"], tenant, r["user_id"], WriteOutcome.updated, r["updated_at"]) for r in rows
                    )
                elapsed = int((time.perf_counter() - started) * 1000)
                for (trigger, key), s in stats.items():
                    records.append(
                        telemetry.record(
                            tenant,
                            "memory.extraction",
                            {
                                "trigger": trigger.value,
                                "count": s["count"],
                                "dedup_hits": s["dedup"],
                                "model": models.get((trigger, key)),
                                "input_tokens": s["input_tokens"],
                                "output_tokens": s["output_tokens"],
                                "duration_ms": elapsed + s["llm_ms"],
                                "status": "ok",
                            },
                        )
                    )
            if batch.unknown:
                records.append(
                    telemetry.record(
                        tenant,
                        "memory.extraction",
                        {
                            "trigger": "hook",
                            "count": 0,
                            "dedup_hits": 0,
                            "duration_ms": 0,
                            "status": "skipped",
                            "error": f"{batch.unknown} event(s) of types without a rule",
                        },
                    )
                )
            records.extend(failed_record(tenant, "hook", Refused(reason)) for reason in batch.invalid)
            records.extend(failed_record(tenant, "chat", refused) for refused in batch.invalid_chat)
            await telemetry.write(conn, records)
        events = change_events(changes, SOURCE)
        if events:
            await self.bus.publish_many(events)  # failure -> nak -> redelivery -> replay above
