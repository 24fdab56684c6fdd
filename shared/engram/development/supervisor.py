"""The local stack's process supervisor (R-16.2): a crashed function is restarted, the others serve on.

`make run` used honcho, whose manager stops every process as soon as one exits: a `kill -9` of
one worker took the HTTP functions down too. honcho has no restart policy, and the supervisors
that do (supervisord, circus) need a daemon and configuration files of their own; what the
local stack needs is small: start each function as a child, prefix its output with its name,
restart it when it exits with a capped exponential backoff (1 s, 2 s, 4 s, ... 30 s; back to
1 s once it has run for 30 s) and say so in a log line, and on Ctrl-C (SIGINT) or SIGTERM stop
them all: SIGTERM, then SIGKILL after `grace` seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

BACKOFF_BASE = 1.0
BACKOFF_CAP = 30.0
HEALTHY_AFTER = 30.0  # a process that ran this long starts its next backoff from the base again


@dataclass
class Child:
    name: str
    command: Sequence[str]
    env: Mapping[str, str]
    cwd: str
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restarts: int = 0
    failures: int = 0  # exits in a row without a healthy run
    due: float | None = None  # when it is to be started again
    history: list[int] = field(default_factory=list)  # every pid it had, for tests and benchmarks

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None


def backoff(failures: int) -> float:
    return float(min(BACKOFF_CAP, BACKOFF_BASE * 2 ** max(0, failures - 1)))


class Supervisor:
    def __init__(self, out: IO[str] | None = None, *, grace: float = 10.0) -> None:
        self.out = out or sys.stdout
        self.grace = grace
        self.children: dict[str, Child] = {}
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self.width = 0

    def add(self, name: str, command: Sequence[str], *, env: Mapping[str, str], cwd: str) -> None:
        self.children[name] = Child(name, list(command), dict(env), cwd)
        self.width = max(self.width, len(name))

    def say(self, name: str, line: str) -> None:
        with self._lock:
            self.out.write(f"{time.strftime('%H:%M:%S')} {name.ljust(self.width)} | {line}\n")
            self.out.flush()

    def _spawn(self, child: Child) -> None:
        child.proc = subprocess.Popen(
            list(child.command),
            env=dict(child.env),
            cwd=child.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        child.started = time.monotonic()
        child.due = None
        child.history.append(child.proc.pid)
        threading.Thread(target=self._pump, args=(child, child.proc), daemon=True).start()
        self.say(child.name, f"started with pid {child.proc.pid}")

    def _pump(self, child: Child, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            self.say(child.name, raw.decode("utf-8", errors="replace").rstrip())

    def _reap(self, child: Child, now: float) -> None:
        proc = child.proc
        if proc is None or child.due is not None:
            return
        code = proc.poll()
        if code is None:
            return
        ran = now - child.started
        child.failures = 1 if ran >= HEALTHY_AFTER else child.failures + 1
        delay = backoff(child.failures)
        child.due = now + delay
        how = f"signal {-code}" if code < 0 else f"code {code}"
        self.say(
            "supervisor",
            f"{child.name} (pid {proc.pid}) exited with {how} after {ran:.1f} s; restarting in {delay:g} s",
        )

    def step(self) -> None:
        """One round: note exits, start what is due."""
        now = time.monotonic()
        for child in self.children.values():
            self._reap(child, now)
            if child.due is not None and now >= child.due and not self.stopping.is_set():
                child.restarts += 1
                self._spawn(child)

    def run(self, on_started: Callable[[], None] | None = None) -> int:
        """Start every child and supervise until SIGINT or SIGTERM; then stop them all. Returns 0."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for child in self.children.values():
                self._spawn(child)
            if on_started is not None:
                threading.Thread(target=on_started, daemon=True).start()
            while not self.stopping.wait(0.2):
                self.step()
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 0

    def _on_signal(self, signum: int, _: Any) -> None:
        self.stopping.set()

    def stop(self) -> None:
        self.stopping.set()
        alive = [c.proc for c in self.children.values() if c.proc is not None and c.proc.poll() is None]
        for proc in alive:
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.grace
        for proc in alive:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say("supervisor", f"pid {proc.pid} did not stop within {self.grace:g} s: killed")
                proc.kill()
                proc.wait(5)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Send `sig` to a child (benchmarks and tests); its pid."""
        pid = self.children[name].pid
        if pid is None:
            raise RuntimeError(f"{name} is not running")
        os.kill(pid, sig)
        return pid
