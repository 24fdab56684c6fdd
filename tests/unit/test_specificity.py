"""domain.specificity: a candidate that says something no other candidate says keeps its score; one
whose words all the others share ranks down."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.domain.conversation import ConversationSession, Turn, turn_units
from engram.domain.observation import Observation
from engram.domain.specificity import MIN_TURNS, SPECIFIC_FLOOR, specificity, specificity_support
from tests.unit import recall_fixtures
from tests.unit.test_ranking_and_recall_text import obs

NOW = datetime(2026, 12, 6, tzinfo=UTC)
FILLER = "Thanks, that's helpful. Could you make it a bit shorter?"


def test_a_word_no_other_text_has_is_specific_and_words_all_share_are_not() -> None:
    texts = dict.fromkeys(range(7), FILLER) | {"fact": f"{FILLER} I'm allergic to celery, so I have to be careful."}
    found = specificity(texts)
    assert found["fact"] == pytest.approx(1.0)
    assert all(found[n] == pytest.approx(0.0) for n in range(7))
    # in between: a word two of eight texts have
    texts[0] = f"{FILLER} Celery?"
    assert 0.0 < specificity(texts)[0] < 1.0
    # words of one or two letters say nothing ("I", "to", "am")
    assert specificity({1: "I am", 2: "to be", 3: "I am"}) == {1: 0.0, 2: 0.0, 3: 0.0}
    assert specificity({"alone": "anything"}) == {"alone": 1.0}


def test_the_support_runs_from_the_floor_to_one_and_needs_enough_candidates() -> None:
    texts = dict.fromkeys(range(MIN_TURNS - 1), FILLER) | {"fact": f"{FILLER} We adopted a dog called Biscuit."}
    support = specificity_support(texts)
    assert support["fact"] == pytest.approx(1.0)
    assert support[0] == pytest.approx(SPECIFIC_FLOOR)
    assert specificity_support(texts, floor=0.5)[0] == pytest.approx(0.5)
    del texts[0]
    assert specificity_support(texts) == {}  # too few to tell what is common


@given(st.dictionaries(st.integers(0, 30), st.text(max_size=40), min_size=1, max_size=20))
def test_specificity_is_between_zero_and_one_for_every_text(texts: dict[int, str]) -> None:
    found = specificity(texts)
    assert found.keys() == texts.keys()
    assert all(0.0 <= v <= 1.0 + 1e-9 for v in found.values())
    assert specificity(dict(reversed(list(texts.items())))) == found  # the order does not matter


def units(texts: list[str]) -> list[Observation]:
    """One turn unit per text, the user's, a day apart."""
    turns = [Turn(f"D{n}:1", "User", text) for n, text in enumerate(texts, 1)]
    days = [ConversationSession(f"s{n}", NOW - timedelta(days=30 - n), [t]) for n, t in enumerate(turns)]
    drafts = turn_units(tenant_id="t", user_id="u", conversation_id="c", sessions=days)
    return [recall_fixtures.stored(d, NOW) for d in drafts]


def test_a_hybrid_recall_ranks_a_sentence_that_says_nothing_below_the_one_that_tells_a_fact() -> None:
    *fillers, fact = units([FILLER] * MIN_TURNS + [f"{FILLER} I'm allergic to celery, so I have to be careful."])
    ranked = [fillers[0], fact, *fillers[1:]]  # both lists rank a filler first and the fact second
    hits = recall_fixtures.scored("Can you suggest a dinner I could cook tonight?", ranked, ranked, ranked, NOW)
    assert hits[0].observation.id == fact.id and "specific" not in hits[0].boosts
    assert hits[1].boosts["specific"] == pytest.approx(SPECIFIC_FLOOR)  # the speaker is no word of its own
    # too few candidates to tell: the fused order stands
    few = ranked[: MIN_TURNS - 1]
    assert [h.observation.id for h in recall_fixtures.scored("dinner?", few, few, few, NOW)][:2] == [
        fillers[0].id,
        fact.id,
    ]
    # a memory that is no conversation's turn is not compared: its title is a headline of it
    notes = [obs(title="Customer 1001", user_id="u") for _ in range(MIN_TURNS)]
    assert not any("specific" in h.boosts for h in recall_fixtures.scored("customer?", notes, notes, notes, NOW))
