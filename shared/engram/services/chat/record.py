"""What a chat turn leaves behind (R-4.4, R-8.5), built without I/O: the memory trace, the two
messages, the telemetry rows, the events for extraction and summaries, and the answer."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cloudevents.http import CloudEvent

from engram.domain.events import CHAT_TURN_COMPLETED, ChatTurnCompleted, new_event
from engram.domain.language import detect_language
from engram.domain.llm import LlmConfig, Usage, approx_tokens, cost_usd
from engram.domain.models import Session, SessionStatus
from engram.domain.scopes import Permission
from engram.domain.streams import trace_hits
from engram.domain.telemetry import ChatTurnMetrics, MemoryCacheBreak, TelemetryRecord, records_of
from engram.ports import NewMessage
from engram.services.chat.answer import Answered
from engram.services.chat.turn import PreparedTurn, TurnResponse, TurnUsage
from engram.services.profile import stable_block
from engram.services.proposals import ProposalView
from engram.services.sessions import session_ended_event

SOURCE = "/engram/chat-turn"


@dataclass
class TurnRecord:
    """Everything one turn writes, in one transaction."""

    user_message_id: uuid.UUID
    assistant_id: uuid.UUID
    messages: list[NewMessage]
    status: SessionStatus | None
    metadata: dict[str, Any]
    telemetry: list[TelemetryRecord]
    events: list[CloudEvent]
    trace: dict[str, Any]
    usage: Usage
    cost: float
    at: datetime


def memory_trace(prepared: PreparedTurn, answered: Answered) -> dict[str, Any]:
    """What the turn pulled from memory and did (R-4.4), as stored with the assistant message."""
    recalled, outcome = answered.recalled, answered.outcome
    trace: dict[str, Any] = {
        "query_id": str(recalled.query_id) if recalled else None,
        "tier": prepared.decision.tier,
        "routing_reason": prepared.decision.reason,
        "profile": prepared.profile,
        "observations": trace_hits(recalled.streams) if recalled else [],
        "stable_memory": [str(o.id) for o in prepared.stable],
        "tool_calls": [
            {"name": c.name, "duration_ms": c.duration_ms, "success": c.success, "error": c.error}
            for c in (outcome.tool_calls if outcome else [])
        ],
        "tool_hits": [
            {
                "id": str(h.observation.id),
                "title": h.observation.title[:200],
                "score": round(h.score, 6),
                "stream": "tool",
            }
            for h in answered.tool_hits
        ],
        "compactions": [
            {"summary_chars": c.summary_chars, "iteration_input_tokens": c.iteration_input_tokens}
            for c in (outcome.compactions if outcome else [])
        ],
        "offline": outcome is None,
        "memory": "recalled" if recalled else "not permitted (read:AiObservation)",
        "extraction": {"status": "queued"},
    }
    if recalled:
        trace.update(recalled.trace())
    if answered.interview is not None:
        trace["interview"] = answered.interview.trace()
        if answered.interview.outcome is not None:  # the interview took the turn's data in itself
            trace["extraction"] = {"status": "skipped", "reason": "interview"}
    return trace


def turn_events(
    prepared: PreparedTurn, answered: Answered, user_message_id: uuid.UUID, assistant_id: uuid.UUID
) -> list[CloudEvent]:
    """`session.ended` for a session that ends now, and `chat.turn.completed` for extraction."""
    principal = prepared.principal
    ended: list[Session] = [s for s in (prepared.previous_session,) if s is not None]
    if prepared.body.end_session:
        ended.append(prepared.session)
    events = [session_ended_event(principal.tenant_id, s, prepared.chat.id, principal.user_id) for s in ended]
    if answered.interview is not None and answered.interview.outcome is not None:
        return events  # what an interview captured is stored by the turn: no extraction of it
    events.append(
        new_event(
            CHAT_TURN_COMPLETED,
            ChatTurnCompleted(
                chat_id=prepared.chat.id,
                session_id=prepared.session.id,
                user_message_id=user_message_id,
                assistant_message_id=assistant_id,
                user_message=prepared.body.message,
                assistant_message=answered.answer[:200_000],
                model=answered.model,
                language=detect_language(prepared.body.message),
                session_ended=prepared.body.end_session,
                may_store_sensitive=principal.has(Permission.view_sensitive),
                team_ids=sorted(principal.teams),
            ),
            tenant_id=principal.tenant_id,
            source=SOURCE,
            user_id=principal.user_id,
            subject=f"chat/{prepared.chat.id}",
            event_id=f"{CHAT_TURN_COMPLETED.type}:{assistant_id}",
        )
    )
    return events


def turn_telemetry(
    prepared: PreparedTurn, answered: Answered, total: Usage, cost: float, duration_ms: int
) -> list[TelemetryRecord]:
    """The turn's telemetry: what the gateway recorded, a cache break, and `chat.turn_completed`."""
    metas = list(prepared.buffer.events)
    turns = int(prepared.session.metadata.get("turns", 0))
    previous_hash = prepared.session.metadata.get("stable_memory_hash")
    if turns and previous_hash and previous_hash != prepared.stable_hash and answered.outcome is not None:
        metas.append(
            MemoryCacheBreak(
                reason="stable memory changed between turns",
                model=answered.model,
                expected_cached_tokens=approx_tokens(stable_block(prepared.stable, prepared.zone)),
            )
        )
    metas.append(
        ChatTurnMetrics(
            model=answered.model,
            tier=prepared.decision.tier,
            input_tokens=total.input_tokens,
            output_tokens=total.output_tokens,
            cache_creation_input_tokens=total.cache_creation_input_tokens,
            cache_read_input_tokens=total.cache_read_input_tokens,
            cost_usd=cost,
            duration_ms=duration_ms,
            rag_hits=answered.recalled.hit_count if answered.recalled else 0,
            offline=answered.outcome is None,
        )
    )
    return records_of(prepared.principal.tenant_id, metas, user_id=prepared.principal.user_id, chat_id=prepared.chat.id)


def turn_record(prepared: PreparedTurn, answered: Answered, config: LlmConfig, duration_ms: int) -> TurnRecord:
    buffer = prepared.buffer
    total = buffer.total()
    cost = sum(cost_usd(config.price(m), u) for m, u in buffer.usage.items())
    user_message_id, assistant_id = uuid.uuid4(), uuid.uuid4()
    trace = memory_trace(prepared, answered)
    usage = {**total.as_dict(), "cost_usd": cost, "by_model": {m: u.as_dict() for m, u in buffer.usage.items()}}
    return TurnRecord(
        user_message_id=user_message_id,
        assistant_id=assistant_id,
        messages=[
            NewMessage(user_message_id, "user", prepared.body.message),
            NewMessage(
                assistant_id,
                "assistant",
                answered.answer,
                model=answered.model,
                duration_ms=duration_ms,
                memory_trace=trace,
                usage=usage,
                content_blocks=answered.blocks,
            ),
        ],
        status=SessionStatus.completed if prepared.body.end_session else None,
        metadata={
            "turns": int(prepared.session.metadata.get("turns", 0)) + 1,
            "stable_memory_hash": prepared.stable_hash,
            "last_model": answered.model,
            **({"interview": answered.interview.open_state} if answered.interview is not None else {}),
        },
        telemetry=turn_telemetry(prepared, answered, total, cost, duration_ms),
        events=turn_events(prepared, answered, user_message_id, assistant_id),
        trace=trace,
        usage=total,
        cost=cost,
        at=datetime.now(UTC),
    )


def turn_response(
    prepared: PreparedTurn, answered: Answered, record: TurnRecord, proposals: list[dict[str, Any]] | None = None
) -> TurnResponse:
    total = record.usage
    return TurnResponse(
        chat_id=prepared.chat.id,
        session_id=prepared.session.id,
        user_message_id=record.user_message_id,
        message_id=record.assistant_id,
        answer=answered.answer,
        model=answered.model,
        tier=prepared.decision.tier,
        offline=answered.outcome is None,
        offline_reason=answered.offline_reason,
        query_id=answered.recalled.query_id if answered.recalled else None,
        memory_trace=record.trace,
        usage=TurnUsage(
            input_tokens=total.input_tokens,
            output_tokens=total.output_tokens,
            cache_creation_input_tokens=total.cache_creation_input_tokens,
            cache_read_input_tokens=total.cache_read_input_tokens,
            cost_usd=record.cost,
            llm_calls=prepared.buffer.calls,
        ),
        duration_ms=int(prepared.timings["total"]),
        session_ended=prepared.body.end_session,
        timings={k: round(v, 2) for k, v in prepared.timings.items()},
        proposals=[ProposalView.model_validate(p) for p in proposals or []],
    )
