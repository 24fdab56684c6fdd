"""Auto model selection (R-8.1) and multi-stream routing rules (R-7.4), German and English."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.bootstrap import load_llm_config
from engram.domain.observation import Observation, Priority, Scope
from engram.domain.recall import SearchHit
from engram.domain.routing import RoutingRules, route
from engram.domain.scopes import Permission, Principal
from engram.domain.streams import (
    MIN_STREAM_CHARS,
    DecisionEngine,
    Intent,
    StreamResult,
    dedupe_across_streams,
    fair_shares,
    keyword_intent,
    memory_context,
    parse_intent,
    render_observations,
    standard_context_filter,
)
from engram.services.gateway import TelemetryBuffer
from engram.services.multistream import MultiStreamRecall
from engram.settings import CONFIG_DIR, Settings
from tests.fakes import observation
from tests.fakes.recall import FakeRecall


@pytest.fixture(scope="module")
def rules() -> RoutingRules:
    return RoutingRules.from_config(load_llm_config(Settings()).routing)


@pytest.fixture(scope="module")
def engine() -> DecisionEngine:
    text = (CONFIG_DIR / "decision_engine.yaml").read_text()
    return DecisionEngine.from_yaml(text, Settings().engram_observation_types)


@pytest.mark.parametrize(
    ("prompt", "tier"),
    [
        ("Hallo!", "trivial"),
        ("Guten Morgen", "trivial"),
        ("hi there", "trivial"),
        ("Thanks a lot!", "trivial"),
        ("Wie spät ist es in Tokio?", "trivial"),
        ("What time is it?", "trivial"),
        ("Wir müssen die Architektur des Abrechnungssystems überdenken, bevor wir neue Mandanten anbinden.", "complex"),
        ("Welche Risiken hat die Migration?", "complex"),
        ("Bitte eine Risikobewertung für den Umzug", "complex"),
        ("Should we refactor the billing module before the release?", "complex"),
        ("What is the tradeoff between Postgres and Elasticsearch here?", "complex"),
        ("Kannst du mir bitte eine kurze Zusammenfassung der letzten Bestellung von Müller schreiben?", "default"),
        ("Please write a short summary of the last order from Müller Maschinenbau for the sales team.", "default"),
    ],
)
def test_routing_tiers_in_german_and_english(rules: RoutingRules, prompt: str, tier: str) -> None:
    decision = route(prompt, rules)
    assert decision.tier == tier, decision
    assert decision.profile == {"trivial": "chat_default", "default": "chat_default", "complex": "chat_smart"}[tier]
    assert 0 < decision.confidence <= 1 and decision.reason


def test_complex_routing_names_its_keywords(rules: RoutingRules) -> None:
    decision = route("Strategie und Risiko der neuen Architektur", rules)
    assert set(decision.matched) == {"strategie", "risiko", "architektur"}
    assert decision.confidence > route("Risiko?", rules).confidence


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ("Soll ich das Angebot annehmen oder ablehnen?", "DECISION"),
        ("Should we switch to quarterly billing?", "DECISION"),
        ("Wann ist die Frist für die Steuererklärung?", "FACT_WHEN"),
        ("When did we sign the contract?", "FACT_WHEN"),
        ("Was ist unser Abrechnungsmodell?", "FACT_WHAT"),
        ("Ich bin total überfordert mit dem Projekt", "EMPATHY"),
        ("The Python function throws an exception in the API endpoint", "CODING"),
    ],
)
def test_keyword_fast_path(engine: DecisionEngine, text: str, intent: str) -> None:
    found = keyword_intent(text, engine)
    assert found is not None and found.name == intent and found.source == "keyword"


def test_no_keyword_means_no_fast_path(engine: DecisionEngine) -> None:
    assert keyword_intent("Müller Maschinenbau Stuttgart", engine) is None


@pytest.mark.parametrize(
    ("output", "intent"),
    [
        ("CODING", "CODING"),
        ("CODING[/S]", "CODING"),
        ("**decision**", "DECISION"),
        ("Intent: fact what", "FACT_WHAT"),
        ("<s>FACT_WHEN</s>", "FACT_WHEN"),
        ("`EMPATHY`\n", "EMPATHY"),
        ("I am not sure", None),
        ("", None),
    ],
)
def test_tolerant_intent_parser(engine: DecisionEngine, output: str, intent: str | None) -> None:
    assert parse_intent(output, engine.intents) == intent


def test_decision_engine_config_is_checked() -> None:
    bad_stream = "strategies:\n  FACT_WHAT: {streams: [nope]}\nstreams:\n  facts: {types: [fact]}\n"
    with pytest.raises(ValueError, match="unknown stream"):
        DecisionEngine.from_yaml(bad_stream)
    bad_type = "strategies:\n  FACT_WHAT: {streams: [facts]}\nstreams:\n  facts: {types: [gossip]}\n"
    with pytest.raises(ValueError, match="unknown observation type"):
        DecisionEngine.from_yaml(bad_type, frozenset({"fact"}))


def _hit(obs: Observation, score: float = 1.0, stream: str | None = None) -> SearchHit:
    return SearchHit(obs, score, None, None, stream_origin=stream)


def test_standard_context_never_holds_sensitive_or_foreign_memories() -> None:
    tenant = "t1"
    hr = Principal(tenant, "hr", permissions=frozenset({Permission.view_sensitive.value}))
    plain = Principal(tenant, "bob")
    hits = [
        _hit(observation(tenant, "Salary of Bob", scope=Scope.sensitive, user_id="hr")),
        _hit(observation(tenant, "Tenant-wide fact")),
        _hit(observation(tenant, "Alice's private note", scope=Scope.private, user_id="alice")),
        _hit(observation("other-tenant", "Another tenant's fact")),
    ]
    assert [h.observation.title for h in standard_context_filter(hr, hits)] == ["Tenant-wide fact"]
    assert [h.observation.title for h in standard_context_filter(plain, hits)] == ["Tenant-wide fact"]


def test_an_observation_is_kept_once_in_its_best_stream() -> None:
    shared = observation("t", "Shared decision", type="decision")
    facts = StreamResult("facts", [_hit(shared, 0.5, "facts")])
    risk = StreamResult(
        "risk", [_hit(shared, 0.9, "risk"), _hit(observation("t", "Other", type="mistake"), 0.1, "risk")]
    )
    dedupe_across_streams([facts, risk])
    assert facts.hits == [] and [h.observation.title for h in risk.hits] == ["Shared decision", "Other"]


def test_memory_text_orders_by_priority_then_recency_and_marks_unverified() -> None:
    old_critical = observation("t", "Critical rule", priority=Priority.critical, age_days=30)
    new_normal = observation("t", "Fresh fact", age_days=0.1, verified=False, tags=["billing"])
    old_normal = observation("t", "Old fact", age_days=10)
    text = render_observations([old_normal, new_normal, old_critical], 10_000)
    entries = [line for line in text.splitlines() if line.startswith("- ")]
    assert entries == ["- [fact] Critical rule [critical]", "- [fact] Fresh fact (unverified)", "- [fact] Old fact"]
    assert "  tags: billing" in text  # the memory API's recall format, shared (domain.recall_text)
    # each with its day, so the model can tell which of two that disagree holds now
    assert f"as of {old_normal.created_at.date().isoformat()}" in text.split("- [fact] Old fact", 1)[1]
    budgeted = render_observations([old_normal, new_normal, old_critical], 120)  # one entry with its provenance
    assert [line for line in budgeted.splitlines() if line.startswith("- ")] == ["- [fact] Critical rule [critical]"]


def test_memory_context_has_a_section_per_stream() -> None:
    facts = StreamResult("facts", text="- [fact] A")
    empty = StreamResult("risk", text="")
    block = memory_context([facts, empty], "FACT_WHAT")
    assert block is not None and "stream: facts" in block and "stream: risk" not in block
    assert memory_context([empty], "FACT_WHAT") is None


@pytest.mark.parametrize(
    ("needs", "shares"),
    [
        ([0, 0, 3000, 9000], [0, 0, 3000, 5000]),  # two empty streams leave their shares
        ([2000] * 4, [2000] * 4),
        ([9000] * 4, [2000] * 4),
        ([100, 9000, 9000], [100, 3950, 3950]),
        ([9000] * 30, [MIN_STREAM_CHARS] * 30),  # never below the floor, whatever the budget
        ([], []),
    ],
)
def test_the_memory_budget_is_split_by_need(needs: list[int], shares: list[int]) -> None:
    assert fair_shares(needs, 8000) == shares


@given(needs=st.lists(st.integers(0, 20_000), max_size=8), budget=st.integers(500, 20_000))
def test_fair_shares_give_no_stream_less_than_a_bigger_one_unless_it_needs_less(needs: list[int], budget: int) -> None:
    shares = fair_shares(needs, budget)
    total = max(budget, MIN_STREAM_CHARS * len(needs))
    assert sum(shares) <= total and all(0 <= share <= need for share, need in zip(shares, needs, strict=True))
    cut = [share for share, need in zip(shares, needs, strict=True) if share < need]
    if cut:  # the budget is used up (but for rounding), and a cut stream is never below another's share
        assert total - sum(shares) < len(needs)
        assert max(shares) <= min(cut) + 1


async def test_a_stream_that_finds_nothing_leaves_its_share_of_the_block_to_the_others(
    engine: DecisionEngine,
) -> None:
    answers = [
        observation(
            "t", f"Suggestion {n} for the invoice: " + "send a friendly reminder after a week. " * 7, type="passage"
        )
        for n in range(8)
    ]
    recall = FakeRecall(answers)
    streams = MultiStreamRecall(engine, SimpleNamespace(available=False))  # type: ignore[arg-type]
    principal = Principal("t", "alice", permissions=frozenset({Permission.read_observation}))
    message = "What did you suggest for the invoice?"
    result = await streams.recall(principal, recall, message, TelemetryBuffer(), intent=Intent("FACT_WHAT", "keyword"))
    by_name = {r.name: r for r in result.streams}
    assert set(by_name) == {"facts", "tech", "biography", "answers"}
    assert not any(by_name[n].hits for n in ("facts", "tech", "biography"))  # no passages there
    # an equal quarter of the block would hold five of the eight answers; the empty streams' shares hold all
    assert len(by_name["answers"].shown) == 8
    assert engine.memory_budget_chars // 4 < len(by_name["answers"].text) <= engine.memory_budget_chars
