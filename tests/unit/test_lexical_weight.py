"""The BM25 list's weight in the fusion comes from how much of the query its best match covers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.domain.ranking import LEXICAL_FULL_COVERAGE, lexical_weight, query_words, rrf_fuse
from engram.domain.recall import RecallQuery
from engram.domain.scopes import Visibility
from engram.domain.search import Ranked, SearchFilter
from engram.services.recall_plan import Plan

NOW = datetime(2026, 12, 3, tzinfo=UTC)


def test_weight_rises_with_coverage_up_to_full() -> None:
    assert lexical_weight(None) == 1.0  # an index that cannot tell: plain RRF
    assert lexical_weight(LEXICAL_FULL_COVERAGE) == 1.0 and lexical_weight(2.5) == 1.0
    assert lexical_weight(LEXICAL_FULL_COVERAGE / 2) == pytest.approx(0.5)
    assert lexical_weight(0.0) == 0.0 and lexical_weight(-1.0) == 0.0


@given(st.floats(min_value=0, max_value=10), st.floats(min_value=0, max_value=10))
def test_weight_is_monotone_and_bounded(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert 0.0 <= lexical_weight(lo) <= lexical_weight(hi) <= 1.0


def test_query_words_are_distinct_casefolded_words() -> None:
    assert query_words("Which instrument am I learning? Which STRASSE, Straße") == [
        "which",
        "instrument",
        "am",
        "i",
        "learning",
        "strasse",
    ]


def test_weighted_rrf_scales_the_lexical_part_only() -> None:
    by_id = {f.id: f for f in rrf_fuse(["a", "b"], ["b", "c"], lexical_weight=0.5)}
    assert by_id["a"].rrf == pytest.approx(0.5 / 61)
    assert by_id["b"].rrf == pytest.approx(0.5 / 62 + 1 / 61)
    assert by_id["c"].rrf == pytest.approx(1 / 62)


def plan(mode: str, lexical: list[Ranked], vector: list[Ranked]) -> Plan:
    visibility = Visibility(tenant_id="t", user_id="u", teams=frozenset(), include_sensitive=False)
    query = RecallQuery(text="q", limit=10, mode=mode)  # type: ignore[arg-type]
    p = Plan(query, "q", "q", visibility, SearchFilter(now=NOW), pool=20, lexical=lexical, vector=vector)
    p.fuse()
    return p


def lists(coverage: float | None) -> tuple[list[Ranked], list[Ranked]]:
    """BM25 ranks "x" first; kNN ranks "y" first and "x" eighth."""
    lexical = [Ranked("x", 3.0, None, coverage), Ranked("z", 2.0, None, coverage)]
    vector = [Ranked(v, 0.9 - i / 100) for i, v in enumerate(["y", "a", "b", "c", "d", "e", "f", "x"])]
    return lexical, vector


def test_a_list_that_covers_the_query_fuses_as_plain_rrf() -> None:
    for coverage in (None, LEXICAL_FULL_COVERAGE, 0.9):
        assert plan("hybrid", *lists(coverage)).fused[0].id == "x"  # found by both lists


def test_a_list_that_covers_little_of_the_query_cannot_outvote_the_knn_head() -> None:
    fused = plan("hybrid", *lists(0.015)).fused  # weight 0.05
    assert [f.id for f in fused[:2]] == ["y", "a"]
    assert {f.id for f in fused} >= {"x", "z"}  # still candidates, only lower


def test_lexical_mode_ranks_by_bm25_whatever_the_coverage() -> None:
    lexical, _ = lists(0.01)
    assert [f.id for f in plan("lexical", lexical, []).fused] == ["x", "z"]
