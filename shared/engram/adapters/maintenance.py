"""Work across tenants on PostgreSQL, as the connecting role (the tables' owner): the session
sweep's scan, the retention job's rows and lock (`engram.ports.Maintenance`,
`engram.ports.RetentionStore`), and agent key resolution (`engram.ports.AgentKeyDirectory`),
which happens before the tenant is known."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from engram.adapters.postgres import Database
from engram.ports import AgentKeyRecord, ExpiredDay

RETENTION_LOCK = 0x656E6772616D01  # "engram" + 1: retention runs and archive scrubs


class PgMaintenance:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def idle_sessions(self, before: datetime, limit: int) -> list[tuple[str, list[uuid.UUID]]]:
        async with self.db.system() as conn:
            rows = await conn.fetch(
                "SELECT tenant_id, array_agg(id ORDER BY updated_at) AS ids FROM"
                " (SELECT tenant_id, id, updated_at FROM sessions WHERE status = 'active' AND updated_at < $1"
                "  ORDER BY updated_at LIMIT $2) idle GROUP BY tenant_id",
                before,
                limit,
            )
        return [(r["tenant_id"], list(r["ids"])) for r in rows]

    async def prune_inbox(self, consumer: str, before: datetime, limit: int) -> int:
        """Delete at most `limit` of `consumer`'s inbox rows processed before `before`, oldest first."""
        status = await self.db.system_statement(
            "DELETE FROM processed_events p USING (SELECT tenant_id, event_key FROM processed_events"
            " WHERE consumer = $1 AND processed_at < $2 ORDER BY processed_at LIMIT $3) old"
            " WHERE p.consumer = $1 AND p.tenant_id = old.tenant_id AND p.event_key = old.event_key",
            consumer,
            before,
            limit,
        )
        return int(status.split()[-1])

    async def prune_embedding_cache(self, unused_since: datetime, limit: int) -> int:
        """Delete at most `limit` cached vectors not used since `unused_since`."""
        status = await self.db.system_statement(
            "DELETE FROM embedding_cache c USING (SELECT tenant_id, model, text_hash FROM embedding_cache"
            " WHERE used_at < $1 ORDER BY used_at LIMIT $2) old"
            " WHERE c.tenant_id = old.tenant_id AND c.model = old.model AND c.text_hash = old.text_hash",
            unused_since,
            limit,
        )
        return int(status.split()[-1])

    async def expire_proposals(self, now: datetime, limit: int) -> int:
        """Mark at most `limit` undecided memory proposals past their time as expired, oldest first."""
        status = await self.db.system_statement(
            "UPDATE memory_proposals p SET status = 'expired', decided_at = $1 FROM (SELECT id FROM memory_proposals"
            " WHERE status = 'pending' AND expires_at <= $1 ORDER BY expires_at LIMIT $2) old WHERE p.id = old.id",
            now,
            limit,
        )
        return int(status.split()[-1])


class PgRetentionStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    @asynccontextmanager
    async def exclusive(self, wait_seconds: float = 0.0) -> AsyncIterator[bool]:
        """A session-level advisory lock on a connection of its own, held for the block."""
        deadline = time.monotonic() + wait_seconds
        async with self.db.pool.acquire() as lock_conn:
            while not await lock_conn.fetchval("SELECT pg_try_advisory_lock($1)", RETENTION_LOCK):
                if time.monotonic() >= deadline:
                    yield False
                    return
                await asyncio.sleep(0.2)
            try:
                yield True
            finally:
                await lock_conn.execute("SELECT pg_advisory_unlock($1)", RETENTION_LOCK)

    async def expired_days(self, cutoff: datetime) -> list[ExpiredDay]:
        async with self.db.system() as conn:
            groups = await conn.fetch(
                "SELECT tenant_id, (date_trunc('day', created_at, 'UTC') AT TIME ZONE 'UTC')::date AS day,"
                " count(*) AS n FROM ai_events WHERE created_at < $1 GROUP BY 1, 2 ORDER BY 2, 1",
                cutoff,
            )
        return [ExpiredDay(g["tenant_id"], g["day"], g["n"]) for g in groups]

    async def day_rows(self, tenant_id: str, start: datetime, end: datetime) -> AsyncIterator[Mapping[str, Any]]:
        async with self.db.system() as conn:
            async for row in conn.cursor(
                "SELECT id, tenant_id, event_name, user_id, chat_id, metadata, created_at FROM ai_events"
                " WHERE tenant_id = $1 AND created_at >= $2 AND created_at < $3 ORDER BY id",
                tenant_id,
                start,
                end,
                prefetch=2_000,
            ):
                yield row

    async def delete_events(self, ids: Sequence[int]) -> int:
        async with self.db.system() as conn:
            status = await conn.execute("DELETE FROM ai_events WHERE id = ANY($1::bigint[])", list(ids))
        return int(status.split()[-1])


class PgAgentKeyDirectory:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def resolve(self, key_hash: str) -> AgentKeyRecord | None:
        # a narrow SECURITY DEFINER function: the only way to read a key without its tenant
        async with self.db.pool.acquire() as conn:
            row = await conn.fetchrow("SELECT * FROM engram_resolve_agent_key($1)", key_hash)
        if row is None:
            return None
        return AgentKeyRecord(
            tenant_id=row["tenant_id"],
            user_id=row["user_id"],
            teams=frozenset(row["teams"]),
            permissions=frozenset(row["permissions"]),
        )
