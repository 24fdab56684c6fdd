"""Erasure that holds (R-11.3, R-16.5): what was given before a user's erasure never comes back.

Erasing a user writes a tombstone (`personal_data_erasures`: tenant, user, when) in the same
transaction that deletes the user's rows, under an exclusive per-user lock; every writer takes
the shared lock and reads the tombstone inside its own transaction (`ErasureStore.hold`). So a
write is either committed before the erasure (and deleted by it) or sees the tombstone and
drops what its user gave before that moment: queued, in-flight and redelivered events create
nothing. Whatever the user does after the erasure is new and kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime


def parse_time(sent: str | datetime | None) -> datetime | None:
    if sent is None or isinstance(sent, datetime):
        return sent
    try:
        parsed = datetime.fromisoformat(str(sent).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def given_before_erasure(
    users: Iterable[str | None], sent: str | datetime | None, erased_at: Mapping[str, datetime]
) -> bool:
    """Whether something of `users`, given at `sent`, predates one of their erasures (an event
    without a readable time counts as before: it cannot prove it is newer)."""
    when = parse_time(sent)
    for user in users:
        erased = erased_at.get(user or "")
        if erased is not None and (when is None or when <= erased):
            return True
    return False
