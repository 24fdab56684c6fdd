"""The chat turn (R-8, R-4.3, R-4.4): the use case behind `POST /api/ai/chats/{chat_id}/turns`.

`begin` checks the request and prepares the turn in one transaction (`prepare`); `run`
recalls memory and talks to the model (`answer`), then stores what the turn left behind
(`record`) in a second transaction: messages, session, telemetry, and `chat.turn.completed`
announced after the commit without the answer waiting for the bus. Between the two nothing
holds a database connection, so a slow model never blocks the pool.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo

import structlog

from engram.domain.authorization import WriteRequest, authorize_write
from engram.domain.erasure import given_before_erasure
from engram.domain.errors import Forbidden, NotFound
from engram.domain.events import change_events
from engram.domain.llm import StreamInterrupted
from engram.domain.routing import RoutingRules
from engram.domain.scopes import Principal
from engram.domain.streams import DecisionEngine
from engram.domain.telemetry import ChatError, records_of
from engram.ports import Announce, Recall, UnitOfWork
from engram.services.chat.answer import TurnAnswer, offline_answer
from engram.services.chat.interview import Interviewer
from engram.services.chat.prepare import TurnPreparation
from engram.services.chat.record import SOURCE as record_source
from engram.services.chat.record import turn_record, turn_response
from engram.services.chat.turn import PreparedTurn, TextSink, TurnFailed, TurnRequest, TurnResponse, TurnUsage
from engram.services.gateway import LlmGateway
from engram.services.multistream import MultiStreamRecall
from engram.services.sessions import session_ended_event

__all__ = [
    "ChatTurns",
    "PreparedTurn",
    "TurnFailed",
    "TurnRequest",
    "TurnResponse",
    "TurnUsage",
    "offline_answer",
]

log = structlog.get_logger(__name__)


class ChatTurns:
    def __init__(
        self,
        uow: UnitOfWork,
        gateway: LlmGateway,
        engine: DecisionEngine,
        routing: RoutingRules,
        recall: Callable[[], Recall | None],
        *,
        observation_types: frozenset[str],
        history_messages: int = 20,
        session_idle: timedelta = timedelta(minutes=30),
        zone: tzinfo = UTC,
    ) -> None:
        self.uow = uow
        self.gateway = gateway
        self.engine = engine
        self.multistream = MultiStreamRecall(engine, gateway)
        self.preparation = TurnPreparation(
            uow,
            gateway,
            routing,
            self.multistream,
            recall,
            observation_types=observation_types,
            history_messages=history_messages,
            session_idle=session_idle,
            zone=zone,
        )
        engine.check_profiles(gateway.config.profiles)
        self.answering = TurnAnswer(gateway, engine.synthesis_profile, Interviewer(gateway, engine.interview))

    async def begin(self, principal: Principal, chat_id: uuid.UUID, body: TurnRequest) -> PreparedTurn:
        return await self.preparation.begin(principal, chat_id, body)

    async def run(self, prepared: PreparedTurn, *, on_text: TextSink | None = None) -> TurnResponse:
        try:
            answered = await self.answering.answer(prepared, on_text)
        except StreamInterrupted as exc:
            await self._record_failure(prepared, exc)
            raise TurnFailed(f"the model failed while answering: {exc}") from exc
        t2 = time.perf_counter()
        record = turn_record(
            prepared, answered, self.gateway.config, int((time.perf_counter() - prepared.started) * 1000)
        )
        # the events are durable in the outbox at the commit; the answer does not wait for NATS
        began = datetime.now(UTC) - timedelta(seconds=time.perf_counter() - prepared.started)
        async with self.uow.tenant(prepared.principal.tenant_id, announce=Announce.deferred) as tx:
            if given_before_erasure([prepared.user_id], began, await tx.erasures.hold([prepared.user_id])):
                # the user's memory was erased while the model answered: the answer goes back, nothing stays
                log.info("chat.turn_not_kept", reason="the user's memory was erased during the turn")
                return turn_response(prepared, answered, record)
            captured = answered.interview.captured if answered.interview is not None else None
            if captured is not None:  # INTERVIEW mode: the object, as the user's own memory
                authorize_write(prepared.principal, WriteRequest.of(captured.user_id, captured.scope, []))
                written = await tx.observations.write_many([captured])
                tx.emit(change_events([w.change for w in written], record_source))
                record.trace["interview"]["observation_id"] = str(written[0].observation.id)
            await tx.chats.record_turn(
                prepared.chat.id,
                prepared.session.id,
                prepared.user_id,
                record.messages,
                record.at,
                status=record.status,
                metadata=record.metadata,
            )
            await tx.telemetry.write(record.telemetry)
            tx.emit(record.events)
            now = datetime.now(UTC)
            proposals = [p.view(now) for p in await tx.proposals.pending(prepared.chat.id, prepared.user_id, now)]
        prepared.timings["persist"] = (time.perf_counter() - t2) * 1000
        prepared.timings["llm"] = prepared.buffer.llm_ms
        prepared.timings["total"] = (time.perf_counter() - prepared.started) * 1000
        return turn_response(prepared, answered, record, proposals)

    async def _record_failure(self, prepared: PreparedTurn, exc: Exception) -> None:
        principal = prepared.principal
        prepared.buffer.emit(
            ChatError(
                stage="llm.stream",
                error_type=type(exc).__name__,
                message=str(exc)[:2000],
                model=getattr(exc, "model", None),
            )
        )
        records = records_of(
            principal.tenant_id, list(prepared.buffer.events), user_id=principal.user_id, chat_id=prepared.chat.id
        )
        async with self.uow.tenant(principal.tenant_id) as tx:
            await tx.telemetry.write(records)

    async def turn(
        self, principal: Principal, chat_id: uuid.UUID, body: TurnRequest, *, on_text: TextSink | None = None
    ) -> TurnResponse:
        return await self.run(await self.begin(principal, chat_id, body), on_text=on_text)

    async def end_session(self, principal: Principal, chat_id: uuid.UUID) -> uuid.UUID | None:
        """Close the chat's active session now; it gets a summary. None when none was active."""
        if principal.user_id is None:
            raise Forbidden("ending a session needs a user")
        async with self.uow.tenant(principal.tenant_id) as tx:
            chat = await tx.chats.lock_chat(chat_id)
            if chat is None or chat.user_id != principal.user_id:
                raise NotFound(f"chat {chat_id} not found")
            session = await tx.chats.active_session(chat_id)
            if session is None or not await tx.chats.end_session(session.id):
                return None
            tx.emit([session_ended_event(principal.tenant_id, session, chat_id, principal.user_id)])
        return session.id

    async def drain(self) -> None:
        """Wait for the turns' events still being published (on shutdown)."""
        await self.uow.drain()
