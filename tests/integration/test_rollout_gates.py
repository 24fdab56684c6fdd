"""The rollout gates the Kubernetes manifests rely on (k8s/base/migrate/job.yaml).

A function reports ready (`/readyz`, check "schema") and a worker starts consuming only after
every migration its code knows has been applied, so new revisions wait for the migration Job.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from engram.adapters.migrations import applied_version, latest_version, migrate
from engram.adapters.postgres import Database
from tests.integration.databases import fresh_database


async def test_schema_gate_opens_after_migration(services: Any, stack: dict[str, str]) -> None:
    assert (await services.ready())["schema"] is True
    url = await fresh_database(stack["database_url"], "rollout")
    db = await Database.connect(url, max_size=2)
    try:
        fresh = dataclasses.replace(services._current(), db=db)
        assert await fresh.schema_current() is False
        waiting = asyncio.create_task(fresh.wait_for_schema(interval=0.05))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # a worker would not consume yet
        await migrate(url)
        await asyncio.wait_for(waiting, 5)
        assert await fresh.schema_current() is True
        async with db.pool.acquire() as conn:
            assert await applied_version(conn) == latest_version() >= 1
    finally:
        await db.close()
