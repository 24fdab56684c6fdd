"""Import nats-py without aiohttp (cold starts, R-14).

nats-py imports aiohttp at import time for its WebSocket transport only, and aiohttp's import
builds two SSL contexts (about 0.1 s, the largest single import cost of every function). Engram
connects over TCP (`nats://`), so nats-py is imported here, first, with aiohttp hidden; aiohttp
stays importable for everyone else (the Elasticsearch client). `engram.adapters.nats_bus.connect`
hands aiohttp to the transport when a `ws://` or `wss://` URL is configured.
"""

from __future__ import annotations

import sys

_MISSING = object()


def import_nats_without_aiohttp() -> None:
    if "nats" in sys.modules:  # imported before Engram: nothing to save any more
        return
    saved = sys.modules.get("aiohttp", _MISSING)
    if saved is _MISSING:
        sys.modules["aiohttp"] = None  # type: ignore[assignment]  # `import aiohttp` raises ImportError
    try:
        import nats
        import nats.aio.transport  # noqa: F401
    finally:
        if saved is _MISSING:
            del sys.modules["aiohttp"]


def enable_websocket_transport() -> None:
    """Give nats-py's WebSocket transport the aiohttp it did not import."""
    import nats.aio.transport as transport

    if getattr(transport, "aiohttp", None) is None:
        import aiohttp

        setattr(transport, "aiohttp", aiohttp)  # noqa: B010 (not exported by nats-py's stubs)
