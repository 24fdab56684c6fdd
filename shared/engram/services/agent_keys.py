"""Agent keys of a tenant (R-12.1): list, revoke, rotate (`manage:AiObservation`).

A key is a random secret shown once and stored as its SHA-256 (`engram.services.auth`). Every
request resolves its key in PostgreSQL (no cache), so a revocation holds from the next
request on, in every process. Rotation revokes the old key and issues a new one with the same
name, user, teams and permissions, in one transaction.
"""

from __future__ import annotations

import uuid

from engram.domain.errors import NotFound, Unprocessable
from engram.domain.hashing import secret_hash
from engram.domain.models import AgentKey
from engram.domain.scopes import Permission, Principal, require
from engram.ports import UnitOfWork
from engram.services.auth import IssuedKey, new_agent_secret


class AgentKeys:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow

    async def list_keys(self, principal: Principal, *, include_revoked: bool = False) -> list[AgentKey]:
        require(principal, Permission.manage_observation)
        return await self.list_tenant(principal.tenant_id, include_revoked=include_revoked)

    async def revoke(self, principal: Principal, key_id: uuid.UUID) -> AgentKey:
        require(principal, Permission.manage_observation)
        return await self.revoke_tenant(principal.tenant_id, key_id)

    async def rotate(self, principal: Principal, key_id: uuid.UUID) -> tuple[AgentKey, IssuedKey]:
        require(principal, Permission.manage_observation)
        return await self.rotate_tenant(principal.tenant_id, key_id)

    # the operator's side (`engram agent-key`): the tenant named, no principal

    async def list_tenant(self, tenant_id: str, *, include_revoked: bool = False) -> list[AgentKey]:
        async with self.uow.tenant(tenant_id) as tx:
            return await tx.agent_keys.list(include_revoked=include_revoked)

    async def revoke_tenant(self, tenant_id: str, key_id: uuid.UUID) -> AgentKey:
        async with self.uow.tenant(tenant_id) as tx:
            revoked = await tx.agent_keys.revoke(key_id)
        if revoked is None:
            raise NotFound(f"agent key {key_id} not found")
        return revoked

    async def rotate_tenant(self, tenant_id: str, key_id: uuid.UUID) -> tuple[AgentKey, IssuedKey]:
        async with self.uow.tenant(tenant_id) as tx:
            old = next((k for k in await tx.agent_keys.list(include_revoked=True) if k.id == key_id), None)
            if old is None:
                raise NotFound(f"agent key {key_id} not found")
            if old.revoked_at is not None:
                raise Unprocessable("key_id", f"agent key {key_id} is revoked; issue a new one instead")
            revoked = await tx.agent_keys.revoke(key_id) or old
            issued = IssuedKey(uuid.uuid4(), new_agent_secret())
            await tx.agent_keys.create(
                issued.id,
                name=old.name,
                key_hash=secret_hash(issued.secret),
                user_id=old.user_id,
                teams=old.teams,
                permissions=old.permissions,
            )
        return revoked, issued
