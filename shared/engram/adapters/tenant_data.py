"""A tenant's rows across every table, for the operations commands (`engram tenants list`,
`engram tenant export|delete`), as the tables' owner (row-level security does not apply).

The tables are found in the catalog, not listed by hand: every base table of the schema with
a `tenant_id` column, so a table a later migration adds is exported and deleted too. Rows are
turned into JSON by PostgreSQL itself (`to_jsonb`: timestamps in ISO 8601, bytea as `\\x..`
hex, vectors as their text form), streamed with a cursor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from engram.adapters.postgres import Connection, Database
from engram.ports.operations import TenantRows

_TABLES = (
    "SELECT c.table_name FROM information_schema.columns c"
    " JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
    " WHERE c.column_name = 'tenant_id' AND c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'"
    " ORDER BY c.table_name"
)
# deleted first: their delete triggers adjust the rollups and statistics deleted after them
_SOURCES = ("ai_events", "observations", "search_documents", "search_terms")
DELETE_PASSES = 3  # a trigger of a later table may touch an earlier one: go round until none is left


class PgTenantData:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def tables(self, conn: Connection) -> list[str]:
        names = [r["table_name"] for r in await conn.fetch(_TABLES)]
        return sorted(names, key=lambda n: (_SOURCES.index(n) if n in _SOURCES else len(_SOURCES), n))

    async def tenants(self) -> list[TenantRows]:
        async with self.db.system() as conn:
            tables = await self.tables(conn)
            union = " UNION ALL ".join(
                f"SELECT tenant_id, '{t}' AS tbl, count(*) AS n FROM {_ident(t)} GROUP BY tenant_id" for t in tables
            )
            rows = await conn.fetch(f"SELECT tenant_id, tbl, n FROM ({union}) x ORDER BY tenant_id, tbl")
        found: dict[str, dict[str, int]] = {}
        for r in rows:
            found.setdefault(r["tenant_id"], {})[r["tbl"]] = int(r["n"])
        return [TenantRows(tenant, counts) for tenant, counts in found.items()]

    async def export(self, tenant_id: str) -> AsyncIterator[tuple[str, str]]:
        async with self.db.system() as conn:
            for table in await self.tables(conn):
                query = f"SELECT to_jsonb(t)::text AS row FROM {_ident(table)} t WHERE tenant_id = $1"
                async for record in conn.cursor(query, tenant_id, prefetch=1_000):
                    yield table, record["row"]

    async def delete(self, tenant_id: str) -> dict[str, int]:
        deleted: dict[str, int] = {}
        async with self.db.system() as conn:
            tables = await self.tables(conn)
            for _ in range(DELETE_PASSES):
                removed = 0
                for table in tables:
                    status = await conn.execute(f"DELETE FROM {_ident(table)} WHERE tenant_id = $1", tenant_id)
                    n = int(status.split()[-1])
                    removed += n
                    if n or table not in deleted:
                        deleted[table] = deleted.get(table, 0) + n
                if not removed:
                    break
            else:
                raise RuntimeError(f"rows of tenant {tenant_id!r} keep coming back after {DELETE_PASSES} passes")
        return {t: n for t, n in deleted.items() if n}


def _ident(name: str) -> str:
    """A catalog table name as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'
