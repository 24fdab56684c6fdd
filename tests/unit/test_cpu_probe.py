"""bench.cpu_probe: which turns ran while the machine's CPU was slow."""

from __future__ import annotations

import time

import pytest

from bench.cpu_probe import CpuProbe, ProbeRuns


def runs(*cpu_ms: float, start: float = 100.0, every: float = 0.010, length: float = 0.001) -> ProbeRuns:
    return ProbeRuns([(start + i * every, start + i * every + length, ms) for i, ms in enumerate(cpu_ms)])


def test_slowdown_is_the_worst_overlapping_run_against_the_median() -> None:
    probe = runs(1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0)  # runs at 100.000, 100.010, ..., 100.060
    assert probe.median_ms == 1.0
    # a turn from 100.025 to 100.045 overlaps the runs at 100.030 (3 ms) and 100.040
    assert probe.slowdown(100.025, 100.045) == pytest.approx(3.0)
    # one from 100.041 to 100.059 sees only the runs at 100.050 (and not the one that ended at 100.041)
    assert probe.slowdown(100.0415, 100.059) == pytest.approx(1.0)


def test_a_run_that_started_before_the_turn_and_reaches_into_it_counts() -> None:
    probe = ProbeRuns([(10.0, 10.004, 1.0), (10.010, 10.014, 1.0), (10.020, 10.026, 4.0), (10.030, 10.034, 1.0)])
    assert probe.slowdown(10.025, 10.028) == pytest.approx(4.0)


def test_no_overlapping_run_or_no_runs_give_none() -> None:
    assert runs(1.0, 1.0).slowdown(200.0, 200.1) is None
    assert ProbeRuns().slowdown(0.0, 1.0) is None


def test_slowed_share_counts_runs_at_twice_the_median() -> None:
    probe = runs(1.0, 1.0, 1.0, 1.0, 2.0, 5.0, 1.9, 1.0)
    assert probe.slowed_share() == pytest.approx(2 / 8)
    assert probe.slowed_share(1.5) == pytest.approx(3 / 8)


def test_the_probe_process_measures_on_the_monotonic_clock() -> None:
    before = time.monotonic()
    with CpuProbe(period_ms=5, work=2_000) as probe:
        time.sleep(1.0)  # the spawned probe needs ~0.2 s to start, more on a loaded machine
    after = time.monotonic()
    assert len(probe.runs.runs) >= 5
    assert all(before <= start <= end <= after for start, end, _ in probe.runs.runs)
    assert all(ms > 0 for *_, ms in probe.runs.runs)
    assert probe.runs.slowdown(before, after) is not None


def test_a_turn_is_judged_by_the_probe_beside_its_own_work_not_beside_the_llm_wait() -> None:
    from bench.chat_turn import Sample, turn_slowdown

    # the probe slowed down at 100.4-100.5: while this turn waited 1 s for the model
    probe = ProbeRuns([(100.0 + i * 0.01, 100.0 + i * 0.01 + 0.001, 4.0 if 40 <= i < 50 else 1.0) for i in range(300)])
    # 20 ms of work before the LLM call, 1 s of LLM, 5 ms persisting: from 100.000 to 101.025
    turn = Sample(1025.0, 1000.0, {"persist": 5.0}, 0, 100.0, 101.025)
    assert turn_slowdown(turn, probe) == pytest.approx(1.0)
    # the same turn a little later: its work before the call reaches into the slow period
    late = Sample(1025.0, 1000.0, {"persist": 5.0}, 0, 100.385, 101.41)
    assert turn_slowdown(late, probe) == pytest.approx(4.0)
