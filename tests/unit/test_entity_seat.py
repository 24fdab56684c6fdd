"""`entity_seat`: where a named organisation sits, and consolidation's rule on it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engram.domain.consolidation import Decision, Pool, decide
from engram.domain.entity_seat import apart, moved, restated, seats
from engram.domain.observation import Observation
from tests.unit.test_consolidation_domain import obs, r


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Der Kunde Koch Logistik sitzt in Kiel.", {("Koch Logistik", "Kiel")}),
        ("Koch Logistik ist nach Hannover umgezogen.", {("Koch Logistik", "Hannover")}),
        ("Unser Kunde Koch Logistik hat seinen Sitz jetzt in Hannover.", {("Koch Logistik", "Hannover")}),
        ("Koch Logistik ist in Kiel ansässig.", {("Koch Logistik", "Kiel")}),
        ("Dunmore Analytics has its office in Phoenix.", {("Dunmore Analytics", "Phoenix")}),
        (
            "The customer Dunmore Analytics has now moved its head office to Chicago.",
            {("Dunmore Analytics", "Chicago")},
        ),
        ("Our client Brightline Insurance is headquartered in New York.", {("Brightline Insurance", "New York")}),
        ("Koch Logistik has an office in Kiel.", set()),  # one of its offices, not where it sits
        ("I moved to Berlin last year.", set()),  # a person (`life_topics`), not an organisation
        ("Wir sind nach Kiel gezogen.", set()),
        ("Koch Logistik pays on time.", set()),
    ],
)
def test_seats(text: str, expected: set[tuple[str, str]]) -> None:
    assert seats(text) == expected


def test_moved_needs_the_same_name_and_another_place() -> None:
    assert (
        moved("Der Kunde Koch Logistik sitzt in Kiel", "Koch Logistik ist nach Hannover umgezogen") == "Koch Logistik"
    )
    assert moved("Koch Logistik sitzt in Kiel", "Fischer Logistik ist nach Hannover umgezogen") is None
    assert moved("Koch Logistik sitzt in Kiel", "Koch Logistik ist in Kiel ansässig") is None


def _fact(title: str, age_days: int) -> Observation:
    return obs(title, age=timedelta(days=age_days))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Der Kunde Koch Logistik sitzt in Kiel", "Koch Logistik ist nach Hannover umgezogen"),
        ("Dunmore Analytics has its office in Phoenix", "Dunmore Analytics moved to Chicago"),
    ],
)
def test_a_later_seat_of_the_same_organisation_supersedes_the_earlier(old: str, new: str) -> None:
    """Measured by bench.consolidation: these were its missed updates (two words differ: the place
    and "Kunde" or "office"), at cosines 0.90-0.93 in e5."""
    o, n = _fact(old, 20), _fact(new, 2)
    v = decide(r(n), r(o), 0.92, Pool.of([r(o), r(n)]))
    assert (v.decision, v.current) == (Decision.update, n.id), v.reason
    assert "sits" in v.reason


def test_another_organisation_of_the_same_trade_is_not_superseded() -> None:
    koch, fischer = _fact("Koch Logistik sitzt in Kiel", 20), _fact("Fischer Logistik ist nach Hannover umgezogen", 2)
    v = decide(r(fischer), r(koch), 0.90, Pool.of([r(koch), r(fischer)]))
    assert v.decision is not Decision.update, v.reason


def test_apart_names_two_organisations() -> None:
    assert apart("Koch Logistik sitzt in Kiel", "Fischer Logistik ist nach Hannover umgezogen") == (
        "Koch Logistik",
        "Fischer Logistik",
    )
    assert apart("Koch Logistik sitzt in Kiel", "Koch Logistik ist nach Hannover umgezogen") is None
    assert apart("Koch Logistik sitzt in Kiel", "Koch Logistik pays on time") is None


def test_a_name_does_not_run_across_lines() -> None:
    """A title and its narrative are two sentences: "Miami" ending one is no part of the name
    starting the next."""
    text = "Harbor Energy has its office in Miami\nHarbor Energy runs its business from Miami."
    assert seats(text) == {("Harbor Energy", "Miami")}


def test_restated_is_the_same_seat_and_nothing_else() -> None:
    sits = "Customer Harbor Energy sits in Miami\nOur customer Harbor Energy is located in Miami."
    office = "Harbor Energy has its office in Miami\nHarbor Energy runs its business from Miami."
    assert restated(sits, office) == "Harbor Energy"
    assert restated(sits, "Harbor Energy has its office in Miami\nHarbor Energy pays within 30 days.") is None
    assert restated(sits, "Harbor Energy has its office in Miami and a warehouse in Tampa.") is None
    assert restated(sits, "Harbor Energy moved to Tampa.") is None


def test_the_same_seat_in_other_words_is_one_statement() -> None:
    """Whatever the pool makes of "Customer" and "located" (few observations of a small pool use
    them: specific words, a word swapped), two statements of one seat merge."""
    sits = _fact("Customer Harbor Energy sits in Miami", 20).model_copy(
        update={"narrative": "Our customer Harbor Energy is located in Miami."}
    )
    office = _fact("Harbor Energy has its office in Miami", 2).model_copy(
        update={"narrative": "Harbor Energy runs its business from Miami."}
    )
    v = decide(r(office), r(sits), 0.917, Pool.of([r(sits), r(office)]))
    assert v.decision is Decision.duplicate, v.reason
