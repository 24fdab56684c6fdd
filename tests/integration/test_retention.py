"""Retention (R-11.1) on real PostgreSQL and a real S3 endpoint (`moto_server` on loopback).

Retention works across tenants by design, so every assertion here looks at this test's
tenants only; other tests never write events older than the retention period.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import structlog

from engram.adapters.maintenance import RETENTION_LOCK, PgRetentionStore
from engram.adapters.s3_archive import S3Archive
from engram.adapters.unit_of_work import PgUnitOfWork
from engram.development.embedded import free_port, wait_for_port
from engram.domain import telemetry
from engram.domain.errors import ArchiveError
from engram.domain.scopes import Principal
from engram.services.retention import Retention, archive_key, cutoff_for
from tests.conftest import ALL_PERMISSIONS, write_telemetry

REPO = Path(__file__).resolve().parents[2]
NOW = datetime.now(UTC)
DAYS = 90


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """A standalone S3 endpoint on 127.0.0.1, with throwaway credentials."""
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        os.environ.setdefault(key, value)
    port = free_port()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, timeout=30, proc=proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def bucket(s3: str) -> S3Archive:
    name = f"archive-{uuid.uuid4().hex[:10]}"
    archive = S3Archive(name, endpoint_url=s3, region="eu-central-1")
    archive._client.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "eu-central-1"})
    return archive


def at(days: float, hours: float = 0) -> datetime:
    return NOW - timedelta(days=days, hours=hours)


async def add(db: Any, tenant: str, moments: list[datetime], name: str = "chat.tool_used") -> None:
    meta = {"tool_name": "search", "duration_ms": 10, "success": True}
    records = [
        telemetry.TelemetryRecord(
            tenant, name, telemetry.record(tenant, name, meta).metadata, user_id="u", created_at=m
        )
        for m in moments
    ]
    async with db.tenant(tenant) as conn:
        await write_telemetry(conn, records)


async def stored(db: Any, tenant: str) -> list[datetime]:
    async with db.tenant(tenant) as conn:
        return [r["created_at"] for r in await conn.fetch("SELECT created_at FROM ai_events ORDER BY id")]


def day_of(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def keys_of(archive: S3Archive, tenant: str) -> list[str]:
    return sorted(archive.keys(f"ai-events/{quote(tenant, safe='')}/"))


async def test_archive_then_delete_per_tenant_and_day(
    db: Any, tenant: str, other_tenant: str, bucket: S3Archive
) -> None:
    old_a = [at(120, 1), at(120, 2), at(100)]  # two UTC days (unless run right at midnight: same day is fine too)
    await add(db, tenant, [*old_a, at(89), at(1)])
    await add(db, other_tenant, [at(95)])
    report = await Retention(PgRetentionStore(db), retention_days=DAYS, archive=bucket).run(NOW)
    assert not report.failed

    assert await stored(db, tenant) == [at(89), at(1)]
    assert [m for m in await stored(db, tenant) if m < cutoff_for(NOW, DAYS)] == []
    assert await stored(db, other_tenant) == []

    keys = keys_of(bucket, tenant)
    days = sorted({day_of(m) for m in old_a})
    assert [k.split("/")[2:5] for k in keys] == [[f"{d:%Y}", f"{d:%m}", f"{d:%d}"] for d in days]
    archived = []
    for key in keys:
        for line in gzip.decompress(bucket.get(key)).decode().splitlines():
            archived.append(json.loads(line))
    assert len(archived) == 3 and {a["tenant_id"] for a in archived} == {tenant}
    assert archived[0]["event_name"] == "chat.tool_used"
    assert archived[0]["metadata"] == {"toolName": "search", "durationMs": 10, "success": True}
    assert sorted(datetime.fromisoformat(a["created_at"]) for a in archived) == sorted(old_a)
    assert len(keys_of(bucket, other_tenant)) == 1

    # the rollups lost exactly the deleted rows
    async with db.tenant(tenant) as conn:
        assert await conn.fetchval("SELECT sum(calls) FROM ai_events_hourly_tools") == 2


async def test_a_second_run_the_same_day_is_a_no_op(db: Any, tenant: str, bucket: S3Archive) -> None:
    await add(db, tenant, [at(100), at(2)])
    retention = Retention(PgRetentionStore(db), retention_days=DAYS, archive=bucket)
    first = await retention.run(NOW)
    assert [d.deleted for d in first.days if d.tenant_id == tenant] == [1]
    objects = bucket.keys()
    second = await retention.run(NOW + timedelta(hours=3))
    assert second.deleted == 0 and second.days == [] and not second.failed
    assert bucket.keys() == objects and len(await stored(db, tenant)) == 1


async def test_without_a_bucket_rows_are_deleted_in_bounded_batches(db: Any, tenant: str) -> None:
    await add(db, tenant, [at(100, hours=h / 10) for h in range(10)] + [at(3)])
    with structlog.testing.capture_logs() as logs:
        report = await Retention(PgRetentionStore(db), retention_days=DAYS, archive=None, batch_size=3).run(NOW)
    mine = [d for d in report.days if d.tenant_id == tenant]
    assert sum(d.deleted for d in mine) == 10 and all(d.archive_key is None for d in mine)
    progress = [e for e in logs if e["event"] == "retention.progress" and e["tenant"] == tenant]
    assert len(progress) == sum((d.rows + 2) // 3 for d in mine)  # ceil(rows / 3) batches per day
    assert all(e["deleted"] <= e["of"] for e in progress) and sum(e["deleted"] == e["of"] for e in progress) == len(
        mine
    )
    assert len(await stored(db, tenant)) == 1


async def test_an_archive_failure_keeps_the_rows_and_a_later_run_archives_them(
    db: Any, tenant: str, s3: str, bucket: S3Archive
) -> None:
    await add(db, tenant, [at(100), at(101)])
    missing = S3Archive(f"no-such-bucket-{uuid.uuid4().hex[:8]}", endpoint_url=s3, region="eu-central-1")
    report = await Retention(PgRetentionStore(db), retention_days=DAYS, archive=missing).run(NOW)
    failed = [d for d in report.failed if d.tenant_id == tenant]
    assert len(failed) == len({day_of(at(100)), day_of(at(101))}) and "NoSuchBucket" in (failed[0].error or "")
    assert all(d.deleted == 0 for d in report.days if d.tenant_id == tenant)
    assert len(await stored(db, tenant)) == 2  # nothing lost

    retry = await Retention(PgRetentionStore(db), retention_days=DAYS, archive=bucket).run(NOW)
    assert not retry.failed and await stored(db, tenant) == []
    assert len(keys_of(bucket, tenant)) == 2


async def test_two_runs_never_overlap(db: Any, tenant: str) -> None:
    await add(db, tenant, [at(100)])
    async with db.pool.acquire() as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", RETENTION_LOCK)
        try:
            blocked = await Retention(PgRetentionStore(db), retention_days=DAYS).run(NOW)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", RETENTION_LOCK)
    assert blocked.skipped_locked and blocked.days == [] and len(await stored(db, tenant)) == 1
    assert (await Retention(PgRetentionStore(db), retention_days=DAYS).run(NOW)).deleted >= 1


def test_the_cronjob_entry_point(stack: dict[str, str], s3: str, tenant: str) -> None:
    """`python -m functions.retention_cron` as Kubernetes runs it: exit code and a JSON summary."""
    import asyncio

    from engram.adapters.postgres import Database

    async def prepare() -> None:
        db = await Database.connect(stack["database_url"], max_size=1)
        try:
            await add(db, tenant, [at(200), at(5)])
        finally:
            await db.close()

    asyncio.run(prepare())
    name = f"cron-{uuid.uuid4().hex[:8]}"
    archive = S3Archive(name, endpoint_url=s3, region="eu-central-1")
    archive._client.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "eu-central-1"})
    env = {
        **os.environ,
        "DATABASE_URL": stack["database_url"],
        "ENGRAM_ARCHIVE_BUCKET": name,
        "S3_ENDPOINT_URL": s3,
        "AWS_REGION": "eu-central-1",
        "ENGRAM_ARCHIVE_PREFIX": "telemetry/archive",
    }
    done = subprocess.run(
        [sys.executable, "-m", "functions.retention_cron"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert (
        summary["deleted"] >= 1
        and summary["failed"] == []
        and summary["archived_to"] == f"s3://{name}/telemetry/archive/"
    )
    assert archive.keys(f"telemetry/archive/{tenant}/") != []

    env["ENGRAM_ARCHIVE_BUCKET"] = f"{name}-missing"
    asyncio.run(prepare())
    failing = subprocess.run(
        [sys.executable, "-m", "functions.retention_cron"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert failing.returncode == 1 and json.loads(failing.stdout.strip().splitlines()[-1])["failed"]


def test_archive_keys_and_cutoff() -> None:
    assert (
        archive_key("ai-events", "acme/eu west", date(2026, 3, 5), 7, 42)
        == "ai-events/acme%2Feu%20west/2026/03/05/7-42.jsonl.gz"
    )
    now = datetime(2026, 11, 30, 2, 30, tzinfo=UTC)
    assert cutoff_for(now, 90) == datetime(2026, 9, 1, tzinfo=UTC)
    assert cutoff_for(now.replace(hour=23), 90) == cutoff_for(now, 90)  # the same all day: re-runs are no-ops


async def test_erasure_scrubs_the_users_lines_from_the_archive(
    db: Any, tenant: str, other_tenant: str, bucket: S3Archive
) -> None:
    from engram.services.personal_data import PersonalData

    meta = {"tool_name": "search", "duration_ms": 10, "success": True}

    async def add_for(t: str, user: str, moment: datetime) -> None:
        record = telemetry.TelemetryRecord(
            t, "chat.tool_used", telemetry.record(t, "chat.tool_used", meta).metadata, user_id=user, created_at=moment
        )
        async with db.tenant(t) as conn:
            await write_telemetry(conn, [record])

    mixed, only_alice = at(120), at(110)
    for user in ("alice", "bob", "alice"):
        await add_for(tenant, user, mixed)
    await add_for(tenant, "alice", only_alice)
    await add_for(other_tenant, "alice", mixed)  # the same user name in another tenant stays
    retention = Retention(PgRetentionStore(db), retention_days=DAYS, archive=bucket)
    assert not (await retention.run(NOW)).failed
    before = keys_of(bucket, tenant)
    assert len(before) == 2

    # a running retention holds the archive: the scrub waits, then gives up with ArchiveError
    async with db.pool.acquire() as holder:
        await holder.execute("SELECT pg_advisory_lock($1)", RETENTION_LOCK)
        try:
            with pytest.raises(ArchiveError, match="retention run"):
                await retention.scrub_user(tenant, "alice", wait_seconds=0.3)
        finally:
            await holder.execute("SELECT pg_advisory_unlock($1)", RETENTION_LOCK)

    erasure = await PersonalData(PgUnitOfWork(db, None), retention).erase(  # type: ignore[arg-type]
        Principal(tenant_id=tenant, user_id="alice", permissions=frozenset(ALL_PERMISSIONS)), "alice"
    )
    assert erasure.archived_events == 3 and erasure.telemetry_events == 0  # the rows were archived already
    after = keys_of(bucket, tenant)
    assert len(after) == 1  # the day with only alice's event is gone, the mixed day rewritten
    lines = [json.loads(x) for x in gzip.decompress(bucket.get(after[0])).splitlines()]
    assert [x["user_id"] for x in lines] == ["bob"]
    other = keys_of(bucket, other_tenant)
    assert [json.loads(x)["user_id"] for x in gzip.decompress(bucket.get(other[0])).splitlines()] == ["alice"]
    assert await retention.scrub_user(tenant, "alice") == 0  # nothing left: a repeat is a no-op


async def export_lines(personal: Any, tenant: str, user: str) -> list[dict[str, Any]]:
    return [json.loads(line) async for line in await personal.export(tenant, user)]


async def test_the_export_reads_the_users_archived_days_too(
    db: Any, tenant: str, other_tenant: str, bucket: S3Archive
) -> None:
    from engram.services.personal_data import PersonalData

    meta = {"tool_name": "search", "duration_ms": 10, "success": True}

    async def add_for(t: str, user: str, moment: datetime, tool: str) -> None:
        data = telemetry.record(t, "chat.tool_used", {**meta, "tool_name": tool}).metadata
        async with db.tenant(t) as conn:
            await write_telemetry(conn, [telemetry.TelemetryRecord(t, "chat.tool_used", data, user, None, moment)])

    await add_for(tenant, "alice", at(130), "oldest")
    await add_for(tenant, "bob", at(130), "bobs")
    await add_for(tenant, "alice", at(110), "older")
    await add_for(other_tenant, "alice", at(110), "other tenant")
    await add_for(tenant, "alice", at(1), "recent")  # within the retention period: stays in the database
    retention = Retention(PgRetentionStore(db), retention_days=DAYS, archive=bucket)
    assert not (await retention.run(NOW)).failed
    assert len(keys_of(bucket, tenant)) == 2

    # an archived day whose rows are not deleted yet (a retention run between its upload and its
    # delete) is in both places: the export has each event once
    archived = [json.loads(x) for key in keys_of(bucket, tenant) for x in gzip.decompress(bucket.get(key)).splitlines()]
    [line] = [x for x in archived if x["metadata"]["toolName"] == "older"]  # stored camelCase
    async with db.tenant(tenant) as conn:
        await conn.execute(
            "INSERT INTO ai_events (id, tenant_id, event_name, user_id, chat_id, metadata, created_at)"
            " OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3, $4, NULL, $5, $6)",
            line["id"],
            tenant,
            line["event_name"],
            line["user_id"],
            line["metadata"],
            datetime.fromisoformat(line["created_at"]),
        )

    personal = PersonalData(PgUnitOfWork(db, None), retention)  # type: ignore[arg-type]
    lines = await export_lines(personal, tenant, "alice")
    tools = [x["metadata"]["toolName"] for x in lines if x["record"] == "telemetry_event"]
    assert tools == ["older", "recent", "oldest"]  # the database first, then the archive
    end = lines[-1]
    assert end["record"] == "end" and end["telemetry_events"] == 2 and end["archived_telemetry_events"] == 1
    assert "incomplete" not in end
    first = next(x for x in lines if x["record"] == "telemetry_event")
    assert set(first) == {"record", "event_name", "chat_id", "metadata", "created_at"}  # the same shape from both

    # an object that cannot be read: the lines so far stand and the trailer says what is missing
    broken = keys_of(bucket, tenant)[0]
    bucket._client.put_object(Bucket=bucket.bucket, Key=broken, Body=b"not gzip")
    end = (await export_lines(personal, tenant, "alice"))[-1]
    assert end["archived_telemetry_events"] == 0 and "could not be read" in end["incomplete"]

    # an archive that cannot be listed fails before the first line (memory-api: 503)
    gone = S3Archive("no-such-bucket", endpoint_url=bucket._client.meta.endpoint_url, region="eu-central-1")
    unreachable = Retention(PgRetentionStore(db), retention_days=DAYS, archive=gone)
    with pytest.raises(ArchiveError, match="listing"):
        await PersonalData(PgUnitOfWork(db, None), unreachable).export(tenant, "alice")  # type: ignore[arg-type]


async def test_a_tenants_archives_are_deleted_on_offboarding(
    db: Any, tenant: str, other_tenant: str, bucket: S3Archive
) -> None:
    """`engram tenant delete` (TenantOps.delete) removes every archive object of the tenant, only its."""
    await add(db, tenant, [at(120), at(100)])
    await add(db, other_tenant, [at(110)])
    retention = Retention(PgRetentionStore(db), retention_days=DAYS, archive=bucket)
    assert not (await retention.run(NOW)).failed
    assert len(keys_of(bucket, tenant)) >= 1 and len(keys_of(bucket, other_tenant)) == 1
    removed = await retention.delete_tenant(tenant)
    assert removed >= 1 and keys_of(bucket, tenant) == []
    assert len(keys_of(bucket, other_tenant)) == 1
    assert await Retention(PgRetentionStore(db), retention_days=DAYS).delete_tenant(tenant) == 0  # no archive
