"""Ports: what the services need from the outside world (typing.Protocol)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from cloudevents.http import CloudEvent

from engram.adapters.nats_bus import Published, RawMessage
from engram.domain.llm import LlmReply, LlmRequest
from engram.domain.recall import RecallQuery, RecallResult
from engram.domain.scopes import Principal


class EventBus(Protocol):
    async def publish(self, event: CloudEvent) -> Published: ...

    async def publish_many(self, events: Sequence[CloudEvent]) -> list[Published]: ...

    async def publish_raw(self, subject: str, headers: dict[str, str], body: bytes, *, event_id: str) -> Published: ...

    async def publish_raw_many(
        self, items: Sequence[RawMessage], *, timeout: float = 10.0
    ) -> list[Published | BaseException]: ...


class Recall(Protocol):
    """Permission-aware hybrid recall (R-7.1-R-7.3, R-7.5): visibility inside the search."""

    async def search(self, principal: Principal, query: RecallQuery) -> RecallResult: ...


class LLM(Protocol):
    """One provider's Messages API (R-8.4): a call per model, no retries (the gateway decides)."""

    @property
    def provider(self) -> str: ...

    async def complete(
        self, request: LlmRequest, *, model: str, timeout: float, temperature: float | None
    ) -> LlmReply: ...

    async def stream(
        self,
        request: LlmRequest,
        *,
        model: str,
        timeout: float,
        temperature: float | None,
        on_text: Callable[[str], Awaitable[None]],
    ) -> LlmReply: ...
