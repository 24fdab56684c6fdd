"""An in-memory event bus (`engram.ports.EventBus`) that behaves like JetStream where tests look.

Every event is encoded as the NATS binding does (`to_nats_binary`, so what cannot be sent
fails here too) and stored once per `Nats-Msg-Id` (tenant, source and event id): a second publish of the same event is
acknowledged as a duplicate and not stored again (JetStream's `Nats-Msg-Id` de-duplication).
`events` decodes what was stored, as a consumer would receive it.

`fail(times)` makes the next `times` messages fail (None: every message until `heal()`);
`publish_many` raises the first failure after trying them all, `publish_raw_many` reports a
failure per message, as `NatsBus` does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from cloudevents.http import CloudEvent

from engram.adapters.nats_binding import from_nats, to_nats_binary
from engram.domain.bus_access import subject_regex
from engram.domain.events import subject_for
from engram.domain.subjects import user_filters
from engram.ports import Published, RawMessage


class BusDown(ConnectionError):
    """What a publish raises while the fake bus is told to fail."""


class FakeBus:
    def __init__(self) -> None:
        self.stored: list[RawMessage] = []
        self.attempts = 0  # publish calls per message, failed and duplicate ones included
        self.failed = 0
        self._ids: set[str] = set()
        self._failures: int | None = 0  # None: fail until healed

    # ---- what a test controls and reads ---------------------------------------------------------

    def fail(self, times: int | None = None) -> None:
        self._failures = times

    def heal(self) -> None:
        self._failures = 0

    @property
    def events(self) -> list[CloudEvent]:
        return [from_nats(m.headers, m.body) for m in self.stored]

    def of_type(self, event_type: str) -> list[CloudEvent]:
        return [e for e in self.events if e["type"] == event_type]

    async def erase_user(self, tenant_id: str, user_id: str) -> dict[str, int]:
        """The user's messages leave the stored ones (the subjects JetStream's purge filters on)."""
        patterns = [re.compile(subject_regex(f)) for f in user_filters(tenant_id, user_id)]
        before = len(self.stored)
        self.stored = [m for m in self.stored if not any(p.match(m.subject) for p in patterns)]
        return {"ENGRAM": before - len(self.stored)}

    # ---- EventBus ----------------------------------------------------------------------------------

    async def publish(self, event: CloudEvent) -> Published:
        return (await self.publish_many([event]))[0]

    async def publish_many(self, events: Sequence[CloudEvent]) -> list[Published]:
        items = [RawMessage(subject_for(e), *to_nats_binary(e), event_id=str(e["id"])) for e in events]
        results = await self.publish_raw_many(items)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return [r for r in results if isinstance(r, Published)]

    async def publish_raw(self, subject: str, headers: dict[str, str], body: bytes, *, event_id: str) -> Published:
        self.attempts += 1
        if self._failures is None or self._failures > 0:
            if self._failures is not None:
                self._failures -= 1
            self.failed += 1
            raise BusDown(f"no ack for {event_id} on {subject}")
        key = headers.get("Nats-Msg-Id", event_id)  # what JetStream de-duplicates on
        if key in self._ids:
            return Published(event_id, subject, duplicate=True, seq=0)
        self._ids.add(key)
        self.stored.append(RawMessage(subject, dict(headers), body, event_id))
        return Published(event_id, subject, duplicate=False, seq=len(self.stored))

    async def publish_raw_many(
        self, items: Sequence[RawMessage], *, timeout: float = 10.0
    ) -> list[Published | BaseException]:
        results: list[Published | BaseException] = []
        for m in items:
            try:
                results.append(await self.publish_raw(m.subject, m.headers, m.body, event_id=m.event_id))
            except BusDown as exc:
                results.append(exc)
        return results
