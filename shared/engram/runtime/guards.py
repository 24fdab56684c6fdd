"""ASGI guards every HTTP function has (R-16.1): text hygiene and a deadline.

- `TextHygiene`: a NUL or a lone surrogate in the query string, the path or a JSON body is a
  422 problem naming the field (`query.user`, `body.title`, `body.data.name`) before any
  handler runs; the fields an app lists in `strip` are cleaned instead
  (`engram.domain.text`). The body is scanned as bytes: JSON is parsed again only when it
  holds a `\\u0000` or `\\uD800`-`\\uDFFF` escape.
- `Deadline`: a request that has not started its response within `seconds` (a dependency
  slow or hanging) is cancelled and answered `503` with `Retry-After`; a streamed response
  that has started runs on. No request hangs, whatever PostgreSQL, NATS, the index or the
  embedder do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Collection
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram.domain.text import clean, find_unstorable, unstorable

RETRY_AFTER_SECONDS = 2
_SUSPECT_JSON = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


def _problem_response(status: int, detail: str, **extra: Any) -> Any:
    from engram.runtime.problems import problem

    response = problem(status, detail, **extra)
    if status == 503:
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _query_fault(query: bytes) -> tuple[str, str] | None:
    if b"%00" not in query.lower() and b"\x00" not in query:
        return None
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True, encoding="utf-8"):
        if (why := unstorable(name)) is not None:
            return "query", f"a parameter name {why}"
        if (why := unstorable(value)) is not None:
            return f"query.{name}", why
    return None


class TextHygiene:
    def __init__(self, app: ASGIApp, strip: Collection[str] = ()) -> None:
        self.app = app
        self.strip = frozenset(strip)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_path: bytes = scope.get("raw_path") or scope.get("path", "").encode()
        fault = ("path", "contains U+0000 (NUL), which cannot be stored") if b"%00" in raw_path.lower() else None
        fault = fault or _query_fault(scope.get("query_string", b""))
        if fault is not None:
            await _problem_response(422, f"{fault[0]}: {fault[1]}", field=fault[0])(scope, receive, send)
            return
        if scope.get("method") in ("GET", "HEAD", "DELETE", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        body, more = await self._read(receive)
        if _SUSPECT_JSON.search(body):
            checked = self._check(body)
            if isinstance(checked, tuple):
                await _problem_response(422, f"{checked[0]}: {checked[1]}", field=checked[0])(scope, receive, send)
                return
            body = checked
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive() if more else {"type": "http.disconnect"}

        if body and scope.get("headers"):
            scope = dict(scope)
            scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"content-length"] + [
                (b"content-length", str(len(body)).encode())
            ]
        await self.app(scope, replay, send)

    @staticmethod
    async def _read(receive: Receive) -> tuple[bytes, bool]:
        """The whole body (the body limit outside this guard bounds it); `more`: the client may
        still send a disconnect."""
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks), False
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return b"".join(chunks), True

    def _check(self, body: bytes) -> bytes | tuple[str, str]:
        """The body, cleaned where the app strips; (field, reason) when it must be refused."""
        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return body  # not JSON: the route's own parsing reports it
        changed = False
        if isinstance(doc, dict):
            for name in self.strip & doc.keys():
                if isinstance(doc[name], str) and unstorable(doc[name]):
                    doc[name] = clean(doc[name])
                    changed = True
        found = find_unstorable(doc, "body")
        if found is not None:
            return found
        return json.dumps(doc, ensure_ascii=False).encode() if changed else body


class Deadline:
    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.seconds <= 0:
            await self.app(scope, receive, send)
            return
        started = asyncio.Event()
        expired = False

        async def tracked(message: Message) -> None:
            if expired:
                return  # the 503 went out: whatever the cancelled request still sends is dropped
            if message["type"] == "http.response.start":
                started.set()
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, tracked))
        waiter = asyncio.ensure_future(started.wait())
        try:
            await asyncio.wait({task, waiter}, timeout=self.seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not task.done() and not started.is_set():
            expired = True
            task.cancel()
            detail = f"no answer within {self.seconds:g} s: a dependency is slow or unavailable; retry later"
            await _problem_response(503, detail, title="Service Unavailable")(scope, receive, send)
            # the cancelled request may take a while to unwind (a connection attempt): after the answer
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            return
        await task
