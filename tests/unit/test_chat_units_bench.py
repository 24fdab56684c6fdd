"""`bench.chat_units --long`: one long message's derived units with and without the bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import chat_units, xquad
from engram.domain.memory_units import EMBEDDED_TURN_CHARS

XQUAD = Path(xquad.DEFAULT_DATA)


@pytest.mark.skipif(not (XQUAD / "xquad.en.json").exists(), reason="the prose is read from ../shared/bench/xquad")
def test_a_long_message_is_measured_with_and_without_the_bounds() -> None:
    r = chat_units.measure_long(20_000, str(XQUAD), None)
    assert r["unbounded.statements"] > r["bounded.statements"] == chat_units.STATEMENTS_PER_TURN
    assert r["unbounded.passages"] > r["bounded.passages"] == chat_units.PASSAGES_PER_ANSWER
    assert r["unbounded.embedded_chars"] > 30_000 > 10_000 > r["bounded.embedded_chars"]
    # the turn units as indexing embeds them: the user's turn by its title and the first
    # EMBEDDED_TURN_CHARS of its narrative, the answer by its opening
    assert 2_500 < r["turn_units.embedded_chars"] < EMBEDDED_TURN_CHARS + 1_100
