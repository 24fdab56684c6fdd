"""A session summary's layout is no word to search by (`domain/session_summary`, `search.body_text`)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from engram.domain import session_summary
from engram.domain.chat_extraction import Origin, Turn, offline_summary, summary_draft
from engram.domain.observation import Observation
from engram.domain.search import body_text, passage_text
from tests.unit.recall_fixtures import stored

NOW = datetime(2026, 5, 4, 9, 30, tzinfo=UTC)


def summary_observation(language: str = "en") -> Observation:
    turns = [
        Turn("user", "Can you help me set up a monthly budget? I drive a grey Ford Focus."),
        Turn("assistant", "Sure. Next, we need to list your fixed costs."),
        Turn("user", "Could you make it a bit shorter?"),
        Turn("assistant", "Of course."),
    ]
    origin = Origin("t1", "alice", uuid.uuid4(), None, "evt-1", said_at=NOW)
    draft = summary_draft(offline_summary(turns, language), origin, uuid.uuid4())
    return stored(draft, NOW)


def test_the_stored_narrative_keeps_its_sections_and_the_search_text_drops_them() -> None:
    obs = summary_observation()
    assert obs.narrative.splitlines()[0].startswith("Request: Can you help me set up a monthly budget?")
    assert "Completed: 2 answer(s) to 2 message(s)" in obs.narrative
    assert "Notes: offline summary (no language model)" in obs.narrative
    body = body_text(obs)
    assert "Can you help me set up a monthly budget?" in body and "grey Ford Focus" in body
    for layout in ("Request:", "Investigated:", "Learned:", "Next steps:", "answer(s)", "language model"):
        assert layout not in body
    assert obs.discovery_tokens == []  # the summary's model is the session summary's record, not a keyword


def test_german_summaries_drop_the_same_sections() -> None:
    body = body_text(summary_observation("de"))
    assert "Sprachmodell" not in body and "Nachricht(en)" not in body
    assert "monthly budget" in body


def test_the_vector_keeps_the_layout() -> None:
    """Measured (bench/RESULTS.md, part 31): embedded without its labels a summary ranked higher
    among the candidates of questions it seldom answers."""
    assert "Request: Can you help me" in passage_text(summary_observation())


def test_lines_that_are_no_section_are_searched_as_they_are() -> None:
    text = "Request: a budget\nNotes: offline summary\nAdded by hand: call the bank\nCompleted: 2 answers"
    assert session_summary.searched(text) == "a budget\nAdded by hand: call the bank"


def test_other_observations_are_searched_whole() -> None:
    obs = summary_observation().model_copy(update={"tags": ["budget"]})
    assert "Notes: offline summary (no language model)" in body_text(obs)


def test_a_narrative_takes_only_the_known_sections() -> None:
    assert session_summary.narrative([("Request", "a budget"), ("Learned", " "), ("Notes", "offline")]) == (
        "Request: a budget\nNotes: offline"
    )
    with pytest.raises(ValueError, match="Summary"):
        session_summary.narrative([("Summary", "everything")])
