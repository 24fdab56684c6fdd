"""Time windows of the telemetry API (R-10): periods, granularities, and how a window splits
into whole hours (answered from rollups) and ragged edges (answered from raw rows).

Pure: every function takes `now` instead of reading a clock. All buckets are UTC.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from engram.domain.errors import Unprocessable

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


class Period(StrEnum):
    """How far back a query looks from now."""

    hour = "1h"
    day = "24h"
    week = "7d"
    month = "30d"

    @property
    def length(self) -> timedelta:
        return _PERIOD_LENGTH[self]


_PERIOD_LENGTH = {
    Period.hour: HOUR,
    Period.day: DAY,
    Period.week: timedelta(days=7),
    Period.month: timedelta(days=30),
}


class Granularity(StrEnum):
    hour = "hour"
    day = "day"

    @property
    def step(self) -> timedelta:
        return HOUR if self is Granularity.hour else DAY


def floor_to(moment: datetime, granularity: Granularity) -> datetime:
    """Start of the UTC hour or day that contains `moment`."""
    m = moment.astimezone(UTC)
    if granularity is Granularity.hour:
        return m.replace(minute=0, second=0, microsecond=0)
    return m.replace(hour=0, minute=0, second=0, microsecond=0)


def ceil_hour(moment: datetime) -> datetime:
    floored = floor_to(moment, Granularity.hour)
    return floored if floored == moment else floored + HOUR


@dataclass(frozen=True)
class Window:
    """The half-open interval [start, end)."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("window bounds must be timezone-aware")
        if self.end < self.start:
            raise ValueError("window end is before its start")

    @classmethod
    def last(cls, period: Period, now: datetime) -> Window:
        return cls(now - period.length, now)


@dataclass(frozen=True)
class Split:
    """`whole` = hour buckets [whole_start, whole_end) read from rollups; `edges` = raw ranges.

    Together they cover the window exactly once; each edge is shorter than an hour, so the
    raw part of any query is at most two hours of events.
    """

    whole_start: datetime
    whole_end: datetime
    edges: tuple[tuple[datetime, datetime], tuple[datetime, datetime]]


def split(window: Window) -> Split:
    first_whole = ceil_hour(window.start)
    last_whole = floor_to(window.end, Granularity.hour)
    if first_whole >= last_whole:  # no whole hour inside: all raw
        return Split(first_whole, first_whole, ((window.start, window.end), (window.end, window.end)))
    return Split(first_whole, last_whole, ((window.start, first_whole), (last_whole, window.end)))


def buckets(window: Window, granularity: Granularity) -> list[datetime]:
    """Every bucket start that overlaps the window, oldest first (the series' x axis)."""
    out: list[datetime] = []
    current = floor_to(window.start, granularity)
    while current < window.end:
        out.append(current)
        current += granularity.step
    return out


@dataclass(frozen=True)
class DaySplit:
    """A coarser split for per-user rollups: whole UTC days, then whole hours, then raw edges.

    `days` = [start, end) of whole days; `hours` = two ranges of whole hours before and after
    them; `edges` = the two raw ranges of `split`. Together they cover the window exactly once.
    """

    days: tuple[datetime, datetime]
    hours: tuple[tuple[datetime, datetime], tuple[datetime, datetime]]
    edges: tuple[tuple[datetime, datetime], tuple[datetime, datetime]]


def split_days(window: Window) -> DaySplit:
    hourly = split(window)
    h0, h1 = hourly.whole_start, hourly.whole_end
    first_day = floor_to(h0, Granularity.day)
    if first_day < h0:
        first_day += DAY
    last_day = floor_to(h1, Granularity.day)
    if first_day >= last_day:  # no whole day inside: whole hours and raw edges only
        return DaySplit((h0, h0), ((h0, h1), (h1, h1)), hourly.edges)
    return DaySplit((first_day, last_day), ((h0, first_day), (last_day, h1)), hourly.edges)


WITHIN_PATTERN = r"^\s*([0-9]{1,5})([smhdw])\s*$"
"""A window as the API documents it (OpenAPI `pattern`) and `parse_within` reads it: one rule, so the schema
never admits a value the parser refuses."""
_WITHIN = re.compile(WITHIN_PATTERN)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_within(value: str, field: str = "query.within") -> timedelta:
    """A window such as '7d' (a number and a unit s, m, h, d or w) as a timedelta."""
    match = _WITHIN.match(value)
    if not match:
        raise Unprocessable(field, "use a number and a unit s, m, h, d or w, e.g. '7d'")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
