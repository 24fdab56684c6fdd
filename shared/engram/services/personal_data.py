"""A user's personal memory on request (R-11.3): export as JSON Lines, and erasure.

"Personal" = the observations the user owns (`user_id`, whatever their scope), the feedback
the user gave, the user's chats with their messages, sessions with their summaries, and the
user's telemetry (`ai_events` rows and the per-user rollups). Tenant-wide observations
(`user_id` NULL) belong to nobody and stay; tenant totals in the telemetry rollups stay too
(they name no user).

Erasure deletes, in one tenant transaction, the user's observations (with every feedback
row on them), the user's own feedback rows, and stages one `observation.deleted` event per
observation in the outbox; after commit they are published, and the embed-index worker
removes the index entries. It also notes when the erasure happened, so feedback the user
gave before it that was still on its way is dropped by record-feedback. With a telemetry
archive configured (`ENGRAM_ARCHIVE_BUCKET`), the user's lines are then removed from the
tenant's archived days too (`Retention.scrub_user`); if that fails, the database part stands
and asking for the erasure again finishes the archive. The export reads those archived days
as well, so it holds the user's telemetry whether or not retention has moved it yet.

A user may export or erase their own memory; another user's needs `manage:AiObservation`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from pydantic import BaseModel

from engram.domain.errors import ArchiveError, Forbidden, Unprocessable
from engram.domain.events import OBSERVATION_DELETED, observation_changed
from engram.domain.scopes import Permission, Principal, require
from engram.ports import EventBus, UnitOfWork

log = structlog.get_logger(__name__)

SOURCE = "/engram/memory-api"
EXPORT_FORMAT = "engram.personal-memory.v1"


class Erasure(BaseModel):
    user_id: str
    observations: int
    feedback: int
    index_entries: int  # observation.deleted events published: the index drops one entry each
    chats: int = 0
    messages: int = 0  # every message of the user's chats, and the user's messages elsewhere
    sessions: int = 0
    summaries: int = 0
    telemetry_events: int = 0  # ai_events rows naming the user (per-user rollups go with them)
    archived_events: int = 0  # lines naming the user removed from the S3 telemetry archive
    embedding_cache: int = 0  # cached vectors of the user's texts (embedding_cache rows)
    outbox_events: int = 0  # the user's events not yet published (outbox rows)
    stream_messages: int = 0  # the user's messages purged from the main JetStream stream
    dead_letters: int = 0  # the user's dead letters purged from the dead-letter stream


# the export's record name for each part of the user's conversation history, in export order
_HISTORY_RECORDS = {
    "chats": "chat",
    "messages": "message",
    "sessions": "session",
    "summaries": "summary",
    "proposals": "memory_proposal",
}


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str).encode() + b"\n"


def _telemetry_line(event_name: str, chat_id: Any, metadata: Any, created_at: str) -> bytes:
    return _line(
        {
            "record": "telemetry_event",
            "event_name": event_name,
            "chat_id": str(chat_id) if chat_id else None,
            "metadata": json.loads(metadata) if isinstance(metadata, str) else metadata,
            "created_at": created_at,
        }
    )


class TelemetryArchive(Protocol):
    """Expired telemetry on object storage (`engram.services.retention.Retention`)."""

    async def scrub_user(self, tenant_id: str, user_id: str) -> int: ...

    async def archived_keys(self, tenant_id: str) -> list[str]: ...

    def user_events(self, keys: Sequence[str], user_id: str) -> AsyncIterator[dict[str, Any]]: ...


class PersonalData:
    def __init__(self, uow: UnitOfWork, archive: TelemetryArchive | None = None, bus: EventBus | None = None) -> None:
        """`archive`: the telemetry archive (`Retention`); None when none is configured. `bus`:
        where the user's messages are purged from (JetStream)."""
        self.uow = uow
        self.archive = archive
        self.bus = bus

    @staticmethod
    def target(principal: Principal, user: str | None, own_permission: Permission) -> str:
        """Whose memory the call is about; raises Forbidden/Unprocessable before any work starts."""
        target = user if user is not None else principal.user_id
        if target is None:
            raise Unprocessable("user", "this agent key acts for no user; name one with ?user=")
        if not target.strip() or len(target) > 128:
            raise Unprocessable("user", "user must be 1..128 characters")
        if target == principal.user_id:
            require(principal, own_permission)
        elif not principal.has(Permission.manage_observation):
            raise Forbidden(f"another user's memory needs {Permission.manage_observation.value!r}")
        return target

    async def export(self, tenant_id: str, user_id: str) -> AsyncIterator[bytes]:
        """JSON Lines: a header, every owned observation, every feedback row, the user's chats,
        messages, sessions and summaries, the user's telemetry events (in the database, then in
        the archive), and a trailer with counts.

        The archive is listed here once before the first line: if it cannot be reached,
        ArchiveError comes before anything is sent (memory-api answers 503)."""
        if self.archive is not None:
            await self.archive.archived_keys(tenant_id)
        return self._lines(tenant_id, user_id)

    async def _lines(self, tenant_id: str, user_id: str) -> AsyncIterator[bytes]:
        yield _line(
            {
                "record": "export",
                "format": EXPORT_FORMAT,
                "tenant_id": tenant_id,
                "user_id": user_id,
                "exported_at": datetime.now(UTC).isoformat(),
            }
        )
        counts = {"observations": 0, "feedback": 0}
        seen: set[int] = set()
        async with self.uow.tenant(tenant_id) as tx:
            async for obs in tx.personal.observations(user_id):
                counts["observations"] += 1
                yield _line({"record": "observation", **obs.model_dump(mode="json")})
            async for row in tx.personal.feedback(user_id):
                counts["feedback"] += 1
                yield _line(
                    {
                        "record": "feedback",
                        "observation_id": str(row["observation_id"]) if row["observation_id"] else None,
                        "kind": row["kind"],
                        "rating": row["rating"],
                        "query_id": str(row["query_id"]) if row["query_id"] else None,
                        "stream_origin": row["stream_origin"],
                        "created_at": row["created_at"].isoformat(),
                    }
                )
            for name, record in _HISTORY_RECORDS.items():
                counts[name] = 0
                async for row in tx.personal.history(name, user_id):
                    counts[name] += 1
                    yield _line({"record": record, **{k: v for k, v in row.items() if k != "tenant_id"}})
            # the user's telemetry still in the database
            counts["telemetry_events"] = 0
            async for row in tx.personal.telemetry(user_id):
                counts["telemetry_events"] += 1
                seen.add(row["id"])
                yield _telemetry_line(row["event_name"], row["chat_id"], row["metadata"], row["created_at"].isoformat())
        # then the archived days, listed after the database was read: retention uploads a day
        # before it deletes its rows, so every event is in one of the two; an event archived
        # since it was read above is skipped by its id
        end: dict[str, Any] = {"record": "end", **counts, "archived_telemetry_events": 0}
        if self.archive is not None:
            try:
                archived = await self.archive.archived_keys(tenant_id)
                async for event in self.archive.user_events(archived, user_id):
                    if event.get("id") in seen:
                        continue
                    end["archived_telemetry_events"] += 1
                    yield _telemetry_line(event["event_name"], event["chat_id"], event["metadata"], event["created_at"])
            except ArchiveError as exc:  # the lines so far stand; the trailer says the export is short
                log.error("personal_data.export_archive_failed", tenant=tenant_id, error=str(exc))
                end["incomplete"] = f"the telemetry archive could not be read: {exc}"
        yield _line(end)

    async def erase(self, principal: Principal, user: str | None) -> Erasure:
        user_id = self.target(principal, user, Permission.delete_observation)
        tenant_id = principal.tenant_id
        async with self.uow.tenant(tenant_id) as tx:
            erased = await tx.personal.erase(user_id)
            revision = datetime.now(UTC).isoformat()
            events = [
                observation_changed(
                    OBSERVATION_DELETED, obs_id, revision, tenant_id=tenant_id, source=SOURCE, user_id=owner
                )
                for obs_id, owner in erased.observations
            ]
            tx.emit(events)
        # after the commit (the tombstone stands): the user's messages leave the streams; one
        # published later and given before now is dropped and deleted by the worker it reaches
        purged = await self.bus.erase_user(tenant_id, user_id) if self.bus is not None else {}
        # rows the user had in the database cannot reach the archive any more
        archived = await self.archive.scrub_user(tenant_id, user_id) if self.archive is not None else 0
        stream = next(iter(purged), None)
        return Erasure(
            user_id=user_id,
            observations=len(erased.observations),
            feedback=erased.feedback,
            index_entries=len(events),
            archived_events=archived,
            embedding_cache=erased.embedding_cache,
            outbox_events=erased.outbox,
            stream_messages=purged.get(stream, 0) if stream else 0,
            dead_letters=sum(n for name, n in purged.items() if name != stream),
            **erased.history,
        )
