"""Observation rows on PostgreSQL: columns, the row <-> model mapping, shared SQL fragments.

`visibility_sql` and `live_sql` are R-7.2 and "in force" as SQL; the observation store and
the pgvector index (whose tables copy the visibility columns) both build on them.
`search_filter_sql` is a search's `SearchFilter` (in force at its instant, types kept and left
out) on the index tables.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from engram.domain.observation import Observation, ObservationDraft, Provenance
from engram.domain.scopes import Visibility
from engram.domain.search import SearchFilter

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
    "said_at",
    "merged_from",
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
    "timestamptz",
    "uuid[]",
)
# Array-of-array columns cannot go through unnest(); they travel as JSON and are rebuilt.
_JSON_ARRAYS = {"team_ids", "facts", "concepts", "tags", "discovery_tokens", "merged_from"}

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
            cols.append(f"ARRAY(SELECT jsonb_array_elements_text(r.{col}))::{typ}")
        else:
            cols.append(f"r.{col}::{typ}")
    src_types = ", ".join(f"{c} {'jsonb' if c in _JSON_ARRAYS else t}" for c, t in zip(_COLUMNS, _TYPES, strict=True))
    return f"SELECT {', '.join(cols)} FROM jsonb_to_recordset($1::jsonb) AS r({src_types})"


def row_payload(draft: ObservationDraft, new_id: uuid.UUID) -> dict[str, Any]:
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
        "said_at": draft.said_at.isoformat() if draft.said_at else None,
        "merged_from": [str(i) for i in draft.merged_from],
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
        valid_to=row["valid_to"],
        said_at=row["said_at"],
        merged_from=list(row["merged_from"]),
        conflicts_with=list(row["conflicts_with"]),
    )


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


def live_sql(now_param: str, alias: str = "") -> str:
    p = f"{alias}." if alias else ""
    return (
        f"({p}superseded_by IS NULL AND {p}valid_to IS NULL"
        f" AND ({p}expires_at IS NULL OR {p}expires_at > {now_param})"
        f" AND ({p}valid_from IS NULL OR {p}valid_from <= {now_param}))"
    )


def search_filter_sql(where: SearchFilter, params: list[Any], alias: str) -> str:
    """A search's filter besides visibility as SQL on the index tables (they copy the validity
    and type columns); appends its parameters to `params`."""
    a = f"{alias}."
    params.append(where.now)
    now = f"${len(params)}::timestamptz"
    clause = f"({a}valid_from IS NULL OR {a}valid_from <= {now}) AND ({a}expires_at IS NULL OR {a}expires_at > {now})"
    if where.types:
        params.append(list(where.types))
        clause += f" AND {a}type = ANY(${len(params)}::text[])"
    if where.except_types:
        params.append(list(where.except_types))
        clause += f" AND {a}type <> ALL(${len(params)}::text[])"
    if where.within is not None:
        params.extend(where.within)
        start, end = f"${len(params) - 1}::timestamptz", f"${len(params)}::timestamptz"
        # search_documents only (migration 0021: said_at is set only without a valid_from); BM25
        # applies the window in two parts of its own (`pgvector_bm25`)
        clause += (
            f" AND (({a}valid_from >= {start} AND {a}valid_from < {end})"
            f" OR ({a}said_at >= {start} AND {a}said_at < {end} AND {a}valid_from IS NULL))"
        )
    return clause
