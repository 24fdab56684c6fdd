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
from typing import TYPE_CHECKING, Any

import asyncpg
from asyncpg import Connection as Connection  # re-exported for the adapters

from engram.domain.errors import TenantRequired

if TYPE_CHECKING:
    from engram.domain.search import Vector

APP_ROLE = "engram_app"


async def _init_connection(conn: Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


class _Connection(asyncpg.Connection):  # type: ignore[misc]
    """A pooled connection that skips the reset round trip after a use that leaves nothing.

    asyncpg resets a connection when it goes back to the pool (advisory locks, cursors, LISTEN,
    session settings): one more round trip per use. A committed `Database.tenant` transaction
    leaves nothing behind (its settings are transaction-local, `set_config(..., true)`), nor
    does a successful `Database.system_statement`, so the connection returns without it; any
    other use (`Database.system`, a raw `pool.acquire()`, a failure) still gets the full reset.
    asyncpg's documented hook: `get_reset_query` of a Connection subclass; an open transaction
    is always rolled back.
    """

    __slots__ = ("_clean",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clean = False

    def mark_clean(self) -> None:
        """Nothing of this use outlives it: the next release skips the reset query."""
        self._clean = True

    def get_reset_query(self) -> str:
        if self._clean:
            self._clean = False
            return ""
        query: str = super().get_reset_query()
        return query


def _mark_clean(conn: Connection) -> None:
    """No reset query when `conn` goes back to the pool (a pool made elsewhere has plain
    asyncpg connections, which always get it)."""
    if (mark_clean := getattr(conn, "mark_clean", None)) is not None:
        mark_clean()


class Database:
    """`timeout`: how long connecting and waiting for a pooled connection may take; a database that
    is down or slow then raises (an outage: 503 over HTTP, a retry for a worker) instead of hanging."""

    def __init__(self, pool: asyncpg.Pool, *, timeout: float | None = None) -> None:
        self.pool = pool
        self.timeout = timeout

    @classmethod
    async def connect(cls, url: str, *, min_size: int = 1, max_size: int = 10, timeout: float = 10.0) -> Database:
        pool = await asyncpg.create_pool(
            url,
            min_size=min_size,
            max_size=max_size,
            init=_init_connection,
            connection_class=_Connection,
            command_timeout=60,
            max_inactive_connection_lifetime=120,
            timeout=timeout,
        )
        return cls(pool, timeout=timeout)

    async def close(self) -> None:
        await self.pool.close()

    @asynccontextmanager
    async def tenant(self, tenant_id: str) -> AsyncIterator[Connection]:
        """A transaction in which only `tenant_id`'s rows exist."""
        if not tenant_id:
            raise TenantRequired("a tenant-scoped transaction needs a tenant id")
        async with self.pool.acquire(timeout=self.timeout) as conn:
            async with conn.transaction():
                await conn.execute(
                    "SELECT set_config('role', $1, true), set_config('engram.tenant_id', $2, true)",
                    APP_ROLE,
                    tenant_id,
                )
                yield conn
            _mark_clean(conn)  # committed: nothing is left on the connection

    @asynccontextmanager
    async def system(self) -> AsyncIterator[Connection]:
        """A transaction as the connecting role (owner): cross-tenant maintenance only."""
        async with self.pool.acquire() as conn, conn.transaction():
            yield conn

    async def system_statement(self, sql: str, *args: Any) -> str:
        """One statement as the connecting role, committed on its own (no BEGIN/COMMIT round
        trips): for single-statement maintenance such as the outbox's delete. Only for a
        statement that leaves no session state: the connection then goes back to the pool
        without the reset query."""
        async with self.pool.acquire() as conn:
            result: str = await conn.execute(sql, *args)
            _mark_clean(conn)
            return result

    async def ping(self) -> bool:
        async with self.pool.acquire() as conn:
            return bool(await conn.fetchval("SELECT true"))


def record_dict(record: asyncpg.Record) -> dict[str, Any]:
    return dict(record.items())


def vector_literal(vector: Vector) -> str:
    """A vector as pgvector's text form (`[0.1,0.2,...]`)."""
    return "[" + ",".join(repr(float(x)) for x in vector.tolist()) + "]"


def parse_vector(text: str) -> Vector:
    import numpy as np

    return np.array([float(x) for x in text.strip("[]").split(",")], dtype=np.float32)
