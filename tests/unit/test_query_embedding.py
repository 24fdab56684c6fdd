"""Query embedding on the recall path: dynamic batching, one call per batch, the LRU cache."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from engram.adapters.embedders import QueryBatcher, QueryCache, StaticEmbedder


class CountingModel:
    """A fake model call: records each batch, takes a little while, fails on 'boom'."""

    def __init__(self, delay: float = 0.01) -> None:
        self.batches: list[list[str]] = []
        self.delay = delay

    async def __call__(self, texts: list[str]) -> Any:
        self.batches.append(list(texts))
        await asyncio.sleep(self.delay)
        if "boom" in texts:
            raise RuntimeError("model failed")
        return np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32)


async def test_concurrent_queries_share_model_calls() -> None:
    model = CountingModel()
    batcher = QueryBatcher(model)
    texts = [f"query {i}" for i in range(8)]
    first = asyncio.ensure_future(batcher.embed(texts[:1]))
    await asyncio.sleep(0.001)  # the model is busy with the first query
    vectors = [await first, *await asyncio.gather(*(batcher.embed([t]) for t in texts[1:]))]
    # the seven that arrive while the first runs go together into the next call
    assert model.batches == [["query 0"], texts[1:]]
    assert batcher.calls == 2
    for text, (vector,) in zip(texts, vectors, strict=True):
        assert vector[0] == len(text)


async def test_equal_texts_are_embedded_once() -> None:
    model = CountingModel()
    batcher = QueryBatcher(model)
    first, second = await asyncio.gather(batcher.embed(["same", "other", "same"]), batcher.embed(["same"]))
    assert model.batches == [["same", "other"]]
    assert [v[0] for v in first] == [4.0, 5.0, 4.0] and second[0][0] == 4.0


async def test_a_failing_call_fails_only_its_own_texts() -> None:
    model = CountingModel()
    batcher = QueryBatcher(model)
    good = asyncio.ensure_future(batcher.embed(["fine"]))
    await asyncio.sleep(0)  # "fine" is being embedded; the next two wait for the next call
    bad = asyncio.ensure_future(batcher.embed(["boom"]))
    also_bad = asyncio.ensure_future(batcher.embed(["ok"]))
    assert (await good)[0][0] == 4.0
    with pytest.raises(RuntimeError, match="model failed"):
        await bad
    with pytest.raises(RuntimeError, match="model failed"):
        await also_bad
    assert (await batcher.embed(["later"]))[0][0] == 5.0  # the batcher keeps working
    assert model.batches == [["fine"], ["boom", "ok"], ["later"]]


async def test_a_caller_that_gives_up_is_not_embedded() -> None:
    model = CountingModel(delay=0.05)
    batcher = QueryBatcher(model)
    running = asyncio.ensure_future(batcher.embed(["first"]))
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(batcher.embed(["abandoned"]), timeout=0.01)
    await running
    await batcher.embed(["next"])
    assert ["abandoned"] not in model.batches and model.batches[-1] == ["next"]


def test_query_cache_is_a_bounded_lru() -> None:
    cache = QueryCache(2)
    a, b, c = (np.full(2, x, dtype=np.float32) for x in (1.0, 2.0, 3.0))
    cache.put("a", a)
    cache.put("b", b)
    assert cache.get("a") is a  # "a" is now the most recent
    cache.put("c", c)
    assert cache.get("b") is None and cache.get("a") is a and cache.get("c") is c
    assert (cache.hits, cache.misses) == (3, 1)
    off = QueryCache(0)
    off.put("a", a)
    assert off.get("a") is None


async def test_in_process_embedder_batches_queries_and_caches() -> None:
    plain = StaticEmbedder()
    cached = StaticEmbedder(query_cache=16)
    texts = ["Rechnung für Kunde 17", "invoice of customer 17", "Rechnung für Kunde 17"]
    together = await plain.embed_queries(texts)
    assert together.shape == (3, plain.dimensions)
    assert plain.model_calls == 1
    for text, vector in zip(texts, together, strict=True):
        assert np.allclose(vector, await plain.embed_query(text), atol=1e-6)
    assert np.allclose(together[0], together[2])
    await cached.embed_queries(texts)
    await cached.embed_query(texts[1])
    assert cached.model_calls == 1 and cached.query_cache.hits == 1
    await plain.close()
    await cached.close()
