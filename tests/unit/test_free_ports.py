"""Ports for the servers the development stack and the tests start (`development.embedded`)."""

from __future__ import annotations

from pathlib import Path

from engram.development.embedded import EmbeddedNats, free_ports


def test_ports_chosen_together_are_all_different() -> None:
    for _ in range(20):
        ports = free_ports(8)
        assert len(set(ports)) == len(ports) == 8


def test_nats_never_gets_one_port_for_clients_and_monitoring(tmp_path: Path) -> None:
    nats = EmbeddedNats(tmp_path, port=41234, monitor_port=41234)
    assert nats.monitor_port != nats.port == 41234
    apart = EmbeddedNats(tmp_path, port=41234, monitor_port=41235)
    assert (apart.port, apart.monitor_port) == (41234, 41235)
