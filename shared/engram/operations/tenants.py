"""`engram tenants list`, `engram tenant export|delete`, `engram reindex --tenant T | --all-tenants`
(`engram.services.operations.TenantOps`); each also runs as a Kubernetes Job (k8s/jobs/)."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.table import Table

from engram.operations.progress import bar
from engram.services.operations import Progress, TenantOps

console = Console(highlight=False)
SHOWN = ("observations", "chats", "chat_messages", "sessions", "observation_feedback", "ai_events")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tenants", help="tenants and their rows")
    actions = p.add_subparsers(dest="action", required=True)
    p = actions.add_parser("list", help="every tenant with rows, and how many per table")
    p.add_argument("--json", action="store_true", help="one JSON object a line")
    p.set_defaults(func=cmd_tenants_list)

    p = sub.add_parser("tenant", help="export or delete one tenant")
    actions = p.add_subparsers(dest="action", required=True)
    p = actions.add_parser("export", help="every row of the tenant as JSON Lines")
    p.add_argument("tenant")
    p.add_argument("--out", required=True, help="the file to write ('-' for standard output)")
    p.set_defaults(func=cmd_tenant_export)
    p = actions.add_parser("delete", help="everything of the tenant: index, rows, archives, stream messages")
    p.add_argument("tenant")
    p.add_argument("--yes", action="store_true", help="really delete")
    p.set_defaults(func=cmd_tenant_delete)

    p = sub.add_parser("reindex", help="rebuild the search index from PostgreSQL")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--tenant")
    which.add_argument("--all-tenants", action="store_true", help="every tenant with observations")
    p.add_argument("--batch-size", type=int, default=256)
    p.set_defaults(func=cmd_reindex)


def _run(action: Callable[[TenantOps], Awaitable[int]]) -> int:
    async def run() -> int:
        from engram.bootstrap import build, build_operations

        services = await build()
        try:
            return await action(build_operations(services)[1])
        finally:
            await services.close()

    return asyncio.run(run())


def cmd_tenants_list(args: argparse.Namespace) -> int:
    async def action(ops: TenantOps) -> int:
        tenants = await ops.tenants()
        if args.json:
            for t in tenants:
                print(json.dumps({"tenant": t.tenant_id, "rows": t.rows, "total": t.total}))  # noqa: T201
            return 0
        table = Table("tenant", *SHOWN, "all rows")
        for t in tenants:
            table.add_row(t.tenant_id, *(str(t.rows.get(name, 0)) for name in SHOWN), str(t.total))
        console.print(table)
        console.print(f"{len(tenants)} tenant(s)")
        return 0

    return _run(action)


def cmd_tenant_export(args: argparse.Namespace) -> int:
    import sys

    if args.out == "-":
        return _run(lambda ops: _export(ops, args.tenant, sys.stdout, None))
    with Path(args.out).open("w", encoding="utf-8") as out, bar(console, f"export {args.tenant}") as advance:
        return _run(lambda ops: _export(ops, args.tenant, out, advance))


async def _export(ops: TenantOps, tenant: str, out: IO[str], progress: Progress | None) -> int:
    written = await ops.export(tenant, out, progress=progress)
    Console(stderr=True).print(f"{sum(written.values())} row(s) of tenant {tenant} exported: {written}")
    return 0


def cmd_tenant_delete(args: argparse.Namespace) -> int:
    if not args.yes:
        console.print(f"this deletes everything of tenant {args.tenant}; add --yes", style="yellow")
        return 2

    async def action(ops: TenantOps) -> int:
        deleted = await ops.delete(args.tenant)
        console.print(
            f"tenant {args.tenant} deleted: {sum(deleted.rows.values())} row(s) {deleted.rows}, "
            f"index dropped, {deleted.archives} archive object(s), stream messages {deleted.messages}"
        )
        return 0

    return _run(action)


def cmd_reindex(args: argparse.Namespace) -> int:
    """Rebuild one tenant's or every tenant's search index from PostgreSQL (R-6.3)."""

    async def action(ops: TenantOps) -> int:
        if args.all_tenants:
            with bar(console, "reindex tenants") as advance:
                done = await ops.reindex_all(batch_size=args.batch_size, progress=advance)
            console.print(f"{sum(done.values())} observation(s) of {len(done)} tenant(s) indexed")
            return 0
        with bar(console, f"reindex {args.tenant}") as advance:
            total = await ops.indexing.reindex(args.tenant, batch_size=args.batch_size, progress=advance)
        console.print(f"{total} observation(s) of tenant {args.tenant} indexed")
        return 0

    return _run(action)
