"""Shared bench plumbing: embedded servers unless DATABASE_URL / NATS_URL are set, JSON output."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console(highlight=False)


@dataclass
class Servers:
    database_url: str
    nats_url: str


@contextlib.contextmanager
def servers() -> Iterator[Servers]:
    """Embedded PostgreSQL and NATS in a temporary folder (or the configured ones), migrated and declared."""
    import asyncio

    from engram.adapters.migrations import apply_migrations
    from engram.adapters.nats_bus import declare_streams
    from engram.development.embedded import EmbeddedNats, EmbeddedPostgres

    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-"))
    pg = None if os.environ.get("DATABASE_URL") else EmbeddedPostgres(tmp / "pg").start()
    nats = None if os.environ.get("NATS_URL") else EmbeddedNats(tmp / "nats").start()
    try:
        s = Servers(
            database_url=os.environ.get("DATABASE_URL") or (pg.url if pg else ""),
            nats_url=os.environ.get("NATS_URL") or (nats.url if nats else ""),
        )
        os.environ["DATABASE_URL"] = s.database_url
        os.environ["NATS_URL"] = s.nats_url
        if nats is not None:
            os.environ.update(nats.client_env())
        from engram.adapters.nats_auth import bus_credentials
        from engram.settings import get_settings

        get_settings.cache_clear()
        with contextlib.redirect_stdout(open(os.devnull, "w")):
            asyncio.run(apply_migrations(s.database_url))
            asyncio.run(declare_streams(s.nats_url, get_settings().engram_stream, bus_credentials(get_settings())))
        yield s
    finally:
        if nats is not None:
            nats.stop()
        if pg is not None:
            pg.stop()


_IDS: dict[str, Any] = {}  # `repeatable_ids`' generator and its seed


def repeatable_ids(bench: str, seed: int) -> None:
    """Make `uuid.uuid4` draw from a generator seeded with the bench's name and `seed`, in this
    bench process only.

    Equal scores are ordered by id (BM25's `ORDER BY score DESC, id`, fusion's ties), and the
    product's ids are random: two runs of the same code on the same data reordered the hits of
    3-9 of 413 questions. With the ids drawn in a repeatable order the runs agree, so a change of
    one question between two commits is the change's, not the dice's. The ids keep uuid4's form.
    Each bench draws its own sequence (the benches share one database and ids are unique across
    tenants), each conversation its own (`ids_for`: a question more or less before it, each
    drawing a query id, leaves its ids alone), and a bench clears all of its tenants before it
    writes any."""
    import random
    import uuid

    _IDS.update(seed=f"{bench}:{seed}", draw=random.Random(f"{bench}:{seed}"))

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=_IDS["draw"].getrandbits(128), version=4)

    uuid.uuid4 = uuid4


def ids_for(key: str) -> None:
    """From here on, the ids `repeatable_ids` draws are those of `key` (a conversation, a
    language): the same whatever was drawn before. Nothing without `repeatable_ids`."""
    import random

    if _IDS:
        _IDS["draw"] = random.Random(f"{_IDS['seed']}:{key}")


def machine() -> dict[str, Any]:
    return {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    t = Table(title=title)
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*(f"{v:,.1f}" if isinstance(v, float) else str(v) for v in r))
    console.print(t)


def emit_json(figures: dict[str, Any]) -> None:
    print(json.dumps(figures, sort_keys=True))
