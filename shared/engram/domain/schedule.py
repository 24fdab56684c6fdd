"""When retention runs (R-11.1): daily at a local wall-clock time, daylight saving included.

Kubernetes says the same with a CronJob (`schedule: "30 3 * * *"`, `timeZone: Europe/Berlin`);
this module is what `python -m functions.retention_cron --next` and `--daemon` use, and what
the tests check across the changes to and from summer time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo


@dataclass(frozen=True)
class DailySchedule:
    at: time
    timezone: str

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def cron(self) -> str:
        """The CronJob `schedule` field (interpreted in `timeZone`)."""
        return f"{self.at.minute} {self.at.hour} * * *"

    def occurrence(self, day: datetime) -> datetime:
        """The run on the local calendar day of `day`, as an aware UTC datetime.

        A wall-clock time that does not exist that day (inside the spring-forward gap) runs
        at the first instant after the gap, like cron does; one that exists twice (the
        autumn fold) runs once, at its first occurrence.
        """
        wall = datetime.combine(day.date(), self.at)
        for minutes in range(0, 24 * 60):
            candidate = wall + timedelta(minutes=minutes)
            as_utc = candidate.replace(tzinfo=self.zone, fold=0).astimezone(UTC)
            if as_utc.astimezone(self.zone).replace(tzinfo=None) == candidate:  # exists on the wall clock
                return as_utc
        raise AssertionError(f"no valid wall-clock time after {wall} in {self.timezone}")

    def next_after(self, moment: datetime) -> datetime:
        """The first run strictly after `moment` (aware), in UTC."""
        if moment.tzinfo is None:
            raise ValueError("moment must be timezone-aware")
        local = moment.astimezone(self.zone)
        for offset in range(3):
            candidate = self.occurrence(local + timedelta(days=offset))
            if candidate > moment:
                return candidate
        raise AssertionError("a daily schedule always runs within three days")

    def upcoming(self, moment: datetime, count: int) -> list[datetime]:
        runs: list[datetime] = []
        for _ in range(count):
            moment = self.next_after(moment)
            runs.append(moment)
        return runs


RETENTION_SCHEDULE = DailySchedule(at=time(3, 30), timezone="Europe/Berlin")
