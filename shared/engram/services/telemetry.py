"""Writing typed telemetry rows (R-4.5): validated in code, appended to ai_events."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engram.adapters.postgres import Connection
from engram.domain.telemetry import validate_metadata


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
    if not records:
        return
    await conn.executemany(
        "INSERT INTO ai_events (tenant_id, event_name, user_id, chat_id, metadata, created_at)"
        " VALUES ($1, $2, $3, $4, $5, coalesce($6, now()))",
        [(r.tenant_id, r.name, r.user_id, r.chat_id, r.metadata, r.created_at) for r in records],
    )
