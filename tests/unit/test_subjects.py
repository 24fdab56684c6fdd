"""NATS subjects carry tenant and user (engram.domain.subjects): tokens, the scheme, the
arrival check and the erasure filters."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.domain.errors import InvalidEvent
from engram.domain.events import (
    CHAT_TURN_COMPLETED,
    FEEDBACK_RECORDED,
    OBSERVATION_MARKED,
    new_event,
    subject_for,
)
from engram.domain.subjects import (
    check_arrival,
    dead_letter_subject,
    dead_letter_user_filters,
    token,
    user_filters,
)


@given(st.text(max_size=40), st.text(max_size=40))
def test_tokens_are_injective_and_valid_subject_tokens(a: str, b: str) -> None:
    for t in (token(a), token(b)):
        assert t and not any(c in t for c in ".*> \t\r\n")
    if a != b and a and b:
        assert token(a) != token(b)


def test_tokens_read_well() -> None:
    assert token("alice") == "alice"
    assert token("alice@example.com") == "alice_40example_2Ecom"
    assert token(None) == token("") == "_"
    assert token("_") == "_5F"  # never the "no user" token
    assert token("Müller") == "M_C3_BCller"


def test_the_scheme() -> None:
    mark = new_event(OBSERVATION_MARKED, {"text": "x"}, tenant_id="acme", source="/s", user_id="alice")
    assert subject_for(mark) == "engram.mark.acme.alice.marked"
    turn = new_event(CHAT_TURN_COMPLETED, {}, tenant_id="acme", source="/s", user_id="bob@x.de")
    assert subject_for(turn) == "engram.chat.acme.bob_40x_2Ede.turn.completed"
    human = new_event(FEEDBACK_RECORDED, {"kind": "confirmed", "actor": "human"}, tenant_id="a", source="/s")
    assert subject_for(human) == "engram.feedback.a._.human"
    default = new_event(FEEDBACK_RECORDED, {"kind": "confirmed"}, tenant_id="a", source="/s", user_id="u")
    assert subject_for(default) == "engram.feedback.a.u.agent"
    with pytest.raises(InvalidEvent, match="tenantid"):
        subject_for(new_event("com.x.y.v1", {}, tenant_id="", source="/s"))
    with pytest.raises(InvalidEvent, match="actor"):
        subject_for(new_event(FEEDBACK_RECORDED, {"actor": "root"}, tenant_id="a", source="/s"))


def test_arrival_must_match_the_attributes() -> None:
    check_arrival("engram.mark.acme.alice.marked", "engram.mark.acme.alice.marked")
    with pytest.raises(InvalidEvent, match="forged"):
        check_arrival("engram.ingest.acme._.com.x.v1", "engram.ingest.other._.com.x.v1")


def test_erasure_filters_cover_the_users_messages_and_dead_letters() -> None:
    filters = user_filters("acme", "alice")
    assert "engram.chat.acme.alice.>" in filters and "engram.mark.acme.alice.>" in filters
    assert not any(f.startswith("engram.observation.") for f in filters)  # the deletions must flow
    dlq = dead_letter_subject("dlq.engram.extract-observation", "engram.chat.acme.alice.turn.completed")
    assert dlq == "dlq.engram.extract-observation.chat.acme.alice.turn.completed"
    assert "dlq.engram.*.chat.acme.alice.>" in dead_letter_user_filters("dlq.engram", "acme", "alice")
