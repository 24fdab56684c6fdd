"""Reading what was published on the real JetStream stream (for tests)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from cloudevents.http import CloudEvent

from engram.adapters.nats_binding import from_nats


async def published(services: Any, subject: str, *, settle: float = 0.3) -> list[CloudEvent]:
    """Every event stored on `subject` so far, oldest first (an ordered, ephemeral consumer)."""
    events: list[CloudEvent] = []
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def on_message(msg: Any) -> None:
        await queue.put(msg)

    sub = await services.bus.js.subscribe(subject, cb=on_message, ordered_consumer=True)
    try:
        while True:
            try:
                msg = await asyncio.wait_for(queue.get(), settle)
            except TimeoutError:
                break
            events.append(from_nats(msg.headers, msg.data))
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return events
