"""The operations commands on the real PostgreSQL and JetStream (issue 19, part 3): each runs as
its own process (`python -m engram.operations.cli ...`, as a Kubernetes Job would), while the
workers of this process consume the real durable consumers.

- a real dead letter (a NUL in the data, refused by extract-observation) is listed, shown,
  replayed (and dead-lettered again: the cause is in the data) and purged;
- an event dead-lettered by a broken deployment is replayed after the fix and applied once,
  however often it is replayed;
- tenants list, tenant export, tenant delete: nothing of the tenant remains (rows in every
  table, index documents, messages in both streams);
- `engram outbox relay` publishes staged outbox rows as its own bus user and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from nats.js.errors import NotFoundError

from engram import bootstrap
from engram.adapters.outbox import stage
from engram.adapters.tenant_data import PgTenantData
from engram.domain.dead_letters import DeadLetterFilter, tenant_filters
from engram.domain.events import OBSERVATION_CREATED, new_event
from tests.conftest import eventually
from tests.integration.test_extraction import count, customer_event


async def engram(*args: str, env: dict[str, str] | None = None, timeout: float = 60.0) -> tuple[int, str, str]:
    """The `engram` command in a process of its own (the loop keeps running: the workers consume)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "engram.operations.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def listed(tenant: str, *extra: str) -> list[dict[str, Any]]:
    code, out, err = await engram("dlq", "list", "--tenant", tenant, "--json", *extra)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


async def test_a_nul_event_is_listed_shown_replayed_and_purged(services: Any, workers: Any, tenant: str) -> None:
    await services.bus.publish(customer_event(tenant, f"{tenant}-nul", name="Bad\u0000Name"))
    letters = await eventually(lambda: listed(tenant), timeout=20)
    [letter] = letters
    assert letter["consumer"] == "extract-observation" and letter["id"] == f"{tenant}-nul"
    assert letter["type"] == "com.example.crm.customer.created.v1" and letter["tenant"] == tenant
    assert "U+0000" in letter["reason"] and letter["deliveries"] == 1
    assert letter["subject"].startswith(f"engram.ingest.{tenant}._.")

    code, out, err = await engram("dlq", "show", str(letter["seq"]), "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["headers"]["ce-tenantid"] == tenant and "\\u0000" in shown["body"]
    # other selections do not find it
    assert await listed(tenant, "--consumer", "embed-index") == []
    assert await listed(tenant, "--reason", "no such reason") == []
    assert await listed(tenant, "--type", "com.example.other.v1") == []

    code, out, err = await engram("dlq", "replay", "--tenant", tenant)
    assert code == 0, err + out
    assert "1 replayed" in out
    # the cause is in the data: the worker refuses it again, a new dead letter with the original headers
    again = await eventually(lambda: _other_than(tenant, letter["seq"]), timeout=20)
    assert again["id"] == f"{tenant}-nul" and "U+0000" in again["reason"] and again["seq"] > letter["seq"]
    assert await count(services.db, tenant) == 0

    code, out, _ = await engram("dlq", "purge", "--tenant", tenant)
    assert code == 2 and "--yes" in out  # nothing deleted without it
    code, out, err = await engram("dlq", "purge", "--tenant", tenant, "--yes")
    assert code == 0 and "1 dead letter(s) deleted" in out, err
    assert await listed(tenant) == []
    dead_letters, _ = bootstrap.build_operations(services.base)
    assert await dead_letters.queue.remove(again["seq"]) is False  # gone already: no error
    assert await dead_letters.show(again["seq"]) is None


async def _other_than(tenant: str, seq: int) -> dict[str, Any] | None:
    """The tenant's one dead letter, once it is another than `seq` (the replayed one is deleted)."""
    letters = await listed(tenant)
    return letters[0] if len(letters) == 1 and letters[0]["seq"] != seq else None


class _RefusingExtraction:
    """A deployment with a bug: extract-observation refuses this tenant's events as poison."""

    def __init__(self, real: Any, tenant: str) -> None:
        self.real = real
        self.tenant = tenant

    async def handle(self, batch: Any) -> None:
        mine = [d for d in batch if d.tenant == self.tenant]
        for delivery in mine:
            delivery.poison("rules bug in release 1.2.3")
        rest = [d for d in batch if d.tenant != self.tenant]
        if rest:
            await self.real.handle(type(batch)(rest))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


async def test_replayed_after_the_fix_it_is_applied_once(services: Any, workers: Any, tenant: str) -> None:
    base = services.base
    previous = bootstrap.use_services(replace(base, extraction=_RefusingExtraction(base.extraction, tenant)))
    try:
        await services.bus.publish(customer_event(tenant, f"{tenant}-bug", customer_id="7001", name="Kunde Bug"))
        [letter] = await eventually(lambda: listed(tenant), timeout=20)
    finally:
        bootstrap.use_services(previous)  # the fix is deployed
    assert "rules bug" in letter["reason"] and await count(services.db, tenant) == 0

    code, out, err = await engram("dlq", "replay", str(letter["seq"]), "--keep")
    assert code == 0 and "1 replayed (0 already in the stream)" in out, err + out
    await eventually(lambda: _observations(services, tenant, 1), timeout=20)
    # replayed again: JetStream has the replay already; and after the duplicate window, the inbox
    code, out, err = await engram("dlq", "replay", str(letter["seq"]))
    assert code == 0 and "1 replayed (1 already in the stream)" in out, err + out
    dead_letters, _ = bootstrap.build_operations(services.base)
    assert await dead_letters.show(letter["seq"]) is None  # deleted after the replay
    assert [x async for x in dead_letters.select(DeadLetterFilter(tenant=tenant))] == []
    # a replay after the duplicate window (a message id JetStream has not seen): the inbox skips it
    original = await services.bus.js.get_msg("ENGRAM", seq=1, subject=letter["subject"], next=True)
    headers = {**original.headers, "Nats-Msg-Id": f"late-replay-{tenant}"}
    await services.bus.js.publish(letter["subject"], original.data, headers=headers)
    await asyncio.sleep(1.5)
    assert await count(services.db, tenant) == 1
    async with services.db.tenant(tenant) as conn:
        inbox = await conn.fetchval(
            "SELECT count(*) FROM processed_events WHERE consumer = 'extract-observation' AND event_key LIKE $1",
            f"%{tenant}-bug%",
        )
    assert inbox == 1


async def _observations(services: Any, tenant: str, n: int) -> bool:
    return await count(services.db, tenant) == n


async def test_a_tenant_is_listed_exported_and_deleted_without_a_trace(
    services: Any, workers: Any, api: Any, auth: Any, tenant: str, other_tenant: str, tmp_path: Path
) -> None:
    for t in (tenant, other_tenant):
        r = await api.post(
            "/api/ai/memory", json={"title": f"Vertrag {t}", "narrative": "Laufzeit 24 Monate"}, headers=auth(t)
        )
        assert r.status_code in (200, 201), r.text
        await services.bus.publish(customer_event(t, f"{t}-c1", customer_id="8001", name="Kunde Acht"))
    await services.bus.publish(customer_event(tenant, f"{tenant}-nul", name="Bad\u0000Name"))
    await eventually(lambda: _indexed(services, tenant, 2), timeout=30)
    await eventually(lambda: listed(tenant), timeout=20)

    code, out, err = await engram("tenants", "list", "--json")
    assert code == 0, err
    rows = {x["tenant"]: x for x in map(json.loads, out.splitlines()) if x}
    assert rows[tenant]["rows"]["observations"] == 2 and rows[tenant]["total"] >= 2

    target = tmp_path / "export.jsonl"
    code, out, err = await engram("tenant", "export", tenant, "--out", str(target))
    assert code == 0, err
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert {line["table"] for line in lines} >= {"observations", "search_documents"}
    assert all(line["row"]["tenant_id"] == tenant for line in lines)
    assert sum(line["table"] == "observations" for line in lines) == 2
    assert any("Vertrag" in json.dumps(line["row"]) for line in lines)

    code, out, _ = await engram("tenant", "delete", tenant)
    assert code == 2  # not without --yes
    code, out, err = await engram("tenant", "delete", tenant, "--yes")
    assert code == 0, err
    assert f"tenant {tenant} deleted" in out

    remaining = {t.tenant_id: t.rows for t in await PgTenantData(services.db).tenants()}
    assert tenant not in remaining and remaining[other_tenant].get("observations") == 2
    assert await services.index.indexed_ids(tenant) == set()
    assert await services.index.indexed_ids(other_tenant)
    main, dead = tenant_filters(tenant)
    for stream, subject in (("ENGRAM", main), ("ENGRAM_DLQ", dead)):
        try:
            found = await services.bus.js.get_msg(stream, seq=1, subject=subject, next=True)
        except NotFoundError:
            continue
        raise AssertionError(f"{stream} still holds {found.subject}")
    other_main, _ = tenant_filters(other_tenant)
    assert await services.bus.js.get_msg("ENGRAM", seq=1, subject=other_main, next=True)


async def _indexed(services: Any, tenant: str, n: int) -> bool:
    return len(await services.index.indexed_ids(tenant)) >= n and await count(services.db, tenant) == n


async def test_the_standalone_relay_publishes_staged_rows_and_stops_on_sigterm(
    services: Any, stack: dict[str, str], tenant: str
) -> None:
    relay_env = {
        "ENGRAM_NATS_USER": "outbox-relay",
        "ENGRAM_NATS_SEED_FILE": str(Path(stack["nats_dir"]) / "credentials" / "outbox-relay.nk"),
    }

    async def staged(n: int, prefix: str) -> list[str]:
        events = [
            new_event(OBSERVATION_CREATED.type, _changed(), tenant_id=tenant, source="/test", event_id=f"{prefix}-{i}")
            for i in range(n)
        ]
        async with services.db.tenant(tenant) as conn:
            await stage(conn, tenant, events)
        return [str(e["id"]) for e in events]

    async def left() -> int:
        async with services.db.system() as conn:
            return int(await conn.fetchval("SELECT count(*) FROM outbox WHERE tenant_id = $1", tenant))

    ids = await staged(3, f"{tenant}-once")
    code, _, err = await engram("outbox", "relay", "--once", "--older-than", "0", env=relay_env)
    assert code == 0, err
    assert await left() == 0
    subject = f"engram.observation.{tenant}.>"
    seen = []
    seq = 1
    while True:
        try:
            msg = await services.bus.js.get_msg("ENGRAM", seq=seq, subject=subject, next=True)
        except NotFoundError:
            break
        seen.append(msg.headers["ce-id"])
        seq = msg.seq + 1
    assert seen == ids

    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "engram.operations.cli", "outbox", "relay", "--interval", "0.2", "--older-than", "0",
        env={**os.environ, **relay_env}, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await staged(2, f"{tenant}-running")
        await eventually(lambda: _none_left(left), timeout=30)
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 20)
    assert process.returncode == 0


async def _none_left(left: Any) -> bool:
    return bool(await left() == 0)


def _changed() -> dict[str, Any]:
    import uuid

    return {"observation_id": str(uuid.uuid4()), "revision": "2026-12-02T00:00:00+00:00"}
