"""Dates a question names (recall's date support), English and German."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from engram.domain.dates import mentioned_dates, plan_date, plan_when
from engram.domain.ranking import DATE_WEIGHT, date_support

JUNE_3 = date(2023, 6, 3)


@pytest.mark.parametrize(
    "text",
    [
        "What new activity did Maria start recently, as mentioned on 3 June, 2023?",
        "What did we decide on June 3rd 2023?",
        "what happened on june 3, 2023",
        "Was haben wir am 3. Juni 2023 beschlossen?",
        "Notiz vom 03.06.2023",
        "meeting notes 2023-06-03",
        "the 3rd of June 2023",
        "Jun. 3, 2023",
    ],
)
def test_a_full_date_is_found_in_english_and_german(text: str) -> None:
    assert mentioned_dates(text) == (JUNE_3,)


def test_several_dates_in_order_once_and_nothing_from_partial_or_impossible_ones() -> None:
    assert mentioned_dates("from 5 March 2024 to 1 May 2024, and again 5 March 2024") == (
        date(2024, 3, 5),
        date(2024, 5, 1),
    )
    assert mentioned_dates("4. März 2024 und 31. Dezember 2023") == (date(2024, 3, 4), date(2023, 12, 31))
    assert mentioned_dates("What did Caroline do in June?") == ()  # no day, no year: not a date
    assert mentioned_dates("on 31 February 2023 or 2023-13-01") == ()
    assert mentioned_dates("I may 3 times 2023 items") == ()


def test_date_support_counts_the_named_day_with_a_day_of_slack() -> None:
    assert date_support(datetime(2023, 6, 3, 13, 56, tzinfo=UTC), [JUNE_3]) == 1 + DATE_WEIGHT
    assert date_support(datetime(2023, 6, 2, 23, 0, tzinfo=UTC), [JUNE_3]) == 1 + DATE_WEIGHT
    assert date_support(datetime(2023, 6, 6, tzinfo=UTC), [JUNE_3]) == 1.0
    assert date_support(datetime(2023, 6, 6, tzinfo=UTC), []) == 1.0


SAID = date(2025, 2, 2)  # a Sunday


@pytest.mark.parametrize(
    ("text", "day"),
    [
        ("my dentist appointment is on 12 February", date(2025, 2, 12)),
        ("February 12th at the dentist", date(2025, 2, 12)),
        ("ein Termin beim Zahnarzt, am 18. April", date(2025, 4, 18)),
        ("Termin am 18.4. beim Arzt", date(2025, 4, 18)),
        ("we're going to Crete in August instead", date(2025, 8, 31)),
        ("wir haben für Juli einen Urlaub gebucht", date(2025, 7, 31)),
        ("a holiday in February", date(2025, 2, 28)),
        ("the doctor on Thursday", date(2025, 2, 6)),
        ("am Sonntag zum Arzt", date(2025, 2, 9)),  # a weekday is the next one, not today
        ("the dentist on 3 June, 2026", date(2026, 6, 3)),  # a full date as it stands
        ("the dentist on 12 January", date(2025, 1, 12)),  # 344 days ahead: the one just past
        ("the dentist on 12 December", date(2024, 12, 12)),  # 313 days ahead: the same
        ("the dentist on 31 April", None),
        ("I drive a Tesla Model 3", None),
        ("the meeting at 10:30", None),
    ],
)
def test_a_plans_day_without_a_year_is_its_next_occurrence_unless_that_is_most_of_a_year_ahead(
    text: str, day: date | None
) -> None:
    assert plan_date(text, SAID) == day


def test_a_plan_at_the_turn_of_the_year_is_next_years() -> None:
    assert plan_date("the dentist on 12 January", date(2025, 12, 20)) == date(2026, 1, 12)
    assert plan_date("a trip in January", date(2025, 12, 20)) == date(2026, 1, 31)


@pytest.mark.parametrize(
    ("text", "day"),
    [
        ("my dentist appointment is tomorrow", date(2025, 2, 3)),
        ("Morgen habe ich einen Zahnarzttermin.", date(2025, 2, 3)),
        ("ich habe morgen einen Termin beim Arzt", date(2025, 2, 3)),
        ("the dentist the day after tomorrow", date(2025, 2, 4)),
        ("übermorgen beim Zahnarzt", date(2025, 2, 4)),
        ("the doctor in two weeks", date(2025, 2, 16)),
        ("in a week I see my doctor", date(2025, 2, 9)),
        ("Arzttermin in drei Tagen", date(2025, 2, 5)),
        ("the doctor in 3 months", date(2025, 5, 2)),
        ("we fly to Lisbon next month", date(2025, 3, 31)),  # a span: its last day
        ("wir fliegen nächsten Monat nach Lissabon", date(2025, 3, 31)),
        ("a doctor's appointment this month", date(2025, 2, 28)),
        ("the doctor next week", date(2025, 2, 9)),  # said on a Sunday: next week ends on the 9th
        ("holiday this weekend", date(2025, 2, 2)),
        ("am Wochenende in den Urlaub", date(2025, 2, 2)),
        ("nächstes Wochenende in den Urlaub", date(2025, 2, 9)),
        # a morning is no day: "jeden Morgen", "am Morgen", "guten Morgen"
        ("ich gehe jeden Morgen zum Arzt", None),
        ("Guten Morgen, ein Termin beim Arzt", None),
        ("the dentist on Thursday, not tomorrow", date(2025, 2, 6)),  # a named day first
        # the day it was said, while it is still ahead; never in words of the past
        ("my dentist appointment is today", SAID),
        ("I have a dentist appointment today at 3pm", SAID),
        ("the doctor later today", SAID),
        ("Heute um 15 Uhr habe ich einen Zahnarzttermin.", SAID),
        ("Ich habe heute Nachmittag einen Termin beim Arzt", SAID),
        ("Today I have a dentist appointment.", SAID),
        ("Today is my check-up at the doctor's", SAID),
        ("Today I had my check-up at the doctor's", None),
        ("I was at the dentist today", None),
        ("I had my dentist appointment today at 9", None),
        ("Ich war heute beim Zahnarzt", None),
        ("Heute Morgen war ich beim Arzt", None),
        ("the dentist today", None),  # "today" alone does not say whether it is still ahead
    ],
)
def test_a_plans_day_relative_to_when_it_was_said(text: str, day: date | None) -> None:
    assert plan_date(text, SAID) == day


def test_a_month_later_keeps_its_day_where_the_month_has_it() -> None:
    assert plan_date("the doctor in one month", date(2025, 1, 31)) == date(2025, 2, 28)
    assert plan_date("the doctor in 12 months", date(2024, 2, 29)) == date(2025, 2, 28)


def test_how_exact_a_plans_day_is() -> None:
    """Recall text shows a month as the month and a span by its end (`plans.plan_day`)."""
    assert plan_when("the dentist on 12 February", SAID) == (date(2025, 2, 12), "day")
    assert plan_when("a holiday in August", SAID) == (date(2025, 8, 31), "month")
    assert plan_when("the doctor next week", SAID) == (date(2025, 2, 9), "span")
    assert plan_when("the doctor tomorrow", SAID) == (date(2025, 2, 3), "day")
    assert plan_when("nothing planned", SAID) is None


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("What did I tell you yesterday?", (date(2026, 12, 6), date(2026, 12, 6))),
        ("Was habe ich dir gestern erzählt?", (date(2026, 12, 6), date(2026, 12, 6))),
        ("What did we say the day before yesterday?", (date(2026, 12, 5), date(2026, 12, 5))),
        ("What did I say two days ago?", (date(2026, 12, 5), date(2026, 12, 5))),
        ("Was habe ich vor drei Tagen gesagt?", (date(2026, 12, 4), date(2026, 12, 4))),
        ("What did we discuss a week ago?", (date(2026, 11, 27), date(2026, 12, 3))),  # three days either side
        ("What did we discuss last week?", (date(2026, 11, 30), date(2026, 12, 6))),  # Monday to Sunday
        ("Worüber haben wir letzte Woche gesprochen?", (date(2026, 11, 30), date(2026, 12, 6))),
        ("What did I do last weekend?", (date(2026, 12, 5), date(2026, 12, 6))),
        ("What did we talk about last month?", (date(2026, 11, 1), date(2026, 11, 30))),
        ("What should I cook this week?", None),  # may be ahead
        ("What did I tell you on Monday?", None),
        ("Tell me about my sister.", None),
    ],
)
def test_a_span_before_today_a_question_names(text: str, span: tuple[date, date] | None) -> None:
    from engram.domain.dates import past_span

    assert past_span(text, date(2026, 12, 7)) == span  # a Monday


@pytest.mark.parametrize(
    ("text", "spans"),
    [
        ("Where was John between August 11 and August 15 2023?", [(date(2023, 8, 11), date(2023, 8, 15))]),
        ("What did I do from 3 to 9 March 2025?", [(date(2025, 3, 3), date(2025, 3, 9))]),
        ("Wo war ich zwischen dem 11. und 15. August 2023?", [(date(2023, 8, 11), date(2023, 8, 15))]),
        ("Was war vom 3. März bis zum 9. März 2025?", [(date(2025, 3, 3), date(2025, 3, 9))]),
        ("from 28 December to 3 January 2024", [(date(2023, 12, 28), date(2024, 1, 3))]),  # the year before
        ("from 1 January to 15 June 2023", [(date(2023, 1, 1), date(2023, 6, 15))]),
        # not ranges: two people, two dates, an hour, an impossible start
        ("the talk between John and Tim on 11 December, 2023", [(date(2023, 12, 11), date(2023, 12, 11))]),
        ("on 3 March 2025 and on 9 March 2025", [(date(2025, 3, 3),) * 2, (date(2025, 3, 9),) * 2]),
        ("between 2 and 3 pm on 5 May 2023", [(date(2023, 5, 5),) * 2]),
        ("from 28 to 2 March 2025", [(date(2025, 2, 28), date(2025, 3, 2))]),  # the month before
        ("from 30 to 2 March 2025", [(date(2025, 3, 2),) * 2]),  # 30 February: no range
        ("from 29 February to 1 March 2025", [(date(2025, 3, 1),) * 2]),  # not in 2024's February either
    ],
)
def test_a_range_of_days_ends_at_a_full_date(text: str, spans: list[tuple[date, date]]) -> None:
    from engram.domain.dates import mentioned_dates, mentioned_spans

    assert list(mentioned_spans(text)) == spans
    assert mentioned_dates(text) == tuple(dict.fromkeys(last for _, last in spans))  # the dates as before
