"""The composition root: builds every adapter and service from settings, once per process.

Clients are created on first use, never at import (R-2.2), so a scaled-to-zero function pays
only for what it touches.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import structlog

from engram.adapters.nats_bus import NatsBus, connect
from engram.adapters.postgres import Database
from engram.domain.rules import RuleSet
from engram.runtime.auth import Authenticator
from engram.services.extraction import Extraction
from engram.services.feedback import FeedbackRecorder, FeedbackService
from engram.services.ingest import EventIngest
from engram.services.memory import MemoryService
from engram.services.personal_data import PersonalData
from engram.services.telemetry_query import TelemetryQuery
from engram.settings import Settings, get_settings

log = structlog.get_logger(__name__)


@dataclass
class Services:
    settings: Settings
    db: Database
    bus: NatsBus
    auth: Authenticator
    memory: MemoryService
    ingest: EventIngest
    extraction: Extraction
    feedback: FeedbackService
    feedback_recorder: FeedbackRecorder
    telemetry_query: TelemetryQuery
    personal_data: PersonalData
    background: list[asyncio.Task[Any]] = field(default_factory=list)

    async def ready(self) -> dict[str, bool]:
        checks: dict[str, bool] = {}
        try:
            checks["postgres"] = await self.db.ping()
        except Exception:
            checks["postgres"] = False
        try:
            checks["nats"] = await self.bus.ping()
        except Exception:
            checks["nats"] = False
        try:
            checks["schema"] = await self.schema_current()
        except Exception:
            checks["schema"] = False
        return checks

    async def schema_current(self) -> bool:
        """True once every migration this code knows is applied: a new revision takes traffic only then."""
        from engram.migrate import applied_version, latest_version

        async with self.db.pool.acquire() as conn:
            return await applied_version(conn) >= latest_version()

    async def wait_for_schema(self, interval: float = 1.0) -> None:
        """Workers start consuming only after the migration Job has run (k8s/base/migrate)."""
        warned = False
        while not await self.schema_current():
            if not warned:
                log.warning("services.waiting_for_migrations", hint="run `engram migrate`")
                warned = True
            await asyncio.sleep(interval)

    def start_outbox_relay(self) -> None:
        from engram.services.outbox import relay_forever

        self.background.append(asyncio.create_task(relay_forever(self.db, self.bus)))

    async def close(self) -> None:
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        await self.bus.close()
        await self.db.close()


def load_rules(settings: Settings) -> RuleSet:
    return RuleSet.from_yaml(settings.engram_rules_path.read_text(encoding="utf-8"))


async def build(settings: Settings | None = None) -> Services:
    settings = settings or get_settings()
    db = await Database.connect(settings.require_database_url(), max_size=settings.database_pool_size)
    nc = await connect(settings.require_nats_url())
    bus = NatsBus(nc)
    return Services(
        settings=settings,
        db=db,
        bus=bus,
        auth=Authenticator(settings, db),
        memory=MemoryService(db, bus, settings.engram_observation_types),
        ingest=EventIngest(bus),
        extraction=Extraction(db, bus, load_rules(settings), settings.engram_observation_types),
        feedback=FeedbackService(db, bus),
        feedback_recorder=FeedbackRecorder(db, bus),
        telemetry_query=TelemetryQuery(db),
        personal_data=PersonalData(db, bus),
    )


_services: Services | None = None
_lock: asyncio.Lock | None = None


async def get_services() -> Services:
    """The process-wide services, built on first use."""
    global _services, _lock
    if _services is not None:
        return _services
    if _lock is None:
        _lock = asyncio.Lock()
    async with _lock:
        if _services is None:
            _services = await build()
            log.info("services.ready")
    return _services


async def shutdown() -> None:
    global _services
    if _services is not None:
        await _services.close()
        _services = None
