"""The batched idempotent observation write (R-4.1, R-5.4).

One statement for a whole batch on the fast path. Same content for the same tenant and owner
is stored once (unique content hash); the same (tenant, owner, type, key) updates the row in
place, keeps `created_at` and bumps `updated_at` (and makes a row superseded by consolidation
current again: new content under a key is a new statement), unless the stored row was said after
the draft (both have `said_at`: a late or replayed event does not undo a later statement; the
draft is then `deduplicated`). If a concurrent writer wins a race, the
batch falls back to row-by-row writes under savepoints, so the outcome is the same as if the
writers had taken turns.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from engram.adapters.observation_rows import _COLUMNS, _MUTABLE, _select_rows, row_payload
from engram.adapters.postgres import Connection
from engram.domain.observation import ObservationDraft, WriteOutcome

_INSERT_KEYLESS = f"""
INSERT INTO observations ({", ".join(_COLUMNS)})
{_select_rows()}
ON CONFLICT DO NOTHING
RETURNING id
"""

_UPSERT_KEYED = f"""
INSERT INTO observations ({", ".join(_COLUMNS)})
{_select_rows()}
ON CONFLICT (tenant_id, owner_key, type, key) WHERE key IS NOT NULL DO UPDATE SET
  {", ".join(f"{c} = EXCLUDED.{c}" for c in _MUTABLE if c != "type")},
  session_id = coalesce(EXCLUDED.session_id, observations.session_id),
  chat_message_id = coalesce(EXCLUDED.chat_message_id, observations.chat_message_id),
  source_event_id = coalesce(EXCLUDED.source_event_id, observations.source_event_id),
  said_at = coalesce(EXCLUDED.said_at, observations.said_at),
  -- new content under a key is a new statement: current again, even if consolidation had
  -- superseded the row (consolidation then looks at it again)
  superseded_by = NULL,
  valid_to = NULL,
  updated_at = greatest(clock_timestamp(), observations.updated_at + interval '1 microsecond')
WHERE ({", ".join(f"observations.{c}" for c in _MUTABLE)})
  IS DISTINCT FROM ({", ".join(f"EXCLUDED.{c}" for c in _MUTABLE)})
  -- what was said before the stored value (a late or replayed event) does not replace it
  AND NOT coalesce(EXCLUDED.said_at < observations.said_at, false)
RETURNING id, (xmax = 0) AS inserted
"""


def _identity(draft: ObservationDraft) -> tuple[str, str, str]:
    if draft.key is not None:
        return ("key", f"{draft.user_id or ''}\x1f{draft.type}", draft.key)
    return ("hash", draft.user_id or "", draft.content_hash)


Outcomes = dict[tuple[str, str, str], tuple[uuid.UUID, WriteOutcome]]


class ObservationWriter:
    """Writes on one connection that is already inside a tenant transaction."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def write(self, drafts: Sequence[ObservationDraft]) -> list[tuple[uuid.UUID, WriteOutcome]]:
        """Each draft's row and what the write did to it, aligned with `drafts`."""
        if not drafts:
            return []
        try:
            async with self.conn.transaction():  # savepoint: a lost race rolls back only this
                return await self._write_batch(drafts)
        except asyncpg.UniqueViolationError:
            return [await self._write_one_retrying(draft) for draft in drafts]

    async def _write_one_retrying(self, draft: ObservationDraft) -> tuple[uuid.UUID, WriteOutcome]:
        for _attempt in range(3):
            try:
                async with self.conn.transaction():
                    return (await self._write_batch([draft]))[0]
            except asyncpg.UniqueViolationError:
                continue
        raise RuntimeError("observation write kept conflicting with concurrent writers")

    async def _write_batch(self, drafts: Sequence[ObservationDraft]) -> list[tuple[uuid.UUID, WriteOutcome]]:
        # one row per identity: the last draft of a batch wins, earlier ones share its result
        unique: dict[tuple[str, str, str], ObservationDraft] = {}
        for d in drafts:
            unique[_identity(d)] = d
        keyless = [d for i, d in unique.items() if i[0] == "hash"]
        keyed = [d for i, d in unique.items() if i[0] == "key"]
        outcome: Outcomes = {}
        if keyed:
            keyed = await self._stored_elsewhere(keyed, outcome)
        if keyless:
            await self._insert_keyless(keyless, outcome)
        if keyed:
            await self._upsert_keyed(keyed, outcome)
        return [outcome[_identity(d)] for d in drafts]

    async def _stored_elsewhere(self, keyed: list[ObservationDraft], outcome: Outcomes) -> list[ObservationDraft]:
        """A keyed draft whose content is already stored under another row is a dedup hit; the
        drafts that are not."""
        hits = await self.conn.fetch(
            "SELECT o.id, o.owner_key, o.content_hash, o.key, o.type FROM observations o"
            " JOIN unnest($1::text[], $2::text[]) AS x(owner_key, content_hash)"
            " ON o.owner_key = x.owner_key AND o.content_hash = x.content_hash",
            [d.user_id or "" for d in keyed],
            [d.content_hash for d in keyed],
        )
        by_hash = {(r["owner_key"], r["content_hash"]): r for r in hits}
        remaining = []
        for d in keyed:
            hit = by_hash.get((d.user_id or "", d.content_hash))
            if hit is not None and (hit["key"] != d.key or hit["type"] != d.type):
                outcome[_identity(d)] = (hit["id"], WriteOutcome.deduplicated)
            else:
                remaining.append(d)
        return remaining

    async def _insert_keyless(self, keyless: list[ObservationDraft], outcome: Outcomes) -> None:
        payload = [row_payload(d, uuid.uuid4()) for d in keyless]
        inserted = {r["id"] for r in await self.conn.fetch(_INSERT_KEYLESS, payload)}
        missing = []
        for d, p in zip(keyless, payload, strict=True):
            pid = uuid.UUID(p["id"])
            if pid in inserted:
                outcome[_identity(d)] = (pid, WriteOutcome.created)
            else:
                missing.append(d)
        if not missing:
            return
        rows = await self.conn.fetch(
            "SELECT o.id, o.owner_key, o.content_hash FROM observations o"
            " JOIN unnest($1::text[], $2::text[]) AS x(owner_key, content_hash)"
            " ON o.owner_key = x.owner_key AND o.content_hash = x.content_hash",
            [d.user_id or "" for d in missing],
            [d.content_hash for d in missing],
        )
        found = {(r["owner_key"], r["content_hash"]): r["id"] for r in rows}
        for d in missing:
            existing = found.get((d.user_id or "", d.content_hash))
            if existing is None:  # deleted between the two statements: let the caller retry
                raise asyncpg.UniqueViolationError("observation vanished during write")
            outcome[_identity(d)] = (existing, WriteOutcome.deduplicated)

    async def _upsert_keyed(self, keyed: list[ObservationDraft], outcome: Outcomes) -> None:
        payload = [row_payload(d, uuid.uuid4()) for d in keyed]
        rows = await self.conn.fetch(_UPSERT_KEYED, payload)
        changed = {r["id"]: r["inserted"] for r in rows}
        unchanged = []
        for d, p in zip(keyed, payload, strict=True):
            pid = uuid.UUID(p["id"])
            if pid in changed:
                outcome[_identity(d)] = (pid, WriteOutcome.created)
            else:
                unchanged.append(d)
        if not unchanged:
            return
        rows = await self.conn.fetch(
            "SELECT o.id, o.owner_key, o.type, o.key FROM observations o"
            " JOIN unnest($1::text[], $2::text[], $3::text[]) AS x(owner_key, type, key)"
            " ON o.owner_key = x.owner_key AND o.type = x.type AND o.key = x.key",
            [d.user_id or "" for d in unchanged],
            [d.type for d in unchanged],
            [d.key for d in unchanged],
        )
        by_key = {(r["owner_key"], r["type"], r["key"]): r["id"] for r in rows}
        for d in unchanged:
            existing = by_key.get((d.user_id or "", d.type, d.key or ""))
            if existing is None:
                raise asyncpg.UniqueViolationError("observation vanished during write")
            was_updated = existing in changed and not changed[existing]
            outcome[_identity(d)] = (existing, WriteOutcome.updated if was_updated else WriteOutcome.deduplicated)
