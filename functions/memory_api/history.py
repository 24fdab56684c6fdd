"""memory-api routes for consolidation's history and its human undo (R-15.3)."""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from engram.runtime.http import CurrentPrincipal, ServicesDep
from engram.services.memory_history import History, Unmerged

router = APIRouter(prefix="/api/ai/memory", tags=["history"])


class UnmergeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    consolidation_id: uuid.UUID | None = None  # which decision; default: the latest one not undone


@router.get("/{observation_id}/history", response_model=History)
async def history(observation_id: uuid.UUID, principal: CurrentPrincipal, services: ServicesDep) -> History:
    """The chain of versions (superseded, current, retired) and every consolidation decision about
    them: who, when, why, by rules or by which model, and whether a person undid it."""
    return await services.memory_history.history(principal, observation_id)


@router.post("/{observation_id}/unmerge", response_model=Unmerged)
async def unmerge(
    observation_id: uuid.UUID,
    principal: CurrentPrincipal,
    services: ServicesDep,
    body: UnmergeRequest | None = None,
) -> Unmerged:
    """Undo a consolidation (humans only): merged sources come back, the consolidated observation is
    retired, an outdated one becomes current again, a conflict link goes. Never redone automatically."""
    return await services.memory_history.unmerge(principal, observation_id, body.consolidation_id if body else None)
