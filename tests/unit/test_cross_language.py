"""The cross-language gate of fusion: BM25 evidence counts only between texts of one language."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.domain.language import _ENGLISH, _GERMAN, detect_language, language_of
from engram.domain.ranking import RRF_K, Fused, cross_language_factor, memory_language, rrf_fuse
from tests.unit.test_ranking_and_recall_text import obs


def test_questions_and_memories_get_their_language_from_function_words() -> None:
    assert language_of("Wann hat die Müller GmbH zuletzt bestellt?") == "de"
    assert language_of("Welche Auszeichnung erhielt Marlee Matlin?") == "de"  # question words count
    assert language_of("When did Müller GmbH last order?") == "en"  # a name's umlaut does not
    assert language_of("Which shaman's proclamation aided Temüjin's rise?") == "en"
    assert language_of("Müller GmbH") is None and language_of("Rhodophyta?") is None and language_of("") is None
    assert language_of("Was ist in Berlin?") == "de"  # "was" and "in" are words of both: neutral


def test_the_stemmer_choice_still_falls_back_to_english_and_lets_umlauts_break_ties() -> None:
    assert detect_language("Müller GmbH") == "de"
    assert detect_language("Rhodophyta") == "en"
    assert detect_language("Die Rechnung wird nicht mit der Post verschickt") == "de"
    assert detect_language("The invoice is not sent by mail") == "en"


def test_the_function_word_lists_share_no_word() -> None:
    assert not _GERMAN & _ENGLISH


def test_a_memory_language_is_read_from_its_title_and_narrative() -> None:
    assert memory_language(obs(title="Kunde", narrative="Die Firma bestellt jeden März bei uns.")) == "de"
    assert memory_language(obs(title="Customer", narrative="The company orders from us every March.")) == "en"
    assert memory_language(obs(title="Müller GmbH", narrative="")) is None


def test_within_one_language_or_an_unknown_one_fusion_is_plain_rrf() -> None:
    both = Fused("a", 1 / (RRF_K + 1) + 1 / (RRF_K + 3), 1, 3)
    assert cross_language_factor(both, "de", "de") == 1.0
    assert cross_language_factor(both, None, "en") == 1.0
    assert cross_language_factor(both, "de", None) == 1.0
    vector_only = Fused("b", 1 / (RRF_K + 2), None, 2)
    assert cross_language_factor(vector_only, "de", "en") == 1.0


def test_across_languages_only_the_knn_part_of_a_fused_score_counts() -> None:
    both = Fused("a", 1 / (RRF_K + 1) + 1 / (RRF_K + 3), 1, 3)
    assert both.rrf * cross_language_factor(both, "de", "en") == pytest.approx(1 / (RRF_K + 3))
    lexical_only = Fused("c", 1 / (RRF_K + 1), 1, None)
    assert cross_language_factor(lexical_only, "en", "de") == 0.0


ids = st.lists(st.sampled_from("abcdefghijkl"), max_size=12, unique=True)


@given(lexical=ids, vector=ids)
def test_across_languages_the_fused_order_is_the_knn_order(lexical: list[str], vector: list[str]) -> None:
    """A German question over English memories: whatever BM25 matched, the kNN list decides."""
    fused = rrf_fuse(lexical, vector)
    gated = sorted(fused, key=lambda f: -f.rrf * cross_language_factor(f, "de", "en"))
    assert [f.id for f in gated][: len(vector)] == vector


@given(lexical=ids, vector=ids)
def test_gating_never_reorders_memories_of_the_query_language(lexical: list[str], vector: list[str]) -> None:
    fused = rrf_fuse(lexical, vector)
    assert all(cross_language_factor(f, "en", "en") == 1.0 for f in fused)
