"""The idempotent batched observation write in memory, step for step as
`engram.adapters.observation_writes.ObservationWriter` does it in SQL.

- One row per identity in a batch (the last draft wins, earlier ones share its result):
  a keyed draft's identity is (owner, type, key), a keyless one's (owner, content hash).
- A keyed draft whose content hash is stored (before the batch) under another row is a
  dedup hit on that row.
- Keyless drafts are inserted unless their (owner, content hash) is stored: deduplicated.
- Keyed drafts update the row with their (owner, type, key) in place when a mutable field
  differs (`updated`, `updated_at` bumped, `created_at` kept, provenance kept where the draft
  has none; a row superseded by consolidation becomes current again), else `deduplicated`
  (also when the row was said after the draft: both `said_at`); or they are inserted (`created`).
- A unique violation inside the batch (two new rows with one content hash) rolls the batch
  back and writes it draft by draft, as the real writer's fallback does.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from engram.domain.observation import Observation, ObservationDraft, Provenance, WriteOutcome
from tests.fakes.data import TxState, real

Identity = tuple[str, str, str]
Outcomes = dict[Identity, tuple[uuid.UUID, WriteOutcome]]

# the fields whose change makes a keyed write an update (`_MUTABLE` of the real adapter)
MUTABLE = (
    "team_ids",
    "type",
    "title",
    "narrative",
    "facts",
    "concepts",
    "tags",
    "content_hash",
    "discovery_tokens",
    "priority",
    "verified",
    "confidence",
    "scope",
    "valid_from",
    "expires_at",
)


class UniqueViolation(Exception):
    """Two rows of one tenant and owner with the same content hash."""


def identity(draft: ObservationDraft) -> Identity:
    if draft.key is not None:
        return ("key", f"{draft.user_id or ''}\x1f{draft.type}", draft.key)
    return ("hash", draft.user_id or "", draft.content_hash)


def stored_values(draft: ObservationDraft) -> dict[str, Any]:
    """The draft's mutable fields as the row stores them."""
    return {
        "team_ids": list(draft.team_ids),
        "type": draft.type,
        "title": draft.title,
        "narrative": draft.narrative,
        "facts": list(draft.facts),
        "concepts": list(draft.concepts),
        "tags": list(draft.tags),
        "content_hash": draft.content_hash,
        "discovery_tokens": list(draft.discovery_tokens),
        "priority": draft.priority,
        "verified": draft.verified,
        "confidence": real(draft.confidence),
        "scope": draft.scope,
        "valid_from": draft.valid_from,
        "expires_at": draft.expires_at,
    }


class ObservationWrites:
    def __init__(self, tx: TxState) -> None:
        self.tx = tx

    @property
    def rows(self) -> dict[uuid.UUID, Observation]:
        return self.tx.rows().observations

    def write(self, drafts: Sequence[ObservationDraft]) -> list[tuple[uuid.UUID, WriteOutcome]]:
        if not drafts:
            return []
        for d in drafts:
            self.tx.own(d.tenant_id, "an observation")
        before = dict(self.rows)
        try:
            return self._batch(drafts)
        except UniqueViolation:  # the savepoint rolls back; then one draft at a time
            self.rows.clear()
            self.rows.update(before)
            return [self._batch([d])[0] for d in drafts]

    def _batch(self, drafts: Sequence[ObservationDraft]) -> list[tuple[uuid.UUID, WriteOutcome]]:
        unique: dict[Identity, ObservationDraft] = {}
        for d in drafts:
            unique[identity(d)] = d
        keyless = [d for i, d in unique.items() if i[0] == "hash"]
        keyed = [d for i, d in unique.items() if i[0] == "key"]
        outcome: Outcomes = {}
        if keyed:
            keyed = self._stored_elsewhere(keyed, outcome)
        for d in keyless:
            self._insert_keyless(d, outcome)
        for d in keyed:
            self._upsert_keyed(d, outcome)
        return [outcome[identity(d)] for d in drafts]

    def _by_hash(self, owner: str, content_hash: str) -> Observation | None:
        for o in self.rows.values():
            if (o.user_id or "") == owner and o.content_hash == content_hash:
                return o
        return None

    def _by_key(self, owner: str, obs_type: str, key: str) -> Observation | None:
        for o in self.rows.values():
            if (o.user_id or "") == owner and o.type == obs_type and o.key == key:
                return o
        return None

    def _stored_elsewhere(self, keyed: list[ObservationDraft], outcome: Outcomes) -> list[ObservationDraft]:
        remaining = []
        for d in keyed:
            hit = self._by_hash(d.user_id or "", d.content_hash)
            if hit is not None and (hit.key != d.key or hit.type != d.type):
                outcome[identity(d)] = (hit.id, WriteOutcome.deduplicated)
            else:
                remaining.append(d)
        return remaining

    def _insert_keyless(self, d: ObservationDraft, outcome: Outcomes) -> None:
        existing = self._by_hash(d.user_id or "", d.content_hash)
        if existing is not None:  # ON CONFLICT DO NOTHING, then read the row that is there
            outcome[identity(d)] = (existing.id, WriteOutcome.deduplicated)
            return
        outcome[identity(d)] = (self._insert(d), WriteOutcome.created)

    def _upsert_keyed(self, d: ObservationDraft, outcome: Outcomes) -> None:
        assert d.key is not None
        owner = d.user_id or ""
        row = self._by_key(owner, d.type, d.key)
        if row is None:
            if self._by_hash(owner, d.content_hash) is not None:
                raise UniqueViolation(d.content_hash)
            outcome[identity(d)] = (self._insert(d), WriteOutcome.created)
            return
        values = stored_values(d)
        said_before = d.said_at is not None and row.said_at is not None and d.said_at < row.said_at
        if all(getattr(row, f) == values[f] for f in MUTABLE) or said_before:
            outcome[identity(d)] = (row.id, WriteOutcome.deduplicated)
            return
        clash = self._by_hash(owner, d.content_hash)
        if clash is not None and clash.id != row.id:
            raise UniqueViolation(d.content_hash)
        old = row.provenance
        new = d.provenance
        self.rows[row.id] = row.model_copy(
            update={
                **values,
                "provenance": Provenance(
                    session_id=new.session_id or old.session_id,
                    chat_message_id=new.chat_message_id or old.chat_message_id,
                    source_event_id=new.source_event_id or old.source_event_id,
                ),
                "said_at": d.said_at or row.said_at,
                "updated_at": self.tx.bump(row.updated_at),
                # new content under a key is a new statement: current again
                "superseded_by": None,
                "valid_to": None,
            }
        )
        outcome[identity(d)] = (row.id, WriteOutcome.updated)

    def _insert(self, d: ObservationDraft) -> uuid.UUID:
        new_id = uuid.uuid4()
        self.rows[new_id] = Observation(
            id=new_id,
            tenant_id=d.tenant_id,
            user_id=d.user_id,
            key=d.key,
            relevance_count=0,
            source=d.source,
            trigger_source=d.trigger_source,
            provenance=d.provenance,
            superseded_by=None,
            created_at=self.tx.now,  # now(): the transaction's start
            updated_at=self.tx.now,
            merged_from=list(d.merged_from),
            said_at=d.said_at,
            **stored_values(d),
        )
        return new_id
