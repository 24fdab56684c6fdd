"""`engram outbox relay`: the outbox relay as a process of its own (`engram.adapters.outbox`).

Every API and worker process relays what interrupted writers left in the outbox, but in a
cluster where every function is scaled to zero nobody would: this process runs beside them
(k8s/overlays/prod: Deployment `outbox-relay`, bus user `outbox-relay`). It publishes what its
bus user may (every event subject a function may), finishes the round in hand on SIGTERM or
SIGINT and exits 0; it serves `/metrics` on `ENGRAM_METRICS_PORT` (the outbox backlog and what
it relayed). `--once` relays what is there and exits (a Job, a test).
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import structlog

log = structlog.get_logger(__name__)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("outbox", help="the transactional outbox")
    actions = p.add_subparsers(dest="action", required=True)
    p = actions.add_parser("relay", help="publish what interrupted writers left in the outbox, until SIGTERM")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between rounds when idle")
    p.add_argument("--older-than", type=float, default=5.0, help="relay rows older than this (seconds)")
    p.add_argument("--once", action="store_true", help="one pass over what is there, then exit")
    p.set_defaults(func=cmd_outbox_relay)


def cmd_outbox_relay(args: argparse.Namespace) -> int:
    return asyncio.run(relay(args.interval, args.older_than, once=args.once))


async def relay(interval: float, older_than: float, *, once: bool = False) -> int:
    from engram.adapters.outbox import relay_once, relay_until
    from engram.bootstrap import build
    from engram.domain.bus_access import admin_user, relayable, user

    services = await build()
    settings = services.settings
    name = settings.engram_nats_user
    subjects = relayable(user(name, settings.engram_stream) if name else admin_user())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if not once and settings.engram_metrics_port:  # the backlog gauges and relayed count, scraped
        from engram.runtime.observability import serve_metrics

        serve_metrics(settings.engram_metrics_port)
    log.info("outbox.relay_started", user=name or "anonymous", subjects=list(subjects), interval=interval)
    total = 0
    try:
        db, bus = services.database, services.bus
        if once:
            while n := await relay_once(db, bus, older_than_seconds=older_than, subjects=subjects):
                total += n
        else:
            total = await relay_until(
                stop, db, bus, interval=interval, older_than_seconds=older_than, subjects=subjects
            )
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await services.close()
    log.info("outbox.relay_stopped", relayed=total)
    return 0
