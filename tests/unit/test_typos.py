"""bench.typos: conversations with typing errors, deterministic, questions as written."""

from __future__ import annotations

import random

import pytest

from bench.typos import misspelt, typo, with_typos

SAMPLE = {
    "sample_id": "s1",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Ben",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "Yesterday I adopted a wonderful greyhound called Pepper."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Congratulations, what a lovely name!"},
        ],
        "session_1_date_time": "1 May 2023",
    },
    "qa": [{"question": "What is the name of Ann's greyhound?", "evidence": ["D1:1"], "category": 4}],
}


def test_a_typo_keeps_the_first_letter_and_changes_the_length_by_one_at_most() -> None:
    rng = random.Random(3)
    for _ in range(200):
        word = rng.choice(["greyhound", "Pepper", "wonderful", "yesterday", "Stuttgart"])
        wrong = typo(word, rng)
        assert wrong[0] == word[0] and abs(len(wrong) - len(word)) <= 1


def test_the_rate_is_the_share_of_long_words_misspelt() -> None:
    text = " ".join(["wonderful", "greyhound", "congratulations", "yesterday"] * 250)
    changed = sum(a != b for a, b in zip(text.split(), misspelt(text, 0.2, random.Random(1)).split(), strict=True))
    assert 0.15 < changed / 1_000 < 0.25
    assert misspelt(text, 0.0, random.Random(1)) == text


def test_samples_get_typos_in_their_turns_only_and_the_same_for_a_seed() -> None:
    first, again = with_typos([SAMPLE], 1.0), with_typos([SAMPLE], 1.0)
    assert first == again and first != with_typos([SAMPLE], 1.0, seed=8)
    turns = first[0]["conversation"]["session_1"]
    assert turns[0]["text"] != SAMPLE["conversation"]["session_1"][0]["text"]  # type: ignore[index]
    assert [t["dia_id"] for t in turns] == ["D1:1", "D1:2"]
    assert first[0]["qa"] == SAMPLE["qa"] and SAMPLE["conversation"]["session_1"][0]["text"].startswith("Yesterday")  # type: ignore[index]
    with pytest.raises(ValueError, match="rate"):
        with_typos([SAMPLE], 1.5)
