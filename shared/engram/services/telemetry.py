"""Writing typed telemetry rows (R-4.5): validated in code, appended to ai_events."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engram.adapters.postgres import Connection
from engram.domain.telemetry import TelemetryError, validate_metadata


@dataclass(frozen=True)
class TelemetryRecord:
    tenant_id: str
    name: str
    metadata: dict[str, Any]
    user_id: str | None = None
    chat_id: uuid.UUID | None = None
    created_at: datetime | None = None


def record(
    tenant_id: str,
    name: str,
    metadata: Any,
    *,
    user_id: str | None = None,
    chat_id: uuid.UUID | None = None,
) -> TelemetryRecord:
    """Validate now (raises TelemetryError), write later with `write`."""
    return TelemetryRecord(tenant_id, name, validate_metadata(name, metadata), user_id, chat_id)


async def write(conn: Connection, records: Sequence[TelemetryRecord]) -> None:
    """Append rows; every record is validated again here, so nothing unknown or malformed is
    stored even when a record was built by hand. One bad record rejects the whole call
    (TelemetryError) before anything is written."""
    if not records:
        return
    rows = []
    for r in records:
        if not r.tenant_id:
            raise TelemetryError(f"telemetry event {r.name!r} has no tenant")
        rows.append((r.tenant_id, r.name, r.user_id, r.chat_id, validate_metadata(r.name, r.metadata), r.created_at))
    # one statement per call: the rollup trigger folds the whole batch at once
    await conn.execute(
        "INSERT INTO ai_events (tenant_id, event_name, user_id, chat_id, metadata, created_at)"
        " SELECT t, n, u, c, m, coalesce(at, now())"
        " FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::jsonb[], $6::timestamptz[])"
        " AS x(t, n, u, c, m, at)",
        *(list(column) for column in zip(*rows, strict=True)),
    )
