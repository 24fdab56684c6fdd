"""The observation store on PostgreSQL: batched idempotent writes, visible reads (R-4.1, R-5.4).

Writes go through `write_many`: one statement for a whole batch on the fast path. Same
content for the same tenant and owner is stored once (unique content hash); the same
(tenant, owner, type, key) updates the row in place, keeps `created_at` and bumps
`updated_at`. If a concurrent writer wins a race, the batch falls back to row-by-row writes
under savepoints, so the outcome is the same as if the writers had taken turns.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from engram.adapters.postgres import Connection
from engram.domain.observation import Observation, ObservationDraft, Provenance, WriteOutcome
from engram.domain.scopes import Visibility

_COLUMNS = (
    "id",
    "tenant_id",
    "user_id",
    "team_ids",
    "type",
    "title",
    "narrative",
    "facts",
    "concepts",
    "tags",
    "key",
    "content_hash",
    "discovery_tokens",
    "priority",
    "source",
    "verified",
    "confidence",
    "scope",
    "trigger_source",
    "session_id",
    "chat_message_id",
    "source_event_id",
    "valid_from",
    "expires_at",
)
_TYPES = (
    "uuid",
    "text",
    "text",
    "text[]",
    "text",
    "text",
    "text",
    "text[]",
    "text[]",
    "text[]",
    "text",
    "text",
    "text[]",
    "text",
    "text",
    "boolean",
    "real",
    "text",
    "text",
    "uuid",
    "uuid",
    "text",
    "timestamptz",
    "timestamptz",
)
# Array-of-array columns cannot go through unnest(); they travel as JSON and are rebuilt.
_JSON_ARRAYS = {"team_ids", "facts", "concepts", "tags", "discovery_tokens"}

# Fields whose change makes a keyed write an update; identical values make it a no-op.
_MUTABLE = (
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


def _select_rows() -> str:
    cols = []
    for col, typ in zip(_COLUMNS, _TYPES, strict=True):
        if col in _JSON_ARRAYS:
            cols.append(f"ARRAY(SELECT jsonb_array_elements_text(r.{col}))::text[]")
        else:
            cols.append(f"r.{col}::{typ}")
    src_types = ", ".join(f"{c} {'jsonb' if c in _JSON_ARRAYS else t}" for c, t in zip(_COLUMNS, _TYPES, strict=True))
    return f"SELECT {', '.join(cols)} FROM jsonb_to_recordset($1::jsonb) AS r({src_types})"


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
  updated_at = greatest(clock_timestamp(), observations.updated_at + interval '1 microsecond')
WHERE ({", ".join(f"observations.{c}" for c in _MUTABLE)})
  IS DISTINCT FROM ({", ".join(f"EXCLUDED.{c}" for c in _MUTABLE)})
RETURNING id, (xmax = 0) AS inserted
"""


def _row_payload(draft: ObservationDraft, new_id: uuid.UUID) -> dict[str, Any]:
    return {
        "id": str(new_id),
        "tenant_id": draft.tenant_id,
        "user_id": draft.user_id,
        "team_ids": draft.team_ids,
        "type": draft.type,
        "title": draft.title,
        "narrative": draft.narrative,
        "facts": draft.facts,
        "concepts": draft.concepts,
        "tags": draft.tags,
        "key": draft.key,
        "content_hash": draft.content_hash,
        "discovery_tokens": draft.discovery_tokens,
        "priority": draft.priority.value,
        "source": draft.source.value,
        "verified": draft.verified,
        "confidence": draft.confidence,
        "scope": draft.scope.value,
        "trigger_source": draft.trigger_source.value,
        "session_id": str(draft.provenance.session_id) if draft.provenance.session_id else None,
        "chat_message_id": str(draft.provenance.chat_message_id) if draft.provenance.chat_message_id else None,
        "source_event_id": draft.provenance.source_event_id,
        "valid_from": draft.valid_from.isoformat() if draft.valid_from else None,
        "expires_at": draft.expires_at.isoformat() if draft.expires_at else None,
    }


def to_observation(row: asyncpg.Record) -> Observation:
    return Observation(
        id=row["id"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        team_ids=list(row["team_ids"]),
        type=row["type"],
        title=row["title"],
        narrative=row["narrative"],
        facts=list(row["facts"]),
        concepts=list(row["concepts"]),
        tags=list(row["tags"]),
        key=row["key"],
        content_hash=row["content_hash"],
        discovery_tokens=list(row["discovery_tokens"]),
        relevance_count=row["relevance_count"],
        cited_count=row["cited_count"],
        confirmed_count=row["confirmed_count"],
        rejected_count=row["rejected_count"],
        priority=row["priority"],
        source=row["source"],
        verified=row["verified"],
        confidence=row["confidence"],
        scope=row["scope"],
        trigger_source=row["trigger_source"],
        provenance=Provenance(
            session_id=row["session_id"],
            chat_message_id=row["chat_message_id"],
            source_event_id=row["source_event_id"],
        ),
        valid_from=row["valid_from"],
        expires_at=row["expires_at"],
        superseded_by=row["superseded_by"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


@dataclass(frozen=True)
class Change:
    """What a write did to one row: enough to announce it, without loading the row."""

    id: uuid.UUID
    tenant_id: str
    user_id: str | None
    outcome: WriteOutcome
    revision: datetime


@dataclass(frozen=True)
class Written:
    observation: Observation
    outcome: WriteOutcome

    @property
    def change(self) -> Change:
        o = self.observation
        return Change(o.id, o.tenant_id, o.user_id, self.outcome, o.updated_at)


def _identity(draft: ObservationDraft) -> tuple[str, str, str]:
    if draft.key is not None:
        return ("key", f"{draft.user_id or ''}\x1f{draft.type}", draft.key)
    return ("hash", draft.user_id or "", draft.content_hash)


class ObservationStore:
    """Queries on one connection that is already inside a tenant transaction."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def write_many(self, drafts: Sequence[ObservationDraft]) -> list[Written]:
        """Write a batch and read the rows back; aligned with `drafts` (duplicates share a row)."""
        outcomes = await self._write(drafts)
        rows = await self.conn.fetch(
            "SELECT * FROM observations WHERE id = ANY($1::uuid[])", list({i for i, _ in outcomes})
        )
        by_id = {r["id"]: to_observation(r) for r in rows}
        return [Written(by_id[i], outcome) for i, outcome in outcomes]

    async def write_changes(self, drafts: Sequence[ObservationDraft]) -> list[Change]:
        """Write a batch and return only what changed (the fast path of the workers)."""
        outcomes = await self._write(drafts)
        rows = await self.conn.fetch(
            "SELECT id, updated_at FROM observations WHERE id = ANY($1::uuid[])", list({i for i, _ in outcomes})
        )
        revision = {r["id"]: r["updated_at"] for r in rows}
        return [
            Change(i, d.tenant_id, d.user_id, outcome, revision[i])
            for (i, outcome), d in zip(outcomes, drafts, strict=True)
        ]

    async def _write(self, drafts: Sequence[ObservationDraft]) -> list[tuple[uuid.UUID, WriteOutcome]]:
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

        outcome: dict[tuple[str, str, str], tuple[uuid.UUID, WriteOutcome]] = {}

        # a keyed draft whose content is already stored under another row is a dedup hit
        if keyed:
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
            keyed = remaining

        if keyless:
            payload = [_row_payload(d, uuid.uuid4()) for d in keyless]
            inserted = {r["id"] for r in await self.conn.fetch(_INSERT_KEYLESS, payload)}
            missing = []
            for d, p in zip(keyless, payload, strict=True):
                pid = uuid.UUID(p["id"])
                if pid in inserted:
                    outcome[_identity(d)] = (pid, WriteOutcome.created)
                else:
                    missing.append(d)
            if missing:
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

        if keyed:
            payload = [_row_payload(d, uuid.uuid4()) for d in keyed]
            rows = await self.conn.fetch(_UPSERT_KEYED, payload)
            changed = {r["id"]: r["inserted"] for r in rows}
            unchanged = []
            for d, p in zip(keyed, payload, strict=True):
                pid = uuid.UUID(p["id"])
                if pid in changed:
                    outcome[_identity(d)] = (pid, WriteOutcome.created)
                else:
                    unchanged.append(d)
            if unchanged:
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
                    outcome[_identity(d)] = (
                        existing,
                        WriteOutcome.updated if was_updated else WriteOutcome.deduplicated,
                    )

        return [outcome[_identity(d)] for d in drafts]

    async def get(self, observation_id: uuid.UUID) -> Observation | None:
        row = await self.conn.fetchrow("SELECT * FROM observations WHERE id = $1", observation_id)
        return to_observation(row) if row else None

    async def get_many(self, ids: Sequence[uuid.UUID]) -> list[Observation]:
        rows = await self.conn.fetch("SELECT * FROM observations WHERE id = ANY($1::uuid[])", list(ids))
        return [to_observation(r) for r in rows]

    async def list_visible(
        self,
        visibility: Visibility,
        *,
        types: Sequence[str] = (),
        tags: Sequence[str] = (),
        scope: str | None = None,
        source: str | None = None,
        verified: bool | None = None,
        include_expired: bool = False,
        now: datetime,
        limit: int,
        offset: int,
    ) -> tuple[list[Observation], int]:
        params: list[Any] = [visibility.tenant_id]
        where = ["tenant_id = $1", visibility_sql(visibility, params)]
        if types:
            params.append(list(types))
            where.append(f"type = ANY(${len(params)}::text[])")
        if tags:
            params.append([t.casefold() for t in tags])
            where.append(f"tags @> ${len(params)}::text[]")
        if scope:
            params.append(scope)
            where.append(f"scope = ${len(params)}")
        if source:
            params.append(source)
            where.append(f"source = ${len(params)}")
        if verified is not None:
            params.append(verified)
            where.append(f"verified = ${len(params)}")
        if not include_expired:
            params.append(now)
            where.append(live_sql(f"${len(params)}"))
        clause = " AND ".join(where)
        total = await self.conn.fetchval(f"SELECT count(*) FROM observations WHERE {clause}", *params)
        params.extend([limit, offset])
        rows = await self.conn.fetch(
            f"SELECT * FROM observations WHERE {clause} ORDER BY created_at DESC, id"
            f" LIMIT ${len(params) - 1} OFFSET ${len(params)}",
            *params,
        )
        return [to_observation(r) for r in rows], int(total)


def visibility_sql(visibility: Visibility, params: list[Any], alias: str = "", id_column: str = "id") -> str:
    """R-7.2 as SQL; appends its parameters to `params`. Mirrors `Visibility.allows`.

    Works on `observations` and on the index tables that copy its visibility columns (there the
    observation's id is `observation_id`)."""
    p = f"{alias}." if alias else ""
    params.append(visibility.user_id)
    u = f"${len(params)}::text"
    params.append(sorted(visibility.teams))
    t = f"${len(params)}::text[]"
    parts = [
        f"{p}scope = 'public'",
        f"({p}scope = 'private' AND {p}user_id = {u})",
        f"({p}scope = 'team' AND ({p}user_id = {u} OR {p}team_ids && {t}))",
    ]
    if visibility.include_sensitive:
        parts.append(f"{p}scope = 'sensitive'")
    clause = "(" + " OR ".join(parts) + ")"
    if visibility.hidden_ids:
        params.append(sorted(visibility.hidden_ids))
        clause += f" AND {p}{id_column} <> ALL(${len(params)}::uuid[])"
    return clause


# the observations a user rejected ({user}: the parameter holding the user id)
REJECTED_IDS_SQL = (
    "SELECT DISTINCT observation_id FROM observation_feedback"
    " WHERE user_id = {user} AND kind = 'rejected' AND observation_id IS NOT NULL"
)


async def rejected_ids(conn: Connection, user_id: str | None) -> frozenset[str]:
    """The observations this user rejected: hidden from their recall and chat memory (R-7.5)."""
    if user_id is None:
        return frozenset()
    rows = await conn.fetch(
        REJECTED_IDS_SQL.format(user="$1"),
        user_id,
    )
    return frozenset(str(r["observation_id"]) for r in rows)


def live_sql(now_param: str, alias: str = "") -> str:
    p = f"{alias}." if alias else ""
    return (
        f"({p}superseded_by IS NULL AND ({p}expires_at IS NULL OR {p}expires_at > {now_param})"
        f" AND ({p}valid_from IS NULL OR {p}valid_from <= {now_param}))"
    )
