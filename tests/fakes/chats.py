"""Chats, sessions, messages and summaries in memory (`engram.ports.ChatStore`), as `PgChatStore`.

`now()` is the transaction's start (`TxState.now`), as in PostgreSQL: the rows one
transaction touches share it. JSON columns go through a JSON round trip, so a value the real
adapter could not encode fails here too.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engram.domain.models import Chat, ChatKind, ChatMessage, Session, SessionStatus, Summary
from engram.ports import NewMessage, StoredMessage
from tests.fakes.data import MICROSECOND, ConstraintViolation, MessageRow, TenantData, TxState, jsonb

SUMMARY_FIELDS = ("request", "investigated", "learned", "completed", "next_steps", "notes")


class InMemoryChatStore:
    def __init__(self, tx: TxState) -> None:
        self.tx = tx

    @property
    def data(self) -> TenantData:
        return self.tx.rows()

    async def lock_chat(self, chat_id: uuid.UUID) -> Chat | None:
        # a transaction holds its tenant alone (see InMemoryUnitOfWork): the lock is implied
        return self.data.chats.get(chat_id)

    async def create_chat(self, chat_id: uuid.UUID, user_id: str, title: str | None) -> Chat | None:
        if chat_id in self.data.chats or self.tx.chat_taken(chat_id):
            return None  # ON CONFLICT (id) DO NOTHING: ids are unique across tenants
        chat = Chat(
            id=chat_id,
            tenant_id=self.tx.tenant_id,
            user_id=user_id,
            kind=ChatKind.ai,
            title=title,
            created_at=self.tx.now,
            updated_at=self.tx.now,
        )
        self.data.chats[chat_id] = chat
        return chat

    async def set_time_zone(self, chat_id: uuid.UUID, name: str) -> None:
        if (chat := self.data.chats.get(chat_id)) is not None:
            self.data.chats[chat_id] = chat.model_copy(update={"time_zone": name, "time_zone_at": self.tx.now})

    async def user_time_zone(self, user_id: str) -> str | None:
        named = [c for c in self.data.chats.values() if c.user_id == user_id and c.time_zone_at is not None]
        latest = max(named, key=lambda c: c.time_zone_at or self.tx.now, default=None)
        return latest.time_zone if latest is not None else None

    async def active_session(self, chat_id: uuid.UUID) -> Session | None:
        active = [s for s in self.data.sessions.values() if s.chat_id == chat_id and s.status is SessionStatus.active]
        return max(active, key=lambda s: s.updated_at, default=None)

    async def get_session(self, session_id: uuid.UUID) -> Session | None:
        return self.data.sessions.get(session_id)

    async def create_session(
        self, user_id: str, chat_id: uuid.UUID, user_prompt: str, metadata: dict[str, Any]
    ) -> Session:
        if chat_id not in self.data.chats:
            raise ConstraintViolation(f"sessions.chat_id: chat {chat_id} does not exist (foreign key)")
        session = Session(
            id=uuid.uuid4(),
            tenant_id=self.tx.tenant_id,
            user_id=user_id,
            chat_id=chat_id,
            user_prompt=user_prompt,
            status=SessionStatus.active,
            metadata=jsonb(metadata),
            created_at=self.tx.now,
            updated_at=self.tx.now,
        )
        self.data.sessions[session.id] = session
        return session

    def _set(self, session: Session, **changes: Any) -> Session:
        changed = session.model_copy(update=changes)
        self.data.sessions[session.id] = changed
        return changed

    async def end_session(self, session_id: uuid.UUID, status: SessionStatus = SessionStatus.completed) -> bool:
        session = self.data.sessions.get(session_id)
        if session is None or session.status is not SessionStatus.active:
            return False
        self._set(session, status=status, updated_at=self.tx.now)
        return True

    async def end_idle_sessions(self, ids: list[uuid.UUID], idle_before: datetime) -> list[Session]:
        ended = []
        for i in ids:
            s = self.data.sessions.get(i)
            if s is not None and s.status is SessionStatus.active and s.updated_at < idle_before:
                ended.append(self._set(s, status=SessionStatus.completed, updated_at=self.tx.now))
        return ended

    async def fail_session(self, session_id: uuid.UUID) -> None:
        s = self.data.sessions.get(session_id)
        if s is not None and s.status is not SessionStatus.active and session_id not in self.data.summaries:
            self._set(s, status=SessionStatus.failed)

    def _in_order(self, rows: list[MessageRow]) -> list[MessageRow]:
        """ORDER BY created_at, id."""
        return sorted(rows, key=lambda m: (m.created_at, m.id.int))

    async def session_and_history(self, chat_id: uuid.UUID, limit: int) -> tuple[Session | None, list[StoredMessage]]:
        said = [m for m in self.data.messages.values() if m.chat_id == chat_id and m.role in ("user", "assistant")]
        latest = self._in_order(said)[-limit:] if limit > 0 else []
        history = [StoredMessage(m.role, m.content, jsonb(m.content_blocks)) for m in latest]
        return await self.active_session(chat_id), history

    async def session_messages(self, session_id: uuid.UUID, limit: int = 200) -> list[ChatMessage]:
        mine = self._in_order([m for m in self.data.messages.values() if m.session_id == session_id])
        return [m.message(self.tx.tenant_id) for m in mine[:limit]]

    async def record_turn(
        self,
        chat_id: uuid.UUID,
        session_id: uuid.UUID,
        user_id: str,
        messages: Sequence[NewMessage],
        at: datetime,
        *,
        status: SessionStatus | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if chat_id not in self.data.chats or session_id not in self.data.sessions:
            raise ConstraintViolation(f"chat_messages: chat {chat_id} or session {session_id} does not exist")
        for n, m in enumerate(messages):
            if m.id in self.data.messages:
                raise ConstraintViolation(f"chat_messages: duplicate key {m.id}")
            self.data.messages[m.id] = MessageRow(
                id=m.id,
                chat_id=chat_id,
                session_id=session_id,
                user_id=user_id,
                role=m.role,
                content=m.content,
                created_at=at + n * MICROSECOND,  # a microsecond apart: history keeps their order
                model=m.model,
                duration_ms=m.duration_ms,
                memory_trace=jsonb(m.memory_trace or {}),
                usage=jsonb(m.usage or {}),
                content_blocks=jsonb(m.content_blocks),
            )
        session = self.data.sessions[session_id]
        self._set(
            session,
            updated_at=self.tx.now,
            status=status or session.status,
            metadata={**session.metadata, **(jsonb(metadata) or {})},  # jsonb ||: a shallow merge
        )
        chat = self.data.chats[chat_id]
        self.data.chats[chat_id] = chat.model_copy(update={"updated_at": self.tx.now})

    async def fail_extraction(self, message_id: uuid.UUID, reason: str) -> None:
        m = self.data.messages.get(message_id)
        if m is not None and (m.memory_trace.get("extraction") or {}).get("status") != "done":
            m.memory_trace["extraction"] = {"status": "failed", "error": reason[:500]}

    async def set_extraction(self, message_id: uuid.UUID, status: dict[str, Any]) -> None:
        m = self.data.messages.get(message_id)
        if m is not None:
            m.memory_trace["extraction"] = jsonb(status)

    async def save_summary(
        self, session_id: uuid.UUID, user_id: str | None, fields: dict[str, str], model: str
    ) -> Summary:
        """One per session: a second save rewrites the fields, keeps its id, owner and time."""
        existing = self.data.summaries.get(session_id)
        values = {name: fields[name] for name in SUMMARY_FIELDS}
        if existing is not None:
            summary = existing.model_copy(update={**values, "generated_by_model": model})
        else:
            summary = Summary(
                id=uuid.uuid4(),
                tenant_id=self.tx.tenant_id,
                session_id=session_id,
                user_id=user_id,
                generated_by_model=model,
                created_at=self.tx.now,
                **values,
            )
        self.data.summaries[session_id] = summary
        return summary

    async def get_summary(self, session_id: uuid.UUID) -> Summary | None:
        return self.data.summaries.get(session_id)
