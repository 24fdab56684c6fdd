"""`engram dev` (what `make run` runs) as a real process group on the test session's servers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import JWT_SECRET

REPO = Path(__file__).resolve().parents[2]
READY = "Ctrl-C stops everything"


@dataclass
class DevProcess:
    # ENGRAM_PORT_BASE: memory-api on base + 1, chat-turn + 2, telemetry-query + 3, memory-mcp + 4,
    # the workers' metrics on base + 11..14
    base: int
    proc: subprocess.Popen[bytes]
    log: Path

    def url(self, offset: int) -> str:
        return f"http://127.0.0.1:{self.base + offset}"


def _ephemeral_low() -> int:
    """Where the kernel's ephemeral (client) ports begin: 32768 on Linux unless configured."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_base() -> int:
    """A port base whose function ports (HTTP and the workers' metrics) are free on loopback.

    The functions bind their ports seconds after this check; a base inside the ephemeral range
    can meanwhile be taken by any outgoing connection of the test session (a CI run failed so:
    telemetry-query found its port held by a client socket). The base is therefore drawn below
    that range, where the kernel never hands out a port on its own.
    """
    low = min(_ephemeral_low(), 32_768)
    span = max(1, low - 10_000 - 20)
    for _ in range(50):
        base = 10_000 + (uuid.uuid4().int % span)
        try:
            for port in [*range(base + 1, base + 5), *range(base + 11, base + 15)]:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free port range")


@contextlib.contextmanager
def engram_dev(stack: dict[str, str], log: Path, *args: str) -> Iterator[DevProcess]:
    """Start `engram dev ARGS`, wait for its banner (90 s at most), stop it with Ctrl-C (SIGINT)."""
    base = free_base()
    env = {
        **os.environ,
        "DATABASE_URL": stack["database_url"],
        "NATS_URL": stack["nats_url"],
        "ENGRAM_JWT_SECRET": JWT_SECRET,
        "ENGRAM_PORT_BASE": str(base),
        "ENGRAM_DATA_DIR": str(log.parent),
        "ENGRAM_LOG_LEVEL": "DEBUG",  # the most there is to leak (test_no_secret_or_message_body_reaches_a_log_line)
    }
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engram.operations.cli", "dev", *args],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and READY not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text()
            time.sleep(0.3)
        text = log.read_text(errors="replace")
        assert READY in text, text
        yield DevProcess(base, proc, log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(30)
