"""The chat turn (R-8, R-4.3, R-4.4): the use case behind `POST /api/ai/chats/{chat_id}/turns`.

`begin` checks the request and prepares the turn in one transaction (chat, session, history,
the stable memory block); `run` recalls memory, talks to the model and persists the result in
a second transaction (messages, session, telemetry, and `chat.turn.completed` through the
outbox). Between the two nothing holds a database connection, so a slow model never blocks
the pool.

Memory reaches the prompt in two places:
- the stable block (the user's preferences and identity) in the cached system prefix;
- the per-turn multi-stream recall in front of the user's message, after the cache breakpoints.
Both are standard context: sensitive observations never appear, whatever the caller's
permissions (R-7.2); recall is asked with `want_sensitive=False` and the hits are filtered again.

Without `ANTHROPIC_API_KEY` (or when every profile fails) the answer is built from recalled
memory and marked as offline.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field

from engram.adapters.chats import ChatStore, NewMessage, StoredMessage
from engram.adapters.observations import REJECTED_IDS_SQL, live_sql, to_observation, visibility_sql
from engram.adapters.postgres import Connection, Database
from engram.domain.chat_extraction import detect_language
from engram.domain.events import (
    CHAT_TURN_COMPLETED,
    ChatTurnCompleted,
    new_event,
)
from engram.domain.llm import (
    LlmRequest,
    LlmUnavailable,
    Message,
    Profile,
    StreamInterrupted,
    SystemBlock,
    ToolSpec,
    approx_tokens,
    cost_usd,
    from_last_compaction,
)
from engram.domain.models import Chat, ChatKind, Session, SessionStatus
from engram.domain.observation import Observation, Scope
from engram.domain.recall import RecallQuery
from engram.domain.routing import RoutingDecision, RoutingRules, override, route
from engram.domain.scopes import Permission, Principal, Visibility
from engram.domain.streams import (
    DecisionEngine,
    render_observations,
    standard_context_filter,
    trace_hits,
)
from engram.domain.telemetry import (
    ChatError,
    ChatModelAutoRouted,
    MemoryCacheBreak,
    event_name,
)
from engram.domain.telemetry import ChatTurnCompleted as TurnCompletedMeta
from engram.ports import EmbedAhead, EventBus, Recall
from engram.services import outbox, telemetry
from engram.services.gateway import LlmGateway, TelemetryBuffer, Tool, ToolContext, TurnOutcome
from engram.services.memory import Forbidden, NotFound, RecallUnavailable, Unprocessable
from engram.services.multistream import MultiStreamRecall, MultiStreamResult
from engram.services.sessions import session_ended_event

log = structlog.get_logger(__name__)

SOURCE = "/engram/chat-turn"
STABLE_TYPES = ("preference", "identity")
STABLE_LIMIT = 20
TextSink = Callable[[str], Awaitable[None]]


class TurnFailed(RuntimeError):
    """The model failed after the answer had started streaming (HTTP 502 / SSE error event)."""


class TurnRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=20_000, description="the user's message")
    model: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$",
        description="a configured model id or profile name instead of auto selection",
    )
    end_session: bool = Field(default=False, description="close the session after this turn (it gets a summary)")
    title: str | None = Field(default=None, max_length=200, description="title of a new chat")


class TurnUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    cost_usd: float
    llm_calls: int


class TurnResponse(BaseModel):
    chat_id: uuid.UUID
    session_id: uuid.UUID
    user_message_id: uuid.UUID
    message_id: uuid.UUID
    answer: str
    model: str
    tier: str
    offline: bool
    offline_reason: Literal["no_api_key", "llm_unavailable"] | None = None
    query_id: uuid.UUID | None
    memory_trace: dict[str, Any]
    usage: TurnUsage
    duration_ms: int
    session_ended: bool
    timings: dict[str, float] = Field(default_factory=dict, description="milliseconds per stage")


@dataclass
class PreparedTurn:
    principal: Principal
    body: TurnRequest
    chat: Chat
    session: Session
    previous_session: Session | None  # ended now because it was idle: it gets a summary
    history: list[Message]
    stable: list[Observation]
    stable_hash: str
    decision: RoutingDecision
    recall: Recall | None
    started: float
    timings: dict[str, float] = field(default_factory=dict)
    buffer: TelemetryBuffer = field(default_factory=TelemetryBuffer)  # the turn's telemetry, from the start
    recalling: asyncio.Task[MultiStreamResult] | None = None  # the recall, started once the chat was checked


def _history_messages(stored: list[StoredMessage]) -> list[Message]:
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


def _stable_hash(observations: list[Observation]) -> str:
    digest = hashlib.sha256()
    for obs in observations:
        digest.update(f"{obs.id}:{obs.updated_at.isoformat()}\n".encode())
    return digest.hexdigest()[:16]


def offline_answer(message: str, memory: list[Observation], reason: str) -> str:
    german = detect_language(message) == "de"
    if reason == "no_api_key":
        head = (
            "[Offline-Modus: kein Sprachmodell konfiguriert (ANTHROPIC_API_KEY ist nicht gesetzt).]"
            if german
            else "[Offline mode: no language model is configured (ANTHROPIC_API_KEY is not set).]"
        )
    else:
        head = (
            "[Offline-Modus: das Sprachmodell ist gerade nicht erreichbar.]"
            if german
            else "[Offline mode: the language model is unavailable right now.]"
        )
    if not memory:
        body = (
            "Zu dieser Nachricht habe ich noch nichts im Gedächtnis."
            if german
            else "I have no memories that match this message yet."
        )
        return f"{head}\n{body}"
    intro = "Das habe ich zu deiner Nachricht im Gedächtnis:" if german else "Here is what I remember about this:"
    return f"{head}\n{intro}\n{render_observations(memory, 4_000)}"


class ChatTurns:
    def __init__(
        self,
        db: Database,
        bus: EventBus,
        gateway: LlmGateway,
        engine: DecisionEngine,
        routing: RoutingRules,
        recall: Callable[[], Recall | None],
        *,
        observation_types: frozenset[str],
        history_messages: int = 20,
        session_idle: timedelta = timedelta(minutes=30),
    ) -> None:
        self.db = db
        self.bus = bus
        self.gateway = gateway
        self.engine = engine
        self.routing = routing
        self.recall_source = recall
        self.multistream = MultiStreamRecall(engine, gateway)
        self.observation_types = observation_types
        self.history_messages = history_messages
        self.session_idle = session_idle
        self._publishing: set[asyncio.Task[None]] = set()

    def _publish_soon(self, pending: list[outbox.Pending]) -> None:
        """Publish after the response: the events are already durable in the outbox (the relay
        publishes them if this process dies first), so the turn does not wait for NATS."""

        async def publish() -> None:
            try:
                await outbox.publish(self.db, self.bus, pending)
            except Exception as exc:  # left for the relay
                log.warning("chat.publish_deferred", error=str(exc))

        task = asyncio.create_task(publish())
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def drain(self) -> None:
        """Wait for events still being published (on shutdown)."""
        await asyncio.gather(*self._publishing, return_exceptions=True)

    # ---- step 1: check and prepare ----------------------------------------------------------

    def _decide(self, body: TurnRequest) -> RoutingDecision:
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

    async def begin(self, principal: Principal, chat_id: uuid.UUID, body: TurnRequest) -> PreparedTurn:
        started = time.perf_counter()
        if principal.user_id is None:
            raise Forbidden("a chat turn needs a user (this agent key acts for no user)")
        recall = None
        if principal.has(Permission.read_observation):
            recall = self.recall_source()
            if recall is None:
                raise RecallUnavailable(
                    "recall is not configured on this server (Services.recall is None); chat-turn cannot recall memory"
                )
        decision = self._decide(body)
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
            async with self.db.tenant(principal.tenant_id) as conn:
                store = ChatStore(conn)
                chat = await self._chat(store, principal, chat_id, body)
                if recall is not None:
                    # the chat is the caller's: recall (on a connection of its own) runs beside
                    # the rest of the preparation; a turn refused above never recalled anything
                    recalling = asyncio.create_task(
                        self.multistream.recall(principal, recall, body.message, buffer, ahead=ahead, intent=intent)
                    )
                active, stored = await store.session_and_history(chat.id, self.history_messages)
                session, previous = await self._session(store, principal, chat, body, active)
                history = _history_messages(stored)
                # the user's rejections hide memories: here in SQL, in recall by the recall service
                stable = await self._stable_memory(conn, principal) if recall is not None else []
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
            history=history,
            stable=stable,
            stable_hash=_stable_hash(stable),
            decision=decision,
            recall=recall,
            started=started,
            buffer=buffer,
            recalling=recalling,
        )
        prepared.timings["prepare"] = (time.perf_counter() - started) * 1000
        return prepared

    def _routed(self, decision: RoutingDecision, body: TurnRequest) -> ChatModelAutoRouted:
        chain = self.gateway.chain(decision.profile, self._model_override(body))
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
            chat = await store.create_chat(chat_id, principal.tenant_id, principal.user_id, title)
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
        session = await store.create_session(
            principal.tenant_id, principal.user_id, chat.id, body.message[:2_000], {"turns": 0}
        )
        return session, previous

    async def _stable_memory(self, conn: Connection, principal: Principal) -> list[Observation]:
        """The user's own preferences and identity: the cached part of the memory (never sensitive,
        never what the user rejected).

        Only what the user owns: a colleague's public preference is not this user's profile (it
        can still come up through recall).
        """
        types = [t for t in STABLE_TYPES if t in self.observation_types]
        if not types or principal.user_id is None:
            return []
        visibility = Visibility(
            tenant_id=principal.tenant_id,
            user_id=principal.user_id,
            teams=principal.teams,
            include_sensitive=False,
        )
        params: list[Any] = [principal.tenant_id, principal.user_id]
        where = [
            "tenant_id = $1",
            "user_id = $2",
            visibility_sql(visibility, params),
            "scope <> 'sensitive'",
            # the rejected ids, read once by the statement (no round trip of their own)
            f"id <> ALL(ARRAY({REJECTED_IDS_SQL.format(user='$2')}))",
        ]
        params.append(types)
        where.append(f"type = ANY(${len(params)}::text[])")
        params.append(datetime.now(UTC))
        where.append(live_sql(f"${len(params)}"))
        params.append(STABLE_LIMIT)
        rows = await conn.fetch(
            f"SELECT * FROM observations WHERE {' AND '.join(where)}"
            " ORDER BY CASE priority WHEN 'critical' THEN 3 WHEN 'high' THEN 2 WHEN 'normal' THEN 1 ELSE 0 END DESC,"
            f" created_at, id LIMIT ${len(params)}",
            *params,
        )
        observations = [to_observation(r) for r in rows]
        return [o for o in observations if o.scope is not Scope.sensitive and visibility.allows(o)]

    # ---- step 2: recall, answer, persist ---------------------------------------------------

    def _tools(self, prepared: PreparedTurn, executor_model: str, found: list[Any]) -> dict[str, Tool]:
        tools: dict[str, Tool] = {}
        recall = prepared.recall
        if recall is not None:
            principal = prepared.principal

            async def search_memory(arguments: Mapping[str, Any], _ctx: ToolContext) -> str:
                query = str(arguments.get("query") or "").strip()
                if not query:
                    raise ValueError("search_memory needs a 'query'")
                result = await recall.search(
                    principal, RecallQuery(text=query[:2_000], limit=8, want_sensitive=False, stream_origin="tool")
                )
                hits = standard_context_filter(principal, result.hits)  # rejected ones: hidden by recall
                found.extend(hits)
                if not hits:
                    return "No matching memories."
                return render_observations([h.observation for h in hits], 3_000)

            tools["search_memory"] = Tool(
                ToolSpec(
                    name="search_memory",
                    description="Search Engram's memory of this user and tenant: facts, decisions, preferences.",
                    input_schema={
                        "type": "object",
                        "properties": {"query": {"type": "string", "description": "what to look for"}},
                        "required": ["query"],
                    },
                ),
                search_memory,
            )
        advisor_model = self.gateway.profile("advisor").model
        if executor_model != advisor_model:
            context = prepared.body.message[:2_000]
            tools["consult_advisor"] = self.gateway.advisor_tool(context)
        return tools

    def _request(self, prepared: PreparedTurn, memory: str | None) -> Callable[[Profile], LlmRequest]:
        profile_block = render_observations(prepared.stable, 3_000) if prepared.stable else ""
        today = date.today().isoformat()
        history = tuple(prepared.history)
        message = prepared.body.message

        def build(profile: Profile) -> LlmRequest:
            prompts = self.gateway.prompts
            system = [
                SystemBlock(
                    prompts.render("chat_system_v1", model=profile.model, provider=profile.provider, today=today),
                    cache=True,
                )
            ]
            if profile_block:
                system.append(
                    SystemBlock(
                        prompts.render(
                            "stable_memory_v1", model=profile.model, provider=profile.provider, profile=profile_block
                        ),
                        cache=True,
                    )
                )
            return LlmRequest(
                system=tuple(system),
                history=history,
                memory=memory,
                turn=({"role": "user", "content": message},),
                max_tokens=profile.max_tokens,
            )

        return build

    async def run(self, prepared: PreparedTurn, *, on_text: TextSink | None = None) -> TurnResponse:
        principal = prepared.principal
        assert principal.user_id is not None
        buffer = prepared.buffer
        gateway = self.gateway
        executor_model = gateway.chain(prepared.decision.profile, self._model_override(prepared.body))[0].model
        t0 = time.perf_counter()
        recalled: MultiStreamResult | None = None
        if prepared.recalling is not None:
            recalled = await prepared.recalling
        # "recall": what the turn still waited for after preparing; "recall_total": all of it
        prepared.timings["recall"] = (time.perf_counter() - t0) * 1000
        if recalled is not None:
            prepared.timings["recall_total"] = recalled.duration_ms
            prepared.timings["intent"] = recalled.router_ms

        tool_hits: list[Any] = []
        outcome: TurnOutcome | None = None
        offline_reason: Literal["no_api_key", "llm_unavailable"] | None = None
        t1 = time.perf_counter()
        if not gateway.available:
            offline_reason = "no_api_key"
        else:
            try:
                outcome = await gateway.run_tools(
                    prepared.decision.profile,
                    self._request(prepared, recalled.memory if recalled else None),
                    self._tools(prepared, executor_model, tool_hits),
                    telemetry=buffer,
                    model_override=self._model_override(prepared.body),
                    on_text=on_text,
                )
            except StreamInterrupted as exc:
                await self._record_failure(prepared, buffer, exc)
                raise TurnFailed(f"the model failed while answering: {exc}") from exc
            except LlmUnavailable as exc:
                offline_reason = "llm_unavailable"
                buffer.emit(
                    ChatError(stage="llm", error_type="llm_unavailable", message=str(exc)[:2000], model=executor_model)
                )
        prepared.timings["llm_wall"] = (time.perf_counter() - t1) * 1000

        memory_observations = [h.observation for s in (recalled.streams if recalled else []) for h in s.hits]
        if outcome is not None:
            answer, model, blocks = outcome.text, outcome.model, outcome.content_blocks
        else:
            answer = offline_answer(prepared.body.message, memory_observations, offline_reason or "no_api_key")
            model, blocks = "offline", None
            if on_text is not None:
                await on_text(answer)
        if not answer.strip():
            answer = "(no answer)"
        return await self._persist(
            prepared, buffer, recalled, tool_hits, outcome, answer, model, blocks, offline_reason
        )

    def _model_override(self, body: TurnRequest) -> str | None:
        requested = body.model
        if requested is None or requested in self.gateway.config.profiles:
            return None
        return requested

    async def _record_failure(self, prepared: PreparedTurn, buffer: TelemetryBuffer, exc: Exception) -> None:
        principal = prepared.principal
        buffer.emit(
            ChatError(
                stage="llm.stream",
                error_type=type(exc).__name__,
                message=str(exc)[:2000],
                model=getattr(exc, "model", None),
            )
        )
        records = [
            telemetry.record(
                principal.tenant_id, event_name(meta), meta, user_id=principal.user_id, chat_id=prepared.chat.id
            )
            for meta in buffer.events
        ]
        async with self.db.tenant(principal.tenant_id) as conn:
            await telemetry.write(conn, records)

    async def _persist(
        self,
        prepared: PreparedTurn,
        buffer: TelemetryBuffer,
        recalled: MultiStreamResult | None,
        tool_hits: list[Any],
        outcome: TurnOutcome | None,
        answer: str,
        model: str,
        blocks: list[dict[str, Any]] | None,
        offline_reason: Literal["no_api_key", "llm_unavailable"] | None,
    ) -> TurnResponse:
        principal = prepared.principal
        assert principal.user_id is not None
        t2 = time.perf_counter()
        total = buffer.total()
        cost = sum(cost_usd(self.gateway.config.price(m), u) for m, u in buffer.usage.items())
        rag_hits = recalled.hit_count if recalled else 0
        duration_ms = int((time.perf_counter() - prepared.started) * 1000)
        user_message_id, assistant_id = uuid.uuid4(), uuid.uuid4()
        trace: dict[str, Any] = {
            "query_id": str(recalled.query_id) if recalled else None,
            "tier": prepared.decision.tier,
            "routing_reason": prepared.decision.reason,
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
                for h in tool_hits
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
        usage = {**total.as_dict(), "cost_usd": cost, "by_model": {m: u.as_dict() for m, u in buffer.usage.items()}}
        end_now = prepared.body.end_session
        language = detect_language(prepared.body.message)
        events = []
        if prepared.previous_session is not None:
            events.append(self._session_ended(principal, prepared.previous_session, prepared.chat.id))
        if end_now:
            events.append(self._session_ended(principal, prepared.session, prepared.chat.id))
        events.append(
            new_event(
                CHAT_TURN_COMPLETED,
                ChatTurnCompleted(
                    chat_id=prepared.chat.id,
                    session_id=prepared.session.id,
                    user_message_id=user_message_id,
                    assistant_message_id=assistant_id,
                    user_message=prepared.body.message,
                    assistant_message=answer[:200_000],
                    model=model,
                    language=language,
                    session_ended=end_now,
                ),
                tenant_id=principal.tenant_id,
                source=SOURCE,
                user_id=principal.user_id,
                subject=f"chat/{prepared.chat.id}",
                event_id=f"{CHAT_TURN_COMPLETED.type}:{assistant_id}",
            )
        )
        metas = list(buffer.events)
        turns = int(prepared.session.metadata.get("turns", 0))
        previous_hash = prepared.session.metadata.get("stable_memory_hash")
        if turns and previous_hash and previous_hash != prepared.stable_hash and outcome is not None:
            metas.append(
                MemoryCacheBreak(
                    reason="stable memory changed between turns",
                    model=model,
                    expected_cached_tokens=approx_tokens(render_observations(prepared.stable, 3_000)),
                )
            )
        metas.append(
            TurnCompletedMeta(
                model=model,
                tier=prepared.decision.tier,
                input_tokens=total.input_tokens,
                output_tokens=total.output_tokens,
                cache_creation_input_tokens=total.cache_creation_input_tokens,
                cache_read_input_tokens=total.cache_read_input_tokens,
                cost_usd=cost,
                duration_ms=duration_ms,
                rag_hits=rag_hits,
                offline=outcome is None,
            )
        )
        records = [
            telemetry.record(principal.tenant_id, event_name(m), m, user_id=principal.user_id, chat_id=prepared.chat.id)
            for m in metas
        ]
        async with self.db.tenant(principal.tenant_id) as conn:
            store = ChatStore(conn)
            await store.record_turn(
                principal.tenant_id,
                prepared.chat.id,
                prepared.session.id,
                principal.user_id,
                [
                    NewMessage(user_message_id, "user", prepared.body.message),
                    NewMessage(
                        assistant_id,
                        "assistant",
                        answer,
                        model=model,
                        duration_ms=duration_ms,
                        memory_trace=trace,
                        usage=usage,
                        content_blocks=blocks,
                    ),
                ],
                datetime.now(UTC),
                status=SessionStatus.completed if end_now else None,
                metadata={"turns": turns + 1, "stable_memory_hash": prepared.stable_hash, "last_model": model},
            )
            await telemetry.write(conn, records)
            pending = await outbox.stage(conn, principal.tenant_id, events)
        self._publish_soon(pending)
        prepared.timings["persist"] = (time.perf_counter() - t2) * 1000
        prepared.timings["llm"] = buffer.llm_ms
        prepared.timings["total"] = (time.perf_counter() - prepared.started) * 1000
        return TurnResponse(
            chat_id=prepared.chat.id,
            session_id=prepared.session.id,
            user_message_id=user_message_id,
            message_id=assistant_id,
            answer=answer,
            model=model,
            tier=prepared.decision.tier,
            offline=outcome is None,
            offline_reason=offline_reason,
            query_id=recalled.query_id if recalled else None,
            memory_trace=trace,
            usage=TurnUsage(
                input_tokens=total.input_tokens,
                output_tokens=total.output_tokens,
                cache_creation_input_tokens=total.cache_creation_input_tokens,
                cache_read_input_tokens=total.cache_read_input_tokens,
                cost_usd=cost,
                llm_calls=buffer.calls,
            ),
            duration_ms=int(prepared.timings["total"]),
            session_ended=end_now,
            timings={k: round(v, 2) for k, v in prepared.timings.items()},
        )

    def _session_ended(self, principal: Principal, session: Session, chat_id: uuid.UUID) -> Any:
        return session_ended_event(principal.tenant_id, session, chat_id, principal.user_id)

    async def turn(
        self, principal: Principal, chat_id: uuid.UUID, body: TurnRequest, *, on_text: TextSink | None = None
    ) -> TurnResponse:
        return await self.run(await self.begin(principal, chat_id, body), on_text=on_text)

    async def end_session(self, principal: Principal, chat_id: uuid.UUID) -> uuid.UUID | None:
        """Close the chat's active session now; it gets a summary. None when none was active."""
        if principal.user_id is None:
            raise Forbidden("ending a session needs a user")
        async with self.db.tenant(principal.tenant_id) as conn:
            store = ChatStore(conn)
            chat = await store.lock_chat(chat_id)
            if chat is None or chat.user_id != principal.user_id:
                raise NotFound(f"chat {chat_id} not found")
            session = await store.active_session(chat_id)
            if session is None or not await store.end_session(session.id):
                return None
            pending = await outbox.stage(conn, principal.tenant_id, [self._session_ended(principal, session, chat_id)])
        await outbox.publish(self.db, self.bus, pending)
        return session.id
