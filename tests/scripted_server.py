"""What the loopback model servers (`tests.anthropic_server`, `tests.openai_server`) share: a
threaded HTTP server on 127.0.0.1 that records every request and answers from a script.

Replies come from a per-model queue, then the shared queue, then the responder. A subclass
gives its protocol: `_handler()` (the request handler class), `default` (the responder after
`reset`), `url_path` (the base URL's path) and `thread_name`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Protocol, TypeVar, cast


class _Recorded(Protocol):
    @property
    def model(self) -> str: ...


R = TypeVar("R")  # a scripted reply
Q = TypeVar("Q", bound=_Recorded)  # a recorded request


class ScriptedServer(Generic[R, Q]):
    url_path = ""
    thread_name = "model-stub"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: list[Q] = []
        self._shared: deque[R] = deque()
        self._by_model: dict[str, deque[R]] = {}
        self.responder: Callable[[Q], R] = self.default
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=self.thread_name, daemon=True)

    def default(self, recorded: Q) -> R:
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.url_path}"

    def start(self: Any) -> Any:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._shared.clear()
            self._by_model.clear()
            self.responder = self.default

    def script(self, *replies: R, model: str | None = None) -> None:
        with self._lock:
            queue = self._shared if model is None else self._by_model.setdefault(model, deque())
            queue.extend(replies)

    def requests_for(self, model: str) -> list[Q]:
        return [r for r in self.requests if r.model == model]

    def _next(self, recorded: Q) -> R:
        with self._lock:
            queue = self._by_model.get(recorded.model)
            if queue:
                return queue.popleft()
            if self._shared:
                return self._shared.popleft()
            responder = self.responder
        return cast(R, responder(recorded))
