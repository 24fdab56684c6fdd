"""The telemetry archive's wiring (part of the composition root, `engram.bootstrap`): the
retention job with its S3 archive, and personal data's lazy view of it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from engram.adapters.maintenance import PgRetentionStore
from engram.adapters.postgres import Database
from engram.settings import Settings

if TYPE_CHECKING:
    from engram.services.retention import Retention


def build_retention(settings: Settings, db: Database) -> Retention:
    """The telemetry retention job (and its S3 archive when `ENGRAM_ARCHIVE_BUCKET` is set), for
    retention-cron and for erasure's archive step; imported here on use, not at start-up."""
    from engram.adapters.s3_archive import S3Archive
    from engram.services.retention import Retention

    archive = (
        S3Archive(settings.engram_archive_bucket, endpoint_url=settings.s3_endpoint_url, region=settings.aws_region)
        if settings.engram_archive_bucket
        else None
    )
    return Retention(
        PgRetentionStore(db),
        retention_days=settings.ai_events_retention_days,
        archive=archive,
        prefix=settings.engram_archive_prefix,
        batch_size=settings.engram_retention_batch_size,
    )


class LazyArchive:
    """The telemetry archive for personal data (`Retention` as `TelemetryArchive`), built on
    first use: boto3 is imported on the first export or erasure, not at start-up (cold start)."""

    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self._built: Retention | None = None

    @property
    def retention(self) -> Retention:
        if self._built is None:
            self._built = build_retention(self.settings, self.db)
        return self._built

    async def scrub_user(self, tenant_id: str, user_id: str) -> int:
        return await self.retention.scrub_user(tenant_id, user_id)

    async def archived_keys(self, tenant_id: str) -> list[str]:
        return await self.retention.archived_keys(tenant_id)

    def user_events(self, keys: Sequence[str], user_id: str) -> AsyncIterator[dict[str, Any]]:
        return self.retention.user_events(keys, user_id)


def telemetry_archive(settings: Settings, db: Database | None) -> LazyArchive | None:
    """Personal data's view of the telemetry archive, when one is configured."""
    return LazyArchive(settings, db) if settings.engram_archive_bucket and db is not None else None
