"""What consolidation did (R-15.1, R-15.4): one record per decision that changed memory. Pure data."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict


class ConsolidationRecord(BaseModel):
    """One decision that changed memory (`consolidations`): who, when, why, and whether a person
    undid it."""

    model_config = ConfigDict(frozen=True)

    id: uuid.UUID
    tenant_id: str
    decision: Literal["duplicate", "update", "conflict", "digest"]
    anchor_id: uuid.UUID
    result_id: uuid.UUID | None
    source_ids: list[uuid.UUID]
    reason: str
    path: Literal["rules", "llm"]
    model: str | None
    actor: str
    created_at: datetime
    undone_at: datetime | None = None
    undone_by: str | None = None

    @property
    def members(self) -> list[uuid.UUID]:
        return ([self.result_id] if self.result_id else []) + list(self.source_ids)
