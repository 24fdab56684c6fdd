"""A user's personal memory on PostgreSQL (`engram.ports.PersonalDataStore`, R-11.3).

"Personal" = the observations the user owns (`owner_key`, whatever their scope), the feedback
the user gave, the user's chats with their messages, sessions with their summaries, and the
user's telemetry (`ai_events` rows and the per-user rollups). Reads are server-side cursors
in export order (never the whole history in memory); `erase` removes all of it in the
caller's transaction and notes when, so feedback given before still on its way is dropped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from engram.adapters.observation_rows import to_observation
from engram.adapters.postgres import Connection
from engram.adapters.tenant_stores import ERASURE_LOCK
from engram.domain.bus_access import subject_regex
from engram.domain.observation import Observation
from engram.domain.search import passage_text, text_hash
from engram.domain.subjects import user_filters
from engram.ports import Erased

_OF_USER = "tenant_id = $1 AND user_id = $2"
# The user's conversation history ($1 tenant, $2 user), in export order: name -> (table, the
# user's rows). A chat's messages and a session's summaries go with it, as do the user's own
# messages and summaries elsewhere.
HISTORY: dict[str, tuple[str, str]] = {
    "chats": ("chats", _OF_USER),
    "messages": (
        "chat_messages",
        f"tenant_id = $1 AND (user_id = $2 OR chat_id IN (SELECT id FROM chats WHERE {_OF_USER}))",
    ),
    "sessions": ("sessions", _OF_USER),
    "summaries": (
        "summaries",
        f"tenant_id = $1 AND (user_id = $2 OR session_id IN (SELECT id FROM sessions WHERE {_OF_USER}))",
    ),
    "proposals": ("memory_proposals", _OF_USER),  # erased with the user's chats (ON DELETE CASCADE)
}
# children before parents, so a cascade never removes rows before they are counted
_ERASE_ORDER = ("messages", "summaries", "sessions", "chats")
# per-user telemetry rollups (the user's raw ai_events go too; tenant totals name nobody and stay)
_ROLLUPS = ("ai_events_hourly_users", "ai_events_daily_users")


def _count(status: str) -> int:
    """Rows affected, from asyncpg's command status ("DELETE 3")."""
    return int(status.split()[-1])


class PgPersonalDataStore:
    def __init__(self, conn: Connection, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    async def observations(self, user_id: str) -> AsyncIterator[Observation]:
        async for row in self.conn.cursor(
            "SELECT * FROM observations WHERE tenant_id = $1 AND owner_key = $2 ORDER BY created_at, id",
            self.tenant_id,
            user_id,
            prefetch=500,
        ):
            yield to_observation(row)

    async def feedback(self, user_id: str) -> AsyncIterator[Mapping[str, Any]]:
        async for row in self.conn.cursor(
            "SELECT observation_id, kind, rating, query_id, stream_origin, created_at FROM observation_feedback"
            " WHERE tenant_id = $1 AND user_id = $2 ORDER BY created_at, id",
            self.tenant_id,
            user_id,
            prefetch=2_000,
        ):
            yield row

    async def history(self, name: str, user_id: str) -> AsyncIterator[Mapping[str, Any]]:
        table, rows = HISTORY[name]
        sql = f"SELECT * FROM {table} WHERE {rows} ORDER BY created_at, id"
        async for row in self.conn.cursor(sql, self.tenant_id, user_id, prefetch=500):
            yield dict(row)

    async def telemetry(self, user_id: str) -> AsyncIterator[Mapping[str, Any]]:
        async for row in self.conn.cursor(
            f"SELECT id, event_name, chat_id, metadata, created_at FROM ai_events WHERE {_OF_USER}"
            " ORDER BY created_at, id",
            self.tenant_id,
            user_id,
            prefetch=2_000,
        ):
            yield row

    async def erase(self, user_id: str) -> Erased:
        tenant_id = self.tenant_id
        conn = self.conn
        # writers of this user finish first, later ones wait and then see the tombstone
        await conn.execute(f"SELECT pg_advisory_xact_lock({ERASURE_LOCK.format(user='$2')})", tenant_id, user_id)
        owned = [
            to_observation(r)
            for r in await conn.fetch(
                "SELECT * FROM observations WHERE tenant_id = $1 AND owner_key = $2 ORDER BY id FOR UPDATE",
                tenant_id,
                user_id,
            )
        ]
        ids = [o.id for o in owned]
        cache = await self._erase_cache(owned)
        outbox = _count(
            await conn.execute(
                "DELETE FROM outbox WHERE tenant_id = $1 AND subject ~ ANY($2::text[])",
                tenant_id,
                [subject_regex(f) for f in user_filters(tenant_id, user_id)],
            )
        )
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
            table, rows = HISTORY[name]
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
        return Erased(
            feedback=feedback,
            history=history,
            observations=[(r["id"], r["user_id"]) for r in deleted],
            embedding_cache=cache,
            outbox=outbox,
        )

    async def _erase_cache(self, owned: list[Observation]) -> int:
        """The cached vectors of the user's texts, for every model the tenant's cache holds."""
        if not owned:
            return 0
        models = [r["model"] for r in await self.conn.fetch("SELECT DISTINCT model FROM embedding_cache")]
        hashes = [text_hash(m, passage_text(o)) for m in models for o in owned]
        if not hashes:
            return 0
        return _count(
            await self.conn.execute(
                "DELETE FROM embedding_cache WHERE tenant_id = $1 AND text_hash = ANY($2::text[])",
                self.tenant_id,
                hashes,
            )
        )
