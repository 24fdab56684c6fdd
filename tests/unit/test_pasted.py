"""`bench.pasted`: pasted texts in user turns that are no question's evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import xquad
from bench.chatgen import generate
from bench.pasted import PASTED, REQUEST, with_pastes

XQUAD = Path(xquad.DEFAULT_DATA)


def _turns(sample: dict) -> dict[str, dict]:
    return {
        t["dia_id"]: t
        for key, session in sample["conversation"].items()
        if key.startswith("session_") and isinstance(session, list)
        for t in session
    }


@pytest.mark.skipif(not (XQUAD / "xquad.en.json").exists(), reason="the texts are read from ../shared/bench/xquad")
def test_pasted_texts_go_to_user_turns_that_are_no_evidence() -> None:
    samples = generate(21, 2)
    pasted = with_pastes(samples, 2, 3000, XQUAD, 21)
    assert with_pastes(samples, 2, 3000, XQUAD, 21) == pasted  # the seed decides
    assert _turns(samples[0]) != _turns(pasted[0]) and samples != pasted  # the input is left as it was
    seen: set[str] = set()
    for before, after in zip(samples, pasted, strict=True):
        language = "de" if "-de-" in before["sample_id"] else "en"
        evidence = {e for qa in before["qa"] for e in qa["evidence"]}
        old, new = _turns(before), _turns(after)
        changed = [d for d in old if old[d]["text"] != new[d]["text"]]
        assert len(changed) == 2 and not set(changed) & evidence
        for d in changed:
            assert old[d]["speaker"] == before["conversation"]["speaker_a"]
            text = new[d]["text"]
            assert text.startswith(f"{old[d]['text']} {REQUEST[language]} ") and len(text) - len(old[d]["text"]) >= 3000
            tail = text[-200:]
            assert tail not in seen  # no paragraph pasted twice
            seen.add(tail)
        assert after["qa"] == before["qa"]


@pytest.mark.skipif(not (XQUAD / "xquad.en.json").exists(), reason="the texts are read from ../shared/bench/xquad")
def test_questions_about_a_pasted_text_have_its_turn_as_evidence() -> None:
    samples = generate(21, 1)
    pasted = with_pastes(samples, 2, 3000, XQUAD, 21, questions=3)
    for before, after in zip(samples, pasted, strict=True):
        language = "de" if "-de-" in before["sample_id"] else "en"
        added = after["qa"][len(before["qa"]) :]
        assert after["qa"][: len(before["qa"])] == before["qa"] and len(added) == 6
        turns = _turns(after)
        for qa in added:
            assert qa["category"] == PASTED[language] and qa["question"].strip()
            (turn,) = qa["evidence"]
            assert REQUEST[language] in turns[turn]["text"]
