"""The chat store port: chats, their sessions, messages and summaries of one tenant transaction
(`TenantTx.chats`, R-4.3, R-4.4), and the messages as a turn reads and writes them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from engram.domain.models import Chat, ChatMessage, Session, SessionStatus, Summary


class ChatStore(Protocol):
    """Chats, sessions, messages and summaries of the transaction's tenant (R-4.3, R-4.4)."""

    async def lock_chat(self, chat_id: uuid.UUID) -> Chat | None: ...

    async def create_chat(self, chat_id: uuid.UUID, user_id: str, title: str | None) -> Chat | None: ...

    async def set_time_zone(self, chat_id: uuid.UUID, name: str) -> None:
        """The IANA zone a turn of the chat named (checked by the caller), named now."""
        ...

    async def user_time_zone(self, user_id: str) -> str | None:
        """The zone the user named last, in any of their chats; None if they never named one."""
        ...

    async def active_session(self, chat_id: uuid.UUID) -> Session | None: ...

    async def get_session(self, session_id: uuid.UUID) -> Session | None: ...

    async def create_session(
        self, user_id: str, chat_id: uuid.UUID, user_prompt: str, metadata: dict[str, Any]
    ) -> Session: ...

    async def end_session(self, session_id: uuid.UUID, status: SessionStatus = SessionStatus.completed) -> bool: ...

    async def end_idle_sessions(self, ids: list[uuid.UUID], idle_before: datetime) -> list[Session]: ...

    async def fail_session(self, session_id: uuid.UUID) -> None: ...

    async def session_and_history(
        self, chat_id: uuid.UUID, limit: int
    ) -> tuple[Session | None, list[StoredMessage]]: ...

    async def session_messages(self, session_id: uuid.UUID, limit: int = 200) -> list[ChatMessage]: ...

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
    ) -> None: ...

    async def fail_extraction(self, message_id: uuid.UUID, reason: str) -> None: ...

    async def set_extraction(self, message_id: uuid.UUID, status: dict[str, Any]) -> None: ...

    async def save_summary(
        self, session_id: uuid.UUID, user_id: str | None, fields: dict[str, str], model: str
    ) -> Summary: ...

    async def get_summary(self, session_id: uuid.UUID) -> Summary | None: ...


@dataclass(frozen=True)
class StoredMessage:
    """A message of the history as the next turn sends it back."""

    role: str
    content: str
    content_blocks: list[dict[str, Any]] | None


@dataclass(frozen=True)
class NewMessage:
    id: uuid.UUID
    role: str
    content: str
    model: str | None = None
    duration_ms: int | None = None
    memory_trace: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    content_blocks: list[dict[str, Any]] | None = None
