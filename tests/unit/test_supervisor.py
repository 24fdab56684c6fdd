"""The local stack's supervisor: a crashed child comes back with backoff, the others run on."""

from __future__ import annotations

import io
import sys
import time

from engram.development.supervisor import Supervisor, backoff


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4, 10)] == [1.0, 2.0, 4.0, 8.0, 30.0]


def test_a_crashing_child_is_restarted_and_its_neighbour_keeps_running() -> None:
    out = io.StringIO()
    supervisor = Supervisor(out, grace=2)
    supervisor.add("crasher", [sys.executable, "-c", "import sys; sys.exit(3)"], env={}, cwd=".")
    supervisor.add("steady", [sys.executable, "-c", "import time; time.sleep(30)"], env={}, cwd=".")
    for child in supervisor.children.values():
        supervisor._spawn(child)
    steady = supervisor.children["steady"].pid
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline and supervisor.children["crasher"].restarts < 2:
        supervisor.step()
        time.sleep(0.05)
    supervisor.stop()
    assert supervisor.children["crasher"].restarts >= 2  # after 1 s, then 2 s
    assert supervisor.children["steady"].history == [steady]
    assert "crasher (pid" in out.getvalue() and "exited with code 3" in out.getvalue()
    assert "restarting in 1 s" in out.getvalue() and "restarting in 2 s" in out.getvalue()
