"""`engram mcp`: the MCP server over stdio, for an agent client on this machine (Claude Desktop, an IDE).

The client starts this command and talks MCP over its stdin and stdout (logs go to stderr). It
acts with the credentials it was started with, resolved by `engram.services.auth` on every
tool call exactly like a request to memory-api:

- an agent key: `--agent-key egk_...` or `ENGRAM_AGENT_KEY` (unverified writes, cannot verify);
- a person's JWT: `--token` or `ENGRAM_TOKEN`;
- a local user: `--tenant T --user U [--team X] [--permission P]`, signed afresh for every call
  with `ENGRAM_JWT_SECRET` (like `engram token`; for development).

It needs `DATABASE_URL` and `NATS_URL`; on the bus it is the user `memory-mcp` (with the local
stack's seed under `.engram/nats/credentials/` when `ENGRAM_NATS_USER` is not set).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engram.domain.scopes import Principal
    from engram.runtime.mcp_server import Credentials
    from engram.settings import Settings

BUS_USER = "memory-mcp"
LOCAL_TOKEN_SECONDS = 300


def add_mcp_command(sub: Any) -> None:
    p = sub.add_parser("mcp", help="run the MCP server over stdio for a local agent client")
    p.add_argument("--agent-key", default=os.environ.get("ENGRAM_AGENT_KEY"), help="default: $ENGRAM_AGENT_KEY")
    p.add_argument("--token", default=os.environ.get("ENGRAM_TOKEN"), help="a person's JWT; default: $ENGRAM_TOKEN")
    p.add_argument("--tenant", help="with --user: act as this local user (needs ENGRAM_JWT_SECRET)")
    p.add_argument("--user")
    p.add_argument("--team", action="append")
    p.add_argument("--permission", action="append")
    p.set_defaults(func=cmd_mcp)


def _use_local_bus_user() -> None:
    """Without a bus user configured: the local stack's `memory-mcp` seed, if `make run` made one."""
    from engram.development.localstack import local_data_dir
    from engram.settings import get_settings

    if os.environ.get("ENGRAM_NATS_USER"):
        return
    seed = local_data_dir(get_settings().engram_data_dir) / "nats" / "credentials" / f"{BUS_USER}.nk"
    if seed.exists():
        os.environ["ENGRAM_NATS_USER"] = BUS_USER
        os.environ["ENGRAM_NATS_SEED_FILE"] = str(seed)
        get_settings.cache_clear()


def credentials(args: argparse.Namespace, settings: Settings) -> Credentials:
    """How every call authenticates; SystemExit with the reason when nothing usable was given."""
    from engram.bootstrap import get_services
    from engram.services.auth import issue_jwt

    if args.agent_key:
        key = str(args.agent_key)
        header: tuple[str | None, str | None] = (None, key)
    elif args.token:
        header = (f"Bearer {args.token}", None)
    elif args.tenant and args.user:
        secret = settings.engram_jwt_secret
        if secret is None:
            raise SystemExit("engram mcp: --tenant/--user sign a local token with ENGRAM_JWT_SECRET, which is not set")

        async def as_local_user(_: Any) -> Principal:
            token = issue_jwt(
                secret.get_secret_value(),
                tenant_id=args.tenant,
                user_id=args.user,
                teams=args.team or [],
                permissions=args.permission or [],
                ttl_seconds=LOCAL_TOKEN_SECONDS,
            )
            return await (await get_services()).auth.authenticate(f"Bearer {token}", None)

        return as_local_user
    else:
        raise SystemExit(
            "engram mcp: give --agent-key (or ENGRAM_AGENT_KEY), --token (or ENGRAM_TOKEN), or --tenant and --user"
        )

    async def with_credentials(_: Any) -> Principal:
        return await (await get_services()).auth.authenticate(*header)

    return with_credentials


async def serve_stdio(creds: Credentials) -> None:
    from engram.bootstrap import get_services, shutdown
    from engram.runtime.mcp_server import build_server

    server = build_server(creds)
    try:
        (await get_services()).start_outbox_relay()  # what an interrupted write left behind
        await server.run_stdio_async()
    finally:
        await shutdown()


def cmd_mcp(args: argparse.Namespace) -> int:
    from engram.settings import get_settings

    _use_local_bus_user()
    creds = credentials(args, get_settings())
    try:
        asyncio.run(serve_stdio(creds))
    except KeyboardInterrupt:
        pass
    sys.stderr.flush()
    return 0
