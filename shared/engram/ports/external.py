"""The other ports: the event bus, recall, the search index, embeddings and the model provider."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Protocol, runtime_checkable

from cloudevents.http import CloudEvent

from engram.domain.llm import LlmReply, LlmRequest
from engram.domain.recall import RecallQuery, RecallResult
from engram.domain.scopes import Principal, Visibility
from engram.domain.search import IndexDocument, Ranked, SearchFilter, SearchPlan, Vector
from engram.ports.storage import TenantTx

# ---- the bus ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RawMessage:
    """An encoded event as it goes on the bus (the outbox stores this form)."""

    subject: str
    headers: dict[str, str]
    body: bytes
    event_id: str


@dataclass(frozen=True)
class Published:
    event_id: str
    subject: str
    duplicate: bool
    seq: int


class EventBus(Protocol):
    async def publish(self, event: CloudEvent) -> Published: ...

    async def publish_many(self, events: Sequence[CloudEvent]) -> list[Published]: ...

    async def publish_raw(self, subject: str, headers: dict[str, str], body: bytes, *, event_id: str) -> Published: ...

    async def publish_raw_many(
        self, items: Sequence[RawMessage], *, timeout: float = 10.0
    ) -> list[Published | BaseException]: ...

    async def erase_user(self, tenant_id: str, user_id: str) -> dict[str, int]:
        """Remove the user's messages stored so far (their subjects, `engram.domain.subjects`)
        from every stream; the number removed per stream."""
        ...


# ---- search, embeddings, models ------------------------------------------------------------------


class Recall(Protocol):
    """Permission-aware hybrid recall (R-7.1-R-7.3, R-7.5): visibility inside the search."""

    async def search(self, principal: Principal, query: RecallQuery) -> RecallResult: ...


@runtime_checkable
class BatchRecall(Recall, Protocol):
    """Several queries of one caller planned together (multi-stream recall): one visibility
    lookup, one embedding call, one hydration. One result per query, in order; a query that is
    invalid on its own (empty, too long) gets its exception in its place, the others answer."""

    async def search_many(
        self, principal: Principal, queries: Sequence[RecallQuery]
    ) -> list[RecallResult | Exception]: ...


@runtime_checkable
class EmbedAhead(Protocol):
    """A recall that starts embedding query texts before the search is asked for (chat-turn does
    while it prepares the turn); `search_many(..., ahead=)` then takes the vectors from there and
    embeds only what is missing. The vectors stay with the caller's own request."""

    def embed_ahead(self, texts: Sequence[str]) -> Awaitable[Mapping[str, Vector]]: ...

    async def search_many(
        self,
        principal: Principal,
        queries: Sequence[RecallQuery],
        *,
        ahead: Awaitable[Mapping[str, Vector]] | None = None,
    ) -> list[RecallResult | Exception]: ...


class LLM(Protocol):
    """One provider's Messages API (R-8.4): a call per model, no retries (the gateway decides)."""

    @property
    def provider(self) -> str: ...

    async def complete(
        self, request: LlmRequest, *, model: str, timeout: float, temperature: float | None
    ) -> LlmReply: ...

    async def stream(
        self,
        request: LlmRequest,
        *,
        model: str,
        timeout: float,
        temperature: float | None,
        on_text: Callable[[str], Awaitable[None]],
    ) -> LlmReply: ...


class Embedder(Protocol):
    """Text to unit-length vectors (R-6.1). `model` names the model (cache key), `dimensions` its width."""

    @property
    def model(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    async def embed_passages(self, texts: Sequence[str]) -> Vector: ...

    async def embed_query(self, text: str) -> Vector: ...


@runtime_checkable
class BatchQueryEmbedder(Embedder, Protocol):
    """An embedder that embeds several queries in one call (each distinct text once)."""

    async def embed_queries(self, texts: Sequence[str]) -> Vector: ...


class SearchIndex(Protocol):
    """BM25 + kNN over one tenant's observations with R-7.2 visibility applied inside the search (R-6.2)."""

    async def upsert(self, tenant_id: str, documents: Sequence[IndexDocument]) -> None: ...

    async def delete(self, tenant_id: str, observation_ids: Sequence[str]) -> None:
        """Remove the entries of deleted observations for good (a late, older revision never
        brings them back)."""
        ...

    async def withdraw(self, tenant_id: str, revisions: Mapping[str, datetime]) -> None:
        """Remove the entries of observations that are no longer current at these revisions
        (superseded or retired by consolidation): a later revision may index them again (unmerge)."""
        ...

    async def drop_tenant(self, tenant_id: str) -> None: ...

    async def lexical(self, visibility: Visibility, text: str, where: SearchFilter, limit: int) -> list[Ranked]: ...

    async def vector(
        self, visibility: Visibility, embedding: Vector, where: SearchFilter, limit: int
    ) -> list[Ranked]: ...

    async def indexed_ids(self, tenant_id: str) -> set[str]: ...


class TenantSearch(Protocol):
    """An index's searches inside one tenant transaction (`prepare` first, then any number of
    `lexical` / `vector`)."""

    async def prepare(self, limit: int) -> SearchPlan: ...

    async def lexical(
        self, visibility: Visibility, text: str, where: SearchFilter, limit: int, plan: SearchPlan | None = None
    ) -> list[Ranked]: ...

    async def vector(
        self, visibility: Visibility, embedding: Vector, where: SearchFilter, limit: int, plan: SearchPlan
    ) -> list[Ranked]: ...

    async def embeddings(self, ids: Sequence[str]) -> dict[str, Vector]:
        """The stored vectors of these entries (absent: not indexed)."""
        ...


@runtime_checkable
class SharedDatabaseIndex(SearchIndex, Protocol):
    """An index in the application's PostgreSQL (pgvector): recall runs its searches inside its
    own tenant transaction, with the rejected ids and the hydration."""

    def within(self, tx: TenantTx) -> TenantSearch: ...


class ObjectArchive(Protocol):
    """An S3-compatible bucket for archived telemetry (R-11.1). Blocking calls (run in a thread);
    every failure to store or delete is an `ArchiveError`."""

    @property
    def bucket(self) -> str: ...

    def put(self, key: str, body: IO[bytes], *, size: int, content_md5: bytes, metadata: dict[str, str]) -> None: ...

    def get(self, key: str) -> bytes: ...

    def delete(self, key: str) -> None: ...

    def keys(self, prefix: str = "") -> list[str]: ...
