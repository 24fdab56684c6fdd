"""Step 1 of a chat turn: check the request and prepare the turn in one transaction (R-8.1, R-4.3).

The chat (created on the first turn, locked so turns of one chat never race on its session),
its active session (a new one after an idle time; the old one ends and gets a summary), the
history to send back, and the stable memory block: the user's own preferences and identity,
never sensitive and never what the user rejected. The turn's multi-stream recall starts here
as soon as the chat is known to be the caller's, on a connection of its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo

from engram.domain.errors import Forbidden, NotFound, RecallUnavailable, Unprocessable
from engram.domain.llm import Message, from_last_compaction
from engram.domain.models import Chat, ChatKind, Session
from engram.domain.observation import Observation
from engram.domain.routing import RoutingDecision, RoutingRules, override, route
from engram.domain.scopes import Permission, Principal
from engram.domain.telemetry import ChatModelAutoRouted
from engram.domain.zones import user_zone
from engram.ports import ChatStore, EmbedAhead, Recall, StoredMessage, TenantTx, UnitOfWork
from engram.services.chat.turn import PreparedTurn, TurnRequest
from engram.services.gateway import LlmGateway, TelemetryBuffer
from engram.services.multistream import MultiStreamRecall, MultiStreamResult
from engram.services.profile import read_profile


def history_messages(stored: list[StoredMessage]) -> list[Message]:
    """The chat's stored messages as the next request's history (from the last compaction on)."""
    messages: list[Message] = []
    for item in stored:
        if item.role == "assistant" and item.content_blocks:
            messages.append({"role": "assistant", "content": list(item.content_blocks)})
        else:
            messages.append({"role": item.role, "content": item.content})
    messages = from_last_compaction(messages)
    # the API wants user/assistant alternation starting with a user message
    cleaned: list[Message] = []
    for message in messages:
        if not cleaned and message["role"] != "user":
            continue
        if cleaned and cleaned[-1]["role"] == message["role"]:
            cleaned[-1] = message  # a turn that failed half-way: keep the later message
            continue
        cleaned.append(message)
    if cleaned and cleaned[-1]["role"] == "user":
        cleaned.pop()  # an unanswered user message would double the turn's own
    return cleaned


def stable_hash(observations: list[Observation]) -> str:
    digest = hashlib.sha256()
    for obs in observations:
        digest.update(f"{obs.id}:{obs.updated_at.isoformat()}\n".encode())
    return digest.hexdigest()[:16]


def model_override(gateway: LlmGateway, body: TurnRequest) -> str | None:
    """The model the caller asked for by id (a profile name is a routing decision instead)."""
    requested = body.model
    if requested is None or requested in gateway.config.profiles:
        return None
    return requested


class TurnPreparation:
    def __init__(
        self,
        uow: UnitOfWork,
        gateway: LlmGateway,
        routing: RoutingRules,
        multistream: MultiStreamRecall,
        recall: Callable[[], Recall | None],
        *,
        observation_types: frozenset[str],
        history_messages: int,
        session_idle: timedelta,
        zone: tzinfo = UTC,
    ) -> None:
        self.uow = uow
        self.gateway = gateway
        self.routing = routing
        self.multistream = multistream
        self.recall_source = recall
        self.observation_types = observation_types
        self.history_messages = history_messages
        self.session_idle = session_idle
        self.zone = zone  # the users' time zone when a turn names none

    def decide(self, body: TurnRequest) -> RoutingDecision:
        if body.model is None:
            return route(body.message, self.routing)
        config = self.gateway.config
        if body.model in config.profiles:
            return override(body.model, body.model)
        if body.model not in config.known_models():
            raise Unprocessable(
                "body.model",
                f"unknown model {body.model!r}; use one of {sorted(config.known_models())} or a profile name",
            )
        return override(body.model, self.routing.tiers.get("default", "chat_default"))

    def _recall(self, principal: Principal) -> Recall | None:
        if not principal.has(Permission.read_observation):
            return None
        recall = self.recall_source()
        if recall is None:
            raise RecallUnavailable(
                "recall is not configured on this server (Services.recall is None); chat-turn cannot recall memory"
            )
        return recall

    async def begin(self, principal: Principal, chat_id: uuid.UUID, body: TurnRequest) -> PreparedTurn:
        started = time.perf_counter()
        if principal.user_id is None:
            raise Forbidden("a chat turn needs a user (this agent key acts for no user)")
        recall = self._recall(principal)
        decision = self.decide(body)
        # the streams' query vectors are made while the turn is prepared (they are most of recall)
        intent = self.multistream.keyword_intent(body.message) if recall is not None else None
        ahead = (
            recall.embed_ahead(self.multistream.texts_ahead(body.message, intent))
            if isinstance(recall, EmbedAhead)
            else None
        )
        buffer = TelemetryBuffer()
        buffer.emit(self._routed(decision, body))
        recalling: asyncio.Task[MultiStreamResult] | None = None
        try:
            async with self.uow.tenant(principal.tenant_id) as tx:
                chat = await self._chat(tx.chats, principal, chat_id, body)
                zone = await self._zone(tx.chats, principal, chat, body)
                if recall is not None:
                    # the chat is the caller's: recall (on a connection of its own) runs beside
                    # the rest of the preparation; a turn refused above never recalled anything
                    recalling = asyncio.create_task(
                        self.multistream.recall(
                            principal, recall, body.message, buffer, ahead=ahead, intent=intent, zone=zone
                        )
                    )
                active, stored = await tx.chats.session_and_history(chat.id, self.history_messages)
                session, previous = await self._session(tx.chats, principal, chat, body, active)
                # the user's rejections hide memories: here in SQL, in recall by the recall service
                stable = await self._stable_memory(tx, principal, zone) if recall is not None else []
        except BaseException:
            if recalling is not None:  # the turn ends here: its recall is not waited for
                recalling.cancel()
                await asyncio.gather(recalling, return_exceptions=True)
            raise
        prepared = PreparedTurn(
            principal=principal,
            body=body,
            chat=chat,
            session=session,
            previous_session=previous,
            history=history_messages(stored),
            stable=stable,
            stable_hash=stable_hash(stable),
            zone=zone,
            decision=decision,
            recall=recall,
            started=started,
            buffer=buffer,
            recalling=recalling,
        )
        prepared.timings["prepare"] = (time.perf_counter() - started) * 1000
        return prepared

    def _routed(self, decision: RoutingDecision, body: TurnRequest) -> ChatModelAutoRouted:
        chain = self.gateway.chain(decision.profile, model_override(self.gateway, body))
        return ChatModelAutoRouted(
            selected_model=chain[0].model,
            tier=decision.tier,
            reason=decision.reason,
            confidence=decision.confidence,
        )

    async def _chat(self, store: ChatStore, principal: Principal, chat_id: uuid.UUID, body: TurnRequest) -> Chat:
        assert principal.user_id is not None
        chat = await store.lock_chat(chat_id)
        if chat is None:
            title = body.title or (body.message[:80] if len(body.message) <= 80 else body.message[:77] + "...")
            chat = await store.create_chat(chat_id, principal.user_id, title)
            if chat is None:  # a concurrent first turn created it (or another tenant owns the id)
                chat = await store.lock_chat(chat_id)
            if chat is None:  # the id exists in another tenant: not leaked, just not found
                raise NotFound(f"chat {chat_id} not found")
            if chat.user_id == principal.user_id and chat.kind is ChatKind.ai:
                return chat
        if chat.user_id != principal.user_id:
            raise NotFound(f"chat {chat_id} not found")
        if chat.kind is not ChatKind.ai:
            raise Unprocessable(
                "chat_id", f"chat {chat_id} is a conversation between users (kind 'user'), not an AI chat"
            )
        return chat

    async def _zone(self, store: ChatStore, principal: Principal, chat: Chat, body: TurnRequest) -> tzinfo:
        """The zone the turn names, else the one the user named last in any chat, else the
        deployment's: a client that sends the zone once is understood in every chat after, and by
        recall and the MCP tools. A zone other than the user's is kept on the chat, named now."""
        assert principal.user_id is not None
        named_last = await store.user_time_zone(principal.user_id)
        if body.time_zone and body.time_zone != named_last:
            await store.set_time_zone(chat.id, body.time_zone)
        return user_zone(body.time_zone, self.zone, named_last)

    async def _session(
        self, store: ChatStore, principal: Principal, chat: Chat, body: TurnRequest, active: Session | None
    ) -> tuple[Session, Session | None]:
        """The chat's active session (read with the chat locked), or a new one if it was idle."""
        assert principal.user_id is not None
        previous = None
        if active is not None:
            idle = datetime.now(UTC) - active.updated_at
            if idle <= self.session_idle:
                return active, None
            await store.end_session(active.id)
            previous = active
        session = await store.create_session(principal.user_id, chat.id, body.message[:2_000], {"turns": 0})
        return session, previous

    async def _stable_memory(self, tx: TenantTx, principal: Principal, zone: tzinfo) -> list[Observation]:
        """The user's profile (`services.profile`): the cached part of the memory."""
        return await read_profile(tx, principal, self.observation_types, zone=zone)
