"""A search index and an embedder in memory, for the indexing and recall paths.

`FakeSearchIndex` (`engram.ports.SearchIndex`) keeps each tenant's documents; an older
revision never replaces a newer one (as the real indexes). `lexical` counts the query's words
in a document's title (twice) and body; `vector` ranks by cosine similarity. Both filter by
R-7.2 visibility, types and the instant of the search (valid from, expiry) like the real ones.

`FakeEmbedder` (`engram.ports.Embedder`) is deterministic: a hashed bag of words, unit
length, so texts sharing words are near each other. `reject_containing` makes it refuse, as
text-embeddings-inference does with 413, every batch with such a text; `fail` makes every
call raise (an outage); `calls` records the texts of each call.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import datetime

import numpy as np

from engram.domain.errors import EmbeddingRejected
from engram.domain.observation import Scope
from engram.domain.scopes import Visibility
from engram.domain.search import IndexDocument, Ranked, SearchFilter, Vector

_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def visible(doc: IndexDocument, visibility: Visibility, where: SearchFilter) -> bool:
    """`Visibility.allows` on a document's copy of the visibility columns, plus types and time."""
    if doc.tenant_id != visibility.tenant_id or doc.id in visibility.hidden_ids:
        return False
    if (where.types and doc.type not in where.types) or doc.type in where.except_types:
        return False
    if (doc.valid_from is not None and doc.valid_from > where.now) or (
        doc.expires_at is not None and doc.expires_at <= where.now
    ):
        return False
    dated = doc.valid_from or doc.said_at  # a window holds a memory by when it holds from, else when said
    if where.within is not None and (dated is None or not where.within[0] <= dated < where.within[1]):
        return False
    owner = visibility.user_id is not None and doc.user_id == visibility.user_id
    scope = Scope(doc.scope)
    if scope is Scope.private:
        return owner
    if scope is Scope.team:
        return owner or bool(visibility.teams.intersection(doc.team_ids))
    return scope is Scope.public or visibility.include_sensitive


class FakeSearchIndex:
    def __init__(self, dimensions: int = 64) -> None:
        self.dimensions = dimensions
        self.documents: dict[str, dict[str, IndexDocument]] = {}

    async def upsert(self, tenant_id: str, documents: Sequence[IndexDocument]) -> None:
        mine = self.documents.setdefault(tenant_id, {})
        for doc in documents:
            if doc.tenant_id != tenant_id:
                raise ValueError(f"document {doc.id} belongs to tenant {doc.tenant_id!r}, not {tenant_id!r}")
            if doc.embedding.shape != (self.dimensions,):
                raise ValueError(f"embedding of {doc.id} has shape {doc.embedding.shape}, index has {self.dimensions}")
        for doc in documents:
            if doc.id not in mine or mine[doc.id].revision <= doc.revision:
                mine[doc.id] = doc

    async def delete(self, tenant_id: str, observation_ids: Sequence[str]) -> None:
        mine = self.documents.get(tenant_id, {})
        for i in observation_ids:
            mine.pop(i, None)

    async def withdraw(self, tenant_id: str, revisions: Mapping[str, datetime]) -> None:
        mine = self.documents.get(tenant_id, {})
        for i, revision in revisions.items():
            if i in mine and mine[i].revision <= revision:
                del mine[i]

    async def drop_tenant(self, tenant_id: str) -> None:
        self.documents.pop(tenant_id, None)

    async def indexed_ids(self, tenant_id: str) -> set[str]:
        return set(self.documents.get(tenant_id, {}))

    def _candidates(self, visibility: Visibility, where: SearchFilter) -> list[IndexDocument]:
        return [d for d in self.documents.get(visibility.tenant_id, {}).values() if visible(d, visibility, where)]

    async def lexical(self, visibility: Visibility, text: str, where: SearchFilter, limit: int) -> list[Ranked]:
        query = set(words(text))
        ranked = []
        for doc in self._candidates(visibility, where):
            score = 2 * sum(w in query for w in words(doc.title)) + sum(w in query for w in words(doc.body))
            if score:
                ranked.append(Ranked(doc.id, float(score), doc.type))
        ranked.sort(key=lambda r: (-r.score, r.id))
        return ranked[:limit]

    async def vector(self, visibility: Visibility, embedding: Vector, where: SearchFilter, limit: int) -> list[Ranked]:
        query = np.asarray(embedding, dtype=np.float32)
        ranked = []
        for doc in self._candidates(visibility, where):
            norm = float(np.linalg.norm(doc.embedding) * np.linalg.norm(query)) or 1.0
            ranked.append(Ranked(doc.id, float(np.dot(doc.embedding, query)) / norm, doc.type))
        ranked.sort(key=lambda r: (-r.score, r.id))
        return ranked[:limit]


class FakeEmbedder:
    def __init__(self, dimensions: int = 64, *, model: str = "fake-hashed-words") -> None:
        self._dimensions = dimensions
        self._model = f"{model}-{dimensions}"
        self.reject_containing: str | None = None
        self.fail: BaseException | None = None
        self.calls: list[list[str]] = []

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def embedded(self) -> int:
        """Texts embedded so far (rejected calls included)."""
        return sum(len(c) for c in self.calls)

    def vector(self, text: str) -> Vector:
        v = np.zeros(self._dimensions, dtype=np.float32)
        for w in words(text):
            digest = hashlib.sha256(w.encode()).digest()
            v[int.from_bytes(digest[:4], "big") % self._dimensions] += 1.0 if digest[4] & 1 else -1.0
        norm = float(np.linalg.norm(v))
        if norm == 0.0:  # no words: still a unit vector
            v[0], norm = 1.0, 1.0
        unit: Vector = v / norm
        return unit

    async def embed_passages(self, texts: Sequence[str]) -> Vector:
        self.calls.append(list(texts))
        if self.fail is not None:
            raise self.fail
        marker = self.reject_containing
        if marker is not None and any(marker in t for t in texts):
            raise EmbeddingRejected(f"413: a text of the batch is too long for {self._model}")
        return np.stack([self.vector(t) for t in texts]) if texts else np.zeros((0, self._dimensions), np.float32)

    async def embed_query(self, text: str) -> Vector:
        first: Vector = (await self.embed_passages([text]))[0]
        return first

    async def embed_queries(self, texts: Sequence[str]) -> Vector:
        """One vector per text, each distinct text embedded once (one call)."""
        unique = list(dict.fromkeys(texts))
        by_text = dict(zip(unique, await self.embed_passages(unique), strict=True))
        return np.stack([by_text[t] for t in texts]) if texts else np.zeros((0, self._dimensions), np.float32)


class PinnedEmbedder(FakeEmbedder):
    """`FakeEmbedder`, except that a text containing one of `pins`' phrases gets the vector of
    that phrase's label: tests choose which observations are near each other (cosine 1)."""

    def __init__(self, pins: dict[str, str] | None = None, dimensions: int = 64) -> None:
        super().__init__(dimensions, model="fake-pinned")
        self.pins = pins or {}

    def vector(self, text: str) -> Vector:
        for phrase, label in self.pins.items():
            if phrase in text:
                seed = int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "big")
                v = np.random.default_rng(seed).standard_normal(self._dimensions).astype(np.float32)
                pinned: Vector = v / np.linalg.norm(v)
                return pinned
        return super().vector(text)
