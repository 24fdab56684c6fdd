"""Calendar dates a text names, in English and German (recall's date support). Pure, no I/O.

"What did Maria start on 3 June, 2023?", "Was haben wir am 3. Juni 2023 beschlossen?",
"June 3rd 2023", "2023-06-03", "03.06.2023": a question that names a day is about what
happened that day, so recall ranks memories of that day higher (`ranking.date_support`).
Only full dates count there (day, month and year); relative ones ("yesterday") are not parsed.

`plan_date` reads the day of a plan the user tells (`domain/plans.py`): a day and month without
a year, a month, a weekday, or a day relative to when it was said ("tomorrow", "in two weeks",
"nächsten Monat").
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta

MONTHS: dict[str, int] = {}
for number, names in enumerate(
    (
        ("january", "jan", "januar", "jänner"),
        ("february", "feb", "februar"),
        ("march", "mar", "märz", "maerz", "mär"),
        ("april", "apr"),
        ("may", "mai"),
        ("june", "jun", "juni"),
        ("july", "jul", "juli"),
        ("august", "aug"),
        ("september", "sep", "sept"),
        ("october", "oct", "oktober", "okt"),
        ("november", "nov"),
        ("december", "dec", "dezember", "dez"),
    ),
    start=1,
):
    for name in names:
        MONTHS[name] = number

WEEKDAYS_EN = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
WEEKDAYS_DE = ("montag", "dienstag", "mittwoch", "donnerstag", "freitag", "samstag", "sonntag")


def weekday_name(day: date) -> str:
    """`day`'s weekday in English, as a model reads it beside a date ("Thursday")."""
    return WEEKDAYS_EN[day.weekday()].capitalize()


# every month name, the longest first (a regex alternation; the caller groups it)
MONTH_PATTERN = "|".join(sorted(MONTHS, key=len, reverse=True))
_DAY = r"(\d{1,2})(?:st|nd|rd|th|\.)?"
_PATTERNS = (
    # 3 June, 2023 / 3. Juni 2023 / 3rd of June 2023
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?({MONTH_PATTERN})\.?,?\s+(\d{{4}})\b", re.IGNORECASE), ("d", "m", "y")),
    # June 3, 2023 / June 3rd 2023
    (re.compile(rf"\b({MONTH_PATTERN})\.?\s+{_DAY},?\s+(\d{{4}})\b", re.IGNORECASE), ("m", "d", "y")),
    # 2023-06-03
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), ("y", "m", "d")),
    # 03.06.2023 (German numeric)
    (re.compile(r"\b(\d{1,2})\.(\d{1,2})\.(\d{4})\b"), ("d", "m", "y")),
)


def mentioned_dates(text: str) -> tuple[date, ...]:
    """Each valid full date named in `text`, once, in order of appearance."""
    return tuple(dict.fromkeys(d for _, d in _full_dates(text)))


def _full_dates(text: str) -> list[tuple[int, date]]:
    """Each valid full date in `text` with where it starts, in order of appearance."""
    found: list[tuple[int, date]] = []
    for pattern, order in _PATTERNS:
        for match in pattern.finditer(text):
            parts = dict(zip(order, match.groups(), strict=True))
            month = parts["m"]
            month_number = int(month) if month.isdigit() else MONTHS[month.lower()]
            try:
                found.append((match.start(), date(int(parts["y"]), month_number, int(parts["d"]))))
            except ValueError:  # 31 February and the like
                continue
    return sorted(found)


# the start of a range whose end is a full date: "between August 11 and", "from 3 to", "zwischen dem
# 11. und", "vom 3. März bis zum"; its month and year are the end's unless it names them
_RANGE_START = re.compile(
    rf"\b(?:between|from|zwischen(?:\s+dem)?|vom|von)\s+(?:(?P<m1>{MONTH_PATTERN})\.?\s+)?(?P<d>\d{{1,2}})"
    rf"(?:st|nd|rd|th|\.)?(?:\s+(?:of\s+)?(?P<m2>{MONTH_PATTERN})\.?)?,?\s+"
    r"(?:and|to|until|till|und|bis(?:\s+zum)?|-|–)\s+(?:(?:dem|zum)\s+)?$",
    re.IGNORECASE,
)


def mentioned_spans(text: str) -> tuple[tuple[date, date], ...]:
    """Each full date named in `text` as a span of days [first, last], once, in order: a range
    ("between August 11 and August 15 2023", "from 3 to 9 March 2025", "vom 3. bis 9. März
    2025") is one span, from its start to the full date that ends it; any other date is a day."""
    spans = ((_range_start(text[:at], last) or last, last) for at, last in _full_dates(text))
    return tuple(dict.fromkeys(spans))


def _range_start(before: str, last: date) -> date | None:
    """The first day of a range that `before` opens and `last` ends, if it does."""
    opened = _RANGE_START.search(before[-80:])
    if opened is None:
        return None
    named, day = opened.group("m1") or opened.group("m2"), int(opened.group("d"))
    if named:  # "from 28 December to 3 January 2024": the year before the end's
        month = MONTHS[named.lower()]
        year = last.year - 1 if (month, day) > (last.month, last.day) else last.year
    else:  # "from 28 to 3 March": the month before the end's
        opens = last if day <= last.day else _months_later(last, -1)
        year, month = opens.year, opens.month
    try:
        return date(year, month, day)
    except ValueError:  # 30 February, 29 February of a year without one
        return None


# a plan's date without a year ("on 12 February", "am 18. April", "18.4.", "in August", "on Thursday");
# the day-and-month forms are also a fragment of larger patterns (`life_topics`: an appointment's day)
DAY_MONTH_PATTERNS = (
    rf"\b{_DAY}\s+(?:of\s+)?({MONTH_PATTERN})\b",
    rf"\b({MONTH_PATTERN})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?!:)",
    r"\b(\d{1,2})\.(\d{1,2})\.(?!\d)",
)
_DAY_MONTH = tuple(
    (re.compile(p, re.IGNORECASE), order)
    for p, order in zip(DAY_MONTH_PATTERNS, (("d", "m"), ("m", "d"), ("d", "m")), strict=True)
)
_MONTH_ONLY = re.compile(
    rf"\b(?:in|for|für|im|until|bis|during|next|nächsten|kommenden)\s+({MONTH_PATTERN})\b", re.IGNORECASE
)
_WEEKDAY = re.compile(
    r"\b(?:on|am|this|next|nächsten|kommenden|diesen)\s+(" + "|".join((*WEEKDAYS_EN, *WEEKDAYS_DE)) + r")\b",
    re.IGNORECASE,
)
# a day said relative to when it was said: "tomorrow", "übermorgen", "in two weeks", "in drei Tagen",
# "next week", "nächsten Monat", "this weekend", "am Wochenende"; "morgen" is "tomorrow" unless it is a
# morning ("am Morgen", "guten Morgen"). The day it was said only when it is still ahead ("is today",
# "later today", "today at 3", "tonight", "heute um 15 Uhr", "heute Nachmittag"), never in words of the
# past (`_DONE`): "I was at the dentist today" is no plan
_COUNTS = {
    **dict.fromkeys(("a", "an", "one", "ein", "einem", "einer", "eine"), 1),
    **{w: n for n, w in enumerate("two three four five six seven eight nine ten eleven twelve".split(), start=2)},
    **{w: n for n, w in enumerate("zwei drei vier fünf sechs sieben acht neun zehn elf zwölf".split(), start=2)},
}
_COUNT = "|".join(sorted(_COUNTS, key=len, reverse=True))
_UNITS = {
    **dict.fromkeys(("day", "days", "tag", "tagen"), "day"),
    **dict.fromkeys(("week", "weeks", "woche", "wochen"), "week"),
    **dict.fromkeys(("month", "months", "monat", "monaten"), "month"),
}
_UNIT = "|".join(sorted(_UNITS, key=len, reverse=True))
_THIS = r"this|am|diese[nrs]?"
_NEXT = r"next|nächste[nrs]?|kommende[nrs]?"
_SPANS = {
    "week": "week",
    "woche": "week",
    "weekend": "weekend",
    "wochenende": "weekend",
    "month": "month",
    "monat": "month",
}
_SPAN = "|".join(sorted(_SPANS, key=len, reverse=True))
_TODAY = (  # "today at 3pm": no word's end after its hour
    r"today (?:at|from) \d|(?:later today|tonight|this (?:afternoon|evening)|(?:is|'s|are|'re) today"
    r"|today (?:is|i have|i've got|we have)"
    r"|heute (?:um|ab|nachmittag|abend|später)|später heute|(?:ist|sind) heute)\b"
)
# the past, beside `plan_topics`' words of it, for a day said as today: "I was at the dentist today"
_DONE = re.compile(r"\b(was|were|had|did|went|been|got back|came back|war|waren|hatte|hatten|gewesen)\b", re.I)
_TOMORROW = r"tomorrow|(?<!\bam )(?<!\bjeden )(?<!\bguten )(?<!\bheute )(?<!\bgestern )(?<!\bden )morgen"
_RELATIVE = re.compile(
    rf"\b(?P<after>day after tomorrow|übermorgen)\b|\b(?P<tomorrow>{_TOMORROW})\b|(?P<today>\b(?:{_TODAY}))"
    rf"|\bin (?P<count>\d{{1,2}}|{_COUNT}) (?P<unit>{_UNIT})\b|\b(?:(?P<this>{_THIS})|{_NEXT}) (?P<span>{_SPAN})\b",
    re.IGNORECASE,
)
# the same as a fragment of larger patterns (`life_topics`: an appointment with its day), without its group names
RELATIVE_DAY_PATTERN = "(?:" + re.sub(r"\(\?P<\w+>", "(?:", _RELATIVE.pattern) + ")"
# a date this many days ahead or more, given without a year, is the one just past ("on 12 May" said on 20 June)
PLAN_HORIZON_DAYS = 300


def plan_date(text: str, said: date) -> date | None:
    """The day a plan `text` names, said on `said`: a full date as it stands; a day and month
    without a year at their next occurrence from `said`, unless that is `PLAN_HORIZON_DAYS` or more
    ahead (then the one just past: "the dentist on 12 May" told on 20 June was in May); a month
    alone ("in August") its last day, by the same rule; a weekday its next occurrence after `said`;
    a day relative to `said` ("tomorrow", "in two weeks", "next month": its last day). None when it
    names none. The first that `text` names counts, in that order of kinds."""
    found = plan_when(text, said)
    return found[0] if found is not None else None


def plan_when(text: str, said: date) -> tuple[date, str] | None:
    """`plan_date` and how exact it is: "day" (a day is named or meant), "month" (a month alone:
    the day is its last) or "span" (a week, a weekend or a month from `said`: the day is its last)."""
    if full := mentioned_dates(text):
        return full[0], DAY
    for month, day in _days_and_months(text):
        if (at := _next_occurrence(said, month, day)) is not None:
            return at, DAY
    if month_only := _MONTH_ONLY.search(text):
        at = _next_occurrence(said, MONTHS[month_only.group(1).lower()], 1, latest=True)
        return (at, MONTH) if at is not None else None
    if weekday := _WEEKDAY.search(text):
        name = weekday.group(1).lower()
        number = WEEKDAYS_EN.index(name) if name in WEEKDAYS_EN else WEEKDAYS_DE.index(name)
        return said + timedelta(days=(number - said.weekday() - 1) % 7 + 1), DAY
    if relative := _RELATIVE.search(text):
        return None if relative.group("today") and _DONE.search(text) else _relative_day(relative, said)
    return None


DAY, MONTH, SPAN = "day", "month", "span"  # `plan_when`: how exact a plan's day is


def _relative_day(found: re.Match[str], said: date) -> tuple[date, str]:
    """The day a relative phrase names: a span ("next week", "this weekend", "nächsten Monat") at its
    last day, so a plan stays ahead until the span is over."""
    if found.group("after"):
        return said + timedelta(days=2), DAY
    if found.group("tomorrow"):
        return said + timedelta(days=1), DAY
    if found.group("today"):
        return said, DAY
    if count := found.group("count"):
        return _counted(said, count, found.group("unit"))[0], DAY
    span = _SPANS[found.group("span").lower()]
    later = 0 if found.group("this") else 1
    if span == "month":
        end = _months_later(said, later)
        return date(end.year, end.month, calendar.monthrange(end.year, end.month)[1]), SPAN
    return said + timedelta(days=6 - said.weekday() + 7 * later), SPAN  # the week's (or weekend's) Sunday


def _counted(day: date, count: str, unit: str, later: bool = True) -> tuple[date, str]:
    """`day` moved by a counted span ("in two weeks", "drei Tage", "3 months"), later or earlier,
    and the span's unit ("day", "week", "month")."""
    n = (1 if later else -1) * (int(count) if count.isdigit() else _COUNTS[count.lower()])
    span = _UNITS[unit.lower()]
    at = _months_later(day, n) if span == "month" else day + timedelta(days=n * (7 if span == "week" else 1))
    return at, span


def _months_later(said: date, months: int) -> date:
    year, month = divmod(said.month - 1 + months, 12)
    year, month = said.year + year, month + 1
    return date(year, month, min(said.day, calendar.monthrange(year, month)[1]))


def day_and_month(text: str) -> tuple[int, int] | None:
    """(month, day) of the first full date or day and month `text` names ("14 March", "am 14. März",
    "14.3.", "2025-03-14"), None if it names none (a month alone or a weekday is no day of the year)."""
    if full := mentioned_dates(text):
        return full[0].month, full[0].day
    return next(((m, d) for m, d in _days_and_months(text) if 1 <= m <= 12 and 1 <= d <= 31), None)


def _days_and_months(text: str) -> list[tuple[int, int]]:
    """(month, day) of each day and month without a year `text` names, in the order it names them
    (unchecked: "31.13." gives (13, 31))."""
    found = []
    for pattern, order in _DAY_MONTH:
        for match in pattern.finditer(text):
            parts = dict(zip(order, match.groups(), strict=True))
            month = int(parts["m"]) if parts["m"].isdigit() else MONTHS[parts["m"].lower()]
            found.append((match.start(), month, int(parts["d"])))
    return [(month, day) for _, month, day in sorted(found)]


def next_anniversary(month: int, day: int, today: date) -> date | None:
    """The next `month`/`day` on or after `today` (29 February: the 28th in a common year); None if
    there is no such day (31 April)."""
    for year in (today.year, today.year + 1):
        at = _on(year, month, day, False) or (date(year, 2, 28) if (month, day) == (2, 29) else None)
        if at is not None and at >= today:
            return at
    return None


def _next_occurrence(said: date, month: int, day: int, latest: bool = False) -> date | None:
    """`month`/`day` at its first occurrence on or after `said`, or the one a year before when that
    is `PLAN_HORIZON_DAYS` or more ahead; None if there is no such day (31 April). `latest`: the
    month's last day, whatever `day` says."""
    for year in (said.year, said.year + 1):
        at = _on(year, month, day, latest)
        if at is not None and at >= said:
            return at if (at - said).days < PLAN_HORIZON_DAYS else _on(year - 1, month, day, latest)
    return None


def _on(year: int, month: int, day: int, latest: bool) -> date | None:
    try:
        return date(year, month, calendar.monthrange(year, month)[1] if latest else day)
    except ValueError:
        return None


# a span before now a question names ("What did I tell you yesterday?", "letzte Woche"), for recall
_PAST_SPAN = re.compile(
    rf"\b(?P<before>the day before yesterday|vorgestern)\b|\b(?P<yesterday>yesterday|gestern|last night)\b"
    rf"|\b(?:(?P<n>\d{{1,2}}|{_COUNT}) (?P<unit>{_UNIT}) ago|vor (?P<n_de>\d{{1,2}}|{_COUNT}) (?P<unit_de>{_UNIT}))\b"
    r"|\b(?:last|previous|letzte[nrs]?|vorige[nrs]?|vergangene[nrs]?)"
    r" (?P<span>week|weekend|month|woche|wochenende|monat)\b",
    re.IGNORECASE,
)


def names_past_span(text: str) -> bool:
    """Whether a question names days before now (`past_span`): only then does the asker's time zone
    change what it searches (`decomposition.past_window`)."""
    return _PAST_SPAN.search(text) is not None


def past_span(text: str, today: date) -> tuple[date, date] | None:
    """The days [first, last] before `today` that a question names by a relative phrase:
    yesterday / gestern / last night, the day before yesterday / vorgestern, N days or weeks ago
    / vor N Tagen (that day; a week ago within three days either side), last week / letzte Woche
    (Monday to Sunday), last weekend, last month / letzten Monat (the calendar month); None for
    any other text. "this week" or a weekday may mean days ahead, so they name none."""
    found = _PAST_SPAN.search(text)
    if found is None:
        return None
    if found.group("before"):
        return today - timedelta(days=2), today - timedelta(days=2)
    if found.group("yesterday"):
        return today - timedelta(days=1), today - timedelta(days=1)
    if count := found.group("n") or found.group("n_de"):
        at, unit = _counted(today, count, found.group("unit") or found.group("unit_de"), later=False)
        slack = timedelta(days={"day": 0, "week": 3, "month": 15}[unit])
        return at - slack, at + slack
    span = _SPANS[found.group("span").lower()]
    monday = today - timedelta(days=today.weekday())
    if span == "month":
        last = today.replace(day=1) - timedelta(days=1)
        return last.replace(day=1), last
    if span == "weekend":
        return monday - timedelta(days=2), monday - timedelta(days=1)
    return monday - timedelta(days=7), monday - timedelta(days=1)
