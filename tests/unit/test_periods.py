"""Telemetry windows (R-10): whole hours from rollups plus raw edges cover a window exactly once."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.domain.periods import DAY, HOUR, Granularity, Period, Window, buckets, floor_to, split, split_days

moments = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC))


@given(now=moments, period=st.sampled_from(list(Period)))
def test_split_covers_the_window_exactly_once(now: datetime, period: Period) -> None:
    window = Window.last(period, now)
    s = split(window)
    (a0, a1), (b0, b1) = s.edges
    assert a0 == window.start and b1 == window.end
    assert a1 == s.whole_start or (s.whole_start == s.whole_end and a1 == window.end)
    assert s.whole_start.minute == s.whole_start.second == s.whole_start.microsecond == 0
    assert s.whole_end.minute == s.whole_end.second == s.whole_end.microsecond == 0
    assert a1 - a0 <= HOUR and b1 - b0 < HOUR
    covered = (a1 - a0) + (s.whole_end - s.whole_start) + (b1 - b0)
    assert covered == window.end - window.start


@given(now=moments, period=st.sampled_from(list(Period)), granularity=st.sampled_from(list(Granularity)))
def test_buckets_tile_the_window(now: datetime, period: Period, granularity: Granularity) -> None:
    window = Window.last(period, now)
    bs = buckets(window, granularity)
    assert bs[0] == floor_to(window.start, granularity)
    assert bs[-1] == floor_to(window.end - timedelta.resolution, granularity)  # the bucket of the last instant
    assert all(b - a == granularity.step for a, b in itertools.pairwise(bs))
    assert bs[-1] < window.end


def test_examples() -> None:
    now = datetime(2026, 11, 30, 10, 20, tzinfo=UTC)
    s = split(Window.last(Period.day, now))
    assert (s.whole_start, s.whole_end) == (
        datetime(2026, 11, 29, 11, tzinfo=UTC),
        datetime(2026, 11, 30, 10, tzinfo=UTC),
    )
    assert s.edges == ((datetime(2026, 11, 29, 10, 20, tzinfo=UTC), s.whole_start), (s.whole_end, now))
    short = split(Window.last(Period.hour, now))  # 09:20..10:20: no whole hour, both parts raw
    assert short.whole_start == short.whole_end
    assert short.edges[0] == (datetime(2026, 11, 30, 9, 20, tzinfo=UTC), now)
    assert len(buckets(Window.last(Period.day, now), Granularity.hour)) == 25
    assert len(buckets(Window.last(Period.month, now), Granularity.day)) == 31
    aligned = datetime(2026, 11, 30, 10, tzinfo=UTC)
    assert len(buckets(Window.last(Period.day, aligned), Granularity.hour)) == 24
    assert [p.value for p in Period] == ["1h", "24h", "7d", "30d"]


def test_windows_need_aware_ordered_bounds() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Window(datetime(2026, 1, 1), datetime(2026, 1, 2))
    with pytest.raises(ValueError, match="before its start"):
        Window(datetime(2026, 1, 2, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC))


@given(now=moments, period=st.sampled_from(list(Period)))
def test_day_split_covers_the_window_exactly_once(now: datetime, period: Period) -> None:
    window = Window.last(period, now)
    s = split_days(window)
    parts = [s.edges[0], s.hours[0], s.days, s.hours[1], s.edges[1]]
    assert all(b <= e for b, e in parts)
    used = [p for p in parts if p[0] < p[1]]  # in order, end to start, no gap and no overlap
    assert used[0][0] == window.start and used[-1][1] == window.end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(used))
    d0, d1 = s.days
    if d0 < d1:
        assert d0 == floor_to(d0, Granularity.day) and d1 == floor_to(d1, Granularity.day)
        assert (d1 - d0) % DAY == timedelta(0)
    for b, e in s.hours:
        assert b == floor_to(b, Granularity.hour) and e == floor_to(e, Granularity.hour) and e - b < DAY


def test_day_split_example() -> None:
    now = datetime(2026, 11, 30, 10, 20, tzinfo=UTC)
    s = split_days(Window.last(Period.week, now))
    assert s.days == (datetime(2026, 11, 24, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC))
    assert s.hours == (
        (datetime(2026, 11, 23, 11, tzinfo=UTC), datetime(2026, 11, 24, tzinfo=UTC)),
        (datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 11, 30, 10, tzinfo=UTC)),
    )
    short = split_days(Window.last(Period.day, now))  # no whole UTC day inside 24 h unless aligned
    assert short.days[0] == short.days[1]
