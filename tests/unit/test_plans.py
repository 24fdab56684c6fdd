"""The user's plans still ahead, for the stable memory block (`domain/plans.py`)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from engram.domain.observation import Observation, ObservationDraft
from engram.domain.plan_topics import PLAN_FLAG, plan_topic
from engram.domain.plans import PLANS_LIMIT, plan_day, upcoming
from engram.domain.recall_text import render_entry
from engram.domain.search import headline_text, passage_text
from engram.domain.zones import local_day, time_zone, user_zone
from tests.unit.recall_fixtures import stored

SAID = datetime(2025, 2, 2, 9, 30, tzinfo=UTC)


def told(title: str, days_later: int = 0) -> Observation:
    """An event the user told `days_later` days after `SAID`."""
    at = SAID + timedelta(days=days_later)
    return stored(ObservationDraft(tenant_id="t", user_id="u", type="event", title=title, said_at=at), at)


@pytest.mark.parametrize(
    ("text", "topic"),
    [
        ("Quick update: my dentist appointment is on 12 February.", "appointment:dentist"),
        ("Also, we're also flying to Lisbon in April.", "trip:next"),  # a second plan is still a plan
        ("Die Zahnarztpraxis hat meinen Termin auf den 18. April verschoben.", "appointment:dentist"),
        ("Kurzes Update: wir fliegen im März nach Marokko.", "trip:next"),
        ("We went to Crete in May.", None),  # the past
        ("Last August we were on holiday in Norway.", None),
        ("Our holiday was lovely.", None),  # no day
        ("My dentist is very friendly.", None),  # no day
        ("The deadline for the report is 12 February.", None),  # a date, but not one of the plans
        ("Also, Anna turns forty on 14 March, and I still have no gift.", "birthday"),
        ("Meine Frau Anna hat am 14. März Geburtstag.", "birthday"),
        ("Anna wird am 14. März vierzig.", "birthday"),
        ("Could you help me plan a surprise for Anna, who turns forty on 14 March?", "birthday"),
        ("Das Paket wird am 3. März geliefert.", None),  # "wird" and a number of the date: no age
        ("Her birthday is in March.", None),  # a birthday needs its day
        ("My dentist appointment is tomorrow.", "appointment:dentist"),  # a day relative to when it was said
        ("Ich habe übermorgen einen Termin beim Hausarzt.", "appointment:doctor"),
        ("We fly to Lisbon next month.", "trip:next"),
        ("Am Wochenende fahren wir nach Kreta in den Urlaub.", "trip:next"),
        ("We went on holiday last week.", None),
        ("My dentist appointment is today at 3pm.", "appointment:dentist"),  # today, still ahead
        ("Heute Nachmittag habe ich einen Termin beim Zahnarzt.", "appointment:dentist"),
        ("I was at the dentist today.", None),  # today, done
        ("Ich war heute beim Zahnarzt.", None),
    ],
)
def test_a_plan_is_a_trip_or_an_appointment_with_its_day_not_in_the_past(text: str, topic: str | None) -> None:
    assert plan_topic(text) == topic


def test_only_the_plans_still_ahead_soonest_first() -> None:
    dentist = told("My dentist appointment is on 12 February.")
    trip = told("We booked a holiday in Lisbon for April.")
    doctor = told("I see my doctor on 20 February.", days_later=5)
    past = told("My dentist appointment is on 1 February.")  # before it was told: the past
    note = told("I prefer short answers.")
    assert upcoming([trip, note, past, doctor, dentist], date(2025, 2, 3)) == [dentist, doctor, trip]
    assert upcoming([trip, doctor, dentist], date(2025, 2, 13)) == [doctor, trip]  # the dentist is past
    assert upcoming([trip, doctor, dentist], date(2025, 5, 1)) == []


def test_a_plan_that_says_it_moved_replaces_what_was_said_of_it_before() -> None:
    first = told("My dentist appointment is on 12 February.")
    moved = told("The dentist moved my appointment to 18 April.", days_later=3)
    again = told("What should I ask at my dentist appointment on 18 April?", days_later=6)
    lisbon = told("We booked a holiday in Lisbon for April.")
    crete = told("We changed our plans, we're going to Crete in August instead.", days_later=4)
    today = date(2025, 2, 3)
    assert upcoming([first, moved, lisbon, crete], today) == [moved, crete]
    assert upcoming([moved, first, crete, lisbon], today) == [moved, crete]  # by when they were said
    assert upcoming([first, moved, again], today) == [again]  # the same plan told twice: once, the later words
    other = told("I finally booked the dentist for 3 March.", days_later=1)  # no "moved": another appointment
    assert upcoming([first, other], today) == [first, other]


def test_a_plan_called_off_takes_that_plan_away_and_is_none_itself() -> None:
    dentist = told("My dentist appointment is on 12 February.")
    doctor = told("I see my doctor on 20 February.")
    lisbon = told("We booked a holiday in Lisbon for April.")
    crete = told("We're also going to Crete in August.")
    today = date(2025, 2, 3)
    for off in (
        "I cancelled my dentist appointment on 12 February.",
        "The dentist appointment on 12 February is cancelled.",
        "Der Zahnarzttermin am 12. Februar fällt aus.",
        "Ich habe den Zahnarzttermin am 12. Februar abgesagt.",
    ):
        assert upcoming([dentist, doctor, told(off, days_later=1)], today) == [doctor], off
    assert upcoming([dentist, told("Should I cancel my dentist appointment on 12 February?", 1)], today) != [], "asked"
    assert upcoming([dentist, told("I cancelled my dentist appointment on 13 February.", 1)], today) == [dentist]
    off = told("The trip to Lisbon in April is off.", days_later=1)
    assert upcoming([lisbon, crete, off], today) == [crete]  # another trip stays
    new = told("Not related, but the old trip is cancelled; Iceland in June is the new plan.", days_later=1)
    assert upcoming([lisbon, new], today) == [new]  # a change: the day it names is the new plan
    neu = told("Die alte Reise ist storniert; Rom im Mai ist der neue Plan.", days_later=1)
    assert upcoming([lisbon, neu], today) == [neu]
    booked_again = told("We booked a holiday in Lisbon for April after all.", days_later=2)
    assert upcoming([lisbon, off, booked_again], today) == [booked_again]  # by when they were said


def test_an_appointment_moved_without_saying_whose_is_the_one_told_last() -> None:
    dentist = told("Ich habe endlich einen Termin beim Zahnarzt, am 3. März.")
    vet = told("The vet appointment for our dog is on 20 March.", days_later=1)
    moved = told("Die Praxis hat meinen Termin auf den 7. Mai verschoben.", days_later=2)
    today = date(2025, 2, 3)
    assert upcoming([dentist, moved], today) == [moved]
    assert upcoming([dentist, vet, moved], today) == [dentist, moved]  # the vet's was told last
    bank = told("I have an appointment at the bank on 12 February.")
    assert upcoming([bank, dentist], today) == [bank, dentist]  # another kind: another plan
    off = told("I cancelled my appointment on 3 March.", days_later=3)  # whose: the one on that day
    assert upcoming([bank, dentist, off], today) == [bank]


def test_at_most_the_limit() -> None:
    plans = [told(f"My doctor's appointment is on {day} March.") for day in range(1, 12)]
    assert len(upcoming(plans, date(2025, 2, 3))) == PLANS_LIMIT


def test_a_birthday_comes_back_every_year_and_replaces_no_other() -> None:
    anna = told("Anna turns forty on 14 March.")
    ben = told("My brother Ben's birthday is on 2 February.", days_later=1)
    again = told("What should I get Anna for her birthday on 14 March?", days_later=3)
    dentist = told("My dentist appointment is on 20 March.")
    assert upcoming([anna, ben, dentist], date(2025, 2, 3)) == [anna, dentist, ben]  # Ben's next is in 2026
    assert upcoming([anna, again, ben], date(2025, 2, 3)) == [again, ben]  # told twice: once
    assert upcoming([anna], date(2027, 3, 15)) == [anna]  # years later, still ahead


def test_a_statement_that_tells_a_plan_is_flagged_when_written() -> None:
    """The profile reads the user's plans by this flag however much they said since (migration 0019)."""
    draft = lambda title, **kw: ObservationDraft(tenant_id="t", **({"user_id": "u", "type": "event"} | kw), title=title)  # noqa: E731
    assert PLAN_FLAG in draft("My dentist appointment is on 12 February.", tags=["chat"]).tags
    assert PLAN_FLAG in draft("Since we changed our plans, we're going to Crete in August", type="identity").tags
    assert PLAN_FLAG in draft("Noted", narrative="Anna turns forty on 14 March.").tags  # the narrative tells it
    assert PLAN_FLAG not in draft("We went to Crete in May.").tags  # the past
    assert PLAN_FLAG not in draft("My dentist appointment is on 12 February.", type="note").tags  # not read as one
    assert PLAN_FLAG not in draft("Dentist on 12 February", user_id=None, scope="public").tags  # nobody's plan
    forged = draft("Invoices go out quarterly", tags=["flag:plan", "billing"])
    assert forged.tags == ["billing"]  # the flag is Engram's alone
    assert draft("My dentist appointment is on 12 February.", tags=["chat"]).tags == ["chat", PLAN_FLAG]


def test_engrams_flags_are_neither_searched_nor_shown() -> None:
    plan = stored(
        ObservationDraft(tenant_id="t", user_id="u", type="event", title="My dentist is on 12 May", tags=["chat"]), SAID
    )
    assert plan.tags == ["chat", PLAN_FLAG]
    assert "flag" not in headline_text(plan) and "flag" not in passage_text(plan)
    assert "tags: chat\n" in render_entry(plan) and "flag" not in render_entry(plan)


def test_recall_text_shows_the_day_a_plan_means() -> None:
    """A model reads the day instead of working out "tomorrow" from when it was said."""
    tomorrow = told("My dentist appointment is tomorrow.")  # said on Sunday 2 February 2025
    assert plan_day(tomorrow) == "2025-02-03, Monday"
    assert "(day: 2025-02-03, Monday)" in render_entry(tomorrow).splitlines()[0]
    assert plan_day(told("Anna turns forty on 14 March.")) == "every 14 March"
    assert plan_day(told("We booked a holiday in Lisbon for April.")) == "April 2025"  # the month, not its last day
    assert plan_day(told("I have a doctor's appointment next week.")) == "by 2025-02-09, Sunday"  # a span's end
    assert plan_day(told("My dentist appointment is in two weeks.")) == "2025-02-16, Sunday"
    assert plan_day(told("I cancelled my dentist appointment on 12 May.")) is None  # called off
    assert plan_day(told("I prefer short answers.")) is None
    assert "day:" not in render_entry(told("We went to Crete in May."))


def test_a_plans_day_and_today_are_the_users_in_their_time_zone() -> None:
    """At 8 pm in New York it is 1 am UTC of the next day: "tomorrow" said then is the day after
    the user's today, not the day after UTC's; the recall text's dates are the user's too."""
    new_york = time_zone("America/New_York")
    evening = datetime(2025, 2, 6, 1, 0, tzinfo=UTC)  # Wednesday 5 February, 20:00 in New York
    tomorrow = stored(
        ObservationDraft(
            tenant_id="t", user_id="u", type="event", title="My dentist appointment is tomorrow.", said_at=evening
        ),
        evening,
    )
    assert plan_day(tomorrow) == "2025-02-07, Friday"  # read in UTC: a day late
    assert plan_day(tomorrow, new_york) == "2025-02-06, Thursday"
    entry = render_entry(tomorrow, zone=new_york)
    assert "(day: 2025-02-06, Thursday)" in entry and "as of 2025-02-05" in entry
    assert "as of 2025-02-06" in render_entry(tomorrow)
    # on Thursday 6 February at 9 pm in New York (2 am UTC on Friday) the appointment is today: still ahead
    thursday = local_day(datetime(2025, 2, 7, 2, 0, tzinfo=UTC), new_york)
    assert thursday == date(2025, 2, 6)
    assert upcoming([tomorrow], thursday, zone=new_york) == [tomorrow]
    assert upcoming([tomorrow], date(2025, 2, 7), zone=new_york) == []  # the next day it has passed


@pytest.mark.parametrize("name", ["Europe/Berlin", "UTC", "America/Argentina/Buenos_Aires", "Etc/GMT+5"])
def test_a_time_zone_is_an_iana_name(name: str) -> None:
    assert str(time_zone(name)) == name


@pytest.mark.parametrize(
    "name", ["utc", "Europe", "Europe/", "+01:00", "../etc/passwd", "/etc/localtime", "zone.tab", "a\x00b", ""]
)
def test_anything_else_is_refused_by_name(name: str) -> None:
    with pytest.raises(ValueError, match=r"unknown time zone .*IANA name"):
        time_zone(name)


def test_the_deployments_time_zone_is_a_setting_checked_at_start() -> None:
    from pydantic import ValidationError

    from engram.settings import Settings

    assert str(Settings(engram_time_zone="Europe/Berlin").zone) == "Europe/Berlin"
    assert str(Settings().zone) == "UTC"
    with pytest.raises(ValidationError, match="engram_time_zone"):
        Settings(engram_time_zone="Berlin")


def test_the_zone_named_else_the_one_kept_else_the_deployments() -> None:
    berlin, tokyo = time_zone("Europe/Berlin"), time_zone("Asia/Tokyo")
    assert user_zone("Asia/Tokyo", berlin, "America/New_York") == tokyo  # named: the call's
    assert str(user_zone(None, berlin, "America/New_York")) == "America/New_York"  # the user named it last
    assert user_zone(None, berlin) == berlin  # none: the deployment's
    assert user_zone(None, berlin, "Atlantis/Capital") == berlin  # a kept name no zone database knows
    with pytest.raises(ValueError, match="IANA name"):
        user_zone("Atlantis/Capital", berlin)  # a caller's own unknown zone is their error


def test_a_plan_for_today_is_ahead_until_the_users_day_is_over() -> None:
    today = told("My dentist appointment is today at 3pm.")
    done = told("I was at the dentist today, it went fine.")
    assert PLAN_FLAG in today.tags and PLAN_FLAG not in done.tags
    assert upcoming([today, done], SAID.date()) == [today]
    assert upcoming([today], SAID.date() + timedelta(days=1)) == []
    assert plan_day(today) == "2025-02-02, Sunday"
