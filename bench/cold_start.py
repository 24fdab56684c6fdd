"""Cold start of every function: process start to healthy, as a whole process (R-2.2, issue 6).

Scale to zero only works if a function is useful soon after its pod starts. For each function
folder that exists (`functions/<name>/__main__.py`) this starts `python -m functions.<name>` as
a fresh process, five times, and measures from just before the process is spawned to:

- HTTP functions: the first `GET /healthz` on $PORT that answers 200 (the target); the first
  200 from `GET /readyz` (PostgreSQL, NATS and schema checked: what Knative's readiness probe
  waits for before it routes the request) is reported beside it;
- JetStream workers: the moment the pull runner consumes (it creates `ENGRAM_READY_FILE`, the
  same file the Kubernetes readiness probe checks).

The baseline is a bare `python -c pass` measured in the same run, interleaved with the others,
so the ratio stays meaningful on a shared, noisy machine. PostgreSQL and NATS come from
`engram.development.embedded` (migrated and declared, like a cluster after the migration Job). As in the
image (compileall at build time, PYTHONDONTWRITEBYTECODE at run time), Engram's own modules
are compiled before the first start, so no run pays for compiling source.

    python -m bench.cold_start [--runs 5] [--json] [--python PATH] [--only memory-mcp ...]

`--only NAME` (repeatable) measures only those functions, still against the baseline of the run.
`--python` starts the functions (and the baseline) with another interpreter, e.g. a virtualenv
installed the way infra/Dockerfile installs the image (non-editable, compiled, no model
packages for EMBEDDER=tei); it then runs outside the repository with PYTHONSAFEPATH=1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

REPO = Path(__file__).resolve().parents[1]
FUNCTIONS_DIR = REPO / "functions"

Kind = Literal["http", "worker", "job"]

# how each function runs on Kubernetes. Folders not listed are classified from their `__main__.py`.
KINDS: dict[str, Kind] = {
    "chat_turn": "http",
    "memory_api": "http",
    "memory_mcp": "http",
    "telemetry_query": "http",
    "extract_observation": "worker",
    "embed_index": "worker",
    "record_feedback": "worker",
    "consolidate_memory": "worker",
    "retention_cron": "job",
}
TARGETS: dict[Kind, float] = {"http": 1.5, "worker": 1.0}
TIMEOUT = 60.0


@dataclass(frozen=True)
class Function:
    module: str
    kind: Kind

    @property
    def name(self) -> str:
        return self.module.replace("_", "-")


def classify(module: str, main_source: str) -> Kind:
    if module in KINDS:
        return KINDS[module]
    if "uvicorn" in main_source:
        return "http"
    if "WORKER.main()" in main_source:
        return "worker"
    return "job"


def discover(functions_dir: Path = FUNCTIONS_DIR) -> list[Function]:
    """Every function folder with a `__main__.py`, in name order."""
    found = []
    for main in sorted(functions_dir.glob("*/__main__.py")):
        module = main.parent.name
        found.append(Function(module, classify(module, main.read_text(encoding="utf-8"))))
    return found


def _free_port() -> int:
    from engram.development.embedded import free_port

    return free_port()


def _healthy(port: int, path: str = "/healthz") -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class Start:
    healthy_s: float  # /healthz answered (HTTP) or consuming (worker)
    ready_s: float | None = None  # /readyz answered (HTTP)
    cpu_s: float | None = None  # CPU time the process had used when it became healthy
    rss_mb: float | None = None  # resident memory once ready (what a pod needs at rest: issue 19)


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a running process (Linux): what other load on the machine cannot inflate."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float | None:
    """Resident set size of a running process (Linux `VmRSS`), in MB."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) / 1024 for line in lines if line.startswith("VmRSS:")), None)


def start_once(fn: Function, env: dict[str, str], workdir: Path, python: str = sys.executable) -> Start:
    """Seconds from spawn to healthy (HTTP) or consuming (worker); raises if it never gets there."""
    run_env = dict(env)
    ready = workdir / f"{fn.module}.ready"
    ready.unlink(missing_ok=True)
    port = _free_port()
    run_env.update({"PORT": str(port), "HOST": "127.0.0.1", "ENGRAM_READY_FILE": str(ready)})
    if run_env.get("ENGRAM_NATS_SEED_FILE"):  # each function as its own bus user, as deployed
        user = fn.module.replace("_", "-")
        run_env["ENGRAM_NATS_USER"] = user
        run_env["ENGRAM_NATS_SEED_FILE"] = str(Path(run_env["ENGRAM_NATS_SEED_FILE"]).with_name(f"{user}.nk"))
    log_path = workdir / f"{fn.module}.log"
    with open(log_path, "ab") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [python, "-m", f"functions.{fn.module}"],
            cwd=REPO if python == sys.executable else workdir,
            env=run_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = started + TIMEOUT
        healthy: float | None = None
        cpu: float | None = None
        while time.perf_counter() < deadline:
            if fn.kind == "http" and healthy is None and _healthy(port):
                healthy = time.perf_counter() - started
                cpu = _cpu_seconds(proc.pid)
            if healthy is not None and _healthy(port, "/readyz"):
                return Start(healthy, time.perf_counter() - started, cpu, _rss_mb(proc.pid))
            if fn.kind == "worker" and ready.exists():
                return Start(time.perf_counter() - started, cpu_s=_cpu_seconds(proc.pid), rss_mb=_rss_mb(proc.pid))
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{fn.name} exited with {proc.returncode} before it was ready:\n{tail}")
            time.sleep(0.002 if fn.kind == "worker" else 0.005)
        raise TimeoutError(f"{fn.name} was not ready after {TIMEOUT}s")
    finally:
        _stop(proc)


def baseline_once(python: str = sys.executable) -> float:
    started = time.perf_counter()
    subprocess.run([python, "-c", "pass"], check=True)
    return time.perf_counter() - started


@dataclass
class Result:
    function: Function
    samples: list[float] = field(default_factory=list)
    ready_samples: list[float] = field(default_factory=list)
    cpu_samples: list[float] = field(default_factory=list)
    rss_samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def ready_median(self) -> float | None:
        return statistics.median(self.ready_samples) if self.ready_samples else None

    @property
    def target(self) -> float | None:
        return TARGETS.get(self.function.kind)

    @property
    def ok(self) -> bool:
        return self.target is None or self.median <= self.target


@contextlib.contextmanager
def backing_services(workdir: Path) -> Iterator[dict[str, str]]:
    """PostgreSQL and NATS from the PyPI wheels, migrated and declared."""
    from engram.adapters.migrations import apply_migrations
    from engram.adapters.nats_bus import declare_streams
    from engram.development.embedded import EmbeddedNats, EmbeddedPostgres

    pg = EmbeddedPostgres(workdir / "postgres").start()
    try:
        nats = EmbeddedNats(workdir / "nats").start()
        try:
            asyncio.run(apply_migrations(pg.url))
            asyncio.run(declare_streams(nats.url, "ENGRAM", nats.credentials("engram")))
            yield {"DATABASE_URL": pg.url, "NATS_URL": nats.url, **nats.client_env()}
        finally:
            nats.stop()
    finally:
        pg.stop()


def measure(
    functions: list[Function], env: dict[str, str], workdir: Path, runs: int, python: str = sys.executable
) -> tuple[list[Result], list[float]]:
    """Round-robin over the functions and the baseline, so noise spreads evenly over all of them."""
    results = [Result(fn) for fn in functions if fn.kind != "job"]
    baseline: list[float] = []
    for fn_result in results:  # one warm-up start each: page cache, .pyc files
        start_once(fn_result.function, env, workdir, python)
    for _ in range(runs):
        baseline.append(baseline_once(python))
        for result in results:
            start = start_once(result.function, env, workdir, python)
            result.samples.append(start.healthy_s)
            if start.ready_s is not None:
                result.ready_samples.append(start.ready_s)
            if start.cpu_s is not None:
                result.cpu_samples.append(start.cpu_s)
            if start.rss_mb is not None:
                result.rss_samples.append(start.rss_mb)
    return results, baseline


def function_env(urls: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "PYTHON"))}
    env.update(urls)
    env.update(
        {
            "ENGRAM_JWT_SECRET": "bench-only-secret-not-used-for-anything-else",
            "ENGRAM_LOG_LEVEL": "WARNING",
            "ENGRAM_LOG_FORMAT": "json",
            "PYTHONDONTWRITEBYTECODE": "1",  # as in the image: read the compiled files, never write them
        }
    )
    return env


def report(
    results: list[Result], baseline: list[float], skipped: list[Function], runs: int, python: str = sys.executable
) -> dict[str, object]:
    base = statistics.median(baseline)
    return {
        "bench": "cold_start",
        "python": python,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_1m": round(os.getloadavg()[0], 2),
        "runs": runs,
        "baseline_python_pass_s": round(base, 4),
        "functions": {
            r.function.name: {
                "kind": r.function.kind,
                "median_s": round(r.median, 3),
                "min_s": round(min(r.samples), 3),
                "max_s": round(max(r.samples), 3),
                "ratio_to_baseline": round(r.median / base, 1),
                "readyz_median_s": round(r.ready_median, 3) if r.ready_median is not None else None,
                "cpu_median_s": round(statistics.median(r.cpu_samples), 3) if r.cpu_samples else None,
                "rss_max_mb": round(max(r.rss_samples), 1) if r.rss_samples else None,
                "target_s": r.target,
                "ok": r.ok,
            }
            for r in results
        },
        "skipped": {fn.name: f"{fn.kind}: runs to completion, no cold-start target" for fn in skipped},
        "all_ok": all(r.ok for r in results),
    }


def print_table(summary: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Cold start, median of {summary['runs']} whole-process starts")
    columns = ("function", "kind", "median s", "min s", "max s", "x python -c pass", "target s", "ok")
    columns += ("/readyz s", "CPU s", "RSS MB (max)")
    for column in columns:
        table.add_column(column)
    functions = summary["functions"]
    assert isinstance(functions, dict)
    for name, row in functions.items():
        table.add_row(
            name,
            row["kind"],
            f"{row['median_s']:.3f}",
            f"{row['min_s']:.3f}",
            f"{row['max_s']:.3f}",
            f"{row['ratio_to_baseline']:.1f}",
            f"{row['target_s']}",
            "yes" if row["ok"] else "NO",
            "-" if row["readyz_median_s"] is None else f"{row['readyz_median_s']:.3f}",
            "-" if row["cpu_median_s"] is None else f"{row['cpu_median_s']:.3f}",
            "-" if row.get("rss_max_mb") is None else f"{row['rss_max_mb']:.1f}",
        )
    console = Console(width=max(Console().width, 110))
    console.print(table)
    console.print(
        f"baseline python -c pass: {summary['baseline_python_pass_s']} s; {summary['machine']}; "
        f"load average {summary['load_average_1m']} (other work on the machine inflates wall times, not CPU s)"
    )
    for name, why in dict(summary["skipped"]).items():  # type: ignore[call-overload]
        console.print(f"skipped {name} ({why})")


def precompile() -> None:
    """Bytecode for shared/ and functions/ (timestamp-checked, so later edits still take effect)."""
    import compileall

    for folder in (REPO / "shared", FUNCTIONS_DIR):
        compileall.compile_dir(folder, quiet=1, workers=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs the functions")
    parser.add_argument("--only", action="append", default=[], help="only this function (e.g. memory-mcp)")
    parser.add_argument(
        "--embedder", help="ENGRAM_EMBEDDER of the functions (tei: as in the prod images, no model in the process)"
    )
    args = parser.parse_args(argv)

    precompile()
    functions = discover()
    if args.only:
        wanted = {name.replace("_", "-") for name in args.only}
        unknown = wanted - {fn.name for fn in functions}
        if unknown:
            parser.error(f"no such function: {', '.join(sorted(unknown))}")
        functions = [fn for fn in functions if fn.name in wanted]
    skipped = [fn for fn in functions if fn.kind == "job"]
    with tempfile.TemporaryDirectory(prefix="engram-cold-start-") as tmp:
        workdir = Path(tmp)
        with backing_services(workdir) as urls:
            env = function_env(urls)
            if args.embedder:
                env["ENGRAM_EMBEDDER"] = args.embedder
                if args.embedder == "tei":  # never reached while starting: the clients connect on first use
                    env["TEI_EMBEDDING_URL"] = "http://127.0.0.1:9"
            if args.python != sys.executable:
                env["PYTHONSAFEPATH"] = "1"  # as in the image: the working directory is not on sys.path
            results, baseline = measure(functions, env, workdir, args.runs, args.python)
    summary = report(results, baseline, skipped, args.runs, args.python)
    if args.json:
        print(json.dumps(summary))
    else:
        print_table(summary)
    return 0 if summary["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
