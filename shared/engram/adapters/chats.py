"""Chats, sessions, messages and summaries on PostgreSQL (R-4.3, R-4.4).

Queries on one connection inside a tenant transaction (RLS applies); the chat service
decides, this module only reads and writes rows.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from engram.adapters.postgres import Connection
from engram.domain.models import Chat, ChatKind, ChatMessage, Session, SessionStatus, Summary
from engram.ports import NewMessage, StoredMessage


def _chat(row: asyncpg.Record) -> Chat:
    return Chat(
        id=row["id"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        kind=ChatKind(row["kind"]),
        title=row["title"],
        time_zone=row["time_zone"],
        time_zone_at=row["time_zone_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _session(row: asyncpg.Record) -> Session:
    return Session(
        id=row["id"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        chat_id=row["chat_id"],
        user_prompt=row["user_prompt"],
        status=SessionStatus(row["status"]),
        metadata=dict(row["metadata"] or {}),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _message(row: asyncpg.Record) -> ChatMessage:
    return ChatMessage(
        id=row["id"],
        tenant_id=row["tenant_id"],
        chat_id=row["chat_id"],
        session_id=row["session_id"],
        role=row["role"],
        content=row["content"],
        model=row["model"],
        duration_ms=row["duration_ms"],
        memory_trace=dict(row["memory_trace"] or {}),
        created_at=row["created_at"],
    )


class PgChatStore:
    def __init__(self, conn: Connection, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    async def lock_chat(self, chat_id: uuid.UUID) -> Chat | None:
        """The chat, locked until the transaction ends: turns of one chat never race on its session."""
        row = await self.conn.fetchrow("SELECT * FROM chats WHERE id = $1 FOR UPDATE", chat_id)
        return _chat(row) if row else None

    async def create_chat(self, chat_id: uuid.UUID, user_id: str, title: str | None) -> Chat | None:
        """An AI chat owned by the user; None when the id is taken (in any tenant)."""
        row = await self.conn.fetchrow(
            "INSERT INTO chats (id, tenant_id, user_id, kind, title) VALUES ($1, $2, $3, 'ai', $4)"
            " ON CONFLICT (id) DO NOTHING RETURNING *",
            chat_id,
            self.tenant_id,
            user_id,
            title,
        )
        return _chat(row) if row else None

    async def set_time_zone(self, chat_id: uuid.UUID, name: str) -> None:
        await self.conn.execute("UPDATE chats SET time_zone = $2, time_zone_at = now() WHERE id = $1", chat_id, name)

    async def user_time_zone(self, user_id: str) -> str | None:
        """Through the partial index `chats_user_zone` (migration 0020): only chats that named one."""
        zone: str | None = await self.conn.fetchval(
            "SELECT time_zone FROM chats WHERE tenant_id = $1 AND user_id = $2 AND time_zone IS NOT NULL"
            " ORDER BY time_zone_at DESC LIMIT 1",
            self.tenant_id,
            user_id,
        )
        return zone

    async def active_session(self, chat_id: uuid.UUID) -> Session | None:
        row = await self.conn.fetchrow(
            "SELECT * FROM sessions WHERE chat_id = $1 AND status = 'active' ORDER BY updated_at DESC LIMIT 1",
            chat_id,
        )
        return _session(row) if row else None

    async def get_session(self, session_id: uuid.UUID) -> Session | None:
        row = await self.conn.fetchrow("SELECT * FROM sessions WHERE id = $1", session_id)
        return _session(row) if row else None

    async def create_session(
        self, user_id: str, chat_id: uuid.UUID, user_prompt: str, metadata: dict[str, Any]
    ) -> Session:
        row = await self.conn.fetchrow(
            "INSERT INTO sessions (id, tenant_id, user_id, chat_id, user_prompt, status, metadata)"
            " VALUES ($1, $2, $3, $4, $5, 'active', $6) RETURNING *",
            uuid.uuid4(),
            self.tenant_id,
            user_id,
            chat_id,
            user_prompt,
            metadata,
        )
        return _session(row)

    async def end_session(self, session_id: uuid.UUID, status: SessionStatus = SessionStatus.completed) -> bool:
        """Active -> completed (or failed); False if it had already ended."""
        result = await self.conn.execute(
            "UPDATE sessions SET status = $2, updated_at = now() WHERE id = $1 AND status = 'active'",
            session_id,
            status.value,
        )
        return bool(result.endswith(" 1"))

    async def end_idle_sessions(self, ids: list[uuid.UUID], idle_before: datetime) -> list[Session]:
        """End those of `ids` that are still active and untouched since `idle_before` (a turn that
        came in meanwhile keeps its session)."""
        rows = await self.conn.fetch(
            "UPDATE sessions SET status = 'completed', updated_at = now()"
            " WHERE id = ANY($1::uuid[]) AND status = 'active' AND updated_at < $2 RETURNING *",
            ids,
            idle_before,
        )
        return [_session(r) for r in rows]

    async def fail_session(self, session_id: uuid.UUID) -> None:
        """An ended session whose summary could not be made (never one that has its summary)."""
        await self.conn.execute(
            "UPDATE sessions SET status = 'failed' WHERE id = $1 AND status <> 'active'"
            " AND NOT EXISTS (SELECT 1 FROM summaries WHERE session_id = $1)",
            session_id,
        )

    async def session_and_history(self, chat_id: uuid.UUID, limit: int) -> tuple[Session | None, list[StoredMessage]]:
        """`active_session` and `history` in one round trip (a turn reads both after locking the chat)."""
        row = await self.conn.fetchrow(
            "SELECT s.*, (SELECT coalesce(json_agg(json_build_object('role', m.role, 'content', m.content,"
            " 'content_blocks', m.content_blocks) ORDER BY m.created_at, m.id), '[]'::json)"
            " FROM (SELECT role, content, content_blocks, created_at, id FROM chat_messages"
            " WHERE chat_id = $1 AND role IN ('user', 'assistant')"
            " ORDER BY created_at DESC, id DESC LIMIT $2) m) AS history"
            " FROM (SELECT 1) AS one LEFT JOIN LATERAL (SELECT * FROM sessions WHERE chat_id = $1"
            " AND status = 'active' ORDER BY updated_at DESC LIMIT 1) s ON true",
            chat_id,
            max(limit, 0),
        )
        assert row is not None  # one row, with or without a session
        session = _session(row) if row["id"] is not None else None
        history = [StoredMessage(m["role"], m["content"], m["content_blocks"]) for m in row["history"]]
        return session, history

    async def session_messages(self, session_id: uuid.UUID, limit: int = 200) -> list[ChatMessage]:
        rows = await self.conn.fetch(
            "SELECT * FROM chat_messages WHERE session_id = $1 ORDER BY created_at, id LIMIT $2", session_id, limit
        )
        return [_message(r) for r in rows]

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
        """A turn's messages, in order (a microsecond apart, so history keeps their order), and
        the session (status, merged metadata) and the chat touched: one statement."""

        def as_json(value: Any) -> str | None:  # JSON text: a list would read as an array dimension
            return None if value is None else json.dumps(value)

        await self.conn.execute(
            "WITH new_messages AS ("
            " INSERT INTO chat_messages (id, tenant_id, chat_id, session_id, user_id, role, content, model,"
            " duration_ms, memory_trace, usage, content_blocks, created_at)"
            " SELECT m.id, $1, $2, $3, $4, m.role, m.content, m.model, m.duration_ms, m.memory_trace::jsonb,"
            " m.usage::jsonb, m.content_blocks::jsonb, $5::timestamptz + make_interval(secs => (m.n - 1) / 1e6)"
            " FROM unnest($6::uuid[], $7::text[], $8::text[], $9::text[], $10::int[], $11::text[], $12::text[],"
            " $13::text[]) WITH ORDINALITY AS m(id, role, content, model, duration_ms, memory_trace, usage,"
            " content_blocks, n)),"
            " touched_session AS ("
            " UPDATE sessions SET updated_at = now(), status = coalesce($14, status),"
            " metadata = metadata || coalesce($15::jsonb, '{}'::jsonb) WHERE id = $3)"
            " UPDATE chats SET updated_at = now() WHERE id = $2",
            self.tenant_id,
            chat_id,
            session_id,
            user_id,
            at,
            [m.id for m in messages],
            [m.role for m in messages],
            [m.content for m in messages],
            [m.model for m in messages],
            [m.duration_ms for m in messages],
            [as_json(m.memory_trace or {}) for m in messages],
            [as_json(m.usage or {}) for m in messages],
            [as_json(m.content_blocks) for m in messages],
            status.value if status else None,
            metadata,
        )

    async def fail_extraction(self, message_id: uuid.UUID, reason: str) -> None:
        """The turn's extraction failed, unless it is already `done` (a late report never
        overwrites a result that was stored)."""
        await self.conn.execute(
            "UPDATE chat_messages SET memory_trace = jsonb_set(memory_trace, '{extraction}', $2::jsonb)"
            " WHERE id = $1 AND coalesce(memory_trace #>> '{extraction,status}', '') <> 'done'",
            message_id,
            {"status": "failed", "error": reason[:500]},
        )

    async def set_extraction(self, message_id: uuid.UUID, status: dict[str, Any]) -> None:
        await self.conn.execute(
            "UPDATE chat_messages SET memory_trace = jsonb_set(memory_trace, '{extraction}', $2::jsonb) WHERE id = $1",
            message_id,
            status,
        )

    async def save_summary(
        self, session_id: uuid.UUID, user_id: str | None, fields: dict[str, str], model: str
    ) -> Summary:
        """One summary per session (a redelivered event rewrites it, never duplicates it)."""
        row = await self.conn.fetchrow(
            "INSERT INTO summaries (id, tenant_id, session_id, user_id, request, investigated, learned, completed,"
            " next_steps, notes, generated_by_model) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
            " ON CONFLICT (tenant_id, session_id) DO UPDATE SET request = EXCLUDED.request,"
            " investigated = EXCLUDED.investigated, learned = EXCLUDED.learned, completed = EXCLUDED.completed,"
            " next_steps = EXCLUDED.next_steps, notes = EXCLUDED.notes,"
            " generated_by_model = EXCLUDED.generated_by_model RETURNING *",
            uuid.uuid4(),
            self.tenant_id,
            session_id,
            user_id,
            fields["request"],
            fields["investigated"],
            fields["learned"],
            fields["completed"],
            fields["next_steps"],
            fields["notes"],
            model,
        )
        return Summary(**dict(row.items()))

    async def get_summary(self, session_id: uuid.UUID) -> Summary | None:
        row = await self.conn.fetchrow("SELECT * FROM summaries WHERE session_id = $1", session_id)
        return Summary(**dict(row.items())) if row else None
