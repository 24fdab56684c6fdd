"""Memory proposals in memory (`engram.ports.ProposalStore`), as `adapters/proposal_store.py`."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime

from engram.domain.proposals import NewProposal, Proposal, ProposalStatus
from tests.fakes.data import TxState


class InMemoryProposalStore:
    def __init__(self, tx: TxState) -> None:
        self.tx = tx

    async def add(self, proposals: Sequence[NewProposal]) -> int:
        data = self.tx.rows()
        added = 0
        for p in proposals:
            if p.id in data.proposals or p.chat_id not in data.chats:
                continue
            data.proposals[p.id] = Proposal(
                id=p.id,
                chat_id=p.chat_id,
                user_id=p.user_id,
                message_id=p.message_id,
                reason=p.reason,
                draft=p.draft,
                status=ProposalStatus.pending,
                created_at=self.tx.now,
                expires_at=p.expires_at,
            )
            added += 1
        return added

    async def pending(self, chat_id: uuid.UUID, user_id: str, now: datetime) -> list[Proposal]:
        found = [
            p
            for p in self.tx.rows().proposals.values()
            if p.chat_id == chat_id
            and p.user_id == user_id
            and p.status is ProposalStatus.pending
            and p.expires_at > now
        ]
        return sorted(found, key=lambda p: (p.created_at, p.id))[:50]

    async def lock(self, chat_id: uuid.UUID, proposal_id: uuid.UUID) -> Proposal | None:
        found = self.tx.rows().proposals.get(proposal_id)
        return found if found is not None and found.chat_id == chat_id else None

    async def decide(
        self,
        proposal_id: uuid.UUID,
        status: ProposalStatus,
        *,
        decided_by: str | None,
        at: datetime,
        observation_id: uuid.UUID | None = None,
    ) -> None:
        data = self.tx.rows()
        data.proposals[proposal_id] = dataclasses.replace(
            data.proposals[proposal_id],
            status=status,
            decided_by=decided_by,
            decided_at=at,
            observation_id=observation_id,
        )
