"""Retention runs daily at 03:30 Europe/Berlin (R-11.1), across the daylight-saving changes."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from hypothesis import given
from hypothesis import strategies as st

from engram.domain.schedule import RETENTION_SCHEDULE, DailySchedule

BERLIN = RETENTION_SCHEDULE.zone


def test_the_cronjob_fields() -> None:
    assert RETENTION_SCHEDULE.cron == "30 3 * * *" and RETENTION_SCHEDULE.timezone == "Europe/Berlin"


def test_spring_forward_is_23_hours_after_the_previous_run() -> None:
    # 2027-03-28: clocks go from 02:00 CET to 03:00 CEST
    runs = RETENTION_SCHEDULE.upcoming(datetime(2027, 3, 26, 12, tzinfo=UTC), 3)
    assert runs == [
        datetime(2027, 3, 27, 2, 30, tzinfo=UTC),  # 03:30 CET (UTC+1)
        datetime(2027, 3, 28, 1, 30, tzinfo=UTC),  # 03:30 CEST (UTC+2)
        datetime(2027, 3, 29, 1, 30, tzinfo=UTC),
    ]
    assert runs[1] - runs[0] == timedelta(hours=23) and runs[2] - runs[1] == timedelta(hours=24)
    assert all(r.astimezone(BERLIN).time() == time(3, 30) for r in runs)


def test_fall_back_is_25_hours_after_the_previous_run() -> None:
    # 2027-10-31: clocks go from 03:00 CEST back to 02:00 CET
    runs = RETENTION_SCHEDULE.upcoming(datetime(2027, 10, 29, 12, tzinfo=UTC), 3)
    assert runs == [
        datetime(2027, 10, 30, 1, 30, tzinfo=UTC),
        datetime(2027, 10, 31, 2, 30, tzinfo=UTC),
        datetime(2027, 11, 1, 2, 30, tzinfo=UTC),
    ]
    assert runs[1] - runs[0] == timedelta(hours=25)
    assert all(r.astimezone(BERLIN).time() == time(3, 30) for r in runs)


def test_a_wall_clock_time_in_the_gap_or_the_fold_runs_exactly_once() -> None:
    at_0230 = DailySchedule(time(2, 30), "Europe/Berlin")
    spring = at_0230.upcoming(datetime(2027, 3, 27, 12, tzinfo=UTC), 2)
    assert spring[0] == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)  # 02:30 does not exist: at 03:00 CEST
    assert spring[1] == datetime(2027, 3, 29, 0, 30, tzinfo=UTC)
    autumn = at_0230.upcoming(datetime(2027, 10, 30, 12, tzinfo=UTC), 2)
    assert autumn[0] == datetime(2027, 10, 31, 0, 30, tzinfo=UTC)  # 02:30 happens twice: the first one
    assert autumn[1] == datetime(2027, 11, 1, 1, 30, tzinfo=UTC)


def test_right_at_a_run_the_next_one_is_tomorrow() -> None:
    run = datetime(2027, 1, 10, 2, 30, tzinfo=UTC)
    assert RETENTION_SCHEDULE.next_after(run) == run + timedelta(days=1)
    assert RETENTION_SCHEDULE.next_after(run - timedelta(microseconds=1)) == run


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)))
def test_every_next_run_is_at_0330_berlin_within_25_hours(moment: datetime) -> None:
    run = RETENTION_SCHEDULE.next_after(moment)
    assert run > moment and run - moment <= timedelta(hours=25)
    assert run.astimezone(BERLIN).time() == time(3, 30)
