"""Versioned SQL migrations applied by one command (`engram migrate`), idempotent (R-4.7).

Files are `migrations/NNNN_name.sql`, applied in order, each in its own transaction, under an
advisory lock so concurrent runs (a Job and a developer) wait for each other. An applied file
whose checksum changed is an error: write a new migration instead of editing an old one.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import asyncpg
import structlog

log = structlog.get_logger(__name__)

MIGRATIONS_DIR = Path(__file__).parent.parent / "migrations"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_ID = 0x656E6772616D  # "engram"

GRANTS = """
GRANT USAGE ON SCHEMA public TO engram_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO engram_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO engram_app;
REVOKE ALL ON schema_migrations FROM engram_app;
"""


class MigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    found: list[Migration] = []
    for path in sorted(directory.glob("*.sql")):
        m = _NAME.match(path.name)
        if not m:
            raise MigrationError(f"migration file {path.name} does not match NNNN_name.sql")
        found.append(Migration(int(m.group(1)), m.group(2), path.read_text()))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration versions in {directory}")
    return found


async def migrate(database_url: str, directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Apply what is missing; return what was applied now (empty when up to date)."""
    migrations = discover(directory)
    conn = await asyncpg.connect(database_url)
    applied_now: list[Migration] = []
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_ID)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"]: r["checksum"] for r in await conn.fetch("SELECT * FROM schema_migrations")}
            for mig in migrations:
                if mig.version in done:
                    if done[mig.version] != mig.checksum:
                        raise MigrationError(f"migration {mig.version:04d}_{mig.name} changed after it was applied")
                    continue
                async with conn.transaction():
                    await conn.execute(mig.sql)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                        mig.version,
                        mig.name,
                        mig.checksum,
                    )
                applied_now.append(mig)
                log.info("migration.applied", version=mig.version, name=mig.name)
            await conn.execute(GRANTS)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_ID)
    finally:
        await conn.close()
    return applied_now


@lru_cache(maxsize=8)
def latest_version(directory: Path = MIGRATIONS_DIR) -> int:
    """The newest migration this code knows; 0 when there is none."""
    return max((m.version for m in discover(directory)), default=0)


async def applied_version(conn: asyncpg.Connection) -> int:
    """The newest migration applied to the database behind `conn`; 0 before the first `engram migrate`."""
    if await conn.fetchval("SELECT to_regclass('schema_migrations') IS NULL"):
        return 0
    return int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_migrations"))


async def apply_migrations(url: str) -> str:
    """Apply every SQL migration not yet applied (idempotent); a summary line (`engram migrate`)."""
    applied = await migrate(url)
    names = f" ({', '.join(m.name for m in applied)})" if applied else " (up to date)"
    return f"migrations: {len(applied)} applied{names}"
