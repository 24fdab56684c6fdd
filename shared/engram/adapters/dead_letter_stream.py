"""The dead-letter stream (`<stream>_DLQ`) read by sequence (`engram.ports.operations.DeadLetterQueue`).

Dead letters are read with JetStream's message-get API (`next_by_subj`: the next message at or
after a sequence on a subject filter), not through a consumer: listing them acknowledges
nothing, creates no state on the server and sees the stream exactly as stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from engram.domain.dead_letters import DeadLetter

# JetStream's error codes for deleting a sequence that holds no message (any more)
NO_MESSAGE = frozenset({10043, 10057})


class JetStreamDeadLetters:
    def __init__(self, js: JetStreamContext, stream: str = "ENGRAM_DLQ") -> None:
        self.js = js
        self.stream = stream

    async def scan(self, subject_filter: str) -> AsyncIterator[DeadLetter]:
        last = (await self.js.stream_info(self.stream)).state.last_seq
        seq = 1
        while seq <= last:
            try:
                raw = await self.js.get_msg(self.stream, seq=seq, subject=subject_filter, next=True)
            except NotFoundError:
                return
            if raw.seq is None or raw.seq > last:
                return
            yield _letter(raw)
            seq = raw.seq + 1

    async def get(self, seq: int) -> DeadLetter | None:
        try:
            return _letter(await self.js.get_msg(self.stream, seq=seq))
        except NotFoundError:
            return None

    async def remove(self, seq: int) -> bool:
        try:
            return bool(await self.js.delete_msg(self.stream, seq))
        except APIError as exc:
            if isinstance(exc, NotFoundError) or getattr(exc, "err_code", None) in NO_MESSAGE:
                return False  # no message at that sequence (any more)
            raise


def _letter(raw: object) -> DeadLetter:
    headers = getattr(raw, "headers", None) or {}
    return DeadLetter(
        seq=int(getattr(raw, "seq", 0) or 0),
        subject=str(getattr(raw, "subject", "")),
        headers={str(k): str(v) for k, v in headers.items()},
        body=getattr(raw, "data", None) or b"",
        stored_at=getattr(raw, "time", None),
    )
