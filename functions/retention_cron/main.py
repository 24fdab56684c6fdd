"""retention-cron (R-11.1): archive and delete expired telemetry, once per call.

Kubernetes runs it as a CronJob (daily 03:30 Europe/Berlin, `concurrencyPolicy: Forbid`):
`python -m functions.retention_cron`. The exit code is 0 when every expired day was
handled and 1 when an archive failed (those days' rows stay, and the Job shows as failed).
`--next N` prints the next runs; `--daemon` keeps a process running on the same schedule
where no CronJob exists. Needs PostgreSQL only (and S3 when a bucket is configured).

`--sessions` is the session sweep instead (R-4.3, a CronJob of its own every ten minutes): it
ends the sessions of chats left idle and publishes their `session.ended` events, so they get
their summaries (`engram.services.sessions`), and expires the memory proposals nobody decided
in time (`engram.services.proposals`). Needs PostgreSQL and NATS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime

import structlog

from engram.adapters.postgres import Database
from engram.archive_wiring import build_retention
from engram.domain.schedule import RETENTION_SCHEDULE
from engram.runtime.logs import configure_logging
from engram.services.retention import RetentionReport
from engram.settings import Settings, get_settings

log = structlog.get_logger(__name__)


async def run_once(settings: Settings | None = None, now: datetime | None = None) -> RetentionReport:
    settings = settings or get_settings()
    db = await Database.connect(settings.require_database_url(), min_size=1, max_size=2)
    try:
        return await build_retention(settings, db).run(now)
    finally:
        await db.close()


async def sweep_sessions(settings: Settings | None = None, now: datetime | None = None) -> int:
    from datetime import timedelta

    from engram.adapters.maintenance import PgMaintenance
    from engram.adapters.nats_auth import bus_credentials
    from engram.adapters.nats_bus import NatsBus, connect
    from engram.adapters.unit_of_work import PgUnitOfWork
    from engram.services.proposals import expire_proposals
    from engram.services.sessions import end_idle_sessions

    settings = settings or get_settings()
    db = await Database.connect(settings.require_database_url(), min_size=1, max_size=2)
    nc = await connect(settings.require_nats_url(), name="session-sweep", credentials=bus_credentials(settings))
    try:
        idle = timedelta(minutes=settings.engram_session_idle_minutes)
        maintenance = PgMaintenance(db)
        await expire_proposals(maintenance, now=now)  # memory proposals nobody decided in time
        return await end_idle_sessions(
            PgUnitOfWork(db, NatsBus(nc)), maintenance, idle, now=now, limit=settings.engram_session_sweep_limit
        )
    finally:
        await nc.drain()
        await db.close()


async def daemon() -> None:
    while True:
        now = datetime.now(UTC)
        due = RETENTION_SCHEDULE.next_after(now)
        log.info("retention.sleeping", until=due.isoformat())
        await asyncio.sleep((due - now).total_seconds())
        try:
            await run_once()
        except Exception as exc:  # a failed run is logged; the next day tries again
            log.error("retention.run_failed", error=str(exc))


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    parser = argparse.ArgumentParser(prog="python -m functions.retention_cron", description=__doc__)
    parser.add_argument("--next", type=int, metavar="N", help="print the next N scheduled runs and exit")
    parser.add_argument("--daemon", action="store_true", help="stay running and run on the schedule")
    parser.add_argument(
        "--sessions", action="store_true", help="end the sessions of chats left idle (the session sweep) and exit"
    )
    args = parser.parse_args(argv)
    if args.sessions:
        ended = asyncio.run(sweep_sessions())
        sys.stdout.write(json.dumps({"sessions_ended": ended}) + "\n")
        return 0
    if args.next:
        for run in RETENTION_SCHEDULE.upcoming(datetime.now(UTC), args.next):
            local = run.astimezone(RETENTION_SCHEDULE.zone)
            sys.stdout.write(f"{local.isoformat()}  ({run.isoformat()})\n")
        return 0
    if args.daemon:
        asyncio.run(daemon())
        return 0
    report = asyncio.run(run_once())
    sys.stdout.write(json.dumps(report.summary()) + "\n")
    return 1 if report.failed else 0
