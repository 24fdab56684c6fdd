"""Store a conversation as turn units (one observation per turn, with its context) and the units
derived from it (a person's sentences, sessions, names: `memory_units`), through the same write
path as every other observation: batched idempotent writes plus change events in the outbox,
which embed-index turns into index entries. Re-ingesting updates in place (unit keys)."""

from __future__ import annotations

from collections.abc import Sequence

from engram.domain.conversation import DERIVED_KINDS, ConversationSession, derived_units, turn_units
from engram.domain.events import change_events
from engram.domain.memory_units import UnitKind
from engram.domain.observation import Scope, Source, Written
from engram.ports import UnitOfWork

SOURCE = "/engram/conversations"
WRITE_BATCH = 500


class ConversationIngest:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow

    async def ingest(
        self,
        *,
        tenant_id: str,
        user_id: str | None,
        conversation_id: str,
        sessions: Sequence[ConversationSession],
        window: int = 2,
        scope: Scope = Scope.private,
        team_ids: Sequence[str] = (),
        source: Source = Source.user,
        kinds: frozenset[UnitKind] = DERIVED_KINDS,
        assistants: frozenset[str] = frozenset(),
    ) -> list[Written]:
        """`kinds`: the derived units besides the turn units (none: turn units only);
        `assistants`: the speakers whose turns are an assistant's (not split into statements)."""
        drafts = turn_units(
            tenant_id=tenant_id,
            user_id=user_id,
            conversation_id=conversation_id,
            sessions=sessions,
            window=window,
            scope=scope,
            team_ids=team_ids,
            source=source,
            assistants=assistants,
        )
        drafts += derived_units(
            tenant_id=tenant_id,
            user_id=user_id,
            conversation_id=conversation_id,
            sessions=sessions,
            kinds=kinds,
            assistants=assistants,
            scope=scope,
            team_ids=team_ids,
            source=source,
        )
        written: list[Written] = []
        for start in range(0, len(drafts), WRITE_BATCH):
            async with self.uow.tenant(tenant_id) as tx:
                batch = await tx.observations.write_many(drafts[start : start + WRITE_BATCH])
                tx.emit(change_events([w.change for w in batch], SOURCE))
            written.extend(batch)
        return written
