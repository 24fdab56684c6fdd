"""A scripted Anthropic Messages API on loopback, for the real SDK (anthropic 2.x uses httpx2,
so respx cannot intercept it; the client is pointed here with `base_url`).

    server.script(text("Hallo!"), rate_limited(retry_after=1), model="claude-opus-4-7")
    server.requests[-1].body["context_management"]

Replies are taken from a per-model queue, then the shared queue, then the responder
(default: a short text answer). `POST /v1/messages` with `"stream": true` is answered as
server-sent events the way the API streams (message_start, content blocks with text,
tool-input and compaction deltas, message_delta, message_stop). Every request is recorded
with its headers and JSON body; the peak number of concurrent requests is tracked.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.scripted_server import ScriptedServer


@dataclass
class Reply:
    status: int = 200
    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = "end_turn"
    usage: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    model: str | None = None
    cut_after: int | None = None  # streaming: drop the connection after this many deltas


def _usage(**overrides: Any) -> dict[str, Any]:
    usage = {
        "input_tokens": 120,
        "output_tokens": 30,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    usage.update(overrides)
    return usage


def text(answer: str, *, usage: dict[str, Any] | None = None, stop_reason: str = "end_turn", **kw: Any) -> Reply:
    return Reply(
        content=[{"type": "text", "text": answer}], stop_reason=stop_reason, usage=_usage(**(usage or {})), **kw
    )


def tool_use(name: str, arguments: dict[str, Any], *, preface: str | None = None, tool_id: str | None = None) -> Reply:
    content: list[dict[str, Any]] = []
    if preface:
        content.append({"type": "text", "text": preface})
    content.append(
        {"type": "tool_use", "id": tool_id or f"toolu_{uuid.uuid4().hex[:16]}", "name": name, "input": arguments}
    )
    return Reply(content=content, stop_reason="tool_use", usage=_usage())


def compaction(summary: str | None, answer: str, *, iteration_input_tokens: int = 151_000) -> Reply:
    # as the API reports it: the top-level fields count the answer's sampling only, `iterations`
    # lists the summary's sampling too (both are billed)
    usage = _usage(
        input_tokens=2_400,
        output_tokens=30,
        iterations=[
            {
                "type": "compaction",
                "input_tokens": iteration_input_tokens,
                "output_tokens": 800,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
            {
                "type": "message",
                "input_tokens": 2_400,
                "output_tokens": 30,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        ],
    )
    return Reply(
        content=[
            {"type": "compaction", "content": summary, "encrypted_content": "opaque-state"},
            {"type": "text", "text": answer},
        ],
        usage=usage,
    )


def error(status: int, kind: str, message: str, *, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, error={"type": kind, "message": message}, headers=headers or {})


def rate_limited(retry_after: float = 1.0) -> Reply:
    return error(
        429,
        "rate_limit_error",
        "Number of request tokens has exceeded your rate limit",
        headers={"retry-after": str(retry_after)},
    )


def overloaded(retry_after: float | None = None) -> Reply:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
    return error(529, "overloaded_error", "Overloaded", headers=headers)


def prompt_too_long(tokens: int = 210_000, maximum: int = 200_000) -> Reply:
    return error(400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {maximum} maximum")


def empty() -> Reply:
    return Reply(content=[], stop_reason="end_turn", usage=_usage(output_tokens=0))


def broken_stream(answer: str, after: int = 2) -> Reply:
    """A streamed answer whose connection drops after `after` text deltas."""
    reply = text(answer)
    reply.cut_after = after
    return reply


def slow(seconds: float, reply: Reply | None = None) -> Reply:
    base = reply or text("late answer")
    base.delay = seconds
    return base


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    started: float

    @property
    def model(self) -> str:
        return str(self.body.get("model"))

    @property
    def betas(self) -> list[str]:
        return [b.strip() for b in self.headers.get("anthropic-beta", "").split(",") if b.strip()]

    def prompt_text(self) -> str:
        """Everything the model would read: system, messages and tool definitions, as one string."""
        return json.dumps({k: self.body.get(k) for k in ("system", "messages", "tools")}, ensure_ascii=False)


Responder = Callable[[Recorded], Reply]


class AnthropicServer(ScriptedServer[Reply, Recorded]):
    thread_name = "anthropic-stub"

    def __init__(self) -> None:
        self.active = 0  # requests in flight, and the most at once since the last reset
        self.peak = 0
        super().__init__()

    def default(self, recorded: Recorded) -> Reply:
        return text("Scripted answer.")

    def reset(self) -> None:
        super().reset()
        self.peak = self.active

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms delayed-ACK stall)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode(errors="replace")}
                recorded = Recorded(
                    "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()
                )
                with server._lock:
                    server.requests.append(recorded)
                    server.active += 1
                    server.peak = max(server.peak, server.active)
                try:
                    if not self.path.startswith("/v1/messages"):
                        self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
                        return
                    reply = server._next(recorded)
                    if reply.delay:
                        time.sleep(reply.delay)
                    if reply.error is not None:
                        self._json(reply.status, {"type": "error", "error": reply.error}, reply.headers)
                    elif body.get("stream"):
                        self._stream(reply, recorded)
                    else:
                        self._json(reply.status, self._message(reply, recorded), reply.headers)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with server._lock:
                        server.active -= 1

            def _message(self, reply: Reply, recorded: Recorded) -> dict[str, Any]:
                return {
                    "id": f"msg_{uuid.uuid4().hex[:20]}",
                    "type": "message",
                    "role": "assistant",
                    "model": reply.model or recorded.model,
                    "content": reply.content,
                    "stop_reason": reply.stop_reason,
                    "stop_sequence": None,
                    "usage": reply.usage or _usage(),
                }

            def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_{uuid.uuid4().hex[:12]}")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: Reply, recorded: Recorded) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                usage = reply.usage or _usage()
                start = self._message(reply, recorded)
                start.update(content=[], stop_reason=None)
                start["usage"] = {k: v for k, v in usage.items() if k != "iterations"} | {"output_tokens": 1}
                self._event("message_start", {"type": "message_start", "message": start})
                sent = 0
                for index, block in enumerate(reply.content):
                    kind = block["type"]
                    if kind == "text":
                        opening: dict[str, Any] = {"type": "text", "text": ""}
                        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(block["text"])]
                    elif kind == "tool_use":
                        opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
                    elif kind == "compaction":
                        opening = {"type": "compaction", "content": None}
                        deltas = [
                            {
                                "type": "compaction_delta",
                                "content": block.get("content"),
                                "encrypted_content": block.get("encrypted_content"),
                            }
                        ]
                    else:
                        opening, deltas = dict(block), []
                    self._event(
                        "content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}
                    )
                    for delta in deltas:
                        if reply.cut_after is not None and sent >= reply.cut_after:
                            self.connection.shutdown(socket.SHUT_RDWR)
                            return
                        self._event(
                            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
                        )
                        sent += 1
                    self._event("content_block_stop", {"type": "content_block_stop", "index": index})
                self._event(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                        "usage": usage,
                    },
                )
                self._event("message_stop", {"type": "message_stop"})

            def _event(self, name: str, data: dict[str, Any]) -> None:
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()

        return Handler


def _pieces(answer: str) -> list[str]:
    words = answer.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)] or [""]
