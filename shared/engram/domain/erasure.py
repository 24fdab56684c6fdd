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


def given_before_erasure(users: Iterable[str | None], sent: datetime | None, erased_at: Mapping[str, datetime]) -> bool:
    """Whether something of `users`, given at `sent` (an event's `meta.occurred_at`), predates one
    of their erasures (an event without a time counts as before: it cannot prove it is newer)."""
    for user in users:
        erased = erased_at.get(user or "")
        if erased is not None and (sent is None or sent <= erased):
            return True
    return False
