"""`engram dlq list|show|replay|purge`: the dead letters of every worker (`engram.services.operations`).

Selection: `--consumer`, `--type`, `--tenant`, `--reason` (a substring), or sequence numbers of
the dead-letter stream (`dlq list` shows them). `replay` and `purge` need a selection or `--all`,
and `purge` needs `--yes`. Each also runs as a Kubernetes Job (k8s/jobs/dlq-replay.yaml).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable

from rich.console import Console
from rich.table import Table

from engram.domain.dead_letters import DeadLetter, DeadLetterFilter
from engram.operations.progress import bar
from engram.services.operations import DeadLetterOps

console = Console(highlight=False)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dlq = sub.add_parser("dlq", help="list, show, replay or purge dead letters")
    actions = dlq.add_subparsers(dest="action", required=True)
    for name, text in (
        ("list", "dead letters, oldest first"),
        ("replay", "republish on the original subject with the original headers; then delete"),
        ("purge", "delete dead letters"),
    ):
        p = actions.add_parser(name, help=text)
        p.add_argument("seq", nargs="*", type=int, help="sequence numbers in the dead-letter stream")
        p.add_argument("--consumer", help="the worker that dead-lettered it, e.g. extract-observation")
        p.add_argument("--type", dest="event_type", help="the CloudEvent type")
        p.add_argument("--tenant")
        p.add_argument("--reason", help="a part of the reason (case-insensitive)")
        p.add_argument("--limit", type=int, help="at most this many")
        if name == "list":
            p.add_argument("--json", action="store_true", help="one JSON object a line")
        else:
            p.add_argument("--all", action="store_true", help="every dead letter (no selection needed)")
        if name == "replay":
            p.add_argument("--keep", action="store_true", help="keep the dead letters after the replay")
        if name == "purge":
            p.add_argument("--yes", action="store_true", help="really delete")
        p.set_defaults(func=cmd_dlq)
    p = actions.add_parser("show", help="one dead letter: reason, headers, payload")
    p.add_argument("seq", type=int)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_dlq)


def cmd_dlq(args: argparse.Namespace) -> int:
    return asyncio.run(_with_ops(lambda ops: ACTIONS[args.action](ops, args)))


async def _with_ops(run: Callable[[DeadLetterOps], Awaitable[int]]) -> int:
    from engram.bootstrap import build, build_operations

    services = await build()
    try:
        return await run(build_operations(services)[0])
    finally:
        await services.close()


def _filter(args: argparse.Namespace) -> DeadLetterFilter:
    return DeadLetterFilter(consumer=args.consumer, event_type=args.event_type, tenant=args.tenant, reason=args.reason)


def _selected(args: argparse.Namespace) -> bool:
    which = _filter(args)
    return bool(args.seq or which.consumer or which.event_type or which.tenant or which.reason)


async def _letters(ops: DeadLetterOps, args: argparse.Namespace) -> list[DeadLetter]:
    which = _filter(args)
    if args.seq:
        found = [letter for seq in args.seq if (letter := await ops.show(seq)) is not None]
        return [letter for letter in found if which.matches(letter)][: args.limit]
    return [letter async for letter in ops.select(which, limit=args.limit)]


async def _list(ops: DeadLetterOps, args: argparse.Namespace) -> int:
    letters = await _letters(ops, args)
    if args.json:
        for letter in letters:
            print(json.dumps(letter.summary()))  # noqa: T201 - the command's output
        return 0
    table = Table("seq", "consumer", "type", "tenant", "id", "deliveries", "reason", "stored")
    for letter in letters:
        s = letter.summary()
        when = letter.stored_at.strftime("%Y-%m-%d %H:%M:%S") if letter.stored_at else "-"
        row = (s["seq"], letter.consumer, letter.event_type, letter.tenant, letter.event_id, letter.deliveries)
        table.add_row(*(str(v) for v in row), letter.reason[:120], when)
    console.print(table)
    console.print(f"{len(letters)} dead letter(s)")
    return 0


async def _show(ops: DeadLetterOps, args: argparse.Namespace) -> int:
    letter = await ops.show(args.seq)
    if letter is None:
        console.print(f"no dead letter at sequence {args.seq}", style="red")
        return 1
    body = letter.body.decode("utf-8", errors="replace")
    if args.json:
        print(json.dumps({**letter.summary(), "headers": letter.headers, "body": body}))  # noqa: T201
        return 0
    for key, value in letter.summary().items():
        console.print(f"{key:>12}: {value}")
    console.print("     headers:")
    for key, value in sorted(letter.headers.items()):
        console.print(f"        {key}: {value}")
    console.print(f"        body: {body}")
    return 0


async def _replay(ops: DeadLetterOps, args: argparse.Namespace) -> int:
    if not (args.all or _selected(args)):
        console.print("say which: sequence numbers, --consumer, --type, --tenant, --reason, or --all", style="red")
        return 2
    letters = await _letters(ops, args)
    with bar(console, "replay", len(letters)) as advance:
        report = await ops.replay(letters, keep=args.keep, progress=advance)
    console.print(
        f"{len(report.replayed)} replayed ({report.duplicates} already in the stream), "
        f"{len(report.failed)} failed" + ("" if args.keep else "; replayed dead letters deleted")
    )
    for seq, error in report.failed.items():
        console.print(f"  {seq}: {error}", style="red")
    return 1 if report.failed else 0


async def _purge(ops: DeadLetterOps, args: argparse.Namespace) -> int:
    if not (args.all or _selected(args)):
        console.print("say which dead letters or --all", style="red")
        return 2
    letters = await _letters(ops, args)
    if not args.yes:
        console.print(f"{len(letters)} dead letter(s) would be deleted; add --yes", style="yellow")
        return 2
    with bar(console, "purge", len(letters)) as advance:
        removed = await ops.purge(letters, progress=advance)
    console.print(f"{removed} dead letter(s) deleted")
    return 0


ACTIONS: dict[str, Callable[[DeadLetterOps, argparse.Namespace], Awaitable[int]]] = {
    "list": _list,
    "show": _show,
    "replay": _replay,
    "purge": _purge,
}
