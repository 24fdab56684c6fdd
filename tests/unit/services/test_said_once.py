"""recall_scoring.said_once: a formula said in many turns takes one place among the hits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engram.domain.conversation import ConversationSession, Turn, turn_units
from engram.domain.observation import ObservationDraft
from tests.unit import recall_fixtures

DAY = datetime(2025, 1, 6, 9, 30, tzinfo=UTC)
FORMULA = "Could you explain the second point in more detail?"
LONG = "and so on " * 60
REPLY = "Of course, here are the details you asked for."


def sessions() -> list[ConversationSession]:
    days = [
        [Turn("D1:1", "User", FORMULA), Turn("D1:2", "Assistant", REPLY), Turn("D1:3", "User", "We fly in April.")],
        [Turn("D2:1", "User", FORMULA), Turn("D2:2", "Assistant", FORMULA)],  # another speaker's words
        [Turn("D3:1", "User", f"  {FORMULA.upper()} "), Turn("D3:2", "Assistant", REPLY), Turn("D3:3", "User", LONG)],
        [Turn("D4:1", "User", LONG)],  # a clipped title ("...") is never the same words
    ]
    return [ConversationSession(f"s{n}", DAY + timedelta(days=7 * n), t) for n, t in enumerate(days, 1)]


def test_a_formula_said_in_several_turns_takes_one_place_and_frees_the_others() -> None:
    drafts = turn_units(tenant_id="t", user_id="u", conversation_id="c", sessions=sessions())
    units = {d.key: recall_fixtures.stored(d, DAY) for d in drafts}
    by_turn = {(o.provenance.source_event_id or "").split("#")[1]: o for o in units.values()}
    note = recall_fixtures.stored(ObservationDraft(tenant_id="t", user_id="u", title=f"User: {FORMULA}"), DAY)
    order = [by_turn[t] for t in ("D1:1", "D2:1", "D3:1", "D2:2", "D3:3", "D4:1")] + [note, by_turn["D1:3"]]
    assert all(o.title.endswith("…") for o in order[4:6]) and order[4].title == order[5].title
    hits = recall_fixtures.scored("What do we pack?", order, [], order, DAY, limit=6)
    said = [(h.observation.provenance.source_event_id or "note").split("#")[-1] for h in hits]
    # the user's formula once, at its best place; the assistant's own turn, both clipped turns, a
    # note of the same title (not a unit: not the same memory), and the fact in a freed place
    assert said[0] == "D1:1" and sorted(said) == ["D1:1", "D1:3", "D2:2", "D3:3", "D4:1", "note"]
