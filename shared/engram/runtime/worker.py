"""Entry point of the event workers: `python -m functions.<name>` runs the JetStream pull runner."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from engram.runtime.logs import configure_logging


def main(module: str, target: str, durable: str) -> None:
    configure_logging()
    from engram.bootstrap import get_services, shutdown
    from engram.runtime.jetstream import serve

    async def start() -> None:
        services = await get_services()
        await services.wait_for_schema()
        services.start_outbox_relay()

    asyncio.run(
        serve(
            module,
            target,
            durable,
            batch_size=int(os.environ.get("ENGRAM_BATCH_SIZE", "200")),
            on_start=start,
            on_stop=shutdown,
            ready_file=Path(ready) if (ready := os.environ.get("ENGRAM_READY_FILE")) else None,
        )
    )
