"""`engram` command line: migrate, declare, schemas, token, agent-key, credentials, dev (the local stack),
mcp, and the operations commands (`dlq`, `tenants`, `tenant`, `reindex`, `outbox relay`: one module each)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from pathlib import Path

from rich.console import Console

from engram.operations import dlq, relay, tenants
from engram.operations.mcp_command import add_mcp_command
from engram.runtime.logs import configure_logging

console = Console(stderr=False, highlight=False)


async def _migrate(url: str) -> None:
    from engram.adapters.migrations import apply_migrations

    console.print(await apply_migrations(url))


async def _declare(url: str, stream: str) -> None:
    from engram.adapters.nats_auth import bus_credentials
    from engram.adapters.nats_bus import declare_streams
    from engram.settings import get_settings

    settings = get_settings()
    console.print(await declare_streams(url, stream, bus_credentials(settings), settings.engram_stream_replicas))


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
    """`engram agent-key create|list|revoke|rotate`: an operator's view of a tenant's agent keys."""
    from engram.adapters.postgres import Database
    from engram.adapters.unit_of_work import PgUnitOfWork
    from engram.domain.errors import NotFound, Unprocessable
    from engram.services.agent_keys import AgentKeys
    from engram.services.auth import create_agent_key
    from engram.settings import get_settings

    async def run() -> int:
        db = await Database.connect(get_settings().require_database_url(), max_size=1)
        uow = PgUnitOfWork(db, None)
        keys = AgentKeys(uow)
        if args.action in ("revoke", "rotate") and not args.id:
            console.print(f"agent-key {args.action} needs the key's id", style="red")
            return 2
        try:
            if args.action == "create":
                if not args.name:
                    console.print("--name is required", style="red")
                    return 2
                issued = await create_agent_key(
                    uow,
                    tenant_id=args.tenant,
                    name=args.name,
                    user_id=args.user,
                    teams=args.team or [],
                    permissions=args.permission or [],
                )
                console.print(f"agent key {issued.id} (shown once): {issued.secret}")
            elif args.action == "list":
                for key in await keys.list_tenant(args.tenant, include_revoked=args.all):
                    state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
                    console.print(f"{key.id}  {key.name}  user={key.user_id or '-'}  {state}  {key.permissions}")
            elif args.action == "revoke":
                revoked = await keys.revoke_tenant(args.tenant, uuid.UUID(args.id))
                console.print(f"agent key {revoked.id} ({revoked.name}) revoked at {revoked.revoked_at}")
            else:
                old, issued = await keys.rotate_tenant(args.tenant, uuid.UUID(args.id))
                console.print(f"agent key {old.id} revoked; new key {issued.id} (shown once): {issued.secret}")
        except (NotFound, Unprocessable, ValueError) as exc:
            console.print(str(exc), style="red")
            return 1
        finally:
            await db.close()
        return 0

    return asyncio.run(run())


def cmd_producer_credentials(args: argparse.Namespace) -> int:
    """Onboard a domain system (R-1.2): an NKey user that may publish its tenant's domain events only."""
    from engram.adapters.nats_auth import add_producer, reload_server
    from engram.development.localstack import local_data_dir
    from engram.domain.bus_access import inbox_prefix, producer_user
    from engram.settings import get_settings

    settings = get_settings()
    folder = Path(args.dir) if args.dir else local_data_dir(settings.engram_data_dir) / "nats"
    try:
        user = producer_user(args.tenant, args.name)
    except ValueError as exc:
        console.print(str(exc), style="red")
        return 2
    credentials, auth = add_producer(folder, args.tenant, args.name, settings.engram_stream)
    reloaded = reload_server(folder / "nats.pid")
    console.print(f"producer {user.name}: {auth} written" + (", server reloaded" if reloaded else ""))
    console.print(f"publish to: {user.publish[0]}  (engram.ingest.<tenant>.<user or _>.<event type>)")
    console.print(f"reply inbox prefix (nats.connect(inbox_prefix=...)): {inbox_prefix(user.name)}")
    if not reloaded:
        console.print("deploy the new auth.conf (cluster: the nats-config ConfigMap) and reload NATS")
    console.print("NKey seed, shown once (a secret: give it to the producer only):")
    print(credentials.seed)  # noqa: T201 - the seed is the command's output
    return 0


def cmd_bus_credentials(args: argparse.Namespace) -> int:
    """The functions' NKeys for a cluster overlay (seeds for their Secret, public keys for NATS)."""
    from engram.adapters.nats_auth import write_cluster_credentials
    from engram.settings import get_settings

    seeds, keys = write_cluster_credentials(Path(args.out), get_settings().engram_stream)
    console.print(f"{seeds} (secret, git-ignored) and {keys} written")
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    from engram.development.localstack import run_local_stack

    return run_local_stack(seed=not args.no_seed)


def build_parser() -> argparse.ArgumentParser:
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

    p = sub.add_parser("agent-key", help="create, list, revoke or rotate agent keys (stored hashed; shown once)")
    p.add_argument("action", choices=["create", "list", "revoke", "rotate"])
    p.add_argument("id", nargs="?", help="the key's id (revoke, rotate)")
    p.add_argument("--tenant", required=True)
    p.add_argument("--name", help="create: what the key is for")
    p.add_argument("--user")
    p.add_argument("--team", action="append")
    p.add_argument("--permission", action="append")
    p.add_argument("--all", action="store_true", help="list: revoked keys too")
    p.set_defaults(func=cmd_agent_key)

    p = sub.add_parser("producer-credentials", help="issue a domain system's NATS credentials (NKey)")
    p.add_argument("--tenant", required=True)
    p.add_argument("--name", required=True, help="the system, e.g. crm (lowercase, digits, '-')")
    p.add_argument("--dir", help="where producers.json and auth.conf live (default: the local stack's)")
    p.set_defaults(func=cmd_producer_credentials)

    p = sub.add_parser("bus-credentials", help="NKeys of every function for a cluster overlay")
    p.add_argument("--out", required=True, help="e.g. k8s/overlays/prod/secrets")
    p.set_defaults(func=cmd_bus_credentials)

    for commands in (dlq, tenants, relay):  # the operations commands, a module each
        commands.add_parsers(sub)
    add_mcp_command(sub)  # engram mcp: the MCP server over stdio (operations/mcp_command.py)

    p = sub.add_parser("dev", help="run the whole stack on embedded servers (make run)")
    p.add_argument("--no-seed", action="store_true")
    p.set_defaults(func=cmd_dev)
    return parser


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
