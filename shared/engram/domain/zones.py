"""A user's time zone: the day "today" is for them, and the day a plan they told means.

Engram stores and compares times in UTC. A day, though, is the user's: someone in New York who
says at 8 pm "my dentist appointment is tomorrow" says it at 1 am UTC of the next day, and read in
UTC that appointment would be a day late; the chat's "Today is ..." would be tomorrow for them.
A chat turn names the user's zone (`TurnRequest.time_zone`, an IANA name such as
"Europe/Berlin") and Engram keeps it (on the chat); a call that names none takes the zone the user
named last, and without one the deployment's (`ENGRAM_TIME_ZONE`, UTC unless set).
The zones are the IANA database of the system or, where it has none, the `tzdata` package.
"""

from __future__ import annotations

import re
from datetime import date, datetime, tzinfo
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator

# "UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5"; not a path nor a file name
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9][A-Za-z0-9_+\-]*){0,2}")


def time_zone(name: str) -> ZoneInfo:
    """The IANA time zone `name`; ValueError for any other text (a path, a lower-case "utc", an
    offset such as "+01:00", which knows no summer time)."""
    if _NAME.fullmatch(name):
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # no such zone, or a file that is none
            pass
    raise ValueError(f"unknown time zone {name[:64]!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'")


def _checked(name: str) -> str:
    time_zone(name)
    return name


# a zone's name as a request or a setting gives it, checked where it is read (a ValueError names the field)
TimeZoneName = Annotated[str, AfterValidator(_checked)]


def user_zone(name: str | None, default: tzinfo, stored: str | None = None) -> tzinfo:
    """The zone a caller named (ValueError if it is none), else the one the user named last
    (`stored`), else the deployment's `default` (`ENGRAM_TIME_ZONE`). A stored name the zone
    database no longer knows is passed over: it is not the caller's error."""
    if name:
        return time_zone(name)
    if stored:
        try:
            return time_zone(stored)
        except ValueError:
            pass
    return default


def local_day(at: datetime, zone: tzinfo) -> date:
    """The day `at` (an aware time) falls on in `zone`."""
    return at.astimezone(zone).date()
