"""Memory proposals (issue 20): what chat extraction found worth keeping but does not store on its
own, because it is sensitive, meant for a team, or the model was not sure of it. The chat's user
approves (then it is stored through the one write rule, as the approver) or rejects it; a
proposal nobody decides expires. Pure rules, no I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from engram.domain.observation import ObservationDraft, Scope

LOW_CONFIDENCE = 0.5  # below this, the model's own certainty asks for a person's yes
PROPOSAL_TTL = timedelta(days=7)
APPROVED_CONFIDENCE = 1.0  # a person said yes to it
_NAMESPACE = uuid.UUID("6f1d8a52-3c1e-4c55-9b7e-2a0d5e4b7c11")


class ProposalReason(StrEnum):
    sensitive = "sensitive"
    team = "team"
    low_confidence = "low_confidence"


class ProposalStatus(StrEnum):
    pending = "pending"
    approved = "approved"
    rejected = "rejected"
    expired = "expired"


class Decision(StrEnum):
    approve = "approve"
    reject = "reject"

    @property
    def status(self) -> ProposalStatus:
        return ProposalStatus.approved if self is Decision.approve else ProposalStatus.rejected


def approval_reason(draft: ObservationDraft, *, low_confidence: float = LOW_CONFIDENCE) -> ProposalReason | None:
    """Why a draft from chat extraction needs a person's approval (None: it is stored as it is)."""
    if draft.scope is Scope.sensitive:
        return ProposalReason.sensitive
    if draft.scope is Scope.team or draft.user_id is None:
        return ProposalReason.team
    if draft.confidence < low_confidence:
        return ProposalReason.low_confidence
    return None


def proposal_id(event_key: str, index: int) -> uuid.UUID:
    """One id per extracted item of one event: a redelivered event proposes nothing twice."""
    return uuid.uuid5(_NAMESPACE, f"{event_key}#{index}")


@dataclass(frozen=True)
class NewProposal:
    id: uuid.UUID
    chat_id: uuid.UUID
    user_id: str
    message_id: uuid.UUID | None
    reason: ProposalReason
    draft: ObservationDraft
    expires_at: datetime


@dataclass(frozen=True)
class Proposal:
    id: uuid.UUID
    chat_id: uuid.UUID
    user_id: str
    message_id: uuid.UUID | None
    reason: ProposalReason
    draft: ObservationDraft
    status: ProposalStatus
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None = None
    decided_by: str | None = None
    observation_id: uuid.UUID | None = None

    def current_status(self, now: datetime) -> ProposalStatus:
        """Pending until decided or past its time (the sweep writes `expired` later)."""
        if self.status is ProposalStatus.pending and self.expires_at <= now:
            return ProposalStatus.expired
        return self.status

    def view(self, now: datetime) -> dict[str, Any]:
        """What the front end shows (the turn's response and stream, the proposal API)."""
        d = self.draft
        return {
            "id": str(self.id),
            "chat_id": str(self.chat_id),
            "message_id": str(self.message_id) if self.message_id else None,
            "reason": self.reason.value,
            "status": self.current_status(now).value,
            "type": d.type,
            "title": d.title,
            "narrative": d.narrative,
            "facts": list(d.facts),
            "scope": d.scope.value,
            "team_ids": list(d.team_ids),
            "confidence": d.confidence,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "observation_id": str(self.observation_id) if self.observation_id else None,
        }


def approved_draft(proposal: Proposal) -> ObservationDraft:
    """The observation approving stores: the proposal's draft, verified, as a person said yes to it
    (validated again, so instruction-like text stays flagged and trusted less)."""
    return ObservationDraft.model_validate(
        {**proposal.draft.model_dump(), "verified": True, "confidence": APPROVED_CONFIDENCE}
    )
