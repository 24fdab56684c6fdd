"""Calendar dates a text names, in English and German (recall's date support). Pure, no I/O.

"What did Maria start on 3 June, 2023?", "Was haben wir am 3. Juni 2023 beschlossen?",
"June 3rd 2023", "2023-06-03", "03.06.2023": a question that names a day is about what
happened that day, so recall ranks memories of that day higher (`ranking.date_support`).
Only full dates count (day, month and year); relative ones ("yesterday") are not parsed.
"""

from __future__ import annotations

import re
from datetime import date

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
    return tuple(dict.fromkeys(d for _, d in sorted(found)))
