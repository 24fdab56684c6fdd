"""recall_scoring: session support is for conversations between people; a search over chats with
an assistant (an assistant's turn or a statement unit among its candidates) gets none."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engram.domain.conversation import ConversationSession, Turn, derived_units, turn_units
from engram.domain.observation import Observation
from tests.unit import recall_fixtures

DAY = datetime(2025, 1, 6, 9, 30, tzinfo=UTC)
QUESTION = "Which company pays my salary?"


def sessions(other: str) -> list[ConversationSession]:
    budget = [
        Turn("D1:1", "User", "Can you help me set up a monthly budget for my salary?"),
        Turn("D1:2", other, "Sure. Write down what your salary brings in and what each month costs you."),
    ]
    job = [Turn("D2:1", "User", "Not related, but I work for Acme now. What should I cook tonight?")]
    return [ConversationSession("s1", DAY, budget), ConversationSession("s2", DAY + timedelta(days=7), job)]


def units(other: str, assistants: frozenset[str]) -> dict[str, Observation]:
    """The conversation's units by turn id (a statement unit as `<turn>/<n>`)."""
    found = {}
    for draft in turn_units(
        tenant_id="t", user_id="u", conversation_id="c", sessions=sessions(other), assistants=assistants
    ):
        found[(draft.provenance.source_event_id or "").split("#")[1]] = recall_fixtures.stored(draft, DAY)
    for draft in derived_units(
        tenant_id="t", user_id="u", conversation_id="c", sessions=sessions(other), assistants=assistants
    ):
        turn, place = (draft.key or "").removeprefix("unit:statement:c:").rsplit(":", 1)
        found[f"{turn}/{place}"] = recall_fixtures.stored(draft, DAY)
    return found


def session_boosts(found: dict[str, Observation], names: list[str]) -> dict[str, float]:
    ranked = [found[n] for n in names]
    hits = recall_fixtures.scored(QUESTION, ranked, ranked, ranked, DAY, limit=10)
    name_of = {o.id: n for n, o in found.items()}
    return {name_of[h.observation.id]: h.boosts.get("session", 1.0) for h in hits}


def test_a_conversation_between_people_keeps_its_session_support() -> None:
    found = units("Ben", frozenset())
    boosts = session_boosts(found, ["D1:2", "D1:1", "D2:1"])
    assert boosts["D1:1"] > boosts["D2:1"] > 1.0  # the budget session holds more of the fused score


def test_a_search_over_a_chat_with_an_assistant_gets_no_session_support() -> None:
    found = units("Assistant", frozenset({"Assistant"}))
    # the assistant's answer among the candidates
    assert set(session_boosts(found, ["D1:2", "D1:1", "D2:1"]).values()) == {1.0}
    # or only the user's turns, one of them with its statement unit (only such chats get one)
    statement = "D2:1/0"  # "Not related, but I work for Acme now."
    assert set(session_boosts(found, ["D1:1", statement, "D2:1"]).values()) == {1.0}
    # the user's turns alone show no assistant: the search is scored as between people
    assert session_boosts(found, ["D1:1", "D2:1"])["D1:1"] > 1.0
