"""PostgreSQL access with tenant isolation in two layers (R-4.6).

`Database.tenant(t)` opens a transaction that switches to role `engram_app` and sets
`engram.tenant_id`; row-level security then hides every other tenant's rows, even from a
query that forgets its `WHERE tenant_id = ...`. `Database.system()` is for migrations,
retention and the outbox relay, which work across tenants by design.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from asyncpg import Connection as Connection  # re-exported for the adapters

APP_ROLE = "engram_app"


async def _init_connection(conn: Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


class TenantRequired(ValueError):
    pass


class Database:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @classmethod
    async def connect(cls, url: str, *, min_size: int = 1, max_size: int = 10) -> Database:
        pool = await asyncpg.create_pool(
            url,
            min_size=min_size,
            max_size=max_size,
            init=_init_connection,
            command_timeout=60,
            max_inactive_connection_lifetime=120,
        )
        return cls(pool)

    async def close(self) -> None:
        await self.pool.close()

    @asynccontextmanager
    async def tenant(self, tenant_id: str) -> AsyncIterator[Connection]:
        """A transaction in which only `tenant_id`'s rows exist."""
        if not tenant_id:
            raise TenantRequired("a tenant-scoped transaction needs a tenant id")
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "SELECT set_config('role', $1, true), set_config('engram.tenant_id', $2, true)",
                APP_ROLE,
                tenant_id,
            )
            yield conn

    @asynccontextmanager
    async def system(self) -> AsyncIterator[Connection]:
        """A transaction as the connecting role (owner): cross-tenant maintenance only."""
        async with self.pool.acquire() as conn, conn.transaction():
            yield conn

    async def ping(self) -> bool:
        async with self.pool.acquire() as conn:
            return bool(await conn.fetchval("SELECT true"))


def record_dict(record: asyncpg.Record) -> dict[str, Any]:
    return dict(record.items())
