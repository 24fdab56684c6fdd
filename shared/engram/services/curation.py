"""Verify, delete and "expiring soon" (R-1.3, R-11.2, R-12.1): the memory API's curation use cases.

A delete removes the row and, in the same transaction, its pgvector index entry (cascade),
and stages `observation.deleted` in the outbox; embed-index then removes the entry from any
other index (Elasticsearch). Erasure of a user's memory uses the same event path.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from cloudevents.http import CloudEvent

from engram.domain.errors import Forbidden, NotFound
from engram.domain.events import (
    OBSERVATION_DELETED,
    OBSERVATION_UPDATED,
    observation_changed,
)
from engram.domain.observation import Observation
from engram.domain.scopes import Permission, Principal, Visibility, require, require_sensitive
from engram.ports import TenantTx, UnitOfWork

SOURCE = "/engram/memory-api"
MAX_WITHIN = timedelta(days=3650)


def deleted_event(obs: Observation, deleted_at: datetime, source: str = SOURCE) -> CloudEvent:
    return observation_changed(
        OBSERVATION_DELETED,
        obs.id,
        deleted_at.isoformat(),
        tenant_id=obs.tenant_id,
        source=source,
        user_id=obs.user_id,
    )


class CurationService:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow

    async def _visible(self, principal: Principal, observation_id: uuid.UUID, tx: TenantTx) -> Observation:
        obs = await tx.observations.get(observation_id)
        if obs is None or not Visibility.for_principal(principal, want_sensitive=True).allows(obs):
            raise NotFound(f"observation {observation_id} not found")
        return obs

    async def delete(self, principal: Principal, observation_id: uuid.UUID) -> Observation:
        """The owner deletes their own; anything else (team, public, tenant-wide) needs manage:AiObservation."""
        require(principal, Permission.delete_observation)
        async with self.uow.tenant(principal.tenant_id) as tx:
            obs = await self._visible(principal, observation_id, tx)
            own = obs.user_id is not None and obs.user_id == principal.user_id
            if not own and not principal.has(Permission.manage_observation):
                raise Forbidden("only the owner (or manage:AiObservation) may delete this observation")
            await tx.observations.delete(observation_id)
            tx.emit([deleted_event(obs, datetime.now(UTC))])
        return obs

    async def verify(self, principal: Principal, observation_id: uuid.UUID) -> Observation:
        """Only a human may verify (R-12.1); verifying is idempotent."""
        require(principal, Permission.update_observation)
        if not principal.is_human:
            raise Forbidden("only a human may verify an observation; agent keys cannot")
        async with self.uow.tenant(principal.tenant_id) as tx:
            await self._visible(principal, observation_id, tx)
            obs = await tx.observations.verify(observation_id)
            if obs is None:  # already verified
                current = await tx.observations.get(observation_id)
                assert current is not None
                return current
            tx.emit(
                [
                    observation_changed(
                        OBSERVATION_UPDATED,
                        obs.id,
                        obs.updated_at.isoformat(),
                        tenant_id=obs.tenant_id,
                        source=SOURCE,
                        user_id=principal.user_id,
                    )
                ]
            )
        return obs

    async def expiring(
        self, principal: Principal, within: timedelta, *, include_sensitive: bool = False, limit: int = 200
    ) -> list[Observation]:
        """Visible observations still in force whose `expires_at` falls within `within` from now."""
        require(principal, Permission.read_observation)
        require_sensitive(principal, include_sensitive, "listing sensitive observations")
        now = datetime.now(UTC)
        visibility = Visibility.for_principal(principal, want_sensitive=include_sensitive)
        async with self.uow.tenant(principal.tenant_id) as tx:
            return await tx.observations.expiring(visibility, now=now, until=now + min(within, MAX_WITHIN), limit=limit)
