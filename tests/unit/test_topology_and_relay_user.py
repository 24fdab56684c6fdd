"""The topology's replica count and the standalone outbox relay's bus user (pure)."""

from __future__ import annotations

import pytest

from engram.domain.bus_access import RELAY, function_users, relayable, user
from engram.domain.topology import consumers, streams


def test_streams_and_consumers_at_one_and_three_replicas() -> None:
    assert {s.replicas for s in streams()} == {c.replicas for c in consumers()} == {1}
    assert {s.replicas for s in streams("ENGRAM", 3)} == {c.replicas for c in consumers("ENGRAM", 3)} == {3}
    assert [c.durable for c in consumers("ENGRAM", 3)] == [c.durable for c in consumers()]


@pytest.mark.parametrize("replicas", [0, 2, 4, 7])
def test_only_an_odd_quorum_is_accepted(replicas: int) -> None:
    with pytest.raises(ValueError, match="odd quorum"):
        streams("ENGRAM", replicas)
    with pytest.raises(ValueError, match="odd quorum"):
        consumers("ENGRAM", replicas)


def test_the_relay_may_publish_every_event_subject_of_every_function_and_nothing_else() -> None:
    relay = user(RELAY)
    functions = [u for u in function_users() if u.name != RELAY]
    assert set(relay.publish) == {s for u in functions for s in relayable(u)}
    assert all(s.startswith("engram.") for s in relay.publish)  # no JetStream API, no dead letters, no purge
    assert relay.subscribe == () and relayable(relay) == relay.publish
