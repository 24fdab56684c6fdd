"""A progress bar for the long operations commands (rich, already a dependency of the CLI)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def bar(console: Console, label: str, total: int | None = None) -> Iterator[Callable[[int, int | None], None]]:
    """`advance(done, total)` moves the bar; rich draws it only on a terminal, so a Kubernetes
    Job's log gets the summary lines, not redraws."""
    with Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False
    ) as progress:
        task = progress.add_task(label, total=total)

        def advance(done: int, new_total: int | None = None) -> None:
            progress.update(task, completed=done, total=new_total if new_total is not None else total)

        yield advance
