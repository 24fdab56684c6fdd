"""The memory list's two statements read what a page needs, however long the list is
(`PgObservationStore.list_visible`, `domain.paging`): the total stops counting at its cap, and a
page after a mark starts at the mark instead of reading the rows before it.

The caller's 20,000 rows are written by one statement, so they share their `created_at` (as a
batch written in one transaction does): a mark in the middle of them is the case where a filter
over the mark's instant read every row of it before the mark. Another tenant's 30,000 rows make
the list a part of the table. With 3,000 rows (of 4,546 in a test database, or after other
tests' statistics) the count was planned as a bitmap scan of the caller's rows and a sort: all
3,000 read, a fair plan at that size, since reading a list of 3,000 costs little either way. At
20,000 (and 358,000 in `bench.memory_list`'s 1M tenant) the walk of the list's index that stops
at the cap is the cheaper plan by far."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from engram.adapters.observations import PgObservationStore
from engram.domain.paging import PageMark
from engram.domain.scopes import Visibility
from tests.integration.plans import Explaining, outline, rows_read
from tests.integration.search_rows import insert_private

NOW = datetime(2026, 12, 7, tzinfo=UTC)
ROWS = 20_000
OTHERS = 30_000  # another tenant's: the list is a part of the table, as in production, not most of a test database
PAGE = 50


class Rollback(Exception):
    pass


async def test_a_page_after_a_mark_and_the_capped_total_read_only_their_rows(db: Any, tenant: str) -> None:
    alice = Visibility(tenant_id=tenant, user_id="alice", teams=frozenset(), include_sensitive=False)
    try:
        async with db.system() as conn:
            await insert_private(conn, f"{tenant}-other", "alice", "note", OTHERS)
            await insert_private(conn, tenant, "alice", "note", ROWS)
            await conn.execute("ANALYZE observations")
            await conn.execute(
                "SELECT set_config('role', 'engram_app', true), set_config('engram.tenant_id', $1, true)", tenant
            )
            store = PgObservationStore(conn)
            whole, counted = await store.list_visible(alice, now=NOW, limit=ROWS, count_up_to=ROWS + 1)
            assert counted == ROWS and len({o.created_at for o in whole}) == 1
            middle = whole[ROWS * 2 // 3]
            mark = PageMark(middle.created_at, middle.id)
            page, capped = await store.list_visible(alice, now=NOW, limit=PAGE, after=mark, count_up_to=1_001)
            assert capped == 1_001
            assert [o.id for o in page] == [o.id for o in whole[ROWS * 2 // 3 + 1 :][:PAGE]]

            explaining = Explaining(conn)
            await PgObservationStore(explaining).list_visible(alice, now=NOW, limit=PAGE, after=mark, count_up_to=1_001)
            raise Rollback
    except Rollback:
        pass
    count, page_plan = (plan["Plan"] for plan in explaining.plans)
    assert rows_read(count, "observations") <= 1_001, outline(count)  # not the 20,000 of the list
    # the page's rows and the one look each range takes past its end, not the 13,333 rows of the
    # mark's instant before it
    assert rows_read(page_plan, "observations") <= 2 * PAGE + 2, outline(page_plan)
