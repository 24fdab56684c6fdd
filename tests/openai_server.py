"""A scripted OpenAI-compatible Chat Completions API on loopback (what Ollama, vLLM and llama.cpp's
server speak), for the real `openai` SDK pointed here with `base_url`.

    server.script(answer("Hallo!"), rate_limited(retry_after=1), model="llama3.1:8b")
    server.requests[-1].body["messages"]

Replies come from a per-model queue, then the shared queue, then the responder (default: a
short answer). `POST /v1/chat/completions` with `"stream": true` is answered as server-sent
events the way the API streams: `data: {chunk}` lines with `delta`s (role, content pieces,
tool-call pieces by `index`), a last chunk with `finish_reason`, a usage chunk with an empty
`choices` list when `stream_options.include_usage` is set, and `data: [DONE]`. Chunks and
completions are built from the SDK's own types (`openai.types.chat`) and dumped, so the wire
format is what the SDK itself defines.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.scripted_server import ScriptedServer

VALIDATE = True  # check every payload against the SDK's types (bench.llm_providers turns it off)


@dataclass
class Reply:
    status: int = 200
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"id", "name", "arguments": dict | str}
    refusal: str | None = None
    finish_reason: str | None = "stop"
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    no_choices: bool = False  # a completion (or stream) with an empty `choices` list
    cut_after: int | None = None  # streaming: drop the connection after this many content pieces


def _usage(prompt: int = 100, completion: int = 20, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def answer(text: str, *, cached: int = 0, **kw: Any) -> Reply:
    return Reply(content=text, usage=_usage(cached=cached), **kw)


def tool_call(name: str, arguments: dict[str, Any] | str, *, preface: str | None = None) -> Reply:
    call = {"id": f"call_{uuid.uuid4().hex[:12]}", "name": name, "arguments": arguments}
    return Reply(content=preface, tool_calls=[call], finish_reason="tool_calls", usage=_usage())


def refusal(text: str) -> Reply:
    return Reply(content=None, refusal=text, finish_reason="stop", usage=_usage())


def filtered(text: str = "") -> Reply:
    return Reply(content=text or None, finish_reason="content_filter", usage=_usage())


def error(status: int, message: str, *, kind: str = "server_error", headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, error={"message": message, "type": kind, "code": None}, headers=headers or {})


def rate_limited(retry_after: float = 1.0) -> Reply:
    return error(429, "Rate limit reached", kind="rate_limit_error", headers={"retry-after": str(retry_after)})


def no_choices() -> Reply:
    return Reply(no_choices=True, usage=_usage(completion=0))


def slow(seconds: float, reply: Reply | None = None) -> Reply:
    base = reply or answer("late answer")
    base.delay = seconds
    return base


def broken_stream(text: str, after: int = 2) -> Reply:
    reply = answer(text)
    reply.cut_after = after
    return reply


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def model(self) -> str:
        return str(self.body.get("model"))


def _arguments(call: dict[str, Any]) -> str:
    args = call["arguments"]
    return args if isinstance(args, str) else json.dumps(args)


def completion(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": reply.refusal}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": _arguments(c)}}
            for c in reply.tool_calls
        ]
    choices = [] if reply.no_choices else [{"index": 0, "message": message, "finish_reason": reply.finish_reason}]
    raw = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": reply.usage or _usage(),
    }
    if choices and VALIDATE:  # the SDK's own type: the wire format is the one it reads
        return ChatCompletion.model_validate(raw).model_dump(mode="json", exclude_unset=True)
    return raw


def chunks(reply: Reply, model: str, *, include_usage: bool) -> list[dict[str, Any]]:
    """The stream's chunks, each checked against the SDK's `ChatCompletionChunk`."""
    base = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk", "created": 1, "model": model}
    out: list[dict[str, Any]] = []

    def delta(payload: dict[str, Any], finish: str | None = None) -> None:
        out.append({**base, "choices": [{"index": 0, "delta": payload, "finish_reason": finish}]})

    if not reply.no_choices:
        delta({"role": "assistant", "content": ""})
        for piece in _pieces(reply.content or ""):
            delta({"content": piece})
        if reply.refusal:
            delta({"refusal": reply.refusal})
        for index, call in enumerate(reply.tool_calls):
            opening = {"index": index, "id": call["id"], "type": "function", "function": {"name": call["name"]}}
            delta({"tool_calls": [{**opening, "function": {**opening["function"], "arguments": ""}}]})
            arguments = _arguments(call)
            middle = len(arguments) // 2
            for part in (arguments[:middle], arguments[middle:]):
                delta({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
        delta({}, reply.finish_reason)
    if include_usage:
        out.append({**base, "choices": [], "usage": reply.usage or _usage()})
    for chunk in out if VALIDATE else ():
        ChatCompletionChunk.model_validate(chunk)
    return out


class OpenAIServer(ScriptedServer[Reply, Recorded]):
    url_path = "/v1"
    thread_name = "openai-stub"

    def default(self, recorded: Recorded) -> Reply:
        return answer("Scripted local answer.")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                recorded = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with server._lock:
                    server.requests.append(recorded)
                try:
                    if not self.path.startswith("/v1/chat/completions"):
                        self._json(404, {"error": {"message": self.path, "type": "not_found"}})
                        return
                    reply = server._next(recorded)
                    if reply.delay:
                        time.sleep(reply.delay)
                    if reply.error is not None:
                        self._json(reply.status, {"error": reply.error}, reply.headers)
                    elif body.get("stream"):
                        include = bool((body.get("stream_options") or {}).get("include_usage"))
                        self._stream(chunks(reply, recorded.model, include_usage=include), reply.cut_after)
                    else:
                        self._json(200, completion(reply, recorded.model))
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, items: list[dict[str, Any]], cut_after: int | None) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                sent = 0
                for item in items:
                    is_content = any((c.get("delta") or {}).get("content") for c in item["choices"])
                    if is_content and cut_after is not None and sent >= cut_after:
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    self.wfile.write(f"data: {json.dumps(item)}\n\n".encode())
                    self.wfile.flush()
                    sent += int(is_content)
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler


def _pieces(text: str) -> list[str]:
    if not text:
        return []
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
