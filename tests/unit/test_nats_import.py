"""nats-py is imported without aiohttp (a faster cold start), and nothing else loses aiohttp."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_functions_start_without_aiohttp_and_it_stays_importable() -> None:
    out = run(
        """
        import sys
        import functions.extract_observation.main, functions.memory_api.main
        print("aiohttp" in sys.modules)
        import nats.aio.transport as transport
        print(transport.aiohttp is None)
        import aiohttp  # the Elasticsearch client still gets it
        from engram._nats_import import enable_websocket_transport
        enable_websocket_transport()
        print(transport.aiohttp is aiohttp)
        """
    )
    assert out.split() == ["False", "True", "True"]


def test_nats_imported_first_is_left_alone() -> None:
    out = run(
        """
        import sys, nats
        import engram.bootstrap
        import nats.aio.transport as transport
        print(transport.aiohttp is not None and "aiohttp" in sys.modules)
        """
    )
    assert out == "True"
