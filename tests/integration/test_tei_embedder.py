"""The TEI adapter against a loopback server with TEI's documented API and errors (R-6.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from engram.adapters.embedders import TeiEmbedder
from engram.domain.errors import EmbeddingRejected, EmbeddingUnavailable
from tests.fake_tei import FakeTei


@pytest.fixture
async def tei() -> AsyncIterator[FakeTei]:
    server = await FakeTei(dims=16, max_batch=4).start()
    yield server
    await server.stop()


def client(tei: FakeTei, **kw: Any) -> TeiEmbedder:
    async def no_sleep(_: float) -> None:
        return None

    return TeiEmbedder(tei.url, model="BAAI/bge-m3", dimensions=16, sleep=no_sleep, **kw)


async def test_batches_within_max_client_batch_size_and_normalised(tei: FakeTei) -> None:
    emb = client(tei)
    texts = [f"text {i}" for i in range(10)]
    vectors = await emb.embed_passages(texts)
    assert vectors.shape == (10, 16) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert [len(r["inputs"]) for r in tei.embed_requests] == [4, 4, 2]
    assert all(r["normalize"] is True for r in tei.embed_requests)
    query = await emb.embed_query("text 3")
    assert np.allclose(query, vectors[3], atol=1e-6)
    assert tei.info_requests == 1  # /info is read once
    await emb.close()


async def test_retries_429_503_424_then_succeeds(tei: FakeTei) -> None:
    tei.script.extend([429, 503, 424])
    emb = client(tei)
    vectors = await emb.embed_passages(["a", "b"])
    assert vectors.shape == (2, 16) and len(tei.embed_requests) == 4
    await emb.close()


async def test_stays_unavailable_after_attempts(tei: FakeTei) -> None:
    tei.script.extend([503] * 10)
    emb = client(tei, attempts=3)
    with pytest.raises(EmbeddingUnavailable, match="3 attempts"):
        await emb.embed_passages(["a"])
    assert len(tei.embed_requests) == 3
    await emb.close()


@pytest.mark.parametrize("status", [400, 413, 422])
async def test_permanent_errors_are_not_retried(tei: FakeTei, status: int) -> None:
    tei.script.append(status)
    emb = client(tei)
    with pytest.raises(EmbeddingRejected, match=str(status)):
        await emb.embed_passages(["a"])
    assert len(tei.embed_requests) == 1
    await emb.close()


async def test_oversize_batch_answer_is_permanent(tei: FakeTei) -> None:
    """A client that ignored /info would get TEI's 422 Validation; it must not retry that."""
    emb = client(tei)
    emb._max_batch = 10  # pretend /info said otherwise
    with pytest.raises(EmbeddingRejected, match="maximum allowed batch size 4"):
        await emb.embed_passages([f"t{i}" for i in range(6)])
    await emb.close()


async def test_connection_refused_is_unavailable() -> None:
    emb = TeiEmbedder("http://127.0.0.1:9", model="m", dimensions=16, attempts=2, backoff=0.0)
    with pytest.raises(EmbeddingUnavailable):
        await emb.embed_query("x")
    await emb.close()


async def test_wrong_dimensions_are_reported(tei: FakeTei) -> None:
    emb = TeiEmbedder(tei.url, model="m", dimensions=1024)
    with pytest.raises(EmbeddingRejected, match="TEI_EMBEDDING_DIMENSIONS"):
        await emb.embed_query("x")
    await emb.close()
