"""Pure recall rules: fusion, BM25 parts, boosts, recall text, query validation, turn units."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram.domain.conversation import ConversationSession, Turn, turn_id_of, turn_units
from engram.domain.errors import Unprocessable
from engram.domain.language import detect_language, search_config
from engram.domain.observation import Observation
from engram.domain.ranking import (
    SESSION_WEIGHT,
    TAG_WEIGHT,
    bm25_idf,
    bm25_impact,
    boosted,
    boosts,
    padded_words,
    rrf_fuse,
    session_support,
    support_session,
    tag_support,
)
from engram.domain.recall import RecallQuery, SearchHit
from engram.domain.recall_text import UNVERIFIED, estimate_tokens, render_recall_text
from engram.domain.scopes import Visibility
from engram.domain.search import SearchFilter
from engram.services.recall_plan import Plan, validate_query_text
from engram.services.recall_scoring import scored_hits
from functions.memory_api.retrieval import parse_within

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def obs(**kw: Any) -> Observation:
    base: dict[str, Any] = {
        "id": uuid.uuid4(),
        "tenant_id": "t",
        "user_id": "alice",
        "team_ids": [],
        "type": "fact",
        "title": "a title",
        "narrative": "",
        "facts": [],
        "concepts": [],
        "tags": [],
        "key": None,
        "content_hash": "h",
        "discovery_tokens": [],
        "relevance_count": 0,
        "priority": "normal",
        "source": "user",
        "verified": True,
        "confidence": 1.0,
        "scope": "private",
        "trigger_source": "manual",
        "provenance": {},
        "valid_from": None,
        "expires_at": None,
        "superseded_by": None,
        "created_at": NOW - timedelta(days=1),
        "updated_at": NOW - timedelta(days=1),
    }
    base.update(kw)
    return Observation(**base)


def hit(o: Observation, score: float = 1.0) -> SearchHit:
    return SearchHit(observation=o, score=score, lexical_rank=1, vector_rank=None)


def test_rrf_adds_reciprocal_ranks_with_k_60() -> None:
    fused = rrf_fuse(["a", "b", "c"], ["c", "a"])
    by_id = {f.id: f for f in fused}
    assert by_id["a"].rrf == pytest.approx(1 / 61 + 1 / 62)
    assert by_id["c"].rrf == pytest.approx(1 / 63 + 1 / 61)
    assert by_id["b"].rrf == pytest.approx(1 / 62) and by_id["b"].vector_rank is None
    assert [f.id for f in fused] == ["a", "c", "b"]
    assert rrf_fuse([], []) == []


def test_bm25_parts() -> None:
    assert bm25_idf(100, 1) > bm25_idf(100, 50) > 0
    assert bm25_idf(10, 10) > 0  # never negative
    short, long = bm25_impact(1, 5, 10), bm25_impact(1, 40, 10)
    assert short > long  # length normalisation
    assert bm25_impact(10, 10, 10) < 10 * bm25_impact(1, 10, 10)  # saturation


def test_boosts_order_priority_feedback_and_recency() -> None:
    base = boosted(1.0, boosts(obs(), NOW))
    assert boosted(1.0, boosts(obs(priority="critical"), NOW)) > boosted(1.0, boosts(obs(priority="high"), NOW)) > base
    assert boosted(1.0, boosts(obs(priority="low"), NOW)) < base
    assert boosted(1.0, boosts(obs(verified=False), NOW)) < base
    assert boosted(1.0, boosts(obs(cited_count=3, confirmed_count=2), NOW)) > base
    assert boosted(1.0, boosts(obs(rejected_count=3), NOW)) < base
    assert boosted(1.0, boosts(obs(relevance_count=20), NOW)) > base
    old = obs(created_at=NOW - timedelta(days=400), updated_at=NOW - timedelta(days=400))
    assert boosted(1.0, boosts(old, NOW)) < base
    # recency counts from when it was said: an old event written today is old
    said_long_ago = obs(said_at=NOW - timedelta(days=400))
    assert boosts(said_long_ago, NOW)["recency"] == boosts(old, NOW)["recency"]
    assert boosts(obs(type="decision"), NOW, {"decision": 1.5})["type"] == 1.5
    assert "type" not in boosts(obs(), NOW, {"decision": 1.5})


def test_recall_text_orders_marks_tags_and_budget() -> None:
    hits = [
        hit(obs(title="normal old", created_at=NOW - timedelta(days=30))),
        hit(obs(title="normal new", verified=False, tags=["billing", "Müller"])),
        hit(obs(title="critical one", priority="critical", narrative="Never deploy on Fridays.")),
    ]
    text = render_recall_text(hits)
    lines = text.splitlines()
    assert lines[0] == "Relevant memories (3):"
    assert lines[1].startswith("- [fact] critical one [critical]")
    assert "Never deploy on Fridays." in lines[2]
    assert text.index("normal new") < text.index("normal old")
    assert f"normal new {UNVERIFIED}" in text and "tags: billing, Müller" in text
    assert UNVERIFIED not in text.split("normal new")[0]
    many = [hit(obs(title=f"entry {i} " + "word " * 40)) for i in range(50)]
    small = render_recall_text(many, token_budget=300)
    assert estimate_tokens(small) <= 300 and 0 < small.count("\n- [") < 50
    assert render_recall_text([]) == ""


def test_over_the_budget_the_least_relevant_of_a_priority_are_left_out_not_the_oldest() -> None:
    """The hits come best first; what fits is chosen by priority, then that order, and shown by
    priority, then the newest first (R-7.3)."""
    words = "word " * 30
    best_old = hit(obs(title="best but old " + words, created_at=NOW - timedelta(days=300)))
    second = hit(obs(title="second " + words, created_at=NOW - timedelta(days=200)))
    worst_new = [hit(obs(title=f"weak but new {i} " + words, created_at=NOW - timedelta(days=i))) for i in range(3)]
    low = hit(obs(title="low priority " + words, priority="low"))
    critical = hit(
        obs(title="critical but weakest " + words, priority="critical", created_at=NOW - timedelta(days=900))
    )
    hits = [best_old, second, low, *worst_new, critical]
    full = estimate_tokens(render_recall_text(hits[:1], header=None))
    text = render_recall_text(hits, token_budget=3 * full + 12, header=None)  # three entries
    titles = [line.split("] ", 1)[1].split(" word")[0] for line in text.splitlines() if line.startswith("- [")]
    assert titles == ["critical but weakest", "second", "best but old"]


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "empty"), ("   ", "empty"), ("x" * 100_000, "at most"), ("hello\x00", r"U\+0000"), ("a\x1bb", r"U\+001B")],
)
def test_bad_queries_are_unprocessable(text: str, message: str) -> None:
    with pytest.raises(Unprocessable, match=message) as info:
        validate_query_text(text, "query.q")
    assert info.value.field == "query.q"


def test_good_query_is_trimmed() -> None:
    assert validate_query_text("  Müller\tinvoices\n ") == "Müller invoices"


def test_within() -> None:
    assert parse_within("7d") == timedelta(days=7)
    assert parse_within("12h") == timedelta(hours=12)
    with pytest.raises(Unprocessable):
        parse_within("soon")


def test_language_detection() -> None:
    assert search_config(detect_language("Die Rechnung wird nicht mit der Post verschickt")) == "german"
    assert search_config(detect_language("The invoice is not sent by mail")) == "english"


def test_turn_units_carry_context_date_speaker_and_provenance() -> None:
    day = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    turns = [
        Turn("D1:1", "Caroline", "I went to a support group yesterday."),
        Turn("D1:2", "Melanie", "That sounds powerful!", image_caption="a photo of a sunset"),
        Turn("D1:3", "Caroline", "It really was."),
    ]
    drafts = turn_units(
        tenant_id="t", user_id="u", conversation_id="conv-1", sessions=[ConversationSession("s1", day, turns)], window=1
    )
    assert len(drafts) == 3
    middle = drafts[1]
    assert middle.title == "Melanie: That sounds powerful! [shares a photo: a photo of a sunset]"
    assert (
        middle.narrative == "On 8 May 2023, Melanie said: That sounds powerful! [shares a photo: a photo of a sunset]"
    )
    assert middle.discovery_tokens == [
        "Before, Caroline: I went to a support group yesterday.",
        "After, Caroline: It really was.",
    ]
    assert middle.valid_from == day and middle.tags == ["melanie"] and middle.trigger_source.value == "chat"
    assert turn_id_of(middle.provenance.source_event_id) == "D1:2"
    assert middle.key == "turn:conv-1:D1:2"
    assert [t.split(",")[0] for t in drafts[0].discovery_tokens] == ["After"]
    assert [t.split(",")[0] for t in drafts[2].discovery_tokens] == ["Before"]
    long = turn_units(
        tenant_id="t",
        user_id="u",
        conversation_id="c",
        sessions=[ConversationSession("s", day, [Turn("D1:1", "A", "word " * 90), Turn("D1:2", "B", "hi")])],
    )
    wide = turn_units(
        tenant_id="t", user_id="u", conversation_id="c", sessions=[ConversationSession("s1", day, turns)]
    )  # default window: two turns either side
    assert [t.split(",")[0] for t in wide[0].discovery_tokens] == ["After", "After"]
    assert all(len(t) <= 200 for t in long[1].discovery_tokens) and len(long[1].discovery_tokens) == 3
    # the turns of one session share a stable session id (recall's session support), other sessions differ
    again = turn_units(
        tenant_id="t", user_id="u", conversation_id="conv-1", sessions=[ConversationSession("s1", day, turns)]
    )
    other = turn_units(
        tenant_id="t", user_id="u", conversation_id="conv-1", sessions=[ConversationSession("s2", day, turns)]
    )
    assert len({d.provenance.session_id for d in drafts}) == 1 and drafts[0].provenance.session_id is not None
    assert again[0].provenance.session_id == drafts[0].provenance.session_id != other[0].provenance.session_id


def test_session_support_lifts_candidates_of_strong_sessions() -> None:
    support = session_support([("a", 0.03, "s1"), ("b", 0.02, "s1"), ("c", 0.04, "s2"), ("d", 0.01, None)])
    assert support["a"] == support["b"] == pytest.approx(1 + SESSION_WEIGHT)  # s1 holds the most fused score
    assert support["c"] == pytest.approx(1 + SESSION_WEIGHT * 0.04 / 0.05)
    assert support["d"] == 1.0  # no session, no support
    assert session_support([]) == {} and session_support([("x", 0.0, "s")]) == {"x": 1.0}


def test_a_low_priority_memory_neither_lends_nor_takes_session_support() -> None:
    budget, job = uuid.uuid4(), uuid.uuid4()
    assert support_session(obs(provenance={"session_id": budget})) == budget
    assert support_session(obs(priority="low", provenance={"session_id": budget})) is None
    # a question on the budget session's topic: its two assistant answers top both lists, its
    # user turn comes next; the user's fact was said in another session
    found = {
        "answer-1": obs(priority="low", provenance={"session_id": budget}),
        "answer-2": obs(priority="low", provenance={"session_id": budget}),
        "request": obs(provenance={"session_id": budget}),
        "fact": obs(provenance={"session_id": job}),
    }
    plan = Plan(
        RecallQuery(text="Which company pays my salary?", limit=10, mode="hybrid"),
        "Which company pays my salary?",
        "Which company pays my salary?",
        Visibility(tenant_id="t", user_id="alice", teams=frozenset(), include_sensitive=False),
        SearchFilter(now=NOW),
        pool=20,
    )
    plan.lexical = []
    plan.fused = rrf_fuse(["answer-1", "answer-2"], ["answer-1", "answer-2", "fact", "request"])
    hits = {h.observation.id: h for h in scored_hits(plan, found, NOW)}
    by_name = {name: hits[o.id] for name, o in found.items()}
    assert "session" not in by_name["answer-1"].boosts and "session" not in by_name["answer-2"].boosts
    # the request's session holds only its own score now, not its answers': the fact's is stronger
    assert by_name["fact"].boosts["session"] == pytest.approx(1 + SESSION_WEIGHT)
    assert by_name["request"].boosts["session"] == pytest.approx(1 + SESSION_WEIGHT * 63 / 64)
    # counted as before, the answers' scores made the budget session the strongest by far
    before = session_support([(f.id, f.rrf, found[f.id].provenance.session_id) for f in plan.fused])
    assert before["answer-1"] == before["request"] == pytest.approx(1 + SESSION_WEIGHT)
    assert before["fact"] < 1 + SESSION_WEIGHT / 2


def test_tag_support_when_the_query_says_a_tag_as_whole_words() -> None:
    query = padded_words("What did Melanie's team decide about the Müller GmbH invoice?")
    assert query == " what did melanie s team decide about the müller gmbh invoice "
    assert tag_support(["melanie"], query) == 1 + TAG_WEIGHT
    assert tag_support(["Müller GmbH"], query) == 1 + TAG_WEIGHT  # several words, any case
    assert tag_support(["mel", "invoices", "gmbh invoice x"], query) == 1.0  # parts of words do not count
    assert tag_support([], query) == tag_support(["--"], query) == 1.0
