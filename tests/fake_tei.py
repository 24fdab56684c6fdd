"""A text-embeddings-inference stand-in on loopback implementing TEI's documented behaviour.

`GET /info` (with `max_client_batch_size`), `GET /health`, `POST /embed` (`inputs` string or
list, `normalize`, `truncate`) returning one vector per input; errors as TEI sends them:
`{"error": ..., "error_type": ...}` with 422 Validation for a batch above the limit, 400
Empty for an empty input, 413 for a body above the payload limit, and scripted 429
Overloaded / 503 Unhealthy / 424 Backend answers queued by a test.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from typing import Any

import numpy as np
from aiohttp import web

ERROR_TYPES = {400: "Empty", 413: "Validation", 422: "Validation", 424: "Backend", 429: "Overloaded", 503: "Unhealthy"}


def vector_for(text: str, dims: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    return [float(x) * 3.0 for x in np.random.default_rng(seed).standard_normal(dims)]


class FakeTei:
    def __init__(self, *, dims: int = 16, max_batch: int = 4, payload_limit: int = 2_000_000) -> None:
        self.dims = dims
        self.max_batch = max_batch
        self.payload_limit = payload_limit
        self.script: deque[int] = deque()  # statuses to answer next, before normal service
        self.reject_containing: str | None = None  # inputs containing this get 413 (too long)
        self.embed_requests: list[dict[str, Any]] = []
        self.info_requests = 0
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> FakeTei:
        app = web.Application(client_max_size=self.payload_limit * 2)
        app.router.add_get("/info", self.info)
        app.router.add_get("/health", self.health)
        app.router.add_post("/embed", self.embed)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    @staticmethod
    def error(status: int, message: str) -> web.Response:
        return web.json_response({"error": message, "error_type": ERROR_TYPES.get(status, "Backend")}, status=status)

    async def info(self, _: web.Request) -> web.Response:
        self.info_requests += 1
        return web.json_response(
            {
                "model_id": "BAAI/bge-m3",
                "model_sha": None,
                "model_dtype": "float16",
                "model_type": {"embedding": {"pooling": "cls"}},
                "max_concurrent_requests": 512,
                "max_input_length": 8192,
                "max_batch_tokens": 16384,
                "max_batch_requests": None,
                "max_client_batch_size": self.max_batch,
                "auto_truncate": True,
                "tokenization_workers": 2,
                "version": "1.9.3",
            }
        )

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(status=200)

    async def embed(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if len(raw) > self.payload_limit:
            return self.error(413, "payload too large")
        body = json.loads(raw)
        self.embed_requests.append(body)
        if self.script:
            status = self.script.popleft()
            return self.error(status, f"scripted {status}")
        inputs = body["inputs"] if isinstance(body["inputs"], list) else [body["inputs"]]
        if len(inputs) > self.max_batch:
            return self.error(422, f"batch size {len(inputs)} > maximum allowed batch size {self.max_batch}")
        if any(not str(i) for i in inputs):
            return self.error(400, "Input validation error: `inputs` cannot be empty")
        if self.reject_containing and any(self.reject_containing in str(i) for i in inputs):
            return self.error(413, "Input validation error: inputs must have less than 8192 tokens")
        vectors = []
        for text in inputs:
            v = np.array(vector_for(str(text), self.dims))
            if body.get("normalize", True):
                v = v / np.linalg.norm(v)
            vectors.append([float(x) for x in v])
        return web.json_response(vectors)
