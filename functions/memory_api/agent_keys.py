"""memory-api: a tenant's agent keys for its administrators (`manage:AiObservation`, R-12.1)."""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from pydantic import BaseModel

from engram.domain.models import AgentKey
from engram.runtime.http import CurrentPrincipal, ServicesDep

router = APIRouter(prefix="/api/ai/agent-keys", tags=["agent keys"])


class RotatedKey(BaseModel):
    revoked: AgentKey
    id: uuid.UUID
    secret: str  # shown once: only its hash is stored


@router.get("", response_model=list[AgentKey])
async def list_keys(
    principal: CurrentPrincipal, services: ServicesDep, include_revoked: bool = False
) -> list[AgentKey]:
    return await services.agent_keys.list_keys(principal, include_revoked=include_revoked)


@router.post("/{key_id}/revoke", response_model=AgentKey)
async def revoke_key(key_id: uuid.UUID, principal: CurrentPrincipal, services: ServicesDep) -> AgentKey:
    """Refused from the next request on, in every process (keys are not cached)."""
    return await services.agent_keys.revoke(principal, key_id)


@router.post("/{key_id}/rotate", response_model=RotatedKey)
async def rotate_key(key_id: uuid.UUID, principal: CurrentPrincipal, services: ServicesDep) -> RotatedKey:
    """Revoke the key and issue a new one with the same name, user, teams and permissions."""
    old, issued = await services.agent_keys.rotate(principal, key_id)
    return RotatedKey(revoked=old, id=issued.id, secret=issued.secret)
