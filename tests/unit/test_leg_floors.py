"""The head of each list stays at the head of the fusion (`ranking.with_leg_floors`), also
through `scored_hits`: a list's first hit ranks at worst 2nd, its second at worst 4th."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.domain.ranking import LEG_FLOORS, rrf_fuse, with_leg_floors
from engram.domain.recall import RecallQuery
from engram.domain.scopes import Visibility
from engram.domain.search import Ranked, SearchFilter
from engram.services.recall_plan import Plan
from engram.services.recall_scoring import scored_hits
from tests.unit.test_ranking_and_recall_text import obs

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def test_a_lists_first_hit_moves_up_to_second_and_its_second_to_fourth() -> None:
    fused = list("abcdefghij")
    # the kNN list ranks h first and j second; BM25 agrees with the fusion's head
    assert with_leg_floors(fused, [list("abc"), list("hj")]) == list("ahbjcdefgi")
    # already high enough: nothing moves
    assert with_leg_floors(fused, [list("ab"), list("ba")]) == fused
    assert with_leg_floors(fused, [list("ab"), list("ca")]) == list("acbdefghij")
    # both lists' first hits are low: they take 1st and 2nd, the better fused first
    assert with_leg_floors(fused, [list("ia"), list("ga")]) == list("giabcdefhj")
    # a list's entries that are no candidates (not visible, cut) are skipped
    assert with_leg_floors(fused, [list("xyf"), []]) == list("afbcdeghij")
    # other floors can be asked for
    assert with_leg_floors(fused, [list("abc"), list("hj")], floors=(3, 5)) == list("abhcjdefgi")
    assert with_leg_floors([], [list("ab")]) == []


@given(
    st.permutations(range(12)),
    st.lists(st.integers(0, 15), max_size=6, unique=True),
    st.lists(st.integers(0, 15), max_size=6, unique=True),
)
def test_floors_hold_and_everything_else_keeps_its_order(fused: list[int], lex: list[int], vec: list[int]) -> None:
    out = with_leg_floors(fused, [lex, vec])
    assert sorted(out) == sorted(fused)  # a reordering: nothing lost, nothing added
    held = set()
    for leg in (lex, vec):
        present = [i for i in leg if i in fused]
        for rank, item in enumerate(present[: len(LEG_FLOORS)]):
            assert out.index(item) + 1 <= LEG_FLOORS[rank]
            held.add(item)
    rest = [i for i in out if i not in held]
    assert rest == [i for i in fused if i not in held]  # the others keep the fused sequence
    for item in rest:  # and move down by at most the number of held entries
        assert fused.index(item) <= out.index(item) <= fused.index(item) + len(held)


@given(st.lists(st.integers(0, 40), min_size=1, max_size=20, unique=True), st.data())
def test_recall_at_2_and_4_never_below_either_lists_recall_at_1_and_2(fused: list[int], data: Any) -> None:
    lex = data.draw(st.permutations(fused))
    vec = data.draw(st.permutations(fused))
    gold = data.draw(st.sampled_from(fused))
    out = with_leg_floors(fused, [lex, vec])
    for leg in (lex, vec):
        assert (gold in out[:2]) >= (gold in leg[:1])
        assert (gold in out[:4]) >= (gold in leg[:2])


def plan(lexical: list[str], vector: list[str], text: str = "where did I move from?") -> Plan:
    visibility = Visibility(tenant_id="t", user_id="alice", teams=frozenset(), include_sensitive=False)
    p = Plan(RecallQuery(text=text, limit=5, mode="hybrid"), text, text, visibility, SearchFilter(now=NOW), pool=20)
    # full coverage: the BM25 list counts fully in the fusion
    p.lexical = [Ranked(i, 10.0 - n, coverage=1.0) for n, i in enumerate(lexical)]
    p.vector = [Ranked(i, 0.9 - n / 100) for n, i in enumerate(vector)]
    p.fuse()
    return p


def test_scored_hits_keep_the_knn_lists_first_hit_in_the_top_two() -> None:
    # BM25 and kNN agree on five notes; only the kNN list finds the answer, and ranks it first
    both = [f"note-{n}" for n in range(5)]
    p = plan(lexical=both, vector=["answer", *both])
    found = {i: obs(title=i) for i in [*both, "answer"]}
    plain = sorted(p.fused, key=lambda f: -f.rrf)
    assert [f.id for f in plain].index("answer") == 5  # RRF alone: 6th, out of a top five
    hits = scored_hits(p, found, NOW)
    titles = [h.observation.title for h in hits]
    assert titles.index("answer") == 1 and len(hits) == 5
    moved = hits[1]
    assert moved.vector_rank == 1 and moved.lexical_rank is None
    # its score lies between its new neighbours, and the named boosts explain it
    assert hits[0].score > moved.score > hits[2].score
    assert math.prod(moved.boosts.values()) / (60 + 1) == pytest.approx(moved.score, rel=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all("floor" not in h.boosts for h in hits if h is not moved)


def test_scored_hits_leave_a_list_alone_in_other_modes_and_a_low_priority_first_hit_to_its_boosts() -> None:
    both = [f"note-{n}" for n in range(5)]
    found = {i: obs(title=i) for i in [*both, "answer"]}
    p = plan(lexical=both, vector=["answer", *both])
    p.query = RecallQuery(text=p.text, limit=5, mode="lexical")
    p.fused = rrf_fuse([r.id for r in p.lexical], [])
    assert "answer" not in [h.observation.title for h in scored_hits(p, found, NOW)]
    # the kNN list's first hit is an assistant's answer (low priority): the list alone would rank
    # the next one first (its boosts decide, as in a kNN-only search), so that one is held instead
    found["answer"] = obs(title="answer", priority="low", created_at=NOW - timedelta(days=400))
    p = plan(lexical=both[1:], vector=["answer", "note-0", *both[1:]])
    titles = [h.observation.title for h in scored_hits(p, found, NOW)]
    assert titles.index("note-0") <= 2


def test_a_lists_first_statement_holds_its_turn() -> None:
    """A list's first hit on a statement unit holds the turn it belongs to (hits are turns)."""

    def unit(key: str, turn: str) -> Any:
        return obs(title=key, key=key, provenance={"source_event_id": f"chat#{turn}"})

    notes = [f"note-{n}" for n in range(5)]
    found = {i: obs(title=i) for i in notes}
    found["turn"] = unit("turn:chat:D3:1", "D3:1")  # BM25 finds the turn's context, late
    found["said"] = unit("unit:statement:chat:D3:1:0", "D3:1")  # kNN finds what was said, first
    p = plan(lexical=[*notes, "turn"], vector=["said", *notes])
    hits = scored_hits(p, found, NOW)
    titles = [h.observation.title for h in hits]
    assert "turn:chat:D3:1" in titles[:3] and "unit:statement:chat:D3:1:0" not in titles  # one place, the turn's
