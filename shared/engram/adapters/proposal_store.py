"""Memory proposals on PostgreSQL (`engram.ports.ProposalStore`, table `memory_proposals`): one
tenant's rows inside its transaction (row-level security)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import asyncpg

from engram.adapters.postgres import Connection
from engram.domain.observation import ObservationDraft
from engram.domain.proposals import NewProposal, Proposal, ProposalReason, ProposalStatus


def _proposal(row: asyncpg.Record) -> Proposal:
    return Proposal(
        id=row["id"],
        chat_id=row["chat_id"],
        user_id=row["user_id"],
        message_id=row["message_id"],
        reason=ProposalReason(row["reason"]),
        draft=ObservationDraft.model_validate(row["draft"]),
        status=ProposalStatus(row["status"]),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        decided_at=row["decided_at"],
        decided_by=row["decided_by"],
        observation_id=row["observation_id"],
    )


class PgProposalStore:
    def __init__(self, conn: Connection, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    async def add(self, proposals: Sequence[NewProposal]) -> int:
        if not proposals:
            return 0
        rows = await self.conn.fetch(
            "INSERT INTO memory_proposals (id, tenant_id, chat_id, user_id, message_id, reason, draft, expires_at)"
            " SELECT p.id, $1, p.chat_id, p.user_id, p.message_id, p.reason, p.draft, p.expires_at"
            " FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::uuid[], $6::text[], $7::jsonb[],"
            "  $8::timestamptz[]) AS p(id, chat_id, user_id, message_id, reason, draft, expires_at)"
            " WHERE EXISTS (SELECT 1 FROM chats c WHERE c.id = p.chat_id)"  # a chat erased meanwhile: nothing
            " ON CONFLICT (id) DO NOTHING RETURNING id",
            self.tenant_id,
            [p.id for p in proposals],
            [p.chat_id for p in proposals],
            [p.user_id for p in proposals],
            [p.message_id for p in proposals],
            [p.reason.value for p in proposals],
            [p.draft.model_dump(mode="json") for p in proposals],
            [p.expires_at for p in proposals],
        )
        return len(rows)

    async def pending(self, chat_id: uuid.UUID, user_id: str, now: datetime) -> list[Proposal]:
        rows = await self.conn.fetch(
            "SELECT * FROM memory_proposals WHERE chat_id = $1 AND user_id = $2 AND status = 'pending'"
            " AND expires_at > $3 ORDER BY created_at, id LIMIT 50",
            chat_id,
            user_id,
            now,
        )
        return [_proposal(r) for r in rows]

    async def lock(self, chat_id: uuid.UUID, proposal_id: uuid.UUID) -> Proposal | None:
        row = await self.conn.fetchrow(
            "SELECT * FROM memory_proposals WHERE id = $1 AND chat_id = $2 FOR UPDATE", proposal_id, chat_id
        )
        return _proposal(row) if row is not None else None

    async def decide(
        self,
        proposal_id: uuid.UUID,
        status: ProposalStatus,
        *,
        decided_by: str | None,
        at: datetime,
        observation_id: uuid.UUID | None = None,
    ) -> None:
        await self.conn.execute(
            "UPDATE memory_proposals SET status = $2, decided_by = $3, decided_at = $4, observation_id = $5"
            " WHERE id = $1",
            proposal_id,
            status.value,
            decided_by,
            at,
            observation_id,
        )
