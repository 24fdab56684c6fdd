"""Sessions end (R-4.3): by the user, at the next turn after an idle time, or by the sweep.

A chat's session ends when the user says so, or when the next turn finds it idle for longer
than `ENGRAM_SESSION_IDLE_MINUTES`. A chat the user left never has that next turn: the sweep
(`python -m functions.retention_cron --sessions`, a CronJob every ten minutes) ends sessions
idle for longer than that plus a grace period longer than chat-turn's request timeout (300 s),
so that a turn which read its session as active just before the idle time ran out finishes in
it. Each ended session's `session.ended` event goes through the outbox to extract-observation,
which writes its Summary (a model call each).

A run ends at most `limit` sessions, the longest idle first: the first runs after an upgrade
find every session ever left open, and work through that backlog at that rate instead of
asking for thousands of summaries at once.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from engram.domain.events import SESSION_ENDED, SessionEnded, new_event
from engram.domain.models import Session
from engram.ports import Maintenance, UnitOfWork

log = structlog.get_logger(__name__)

SOURCE = "/engram/chat-turn"
GRACE = timedelta(minutes=10)  # chat-turn's request timeout is 300 s
LIMIT = 200  # sessions ended per run
BATCH = 100  # sessions ended per tenant transaction


def session_ended_event(tenant_id: str, session: Session, chat_id: uuid.UUID | None, user_id: str | None) -> Any:
    """The event extract-observation summarises a session on; one id per session, so ending it
    twice (a turn and the sweep at once) publishes it once (JetStream's de-duplication)."""
    return new_event(
        SESSION_ENDED,
        SessionEnded(session_id=session.id, chat_id=chat_id),
        tenant_id=tenant_id,
        source=SOURCE,
        user_id=session.user_id or user_id,
        subject=f"session/{session.id}",
        event_id=f"{SESSION_ENDED.type}:{session.id}",
    )


async def end_idle_sessions(
    uow: UnitOfWork,
    maintenance: Maintenance,
    idle: timedelta,
    *,
    now: datetime | None = None,
    grace: timedelta = GRACE,
    limit: int = LIMIT,
) -> int:
    """End the active sessions untouched for longer than `idle` + `grace` (at most `limit`, the
    longest idle first), in all tenants, and publish their `session.ended` events. Returns how
    many ended."""
    idle_before = (now or datetime.now(UTC)) - idle - grace
    ended = 0
    for tenant_id, ids in await maintenance.idle_sessions(idle_before, limit):
        for start in range(0, len(ids), BATCH):
            # what fails to go out after the commit stays in the outbox for the relay
            async with uow.tenant(tenant_id) as tx:
                sessions = await tx.chats.end_idle_sessions(ids[start : start + BATCH], idle_before)
                tx.emit(session_ended_event(tenant_id, s, s.chat_id, s.user_id) for s in sessions)
            ended += len(sessions)
    if ended:
        log.info("sessions.ended_idle", count=ended, idle_before=idle_before.isoformat())
    return ended
