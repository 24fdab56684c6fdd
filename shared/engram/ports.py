"""Ports: what the services need from the outside world (typing.Protocol)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cloudevents.http import CloudEvent

from engram.adapters.nats_bus import Published


class EventBus(Protocol):
    async def publish(self, event: CloudEvent) -> Published: ...

    async def publish_many(self, events: Sequence[CloudEvent]) -> list[Published]: ...

    async def publish_raw(self, subject: str, headers: dict[str, str], body: bytes, *, event_id: str) -> Published: ...
