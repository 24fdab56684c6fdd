"""Is a slow sample our code or the machine? A CPU-speed probe beside a latency benchmark.

The benchmark machines are VMs on shared physical cores. In bursts, the same instructions take
two to seven times their usual CPU time there (another tenant on the core, its caches or its
memory bandwidth), and every turn measured during a burst is slow for that reason alone.

`CpuProbe` runs a child process that repeats a fixed piece of pure-Python work every `period_ms`
and records the *thread CPU time* it took. Waiting for a core (the benchmark's own load) does not
count in CPU time; only the same work running slower on a core does. `slowdown(t0, t1)` is the
largest ratio, among the probe's runs that overlap [t0, t1], of its CPU time to its median over
the whole benchmark. The probe costs about 7 % of one core.
"""

from __future__ import annotations

import bisect
import multiprocessing
import statistics
import time
from array import array
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

WORK = 10_000  # loop iterations per probe run: about 0.7 ms of CPU on the benchmark VM
SLOWED = 2.0  # a turn is "slowed" when a probe run beside it took at least twice its median CPU time


def _work(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def _probe(conn: Any, period: float, work: int) -> None:
    samples = array("d")
    while not conn.poll():
        started, cpu = time.monotonic(), time.thread_time()
        _work(work)
        used = time.thread_time() - cpu
        samples.extend((started, time.monotonic(), used * 1000))
        time.sleep(period)
    conn.recv()
    conn.send_bytes(samples.tobytes())


@dataclass
class ProbeRuns:
    """The probe's runs: (start, end, CPU ms), ordered by start, on `time.monotonic()`'s clock."""

    runs: list[tuple[float, float, float]] = field(default_factory=list)

    @cached_property
    def median_ms(self) -> float:
        return statistics.median(r[2] for r in self.runs) if self.runs else 0.0

    @cached_property
    def _starts(self) -> list[float]:
        return [r[0] for r in self.runs]

    def slowdown(self, started: float, ended: float) -> float | None:
        """The largest CPU-time ratio of the runs overlapping [started, ended]; None if none does."""
        median = self.median_ms
        if not median:
            return None
        starts = self._starts
        # runs are short and never overlap each other: the one before `started` may reach into it
        first = max(0, bisect.bisect_left(starts, started) - 1)
        ratios = [r[2] / median for r in self.runs[first : bisect.bisect_right(starts, ended)] if r[1] >= started]
        return max(ratios) if ratios else None

    def slowed_share(self, threshold: float = SLOWED) -> float:
        median = self.median_ms
        if not median:
            return 0.0
        return sum(1 for r in self.runs if r[2] >= threshold * median) / len(self.runs)


class CpuProbe:
    """`with CpuProbe() as probe: ...`; afterwards `probe.runs` holds what it measured."""

    def __init__(self, period_ms: float = 10.0, work: int = WORK) -> None:
        self.period = period_ms / 1000
        self.work = work
        self.runs = ProbeRuns()
        self._conn: Any = None
        self._process: Any = None

    def __enter__(self) -> CpuProbe:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_probe, args=(child, self.period, self.work), daemon=True)
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.send("stop")
        raw = array("d")
        raw.frombytes(self._conn.recv_bytes())
        self._process.join(5)
        self.runs = ProbeRuns([(raw[i], raw[i + 1], raw[i + 2]) for i in range(0, len(raw), 3)])
