"""Migrations, row-level security, content-hash dedup and key upsert against real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from engram.adapters.migrations import MIGRATIONS_DIR, MigrationError, migrate
from engram.adapters.observations import PgObservationStore
from engram.domain.observation import ObservationDraft, Scope, WriteOutcome


async def test_migrate_is_idempotent(stack: dict[str, str]) -> None:
    assert await migrate(stack["database_url"]) == []
    assert await migrate(stack["database_url"]) == []


async def test_changed_migration_is_refused(stack: dict[str, str], tmp_path: Path) -> None:
    for f in MIGRATIONS_DIR.glob("*.sql"):
        (tmp_path / f.name).write_text(f.read_text() + "\n-- edited after the fact\n")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        await migrate(stack["database_url"], tmp_path)


async def test_concurrent_migrations_wait_for_each_other(stack: dict[str, str]) -> None:
    results = await asyncio.gather(*(migrate(stack["database_url"]) for _ in range(3)))
    assert results == [[], [], []]


def draft(tenant: str, user: str | None = "alice", **kw: Any) -> ObservationDraft:
    base: dict[str, Any] = {"tenant_id": tenant, "user_id": user, "title": "Customer Müller prefers email"}
    base.update(kw)
    return ObservationDraft(**base)


async def test_rls_blocks_an_unscoped_cross_tenant_read(db: Any, tenant: str, other_tenant: str) -> None:
    async with db.tenant(tenant) as conn:
        await PgObservationStore(conn).write_many([draft(tenant, scope=Scope.public, title="mine")])
    async with db.tenant(other_tenant) as conn:
        await PgObservationStore(conn).write_many([draft(other_tenant, scope=Scope.public, title="theirs")])
    async with db.tenant(tenant) as conn:
        # deliberately no tenant filter: RLS must still hide the other tenant's rows
        rows = await conn.fetch("SELECT tenant_id, title FROM observations")
        assert {r["tenant_id"] for r in rows} == {tenant}
        assert await conn.fetchval("SELECT count(*) FROM observations WHERE tenant_id = $1", other_tenant) == 0
        # and writing into another tenant is refused
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO ai_events (tenant_id, event_name, metadata) VALUES ($1, 'x', '{}')",
                    other_tenant,
                )


async def test_rls_hides_everything_without_a_tenant(db: Any, tenant: str) -> None:
    async with db.tenant(tenant) as conn:
        await PgObservationStore(conn).write_many([draft(tenant)])
    async with db.pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL ROLE engram_app")
        assert await conn.fetchval("SELECT count(*) FROM observations") == 0


async def test_content_hash_dedup_per_owner(db: Any, tenant: str) -> None:
    async with db.tenant(tenant) as conn:
        store = PgObservationStore(conn)
        first, again, other_owner = await store.write_many(
            [draft(tenant), draft(tenant, title="customer  müller PREFERS email"), draft(tenant, user="bob")]
        )
        assert first.outcome is WriteOutcome.created
        assert again.observation.id == first.observation.id  # same batch, same row
        assert other_owner.outcome is WriteOutcome.created and other_owner.observation.id != first.observation.id
        (later,) = await store.write_many([draft(tenant)])
        assert later.outcome is WriteOutcome.deduplicated and later.observation.id == first.observation.id
        assert await conn.fetchval("SELECT count(*) FROM observations") == 2


async def test_key_upsert_keeps_created_at_and_bumps_updated_at(db: Any, tenant: str) -> None:
    async with db.tenant(tenant) as conn:
        store = PgObservationStore(conn)
        (a,) = await store.write_many([draft(tenant, type="preference", key="pref:style", title="short answers")])
        await asyncio.sleep(0.01)
        (b,) = await store.write_many([draft(tenant, type="preference", key="pref:style", title="long answers")])
        (c,) = await store.write_many([draft(tenant, type="preference", key="pref:style", title="long answers")])
        assert a.outcome is WriteOutcome.created
        assert b.outcome is WriteOutcome.updated and b.observation.id == a.observation.id
        assert b.observation.created_at == a.observation.created_at
        assert b.observation.updated_at > a.observation.updated_at
        assert b.observation.title == "long answers"
        assert c.outcome is WriteOutcome.deduplicated and c.observation.updated_at == b.observation.updated_at
        # a different type with the same key is another observation
        (d,) = await store.write_many([draft(tenant, type="fact", key="pref:style", title="x")])
        assert d.outcome is WriteOutcome.created and d.observation.id != a.observation.id


async def test_concurrent_writers_make_one_row(db: Any, tenant: str) -> None:
    async def write(i: int) -> Any:
        async with db.tenant(tenant) as conn:
            return await PgObservationStore(conn).write_many(
                [
                    draft(tenant, title="same content"),
                    draft(tenant, type="project", key="k", title=f"v{i % 2}"),
                ]
            )

    results = await asyncio.gather(*(write(i) for i in range(8)))
    assert len({r[0].observation.id for r in results}) == 1
    assert len({r[1].observation.id for r in results}) == 1
    async with db.tenant(tenant) as conn:
        assert await conn.fetchval("SELECT count(*) FROM observations") == 2


async def test_agent_key_lookup_function(services: Any, db: Any, tenant: str) -> None:
    from engram.adapters.maintenance import PgAgentKeyDirectory
    from engram.services.auth import Authenticator, create_agent_key
    from engram.settings import get_settings

    issued = await create_agent_key(
        services.uow, tenant_id=tenant, name="crm-bot", user_id=None, teams=[], permissions=["create:AiObservation"]
    )
    principal = await Authenticator(get_settings(), PgAgentKeyDirectory(db)).principal_from_agent_key(issued.secret)
    assert principal.tenant_id == tenant and not principal.is_human
    async with db.tenant(tenant) as conn:
        stored = await conn.fetchval("SELECT key_hash FROM agent_keys WHERE id = $1", issued.id)
    assert issued.secret not in stored and len(stored) == 64
    assert uuid.UUID(str(issued.id))


async def test_pool_skips_the_reset_only_after_a_committed_tenant_transaction(
    stack: dict[str, str], tenant: str
) -> None:
    from engram.adapters.postgres import Database

    db = await Database.connect(stack["database_url"], min_size=1, max_size=1)  # one connection, reused
    queries: list[str] = []
    try:
        async with db.system() as conn:
            conn.add_query_logger(lambda logged: queries.append(logged.query))
            await conn.execute("SET application_name = 'leftover'")  # session-level state
        assert any("RESET ALL" in q for q in queries), "system use is followed by the full reset"
        async with db.system() as conn:
            assert await conn.fetchval("SHOW application_name") != "leftover"

        queries.clear()
        async with db.tenant(tenant) as conn:
            assert await conn.fetchval("SELECT current_setting('engram.tenant_id')") == tenant
        assert not any("RESET ALL" in q for q in queries), "a committed tenant transaction skips the reset"
        async with db.system() as conn:  # and leaves nothing behind: its settings were transaction-local
            assert await conn.fetchval("SELECT current_setting('engram.tenant_id', true)") in (None, "")
            assert await conn.fetchval("SELECT current_user") != "engram_app"

        queries.clear()
        with pytest.raises(RuntimeError):
            async with db.tenant(tenant):
                raise RuntimeError("the turn failed")
        assert any("RESET ALL" in q for q in queries), "a failed tenant transaction is reset in full"

        queries.clear()  # one statement on its own: committed, no BEGIN/COMMIT and no reset
        assert await db.system_statement("DELETE FROM outbox WHERE id = ANY($1::bigint[])", [-1]) == "DELETE 0"
        statements = [" ".join(q.split()) for q in queries]  # beside asyncpg's own type introspection
        assert "DELETE FROM outbox WHERE id = ANY($1::bigint[])" in statements
        assert not any(q.startswith(("BEGIN", "COMMIT")) or "RESET ALL" in q for q in statements), statements
        queries.clear()
        with pytest.raises(asyncpg.UndefinedTableError):
            await db.system_statement("DELETE FROM no_such_table")
        assert any("RESET ALL" in q for q in queries), "a failed statement is reset in full"
    finally:
        await db.close()


async def test_statistics_follow_a_growing_tenant(db: Any) -> None:
    """Migration 0022: autovacuum analyzes the tables recall reads after 1 % of them changed, so a
    new tenant is known to the planner sooner (tests/integration/test_reads_under_stale_statistics.py
    shows what a tenant the statistics do not know costs)."""
    async with db.system() as conn:
        rows = await conn.fetch(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY($1::text[]) AND relkind = 'r'",
            ["observations", "search_documents", "search_terms", "search_term_stats"],
        )
    assert {r["relname"]: "autovacuum_analyze_scale_factor=0.01" in (r["reloptions"] or []) for r in rows} == {
        "observations": True,
        "search_documents": True,
        "search_terms": True,
        "search_term_stats": True,
    }
