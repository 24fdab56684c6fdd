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
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from pydantic import BaseModel

from engram.adapters.observations import to_observation
from engram.adapters.postgres import Database
from engram.adapters.s3_archive import ArchiveError
from engram.domain.events import OBSERVATION_DELETED, observation_changed
from engram.domain.scopes import Permission, Principal
from engram.ports import EventBus
from engram.services import outbox
from engram.services.memory import Forbidden, Unprocessable, require

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


def _count(status: str) -> int:
    """Rows affected, from asyncpg's command status ("DELETE 3")."""
    return int(status.split()[-1])


_OF_USER = "tenant_id = $1 AND user_id = $2"
# The user's conversation history ($1 tenant, $2 user), in export order:
# count name -> (export record, table, the user's rows). A chat's messages and a session's
# summaries go with it, as do the user's own messages and summaries elsewhere.
_HISTORY = {
    "chats": ("chat", "chats", _OF_USER),
    "messages": (
        "message",
        "chat_messages",
        f"tenant_id = $1 AND (user_id = $2 OR chat_id IN (SELECT id FROM chats WHERE {_OF_USER}))",
    ),
    "sessions": ("session", "sessions", _OF_USER),
    "summaries": (
        "summary",
        "summaries",
        f"tenant_id = $1 AND (user_id = $2 OR session_id IN (SELECT id FROM sessions WHERE {_OF_USER}))",
    ),
}
# children before parents, so a cascade never removes rows before they are counted
_ERASE_ORDER = ("messages", "summaries", "sessions", "chats")
# per-user telemetry rollups (the user's raw ai_events go too; tenant totals name nobody and stay)
_ROLLUPS = ("ai_events_hourly_users", "ai_events_daily_users")


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
    def __init__(self, db: Database, bus: EventBus, archive: TelemetryArchive | None = None) -> None:
        """`archive`: the telemetry archive (`Retention`); None when none is configured."""
        self.db = db
        self.bus = bus
        self.archive = archive

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
        async with self.db.tenant(tenant_id) as conn:
            async for row in conn.cursor(
                "SELECT * FROM observations WHERE tenant_id = $1 AND owner_key = $2 ORDER BY created_at, id",
                tenant_id,
                user_id,
                prefetch=500,
            ):
                counts["observations"] += 1
                yield _line({"record": "observation", **to_observation(row).model_dump(mode="json")})
            async for row in conn.cursor(
                "SELECT observation_id, kind, rating, query_id, stream_origin, created_at FROM observation_feedback"
                " WHERE tenant_id = $1 AND user_id = $2 ORDER BY created_at, id",
                tenant_id,
                user_id,
                prefetch=2_000,
            ):
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
            for name, (record, table, rows) in _HISTORY.items():
                counts[name] = 0
                sql = f"SELECT * FROM {table} WHERE {rows} ORDER BY created_at, id"
                async for row in conn.cursor(sql, tenant_id, user_id, prefetch=500):
                    counts[name] += 1
                    yield _line({"record": record, **{k: v for k, v in dict(row).items() if k != "tenant_id"}})
            # the user's telemetry still in the database
            counts["telemetry_events"] = 0
            seen: set[int] = set()
            async for row in conn.cursor(
                "SELECT id, event_name, chat_id, metadata, created_at FROM ai_events"
                f" WHERE {_OF_USER} ORDER BY created_at, id",
                tenant_id,
                user_id,
                prefetch=2_000,
            ):
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
        async with self.db.tenant(tenant_id) as conn:
            ids: list[uuid.UUID] = [
                r["id"]
                for r in await conn.fetch(
                    "SELECT id FROM observations WHERE tenant_id = $1 AND owner_key = $2 ORDER BY id FOR UPDATE",
                    tenant_id,
                    user_id,
                )
            ]
            feedback = _count(
                await conn.execute(
                    "DELETE FROM observation_feedback WHERE tenant_id = $1"
                    " AND (user_id = $2 OR observation_id = ANY($3::uuid[]))",
                    tenant_id,
                    user_id,
                    ids,
                )
            )
            # in-flight feedback the user gave before now is dropped by record-feedback
            await conn.execute(
                "INSERT INTO personal_data_erasures (tenant_id, user_id, erased_at) VALUES ($1, $2, now())"
                " ON CONFLICT (tenant_id, user_id) DO UPDATE SET erased_at = EXCLUDED.erased_at",
                tenant_id,
                user_id,
            )
            history: dict[str, int] = {}
            for name in _ERASE_ORDER:
                _, table, rows = _HISTORY[name]
                history[name] = _count(await conn.execute(f"DELETE FROM {table} WHERE {rows}", tenant_id, user_id))
            history["telemetry_events"] = _count(
                await conn.execute(f"DELETE FROM ai_events WHERE {_OF_USER}", tenant_id, user_id)
            )
            for table in _ROLLUPS:
                await conn.execute(f"DELETE FROM {table} WHERE {_OF_USER}", tenant_id, user_id)
            deleted = await conn.fetch(
                "DELETE FROM observations WHERE tenant_id = $1 AND id = ANY($2::uuid[]) RETURNING id, user_id",
                tenant_id,
                ids,
            )
            revision = datetime.now(UTC).isoformat()
            events = [
                observation_changed(
                    OBSERVATION_DELETED, r["id"], revision, tenant_id=tenant_id, source=SOURCE, user_id=r["user_id"]
                )
                for r in deleted
            ]
            pending = await outbox.stage(conn, tenant_id, events)
        await outbox.publish(self.db, self.bus, pending)
        # after the commit: rows the user had in the database cannot reach the archive any more
        archived = await self.archive.scrub_user(tenant_id, user_id) if self.archive is not None else 0
        return Erasure(
            user_id=user_id,
            observations=len(deleted),
            feedback=feedback,
            index_entries=len(events),
            archived_events=archived,
            **history,
        )
