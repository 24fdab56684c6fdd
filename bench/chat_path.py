"""A conversation stored the way Engram's chat stores one (`bench.locomo --via chat`).

`ConversationIngest`, which the retrieval benches use, writes every turn of an imported
conversation as a unit. A chat through chat-turn is stored by extract-observation instead:
every user message with the assistant's answer goes out as `chat.turn.completed`, and the
extractor keeps what it finds worth keeping (offline, without an LLM key: the user's salient
statements) and, unless `ENGRAM_CHAT_UNITS=false`, the memory units the turn reaches
(`conversation.chat_units`); at a session's end come its summary and its units once more.
This module replays a conversation as a chat with an assistant on that path, through the real
services: the chat, its sessions and messages are written by the chat store, the events go
through extract-observation's own worker declaration
(`functions.extract_observation.main.WORKER`, decoding included) to `Extraction.handle`, and
the change events it announces are indexed by embed-index's indexer.

Hits map back to turns by what they cite: a unit its messages (`<chat id>#<message ids>`), an
extracted observation the message it came from (`chat_message_id`); a summary names no turn.

Each event carries its turn's time (CloudEvents `time`, the conversation's dates), as chat-turn
stamps it: what extraction writes is dated by it (`said_at`). What a session's events wrote is
then dated to the session (`created_at`), as if written while it took place. With `late` (a
share of the turns), those turns' events fail their first delivery and are handled after the
whole conversation, as a redelivery after an outage or a dead letter replayed by an operator
would be: what they give is written last (`created_at` now), though said before.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo

from engram.adapters.observation_rows import to_observation
from engram.adapters.postgres import Database
from engram.adapters.tenant_data import PgTenantData
from engram.bootstrap import build_extraction, build_gateway
from engram.domain.conversation import ConversationSession, turn_id_of
from engram.domain.events import CHAT_TURN_COMPLETED, ChatTurnCompleted, new_event
from engram.domain.language import detect_language
from engram.domain.observation import Observation, is_unit_key
from engram.domain.scopes import Principal, PrincipalKind
from engram.domain.streams import DecisionEngine
from engram.ports import Embedder, NewMessage, Recall, SearchIndex, UnitOfWork
from engram.services.consolidation import Consolidator
from engram.services.extraction import Extraction
from engram.services.gateway.calls import TelemetryBuffer
from engram.services.multistream import MultiStreamRecall
from engram.services.profile import read_profile, stable_block
from engram.services.sessions import session_ended_event
from engram.settings import get_settings
from functions.extract_observation.main import WORKER as EXTRACT

SOURCE = "/engram/chat-turn"
NAMESPACE = uuid.UUID("5f0c3f62-8e5e-4b8e-9d1c-2a3c1b7e9a10")


@dataclass
class ChatReplay:
    """What one replay wrote: message id -> turn id, and the outcome of the events."""

    turns: dict[uuid.UUID | None, str] = field(default_factory=dict)
    turn_events: int = 0
    session_events: int = 0
    late_events: int = 0  # turn events handled after the conversation (`late`)
    refused: list[str] = field(default_factory=list)

    def turn_of(self, observation: Observation) -> str:
        """The turn(s) an observation stands for: a memory unit's messages (`<chat>#<ids>`), else
        the message it was extracted from ("" for a summary)."""
        cited = [_uuid(m) for m in (turn_id_of(observation.provenance.source_event_id) or "").split()]
        turns = [self.turns[m] for m in cited if m in self.turns]
        if turns:
            return " ".join(dict.fromkeys(turns))
        message = observation.provenance.chat_message_id
        return self.turns.get(message, "") if message is not None else ""


def _uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def chat_extraction(uow: UnitOfWork) -> tuple[Extraction, str]:
    """extract-observation's service as bootstrap builds it (its rules, types and LLM gateway:
    offline unless an API key is configured), and which extractor that is ("llm" or "offline")."""
    settings = get_settings()
    gateway = build_gateway(settings)
    return build_extraction(settings, uow, gateway), "llm" if gateway.available else "offline"


def chat_streams() -> MultiStreamRecall:
    """chat-turn's multi-stream recall as bootstrap builds it: its decision engine and LLM gateway
    (offline unless an API key is configured: the keyword intent, else the fallback)."""
    settings = get_settings()
    engine = DecisionEngine.from_yaml(
        settings.engram_decision_engine_path.read_text(encoding="utf-8"), settings.engram_observation_types
    )
    return MultiStreamRecall(engine, build_gateway(settings))


async def streamed(
    streams: MultiStreamRecall, principal: Principal, recall: Recall, message: str, zone: tzinfo = UTC
) -> list[Observation]:
    """The memories a chat turn's streams put into its prompt for `message`: what each stream's
    text holds within its share of the memory budget (`StreamResult.shown`; a compressed
    stream's, what it held before compression)."""
    result = await streams.recall(principal, recall, message, TelemetryBuffer(), zone=zone)
    return [obs for r in result.streams for obs in r.shown]


async def reset_tenant(db: Database, tenant_id: str, keep: frozenset[str] = frozenset({"embedding_cache"})) -> None:
    """Every row of the tenant but the embedding cache: chats, inbox and memory start empty."""
    data = PgTenantData(db)
    async with db.system() as conn:
        tables = [t for t in await data.tables(conn) if t not in keep]
        for _ in range(3):  # a delete trigger may touch a table deleted before it
            for table in tables:
                await conn.execute(f'DELETE FROM "{table}" WHERE tenant_id = $1', tenant_id)


async def stored_observations(db: Database, tenant_id: str) -> Counter[str]:
    """The tenant's observations by how they came about (trigger source and type)."""
    async with db.tenant(tenant_id) as conn:
        rows = await conn.fetch("SELECT trigger_source, type, count(*) AS n FROM observations GROUP BY 1, 2")
    return Counter({f"{r['trigger_source']}.{r['type']}": int(r["n"]) for r in rows})


async def tenant_observations(db: Database, tenant_id: str) -> list[Observation]:
    async with db.tenant(tenant_id) as conn:
        return [to_observation(r) for r in await conn.fetch("SELECT * FROM observations ORDER BY created_at, id")]


@dataclass(frozen=True)
class StableBlock:
    """The stable memory block a chat turn of a user would send."""

    turns: frozenset[str]  # one turn id per message the block's observations were extracted from
    chars: int  # its length in the prompt


async def stable_memory_block(
    uow: UnitOfWork, tenant_id: str, user_id: str, replay: ChatReplay, now: datetime | None = None
) -> StableBlock:
    """The chat's stable memory block as `chat.prepare` reads it at `now` (the user's own
    preferences and identity, never sensitive, the newest that fit the block's budget, and their
    plans still ahead), and the turns it cites."""
    reader = Principal(tenant_id, user_id, PrincipalKind.human, frozenset(), frozenset())
    async with uow.tenant(tenant_id) as tx:
        sent = await read_profile(tx, reader, get_settings().engram_observation_types, now)
    turns = frozenset(turn for o in sent for turn in replay.turn_of(o).split() if turn)
    return StableBlock(turns, len(stable_block(sent)))


async def consolidate_extracted(
    db: Database, uow: UnitOfWork, embedder: Embedder, index: SearchIndex, tenant_id: str
) -> int:
    """What consolidate-memory does on each `observation.created` of the replay (rules and
    vectors, no model), in the order the observations were written: memory units are records of
    what was said and are left alone (`Consolidator.consolidate`). The changes' events stay on
    the bus for the indexer. Returns how many observations consolidation superseded."""
    consolidator = Consolidator(uow, embedder, index)
    for obs in await tenant_observations(db, tenant_id):
        if not is_unit_key(obs.key):
            await consolidator.consolidate(tenant_id, obs.id, trigger="event")
    return sum(o.superseded_by is not None for o in await tenant_observations(db, tenant_id))


def message_id(tenant: str, conversation_id: str, turn_id: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"{tenant}/{conversation_id}/{turn_id}")


async def replay_chat(
    db: Database,
    uow: UnitOfWork,
    extraction: Extraction,
    *,
    tenant_id: str,
    user_id: str,
    conversation_id: str,
    sessions: Sequence[ConversationSession],
    assistants: frozenset[str],
    replay: ChatReplay,
    late: float = 0.0,
    seed: int = 0,
) -> None:
    """One chat per conversation, one chat session per conversation session: each user message
    (the turns of a speaker who is not an assistant) with the assistant's answer after it is a
    recorded turn, then its `chat.turn.completed` event is handled, as chat-turn and
    extract-observation take turns in a chat; each session ends with `session.ended`. A `late`
    share of the turn events (drawn with `seed`) is handled after the last session instead."""
    chat_id = uuid.uuid5(NAMESPACE, f"{tenant_id}/{conversation_id}")
    draw = random.Random(f"{seed}/{conversation_id}")
    delayed = []
    async with uow.tenant(tenant_id) as tx:
        await tx.chats.create_chat(chat_id, user_id, conversation_id)
    for session in sessions:
        turns = [t for t in session.turns if t.text.strip()]
        pairs: list[tuple[str, str, str, str | None]] = []  # user turn id, text, answer, answer turn id
        for i, turn in enumerate(turns):
            if turn.speaker in assistants:
                continue
            reply = turns[i + 1] if i + 1 < len(turns) and turns[i + 1].speaker in assistants else None
            pairs.append((turn.turn_id, turn.text, reply.text if reply else "", reply.turn_id if reply else None))
        if not pairs:
            continue
        async with uow.tenant(tenant_id) as tx:
            chat_session = await tx.chats.create_session(user_id, chat_id, pairs[0][1][:2_000], {})
        async with db.tenant(tenant_id) as conn:  # the session took place on the conversation's date
            await conn.execute("UPDATE sessions SET created_at = $2 WHERE id = $1", chat_session.id, session.started_at)
        outcomes: list[Exception | None] = []
        for user_turn, text, answer, answer_turn in pairs:  # as chat-turn: the turn, then its event
            user_message = message_id(tenant_id, conversation_id, user_turn)
            answer_id = message_id(tenant_id, conversation_id, answer_turn or f"{user_turn}/answer")
            replay.turns[user_message] = user_turn
            messages = [NewMessage(user_message, "user", text)]
            if answer_turn is not None:
                replay.turns[answer_id] = answer_turn
                messages.append(NewMessage(answer_id, "assistant", answer))
            at = session.started_at + timedelta(seconds=len(replay.turns))  # in order
            async with uow.tenant(tenant_id) as tx:
                await tx.chats.record_turn(chat_id, chat_session.id, user_id, messages, at)
            completed = new_event(
                CHAT_TURN_COMPLETED,
                ChatTurnCompleted(
                    chat_id=chat_id,
                    session_id=chat_session.id,
                    user_message_id=user_message,
                    assistant_message_id=answer_id,
                    user_message=text,
                    assistant_message=answer,
                    language=detect_language(text),
                ),
                tenant_id=tenant_id,
                source=SOURCE,
                user_id=user_id,
                subject=f"chat/{chat_id}",
                event_id=f"{CHAT_TURN_COMPLETED.type}:{answer_id}",
                time=at.isoformat(),  # chat-turn stamps the turn's event when the turn took place
            )
            if draw.random() < late:
                delayed.append(completed)
            else:
                outcomes += await EXTRACT.run(extraction.handle, [completed], extraction.rejected)
        ended = session_ended_event(tenant_id, chat_session, chat_id, user_id)
        ended["time"] = at.isoformat()
        outcomes += await EXTRACT.run(extraction.handle, [ended], extraction.rejected)
        async with db.tenant(tenant_id) as conn:  # what the session gave was written while it took place
            await conn.execute(
                "UPDATE observations SET created_at = $2 WHERE session_id = $1", chat_session.id, session.started_at
            )
        replay.turn_events += len(pairs)
        replay.session_events += 1
        replay.refused += [str(o) for o in outcomes if o is not None]
    late_outcomes = await EXTRACT.run(extraction.handle, delayed, extraction.rejected) if delayed else []
    replay.late_events += len(delayed)
    replay.refused += [str(o) for o in late_outcomes if o is not None]
