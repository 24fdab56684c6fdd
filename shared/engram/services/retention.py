"""Telemetry retention (R-11.1): archive, then delete ai_events older than the retention period.

Work goes by (tenant, UTC day), oldest first, for days that ended before the cutoff
(`AI_EVENTS_RETENTION_DAYS` before the start of today, UTC), so each day is handled whole
and a second run on the same day finds nothing to do:

1. read the day's rows (a server-side cursor, never the whole table in memory) into a gzip
   JSON Lines file, one line per event;
2. with a bucket configured, upload it as
   `<prefix>/<tenant>/<YYYY>/<MM>/<DD>/<first id>-<last id>.jsonl.gz`; S3 checks the MD5 and
   a HEAD confirms the size. If that fails, that day's rows stay and the run reports failure;
3. delete exactly the ids that were archived, in batches of `batch_size` rows, each in its
   own short transaction (no long locks), logging progress.

Observations are never touched (R-11.2). A PostgreSQL advisory lock keeps two runs apart
even if the CronJob's `concurrencyPolicy: Forbid` is bypassed.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import IO, Any
from urllib.parse import quote

import structlog

from engram.domain.errors import ArchiveError
from engram.ports import ObjectArchive, RetentionStore

log = structlog.get_logger(__name__)


@dataclass
class DayResult:
    tenant_id: str
    day: date
    rows: int = 0
    deleted: int = 0
    archive_key: str | None = None
    error: str | None = None


@dataclass
class RetentionReport:
    cutoff: datetime
    archived_to: str | None
    days: list[DayResult] = field(default_factory=list)
    skipped_locked: bool = False
    seconds: float = 0.0

    @property
    def deleted(self) -> int:
        return sum(d.deleted for d in self.days)

    @property
    def failed(self) -> list[DayResult]:
        return [d for d in self.days if d.error is not None]

    def summary(self) -> dict[str, Any]:
        return {
            "cutoff": self.cutoff.isoformat(),
            "archived_to": self.archived_to,
            "days": len(self.days),
            "deleted": self.deleted,
            "failed": [f"{d.tenant_id}/{d.day.isoformat()}: {d.error}" for d in self.failed],
            "skipped_locked": self.skipped_locked,
            "seconds": round(self.seconds, 3),
        }


def cutoff_for(now: datetime, retention_days: int) -> datetime:
    """Rows created before this instant are expired: the start of the UTC day `retention_days` ago."""
    start_of_today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start_of_today - timedelta(days=retention_days)


def archive_key(prefix: str, tenant_id: str, day: date, first_id: int, last_id: int) -> str:
    return f"{prefix}/{quote(tenant_id, safe='')}/{day:%Y/%m/%d}/{first_id}-{last_id}.jsonl.gz"


class _Md5Writer:
    """A file wrapper that hashes what gzip writes through it."""

    def __init__(self, target: IO[bytes]) -> None:
        self.target = target
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.size = 0

    def write(self, data: bytes) -> int:
        self.md5.update(data)
        self.size += len(data)
        return self.target.write(data)

    def flush(self) -> None:
        self.target.flush()


def _line(row: Any) -> bytes:
    return (
        json.dumps(
            {
                "id": row["id"],
                "tenant_id": row["tenant_id"],
                "event_name": row["event_name"],
                "user_id": row["user_id"],
                "chat_id": str(row["chat_id"]) if row["chat_id"] else None,
                "metadata": row["metadata"],
                "created_at": row["created_at"].isoformat(),
            },
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()
        + b"\n"
    )


class Retention:
    def __init__(
        self,
        store: RetentionStore,
        *,
        retention_days: int,
        archive: ObjectArchive | None = None,
        prefix: str = "ai-events",
        batch_size: int = 5_000,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        self.store = store
        self.retention_days = retention_days
        self.archive = archive
        self.prefix = prefix.strip("/")
        self.batch_size = batch_size

    async def run(self, now: datetime | None = None) -> RetentionReport:
        started = time.perf_counter()
        now = now or datetime.now(UTC)
        cutoff = cutoff_for(now, self.retention_days)
        report = RetentionReport(
            cutoff=cutoff, archived_to=f"s3://{self.archive.bucket}/{self.prefix}/" if self.archive else None
        )
        async with self.store.exclusive() as locked:
            if not locked:
                log.warning("retention.already_running")
                report.skipped_locked = True
                return report
            groups = await self.store.expired_days(cutoff)
            log.info(
                "retention.start",
                cutoff=cutoff.isoformat(),
                days=len(groups),
                rows=sum(g.rows for g in groups),
                archive=report.archived_to,
            )
            for g in groups:
                report.days.append(await self._day(g.tenant_id, g.day, cutoff))
        report.seconds = time.perf_counter() - started
        log.info("retention.done", **report.summary())
        return report

    async def scrub_user(self, tenant_id: str, user_id: str, *, wait_seconds: float = 30.0) -> int:
        """Remove a user's events from the tenant's archived days (R-11.3 erasure); the count.

        Each archive object of the tenant that holds a line naming the user is rewritten
        without those lines (deleted when none is left), checked like a new archive. It runs
        under the retention lock: a retention run that read the user's rows before they were
        erased has uploaded them before this looks, and later runs cannot see them. A run
        holding the lock longer than `wait_seconds`, or an archive error, raises ArchiveError;
        the erasure can simply be asked for again.
        """
        if self.archive is None:
            return 0
        archive = self.archive
        async with self.store.exclusive(wait_seconds) as locked:
            if not locked:
                raise ArchiveError(f"a retention run held the archive for over {wait_seconds:.0f}s")
            removed = 0
            for key in await self.archived_keys(tenant_id):
                removed += await asyncio.to_thread(_without_user, archive, key, user_id)
            if removed:
                log.info("retention.user_scrubbed", tenant=tenant_id, removed=removed)
            return removed

    async def delete_tenant(self, tenant_id: str, *, wait_seconds: float = 30.0) -> int:
        """Delete every archive object of the tenant (off-boarding); the count. Under the
        retention lock, as `scrub_user`: no run is uploading one of the tenant's days meanwhile."""
        if self.archive is None:
            return 0
        archive = self.archive
        async with self.store.exclusive(wait_seconds) as locked:
            if not locked:
                raise ArchiveError(f"a retention run held the archive for over {wait_seconds:.0f}s")
            keys = await self.archived_keys(tenant_id)
            for key in keys:
                await asyncio.to_thread(archive.delete, key)
            return len(keys)

    async def archived_keys(self, tenant_id: str) -> list[str]:
        """The tenant's archive objects, oldest day first (ArchiveError if the archive cannot be
        listed); none without an archive."""
        if self.archive is None:
            return []
        archive = self.archive
        prefix = f"{self.prefix}/{quote(tenant_id, safe='')}/"
        try:
            keys = await asyncio.to_thread(archive.keys, prefix)
        except Exception as exc:  # botocore raises many types
            raise ArchiveError(f"listing s3://{archive.bucket}/{prefix} failed: {exc}") from exc
        return sorted(keys, key=_archive_order)

    async def user_events(self, keys: Sequence[str], user_id: str) -> AsyncIterator[dict[str, Any]]:
        """The user's archived events in `keys` (from `archived_keys`), in order; an object that
        cannot be read raises ArchiveError. One object at a time is read, and only the user's
        lines are kept: memory stays bounded by one compressed day of the tenant."""
        if self.archive is None:
            return
        for key in keys:
            for event in await asyncio.to_thread(_user_lines, self.archive, key, user_id):
                yield event

    async def _day(self, tenant_id: str, day: date, cutoff: datetime) -> DayResult:
        result = DayResult(tenant_id, day)
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        end = min(start + timedelta(days=1), cutoff)
        ids: list[int] = []
        with tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024) as spool:
            hashing = _Md5Writer(spool)
            with gzip.GzipFile(fileobj=hashing, mode="wb", mtime=0) as gz:
                async for row in self.store.day_rows(tenant_id, start, end):
                    ids.append(row["id"])
                    gz.write(_line(row))
            result.rows = len(ids)
            if not ids:
                return result
            if self.archive is not None:
                key = archive_key(self.prefix, tenant_id, day, ids[0], ids[-1])
                spool.seek(0)
                try:
                    await asyncio.to_thread(
                        self.archive.put,
                        key,
                        spool,
                        size=hashing.size,
                        content_md5=hashing.md5.digest(),
                        metadata={"tenant": quote(tenant_id, safe=""), "day": day.isoformat(), "rows": str(len(ids))},
                    )
                except ArchiveError as exc:
                    result.error = str(exc)
                    log.error("retention.archive_failed", tenant=tenant_id, day=day.isoformat(), error=str(exc))
                    return result  # nothing deleted: the rows wait for the next run
                result.archive_key = key
                log.info("retention.archived", tenant=tenant_id, day=day.isoformat(), rows=len(ids), key=key)
        result.deleted = await self._delete(tenant_id, day, ids)
        return result

    async def _delete(self, tenant_id: str, day: date, ids: Sequence[int]) -> int:
        deleted = 0
        for offset in range(0, len(ids), self.batch_size):
            chunk = list(ids[offset : offset + self.batch_size])
            deleted += await self.store.delete_events(chunk)
            log.info("retention.progress", tenant=tenant_id, day=day.isoformat(), deleted=deleted, of=len(ids))
        return deleted


def _archive_order(key: str) -> tuple[str, int]:
    """`<prefix>/<tenant>/<YYYY>/<MM>/<DD>/<first id>-<last id>.jsonl.gz`: by day, then first id."""
    folder, _, name = key.rpartition("/")
    first = name.split("-", 1)[0]
    return folder, int(first) if first.isdigit() else 0


def _user_lines(archive: ObjectArchive, key: str, user_id: str) -> list[dict[str, Any]]:
    """The user's lines of one archive object, decompressed as a stream."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(archive.get(key))) as lines:
            found = []
            for line in lines:
                event = json.loads(line)
                if event.get("user_id") == user_id:
                    found.append(event)
            return found
    except Exception as exc:  # botocore, a broken object or a line that is not JSON
        raise ArchiveError(f"reading s3://{archive.bucket}/{key} failed: {exc}") from exc


def _without_user(archive: ObjectArchive, key: str, user_id: str) -> int:
    """Rewrite one archive object without the user's lines; how many lines went."""
    try:
        lines = gzip.decompress(archive.get(key)).splitlines(keepends=True)
    except Exception as exc:  # botocore or a broken object: the erasure is not complete
        raise ArchiveError(f"reading s3://{archive.bucket}/{key} failed: {exc}") from exc
    kept = [line for line in lines if json.loads(line).get("user_id") != user_id]
    if len(kept) == len(lines):
        return 0
    if not kept:
        archive.delete(key)
        return len(lines)
    body = gzip.compress(b"".join(kept), mtime=0)
    archive.put(
        key,
        io.BytesIO(body),
        size=len(body),
        content_md5=hashlib.md5(body, usedforsecurity=False).digest(),
        metadata={"rows": str(len(kept)), "scrubbed": "user-erasure"},
    )
    return len(lines) - len(kept)
