"""Pages of the memory list (newest first): a total counted up to a cap, and a mark to go on
after a memory without reading the ones before it. Pure, no I/O.

A page by number (`OFFSET`) and an exact total both read every visible row before the page or
in the list: with 35,000 memories visible to a caller of a 100k tenant, the first page took
104 ms and the last 95 (bench/RESULTS.md, `bench.memory_list`). So, as GitHub's search and
Elasticsearch's `track_total_hits` do, the total is exact up to `TOTAL_CAP` and a lower bound
beyond it (`Page.total_exact`), and `PageMark` (the `next` of a page, passed back as `after`)
goes on after the page's last memory by a range read of the list's index: 6-7 ms for the first,
the 200th and the last page alike. The cap is 1,000, not Elasticsearch's 10,000: counting reads
the rows (visibility is per caller, no index answers it), and 10,000 cost 44 ms at 30 %
visibility.
"""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from engram.domain.errors import Unprocessable

TOTAL_CAP = 1_000
MARK_CHARS = 32  # 24 bytes in URL-safe base64, no padding
MARK_PATTERN = rf"^[A-Za-z0-9_-]{{{MARK_CHARS}}}$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True)
class PageMark:
    """A place in the list ordered `created_at DESC, id`: the rows after it are those created
    before `created_at`, or at it with a greater id (uuids compare as PostgreSQL's do, by bytes)."""

    created_at: datetime
    id: uuid.UUID

    def encode(self) -> str:
        """32 URL-safe characters: the creation time (microseconds since 1970, signed, big
        endian) and the id's 16 bytes."""
        micros = (self.created_at - _EPOCH) // timedelta(microseconds=1)
        raw = micros.to_bytes(8, "big", signed=True) + self.id.bytes
        return base64.urlsafe_b64encode(raw).decode("ascii")

    @classmethod
    def decode(cls, text: str, field: str = "after") -> PageMark:
        """Any 32 characters of `MARK_PATTERN` are a place in the list (a time outside what a
        datetime holds is its first or last one), so a client's mark is refused only for its form."""
        if not re.fullmatch(MARK_PATTERN, text):
            raise Unprocessable(field, f"a page mark is {MARK_CHARS} URL-safe base64 characters (the `next` of a page)")
        raw = base64.urlsafe_b64decode(text)
        micros = int.from_bytes(raw[:8], "big", signed=True)
        try:
            created_at = _EPOCH + timedelta(microseconds=micros)
        except OverflowError:
            created_at = _EARLIEST if micros < 0 else _LATEST
        return cls(created_at, uuid.UUID(bytes=raw[8:]))


def counted_total(counted: int, cap: int = TOTAL_CAP) -> tuple[int, bool]:
    """The total to show and whether it is exact, from a count of at most `cap + 1` rows."""
    return min(counted, cap), counted <= cap
