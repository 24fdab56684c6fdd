"""consolidate-memory (R-15): new and changed observations -> merged, superseded, linked.

A declaration for the worker runtime (`engram.runtime.worker`): over HTTP (Knative,
functions-framework) one event arrives per request; from JetStream a whole fetch, handled one
observation at a time (each decision changes what the next one sees). `sweep()` is the nightly
run (`python -m functions.consolidate_memory --sweep`, the consolidation-sweep CronJob): what
the worker missed, and digests of old low-priority observations.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from engram.runtime.worker import Worker
from engram.services.consolidation import CONSUMER, decode_consolidation

WORKER = Worker(durable=CONSUMER, decode=decode_consolidation, handler=lambda s: s.consolidation.handle)
consolidate_memory = WORKER.cloud_event("consolidate_memory")


async def sweep(tenants: list[str] | None = None) -> dict[str, object]:
    from engram.bootstrap import get_services, shutdown

    try:
        services = await get_services()
        await services.wait_for_schema()
        report = await services.consolidation_sweep.run(tenants=tenants)
        return report.summary()
    finally:
        await shutdown()


def main(argv: list[str] | None = None) -> int:
    """`python -m functions.consolidate_memory`: the worker; with `--sweep` one nightly sweep."""
    parser = argparse.ArgumentParser(prog="python -m functions.consolidate_memory", description=__doc__)
    parser.add_argument("--sweep", action="store_true", help="run the consolidation sweep once and exit")
    parser.add_argument("--tenant", action="append", help="sweep only this tenant (repeatable)")
    args = parser.parse_args(argv)
    if not args.sweep:
        WORKER.main()
        return 0
    from engram.runtime.logs import configure_logging

    configure_logging()
    summary = asyncio.run(sweep(args.tenant))
    sys.stdout.write(json.dumps(summary) + "\n")
    return 1 if summary["failed_tenants"] else 0
