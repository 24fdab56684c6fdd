"""What extract-observation plans for one event: what it extracted, and where that is counted."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from engram.domain.deliveries import Delivery
from engram.domain.observation import ObservationDraft, TriggerSource
from engram.domain.proposals import NewProposal


@dataclass
class Extracted:
    """What chat extraction found in one event: drafts plus what `memory.extraction` reports."""

    drafts: list[ObservationDraft]
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: int = 0
    message_id: uuid.UUID | None = None  # a chat turn's assistant message (its trace shows the status)
    proposals: list[NewProposal] = field(default_factory=list)  # waiting for the user's approval
    # memory units of a chat (what was said, `conversation.chat_units`): stored with the drafts,
    # counted apart from them (`units`), since they are not what extraction chose to keep
    units: list[ObservationDraft] = field(default_factory=list)

    @property
    def written(self) -> list[ObservationDraft]:
        """Everything the event stores: the drafts, then the units."""
        return [*self.drafts, *self.units]


@dataclass
class Planned:
    delivery: Delivery[Any]
    trigger: TriggerSource
    extracted: Extracted
    key: str = field(init=False)  # the event's inbox key
    stats_row: tuple[TriggerSource, str] = field(init=False)  # its `memory.extraction` row

    def __post_init__(self) -> None:
        self.key = self.delivery.key
        # one row per chat extraction (a model call each), one per trigger for the others
        self.stats_row = (self.trigger, self.key if self.trigger is TriggerSource.chat else "")

    @property
    def users(self) -> set[str | None]:
        """Whose memory it writes: the event's user and every draft's owner."""
        return {self.delivery.meta.user_id, *(d.user_id for d in self.extracted.written)}
