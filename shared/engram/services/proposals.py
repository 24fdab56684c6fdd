"""Memory proposals (issue 20): the chat's user sees what extraction proposed and approves or
rejects it (`POST /api/ai/chats/{chat}/proposals/{id}`); undecided ones expire.

Approving stores the proposal's draft through the one write rule (`authorize_write`) as the
approver, so nobody approves into a team they are not in or a sensitive memory they may not see,
verified (a person said yes), in the same transaction that marks the proposal decided; its change
events and the `chat.approval_decision` event go out through the outbox, and a
`chat.approval_decision` telemetry row is written. A decision is taken once: the row is locked,
a second one is a 409.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field

from engram.domain.authorization import WriteRequest, authorize_write
from engram.domain.errors import Conflict, Forbidden, NotFound
from engram.domain.events import CHAT_APPROVAL_DECISION, ChatApprovalDecision, change_events, new_event
from engram.domain.proposals import Decision, Proposal, ProposalStatus, approved_draft
from engram.domain.scopes import Principal
from engram.domain.telemetry import ChatApprovalDecision as ApprovalTelemetry
from engram.domain.telemetry import records_of
from engram.ports import Maintenance, UnitOfWork

log = structlog.get_logger(__name__)

SOURCE = "/engram/chat-turn"
EXPIRE_LIMIT = 10_000  # proposals expired per sweep run


class ProposalView(BaseModel):
    """A memory proposal as the front end shows it (`Proposal.view`)."""

    id: uuid.UUID
    chat_id: uuid.UUID
    message_id: uuid.UUID | None
    reason: Literal["sensitive", "team", "low_confidence"]
    status: Literal["pending", "approved", "rejected", "expired"]
    type: str
    title: str
    narrative: str
    facts: list[str]
    scope: str
    team_ids: list[str]
    confidence: float
    created_at: datetime
    expires_at: datetime
    observation_id: uuid.UUID | None


class ProposalDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: Decision = Field(description="approve: store it as your verified memory; reject: drop it")


def _user(principal: Principal) -> str:
    if principal.user_id is None:
        raise Forbidden("memory proposals belong to a user (this agent key acts for no user)")
    return principal.user_id


class Proposals:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow

    async def pending(self, principal: Principal, chat_id: uuid.UUID) -> list[dict[str, Any]]:
        """The chat's proposals waiting for this user's decision (a chat that is not theirs has none)."""
        user = _user(principal)
        now = datetime.now(UTC)
        async with self.uow.tenant(principal.tenant_id) as tx:
            found = await tx.proposals.pending(chat_id, user, now)
        return [p.view(now) for p in found]

    async def decide(
        self, principal: Principal, chat_id: uuid.UUID, proposal_id: uuid.UUID, decision: Decision
    ) -> dict[str, Any]:
        user = _user(principal)
        if not principal.is_human:
            raise Forbidden("only a person approves or rejects a memory proposal (agent keys cannot)")
        now = datetime.now(UTC)
        async with self.uow.tenant(principal.tenant_id) as tx:
            proposal = await tx.proposals.lock(chat_id, proposal_id)
            if proposal is None or proposal.user_id != user:
                raise NotFound(f"proposal {proposal_id} not found in chat {chat_id}")
            status = proposal.current_status(now)
            if status is not ProposalStatus.pending:
                raise Conflict(f"proposal {proposal_id} is {status.value} already")
            observation_id: uuid.UUID | None = None
            if decision is Decision.approve:
                draft = approved_draft(proposal)
                authorize_write(principal, WriteRequest.of(draft.user_id, draft.scope, draft.team_ids))
                await tx.erasures.hold([user])
                written = await tx.observations.write_many([draft])
                observation_id = written[0].observation.id
                tx.emit(change_events([w.change for w in written], SOURCE))
            await tx.proposals.decide(
                proposal.id, decision.status, decided_by=user, at=now, observation_id=observation_id
            )
            tx.emit([self._event(principal, proposal, decision, observation_id)])
            await tx.telemetry.write(
                records_of(
                    principal.tenant_id,
                    [
                        ApprovalTelemetry(
                            action=f"memory_proposal:{proposal.reason.value}", decision=decision.status.value
                        )
                    ],
                    user_id=user,
                    chat_id=chat_id,
                )
            )
        decided = dataclasses.replace(
            proposal, status=decision.status, decided_at=now, decided_by=user, observation_id=observation_id
        )
        return decided.view(now)

    @staticmethod
    def _event(principal: Principal, proposal: Proposal, decision: Decision, observation_id: uuid.UUID | None) -> Any:
        return new_event(
            CHAT_APPROVAL_DECISION,
            ChatApprovalDecision(
                chat_id=proposal.chat_id,
                proposal_id=proposal.id,
                decision="approved" if decision is Decision.approve else "rejected",
                reason=proposal.reason.value,
                observation_type=proposal.draft.type,
                observation_id=observation_id,
            ),
            tenant_id=principal.tenant_id,
            source=SOURCE,
            user_id=principal.user_id,
            subject=f"chat/{proposal.chat_id}",
            event_id=f"{CHAT_APPROVAL_DECISION.type}:{proposal.id}",
        )


async def expire_proposals(maintenance: Maintenance, *, now: datetime | None = None, limit: int = EXPIRE_LIMIT) -> int:
    """Mark undecided proposals past their time as expired, in all tenants (the session sweep)."""
    expired = await maintenance.expire_proposals(now or datetime.now(UTC), limit)
    if expired:
        log.info("proposals.expired", count=expired)
    return expired
