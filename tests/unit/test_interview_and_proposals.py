"""INTERVIEW mode's and memory proposals' pure rules (issue 20)."""

from __future__ import annotations

from engram.domain.interview import InterviewState, detect, is_question
from engram.domain.observation import ObservationDraft, Scope
from engram.domain.proposals import ProposalReason, approval_reason, proposal_id
from engram.domain.streams import DecisionEngine
from engram.settings import CONFIG_DIR, Settings

ENGINE = DecisionEngine.from_yaml(
    (CONFIG_DIR / "decision_engine.yaml").read_text(encoding="utf-8"), Settings().engram_observation_types
)
SPEC = ENGINE.interview


def test_statements_naming_a_type_are_interviews_questions_are_not() -> None:
    assert detect("Neues Projekt Apollo für Contoso.", SPEC) == ("project", ("neues projekt",))
    assert detect("Bitte ein neues  Kundenprojektteam", SPEC) == ("project", ("neues kundenprojekt",))  # word start
    assert detect("New meeting with Contoso on Friday at 10.", SPEC) == ("event", ("new meeting",))
    assert detect("Das Projekt Apollo startet im Mai.", SPEC) is None  # mentions a project, announces none
    assert detect("Welches neue Projekt hat Contoso?", SPEC) is None
    assert detect("Wann ist der neue Termin mit Müller", SPEC) is None  # a question without "?"
    assert detect("Das Wetter ist schön.", SPEC) is None
    assert is_question("Could you list my projects") and not is_question("Contoso is the customer.")


def test_an_interview_keeps_known_fields_and_names_what_is_missing() -> None:
    state = InterviewState("project", {}).merged({"name": " Apollo ", "colour": "red", "customer": ""}, SPEC)
    assert state.fields == {"name": "Apollo"} and state.missing(SPEC) == ["customer", "deadline"]
    again = InterviewState.from_metadata(state.as_metadata(), SPEC)
    assert again == state and InterviewState.from_metadata({"type": "unknown"}, SPEC) is None


def test_the_coding_strategy_has_its_own_synthesis_profile() -> None:
    assert ENGINE.synthesis_profile("CODING") == "tech_expert" and ENGINE.synthesis_profile("FACT_WHAT") is None


def draft(**kw: object) -> ObservationDraft:
    return ObservationDraft.model_validate({"tenant_id": "t", "user_id": "alice", "title": "x", **kw})


def test_what_needs_approval_and_why() -> None:
    assert approval_reason(draft(confidence=0.7)) is None
    assert approval_reason(draft(scope=Scope.sensitive)) is ProposalReason.sensitive
    assert approval_reason(draft(scope=Scope.team, team_ids=["sales"])) is ProposalReason.team
    assert approval_reason(draft(user_id=None, scope=Scope.public)) is ProposalReason.team
    assert approval_reason(draft(confidence=0.3)) is ProposalReason.low_confidence
    assert proposal_id("e:1", 0) == proposal_id("e:1", 0) != proposal_id("e:1", 1)
