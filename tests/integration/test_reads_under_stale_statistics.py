"""The profile read of every chat turn (`PgObservationStore.profile`) reads the caller's own rows
of the asked types, whatever the planner's statistics say about the tenant.

Statistics taken before a tenant grew estimate it at one row when every other tenant is in the
statistics' most-common-values list and this one is not (a database of fewer than about 100
tenants: a development or small deployment, or a bench); autovacuum takes them again once a
tenth of the table has changed. Then any index that starts with tenant_id looks as cheap as any
other, and the profile read as one `type = ANY(...)` statement walked the whole tenant: 19.0-23.9
ms against 1.8 on a 20,000-row tenant (bench/RESULTS.md).

Here the statistics are taken, inside the test's transaction, of a database that holds another
tenant's 20,000 rows and none of this one's; then the tenant gets its rows. The transaction is
rolled back, so the stale statistics never leave it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from engram.adapters.observations import PgObservationStore
from engram.domain.scopes import Visibility
from tests.integration.plans import Explaining, rows_read
from tests.integration.search_rows import insert_private

NOW = datetime(2026, 12, 7, tzinfo=UTC)
OTHERS = 4_000  # other users' rows, and the caller's of other types
MINE = 30


class Rollback(Exception):
    pass


@asynccontextmanager
async def stale_statistics(db: Any, tenant: str) -> AsyncIterator[Any]:
    """A tenant transaction on `tenant`'s 4,030 rows, planned with statistics taken before it had
    any; rolled back at the end."""
    try:
        async with db.system() as conn:
            await insert_private(conn, f"{tenant}-before", "bob", "note", 20_000)  # the database the statistics saw
            await conn.execute("ANALYZE observations")  # before the tenant had rows
            await insert_private(conn, tenant, "bob", "note", OTHERS // 2)
            await insert_private(conn, tenant, "alice", "note", OTHERS // 2)
            await insert_private(conn, tenant, "alice", "preference", MINE // 2)
            await insert_private(conn, tenant, "alice", "identity", MINE // 2)
            await conn.execute(
                "SELECT set_config('role', 'engram_app', true), set_config('engram.tenant_id', $1, true)", tenant
            )
            yield conn
            raise Rollback
    except Rollback:
        pass


def alice(tenant: str) -> Visibility:
    return Visibility(tenant_id=tenant, user_id="alice", teams=frozenset(), include_sensitive=False)


async def test_the_profile_reads_the_callers_rows_of_its_types(db: Any, tenant: str) -> None:
    visibility = alice(tenant)
    types = ["preference", "identity"]
    explaining: Explaining | None = None
    async with stale_statistics(db, tenant) as conn:
        found = await PgObservationStore(conn).profile(visibility, types=types, now=NOW, limit=20)
        explaining = Explaining(conn)
        await PgObservationStore(explaining).profile(visibility, types=types, now=NOW, limit=20)
    assert len(found) == 20 and {o.type for o in found} == {"preference", "identity"}
    assert [o.id for o in found] == sorted((o.id for o in found), reverse=True)  # said at once: newest id first
    # the caller's rows of the two types, not the tenant's 4,030 (the statement as one
    # `type = ANY(...)` read all of them)
    assert explaining is not None and rows_read(explaining.plan["Plan"], "observations") <= MINE
