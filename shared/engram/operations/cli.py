"""`engram` command line: migrate, declare, schemas, token, agent-key, reindex, dev (the local stack)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from engram.runtime.logs import configure_logging

console = Console(stderr=False, highlight=False)


async def _migrate(url: str) -> None:
    from engram.adapters.migrations import apply_migrations

    console.print(await apply_migrations(url))


async def _declare(url: str, stream: str) -> None:
    from engram.adapters.nats_bus import declare_streams

    console.print(await declare_streams(url, stream))


def cmd_migrate(_: argparse.Namespace) -> int:
    from engram.settings import get_settings

    asyncio.run(_migrate(get_settings().require_database_url()))
    return 0


def cmd_declare(_: argparse.Namespace) -> int:
    from engram.settings import get_settings

    s = get_settings()
    asyncio.run(_declare(s.require_nats_url(), s.engram_stream))
    return 0


def cmd_schemas(args: argparse.Namespace) -> int:
    from engram.domain.events import REGISTRY

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for event_type in REGISTRY.values():
        path = out / f"{event_type.type}.json"
        path.write_text(json.dumps(event_type.json_schema(), indent=2, sort_keys=True) + "\n")
    console.print(f"{len(REGISTRY)} JSON Schemas written to {out}")
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from engram.services.auth import issue_jwt
    from engram.settings import get_settings

    secret = get_settings().engram_jwt_secret
    if secret is None:
        console.print("ENGRAM_JWT_SECRET is not set", style="red")
        return 2
    print(  # noqa: T201 - the token is the command's output
        issue_jwt(
            secret.get_secret_value(),
            tenant_id=args.tenant,
            user_id=args.user,
            teams=args.team or [],
            permissions=args.permission or [],
            ttl_seconds=args.ttl,
        )
    )
    return 0


def cmd_agent_key(args: argparse.Namespace) -> int:
    from engram.adapters.postgres import Database
    from engram.adapters.unit_of_work import PgUnitOfWork
    from engram.services.auth import create_agent_key
    from engram.settings import get_settings

    async def run() -> Any:
        db = await Database.connect(get_settings().require_database_url(), max_size=1)
        try:
            return await create_agent_key(
                PgUnitOfWork(db, None),
                tenant_id=args.tenant,
                name=args.name,
                user_id=args.user,
                teams=args.team or [],
                permissions=args.permission or [],
            )
        finally:
            await db.close()

    issued = asyncio.run(run())
    console.print(f"agent key {issued.id} (shown once): {issued.secret}")
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    """Rebuild one tenant's search index from PostgreSQL (R-6.3), with a progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from engram.bootstrap import build

    async def run() -> int:
        services = await build()
        try:
            with Progress(
                TextColumn(f"reindex {args.tenant}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            ) as progress:
                task = progress.add_task("observations", total=None)

                def advance(done: int, total: int) -> None:
                    progress.update(task, completed=done, total=total)

                return await services.indexing.reindex(args.tenant, batch_size=args.batch_size, progress=advance)
        finally:
            await services.close()

    total = asyncio.run(run())
    console.print(f"{total} observation(s) of tenant {args.tenant} indexed")
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    from engram.development.localstack import run_local_stack

    return run_local_stack(seed=not args.no_seed)


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    parser = argparse.ArgumentParser(prog="engram", description="Engram memory: operations")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("migrate", help="apply SQL migrations (idempotent)").set_defaults(func=cmd_migrate)
    sub.add_parser("declare", help="declare JetStream streams and durable consumers (idempotent)").set_defaults(
        func=cmd_declare
    )
    p = sub.add_parser("schemas", help="write the JSON Schemas of Engram's event data")
    p.add_argument("--out", default="schemas/events")
    p.set_defaults(func=cmd_schemas)

    p = sub.add_parser("token", help="issue a HS256 JWT for local use")
    p.add_argument("--tenant", required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--team", action="append")
    p.add_argument("--permission", action="append")
    p.add_argument("--ttl", type=int, default=3600)
    p.set_defaults(func=cmd_token)

    p = sub.add_parser("agent-key", help="create an agent key (stored hashed; shown once)")
    p.add_argument("--tenant", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--user")
    p.add_argument("--team", action="append")
    p.add_argument("--permission", action="append")
    p.set_defaults(func=cmd_agent_key)

    p = sub.add_parser("reindex", help="rebuild a tenant's search index from PostgreSQL")
    p.add_argument("--tenant", required=True)
    p.add_argument("--batch-size", type=int, default=256)
    p.set_defaults(func=cmd_reindex)

    p = sub.add_parser("dev", help="run the whole stack on embedded servers (make run)")
    p.add_argument("--no-seed", action="store_true")
    p.set_defaults(func=cmd_dev)

    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
