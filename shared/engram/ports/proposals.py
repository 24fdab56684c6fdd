"""Memory proposals' storage (`tx.proposals`, issue 20): one tenant's proposals, and the sweep that
expires undecided ones across tenants (`Maintenance.expire_proposals`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from engram.domain.proposals import NewProposal, Proposal, ProposalStatus


class ProposalStore(Protocol):
    async def add(self, proposals: Sequence[NewProposal]) -> int:
        """Store new proposals (an id already there is left as it is); how many were new."""
        ...

    async def pending(self, chat_id: uuid.UUID, user_id: str, now: datetime) -> list[Proposal]:
        """The chat's proposals for this user still waiting for a decision, oldest first."""
        ...

    async def lock(self, chat_id: uuid.UUID, proposal_id: uuid.UUID) -> Proposal | None:
        """The chat's proposal, locked for the transaction (a decision is taken once)."""
        ...

    async def decide(
        self,
        proposal_id: uuid.UUID,
        status: ProposalStatus,
        *,
        decided_by: str | None,
        at: datetime,
        observation_id: uuid.UUID | None = None,
    ) -> None: ...
