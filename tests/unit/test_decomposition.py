"""Query decomposition: questions that name two things, in English and German."""

from __future__ import annotations

import pytest

from engram.domain.decomposition import MAX_PARTS, decompose, fuse_parts


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        # two names: one question per name, "both" dropped
        (
            "What subject have Caroline and Melanie both painted?",
            ["What subject have Caroline painted?", "What subject have Melanie painted?"],
        ),
        (
            "Which city have both Jean and John visited?",
            ["Which city have Jean visited?", "Which city have John visited?"],
        ),
        ("Was haben Anna und Tom beide gemalt?", ["Was haben Anna gemalt?", "Was haben Tom gemalt?"]),
        # two clauses
        (
            "What schools did John play in and how many years was he with his team?",
            ["What schools did John play in", "how many years was he with his team?"],
        ),
        (
            "Wo wohnt meine Schwester und wann kommt sie zu Besuch?",
            ["Wo wohnt meine Schwester", "wann kommt sie zu Besuch?"],
        ),
        # two phrases, the lead-in sentence left out
        ("Remind me of two things: my employer, and where my sister lives.", ["my employer", "where my sister lives."]),
        (
            "Can you tell me my employer, and also my sister's city?",
            ["Can you tell me my employer", "my sister's city?"],
        ),
        ("I forgot both my employer and my dentist. What were they?", ["I forgot my employer", "I forgot my dentist."]),
        (
            "Erinner mich an zwei Dinge: mein Arbeitgeber und wo meine Schwester wohnt.",
            ["mein Arbeitgeber", "wo meine Schwester wohnt."],
        ),
        (
            "Ich brauche sowohl meinen Arbeitgeber als auch meine Allergie.",
            ["Ich brauche meinen Arbeitgeber", "Ich brauche meine Allergie."],
        ),
        (
            "Zwei Fragen auf einmal: wer mein Arbeitgeber ist, und wo meine Schwester wohnt?",
            ["wer mein Arbeitgeber ist", "wo meine Schwester wohnt?"],
        ),
        # a comparative names two things with "or"
        ("Which is older, my car or my bike?", ["Which is older, my car", "my bike?"]),
    ],
)
def test_questions_naming_two_things_become_parts(question: str, parts: list[str]) -> None:
    assert decompose(question) == parts


@pytest.mark.parametrize(
    "question",
    [
        "What is my sister's name?",
        "Wo wohnt meine Schwester?",
        "What did Caroline do at the park?",
        "Salt and pepper?",  # one word each side: not two things
        "Did I and",
        "Did Melanie make the black and white bowl in the photo?",
        "How long have Mel and her husband been married?",
        "What is the topic of discussion between John and Tim?",
        "Would Tim enjoy reading books by C. S. Lewis or John Greene?",
        "What dessert has an almond flour crust, chocolate ganache, and fresh raspberries?",
        "Wie lange sind Anna und ihr Mann verheiratet?",
        "What was the final score of the game between the Broncos and Steelers?",
        "What did the General Conference on Weights and Measures name after Tesla?",
        "What did Tesla Electric Light & Manufacturing do?",
        "Was benannte die Generalkonferenz für Maß und Gewicht 1960 nach Tesla?",
        "Wo ist die verkehrsreichste Start- und Landebahn der Welt?",
    ],
)
def test_a_question_about_one_thing_has_no_parts(question: str) -> None:
    assert decompose(question) == []


def test_parts_are_few_and_deterministic() -> None:
    question = "my job, and my car, and my bike, and my house, and my dog"
    assert len(decompose(question)) == MAX_PARTS
    assert decompose(question) == decompose(question)


def test_fuse_parts_is_rrf_over_the_question_and_its_parts() -> None:
    fused = fuse_parts(["a", "b"], [["c", "a"], ["c"]], key=lambda x: x)
    assert [item for item, _ in fused] == ["c", "a", "b"]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 61)
    assert fused[1][1] == pytest.approx(1 / 61 + 1 / 62)
    assert fused[2][1] == pytest.approx(1 / 62)


def test_a_question_names_its_days_as_windows() -> None:
    from datetime import UTC, datetime

    from engram.domain.decomposition import day_windows

    def at(y: int, m: int, d: int) -> datetime:
        return datetime(y, m, d, tzinfo=UTC)

    # a full date with a day either side (time zones), a month and year as the month
    assert day_windows("What movie did Joanna watch on 1 May, 2022?") == [(at(2022, 4, 30), at(2022, 5, 3))]
    assert day_windows("What did John share in December 2023?") == [(at(2023, 12, 1), at(2024, 1, 1))]
    assert day_windows("Was hat Nate im Juli 2022 gemacht?") == [(at(2022, 7, 1), at(2022, 8, 1))]
    assert day_windows("What did I do on 3 March 2025 and on 9 March 2025 and on 12 March 2025?") == [
        (at(2025, 3, 2), at(2025, 3, 5)),
        (at(2025, 3, 8), at(2025, 3, 11)),
    ]  # at most two
    # a range, a day either side of it (not only of its last day)
    assert day_windows("Where was John between August 11 and August 15 2023?") == [(at(2023, 8, 10), at(2023, 8, 17))]
    assert day_windows("What did Melanie paint recently?") == []
    assert day_windows("Where is my dentist appointment on 12 February?") == []  # no year: no window


def test_days_before_now_are_the_askers_days() -> None:
    """`past_window`: "yesterday" is the asker's calendar day in their zone, exactly (what was
    said today is not in it); a week is taken a day either side but never into today; without a
    zone, the union of the day over every UTC offset, which ends before now."""
    from datetime import UTC, datetime, timedelta
    from zoneinfo import ZoneInfo

    from engram.domain.decomposition import day_windows, past_window

    now = datetime(2026, 12, 7, 13, 24, tzinfo=UTC)  # a Monday
    yesterday = "What did I tell you yesterday?"
    assert day_windows(yesterday, now, ZoneInfo("Europe/Berlin")) == [
        (datetime(2026, 12, 5, 23, tzinfo=UTC), datetime(2026, 12, 6, 23, tzinfo=UTC))
    ]
    # 05:24 in Los Angeles: its yesterday runs into the UTC morning of today
    assert past_window(yesterday, now, ZoneInfo("America/Los_Angeles")) == (
        datetime(2026, 12, 6, 8, tzinfo=UTC),
        datetime(2026, 12, 7, 8, tzinfo=UTC),
    )
    # a week, a day either side: from the Sunday before it, up to today (Monday), not into it
    assert past_window("Worüber haben wir letzte Woche gesprochen?", now, ZoneInfo("UTC")) == (
        datetime(2026, 11, 29, tzinfo=UTC),
        datetime(2026, 12, 7, tzinfo=UTC),
    )
    # a day of 23 hours: Berlin's clocks went forward on 29 March 2026
    assert past_window("gestern", datetime(2026, 3, 30, 10, tzinfo=UTC), ZoneInfo("Europe/Berlin")) == (
        datetime(2026, 3, 28, 23, tzinfo=UTC),
        datetime(2026, 3, 29, 22, tzinfo=UTC),
    )
    anywhere = past_window(yesterday, now)
    assert anywhere is not None
    start, end = anywhere
    assert now - timedelta(minutes=15) < end <= now  # somewhere (UTC+10:45) today began minutes ago
    assert start == datetime(2026, 12, 5, 13, 30, tzinfo=UTC)  # where it is already late on the 7th
    assert past_window("What did I tell you?", now) is None and day_windows("What did I tell you?", now) == []
