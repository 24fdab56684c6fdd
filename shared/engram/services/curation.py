"""Verify, delete and "expiring soon" (R-1.3, R-11.2, R-12.1): the memory API's curation use cases.

A delete removes the row and, in the same transaction, its pgvector index entry (cascade),
and stages `observation.deleted` in the outbox; embed-index then removes the entry from any
other index (Elasticsearch). Erasure of a user's memory uses the same event path.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from cloudevents.http import CloudEvent

from engram.adapters.observations import ObservationStore, live_sql, to_observation, visibility_sql
from engram.adapters.postgres import Connection, Database
from engram.domain.events import (
    OBSERVATION_DELETED,
    OBSERVATION_UPDATED,
    observation_changed,
)
from engram.domain.observation import Observation
from engram.domain.scopes import Permission, Principal, Visibility
from engram.ports import EventBus
from engram.services import outbox
from engram.services.memory import Forbidden, NotFound, require

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
    def __init__(self, db: Database, bus: EventBus) -> None:
        self.db = db
        self.bus = bus

    async def _visible(self, principal: Principal, observation_id: uuid.UUID, conn: Connection) -> Observation:
        obs = await ObservationStore(conn).get(observation_id)
        if obs is None or not Visibility.for_principal(principal, want_sensitive=True).allows(obs):
            raise NotFound(f"observation {observation_id} not found")
        return obs

    async def delete(self, principal: Principal, observation_id: uuid.UUID) -> Observation:
        """The owner deletes their own; anything else (team, public, tenant-wide) needs manage:AiObservation."""
        require(principal, Permission.delete_observation)
        async with self.db.tenant(principal.tenant_id) as conn:
            obs = await self._visible(principal, observation_id, conn)
            own = obs.user_id is not None and obs.user_id == principal.user_id
            if not own and not principal.has(Permission.manage_observation):
                raise Forbidden("only the owner (or manage:AiObservation) may delete this observation")
            await conn.execute("DELETE FROM observations WHERE id = $1", observation_id)
            pending = await outbox.stage(conn, principal.tenant_id, [deleted_event(obs, datetime.now(UTC))])
        await outbox.publish(self.db, self.bus, pending)
        return obs

    async def verify(self, principal: Principal, observation_id: uuid.UUID) -> Observation:
        """Only a human may verify (R-12.1); verifying is idempotent."""
        require(principal, Permission.update_observation)
        if not principal.is_human:
            raise Forbidden("only a human may verify an observation; agent keys cannot")
        async with self.db.tenant(principal.tenant_id) as conn:
            await self._visible(principal, observation_id, conn)
            row = await conn.fetchrow(
                "UPDATE observations SET verified = true, confidence = greatest(confidence, 1.0),"
                " updated_at = greatest(clock_timestamp(), updated_at + interval '1 microsecond')"
                " WHERE id = $1 AND NOT verified RETURNING *",
                observation_id,
            )
            if row is None:  # already verified
                current = await ObservationStore(conn).get(observation_id)
                assert current is not None
                return current
            obs = to_observation(row)
            revision = obs.updated_at.isoformat()
            pending = await outbox.stage(
                conn,
                principal.tenant_id,
                [
                    observation_changed(
                        OBSERVATION_UPDATED,
                        obs.id,
                        revision,
                        tenant_id=obs.tenant_id,
                        source=SOURCE,
                        user_id=principal.user_id,
                    )
                ],
            )
        await outbox.publish(self.db, self.bus, pending)
        return obs

    async def expiring(
        self, principal: Principal, within: timedelta, *, include_sensitive: bool = False, limit: int = 200
    ) -> list[Observation]:
        """Visible observations still in force whose `expires_at` falls within `within` from now."""
        require(principal, Permission.read_observation)
        if include_sensitive and not principal.has(Permission.view_sensitive):
            raise Forbidden("listing sensitive observations needs 'view:SensitiveAiMemory'")
        now = datetime.now(UTC)
        params: list[object] = []
        vis = visibility_sql(Visibility.for_principal(principal, want_sensitive=include_sensitive), params)
        params.append(now)
        live = live_sql(f"${len(params)}")
        params.extend([now + min(within, MAX_WITHIN), limit])
        async with self.db.tenant(principal.tenant_id) as conn:
            rows = await conn.fetch(
                f"SELECT * FROM observations WHERE {vis} AND {live} AND expires_at IS NOT NULL"
                f" AND expires_at <= ${len(params) - 1} ORDER BY expires_at, id LIMIT ${len(params)}",
                *params,
            )
        return [to_observation(r) for r in rows]
