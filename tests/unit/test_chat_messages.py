"""bench.chat_messages: LoCoMo's turns sent as chat messages; bench.locomo's metrics over bursts."""

from __future__ import annotations

from typing import Any

import pytest

from bench.chat_messages import as_messages, messages_of
from bench.locomo import metrics


def _sample() -> dict[str, Any]:
    return {
        "sample_id": "s1",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "Hi Ben! Guess what. I got the job at Siemens!"},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Congrats!", "blip_caption": "a cake"},
                {"speaker": "Ana", "dia_id": "D1:3", "text": "Thanks. I start in May.\nSo excited"},
            ],
        },
        "qa": [
            {"question": "Where did Ana get a job?", "answer": "Siemens", "evidence": ["D1:1"], "category": 4},
            {"question": "What did Ben send?", "answer": "a cake", "evidence": ["D1:2"], "category": 4},
            {"question": "Hm?", "answer": "", "evidence": ["D1:3"], "category": 4},
        ],
    }


def test_every_sentence_is_a_message_and_the_evidence_is_the_one_holding_the_fact() -> None:
    original = _sample()
    (sample,) = as_messages([original])
    session = sample["conversation"]["session_1"]
    assert [(m["dia_id"], m["speaker"], m["text"]) for m in session] == [
        ("D1:1", "Ana", "Hi Ben!"),
        ("D1:2", "Ana", "Guess what."),
        ("D1:3", "Ana", "I got the job at Siemens!"),
        ("D1:4", "Ben", "Congrats!"),
        ("D1:5", "Ana", "Thanks."),
        ("D1:6", "Ana", "I start in May."),
        ("D1:7", "Ana", "So excited"),
    ]
    assert session[3]["blip_caption"] == "a cake"  # a photo goes with its turn's last message
    # the message sharing most words with question and answer; all of a turn's when none does
    assert [qa["evidence"] for qa in sample["qa"]] == [["D1:3"], ["D1:4"], ["D1:5", "D1:6", "D1:7"]]
    assert original["conversation"]["session_1"][0]["dia_id"] == "D1:1" and original["qa"][0]["evidence"] == ["D1:1"]


def test_interjected_reactions_split_a_long_turn_and_are_never_evidence() -> None:
    (sample,) = as_messages([_sample()], "interjected")
    session = sample["conversation"]["session_1"]
    assert [(m["speaker"], m["text"]) for m in session[:4]] == [
        ("Ana", "Hi Ben!"),
        ("Ben", "haha"),
        ("Ana", "Guess what."),
        ("Ana", "I got the job at Siemens!"),
    ]
    assert [m["dia_id"] for m in session] == [f"D1:{n}" for n in range(1, len(session) + 1)]
    reactions = {m["dia_id"] for m in session if m["text"] in ("haha", "wow")}
    assert len(reactions) == 2 and not reactions & {e for qa in sample["qa"] for e in qa["evidence"]}
    with pytest.raises(ValueError, match="mode must be one of"):
        as_messages([_sample()], "shouted")


def test_a_turn_of_one_sentence_is_one_message() -> None:
    assert messages_of("Congrats!") == ["Congrats!"]
    assert messages_of("  ") == ["  "]


def test_a_burst_hit_covers_all_its_messages_at_its_rank() -> None:
    # one hit holding two of three gold messages, then a miss, then the third
    got = metrics(["D1:1 D1:2", "D2:1", "D1:4"], {"D1:1", "D1:2", "D1:4"})
    assert got["recall@1"] == pytest.approx(2 / 3) and got["recall@5"] == 1.0
    assert 0 < got["ndcg@10"] <= 1.0
    assert metrics(["D1:1 D1:2"], {"D1:1", "D1:2"})["ndcg@10"] == 1.0  # capped: one hit, two gold
    # single ids score as before: binary gains, recall over the first k hits
    single = metrics(["D1:3", "D1:1", "D1:1"], {"D1:1"})
    assert single == {"recall@1": 0.0, "recall@5": 1.0, "recall@10": 1.0, "ndcg@10": pytest.approx(1 / 1.5849625)}
