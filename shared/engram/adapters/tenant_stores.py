"""The small stores of a tenant transaction on PostgreSQL: feedback rows, a consumer's inbox,
the embedding cache and agent keys (`engram.ports`). Each works on one connection that is
already inside the tenant's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime

from engram.adapters.observation_rows import REJECTED_IDS_SQL
from engram.adapters.postgres import Connection, parse_vector, vector_literal
from engram.domain.models import AgentKey, FeedbackRow
from engram.domain.search import Vector


class PgFeedbackStore:
    def __init__(self, conn: Connection, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    async def add(self, rows: Sequence[FeedbackRow]) -> None:
        await self.conn.execute(
            "INSERT INTO observation_feedback"
            " (tenant_id, observation_id, user_id, kind, rating, query_id, stream_origin)"
            " SELECT $1, o, u, k, r, q, s"
            " FROM unnest($2::uuid[], $3::text[], $4::text[], $5::smallint[], $6::uuid[], $7::text[])"
            " AS x(o, u, k, r, q, s)",
            self.tenant_id,
            [r.observation_id for r in rows],
            [r.user_id for r in rows],
            [r.kind.value for r in rows],
            [r.rating for r in rows],
            [r.query_id for r in rows],
            [r.stream_origin for r in rows],
        )

    async def rejected_ids(self, user_id: str | None) -> frozenset[str]:
        if user_id is None:
            return frozenset()
        rows = await self.conn.fetch(REJECTED_IDS_SQL.format(user="$1"), user_id)
        return frozenset(str(r["observation_id"]) for r in rows)


# One advisory lock per (tenant, user): writers hold it shared, an erasure exclusively, both until
# their transaction ends (`engram.domain.erasure`).
ERASURE_LOCK = "hashtextextended('engram.erasure' || chr(31) || $1 || chr(31) || {user}, 0)"


class PgErasureStore:
    def __init__(self, conn: Connection, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    async def hold(self, user_ids: Sequence[str]) -> dict[str, datetime]:
        users = sorted(set(user_ids))  # one order everywhere: no deadlock between writers and erasures
        if not users:
            return {}
        await self.conn.execute(
            f"SELECT pg_advisory_xact_lock_shared({ERASURE_LOCK.format(user='u')})"
            " FROM unnest($2::text[]) WITH ORDINALITY AS x(u, n) ORDER BY n",
            self.tenant_id,
            users,
        )
        rows = await self.conn.fetch(
            "SELECT user_id, erased_at FROM personal_data_erasures WHERE tenant_id = $1 AND user_id = ANY($2::text[])",
            self.tenant_id,
            users,
        )
        return {r["user_id"]: r["erased_at"] for r in rows}


class PgInbox:
    """`processed_events` of one consumer."""

    def __init__(self, conn: Connection, tenant_id: str, consumer: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id
        self.consumer = consumer

    async def seen(self, keys: Sequence[str]) -> dict[str, list[uuid.UUID]]:
        if not keys:
            return {}
        rows = await self.conn.fetch(
            "SELECT event_key, produced FROM processed_events WHERE consumer = $1 AND event_key = ANY($2::text[])",
            self.consumer,
            list(keys),
        )
        return {r["event_key"]: list(r["produced"]) for r in rows}

    async def record(self, produced: Mapping[str, Sequence[uuid.UUID]]) -> None:
        if not produced:
            return
        await self.conn.execute(
            "INSERT INTO processed_events (tenant_id, consumer, event_key, produced)"
            " SELECT $1, $2, k, string_to_array(p, ',')::uuid[]"
            " FROM unnest($3::text[], $4::text[]) AS x(k, p)"
            " ON CONFLICT DO NOTHING",
            self.tenant_id,
            self.consumer,
            list(produced),
            [",".join(str(i) for i in ids) for ids in produced.values()],
        )

    async def claim(self, keys: Sequence[str]) -> set[str]:
        rows = await self.conn.fetch(
            "INSERT INTO processed_events (tenant_id, consumer, event_key)"
            " SELECT $1, $2, k FROM unnest($3::text[]) AS k"
            " ON CONFLICT DO NOTHING RETURNING event_key",
            self.tenant_id,
            self.consumer,
            list(keys),
        )
        return {r["event_key"] for r in rows}


class PgEmbeddingCache:
    def __init__(self, conn: Connection, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    async def cached(self, model: str, hashes: Sequence[str]) -> dict[str, Vector]:
        # a hit older than a day is marked used in the same statement: pruning goes by last use
        rows = await self.conn.fetch(
            "WITH hit AS (SELECT text_hash, embedding, used_at FROM embedding_cache"
            "  WHERE tenant_id = $3 AND model = $1 AND text_hash = ANY($2::text[])),"
            " touched AS (UPDATE embedding_cache c SET used_at = now() FROM hit"
            "  WHERE c.tenant_id = $3 AND c.model = $1 AND c.text_hash = hit.text_hash"
            "  AND hit.used_at < now() - interval '1 day')"
            " SELECT text_hash, embedding::text AS v FROM hit",
            model,
            list(hashes),
            self.tenant_id,
        )
        return {r["text_hash"]: parse_vector(r["v"]) for r in rows}

    async def store(self, model: str, entries: Mapping[str, Vector]) -> None:
        if not entries:
            return
        await self.conn.execute(
            "INSERT INTO embedding_cache (tenant_id, model, text_hash, embedding)"
            " SELECT $1, $2, h, v::vector FROM unnest($3::text[], $4::text[]) AS x(h, v)"
            " ON CONFLICT DO NOTHING",
            self.tenant_id,
            model,
            list(entries),
            [vector_literal(v) for v in entries.values()],
        )


class PgAgentKeyStore:
    def __init__(self, conn: Connection, tenant_id: str) -> None:
        self.conn = conn
        self.tenant_id = tenant_id

    async def create(
        self,
        key_id: uuid.UUID,
        *,
        name: str,
        key_hash: str,
        user_id: str | None,
        teams: list[str],
        permissions: list[str],
    ) -> None:
        await self.conn.execute(
            "INSERT INTO agent_keys (id, tenant_id, name, key_hash, user_id, teams, permissions)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7)",
            key_id,
            self.tenant_id,
            name,
            key_hash,
            user_id,
            teams,
            permissions,
        )

    async def list(self, *, include_revoked: bool = False) -> list[AgentKey]:
        rows = await self.conn.fetch(
            "SELECT id, name, user_id, teams, permissions, created_at, revoked_at FROM agent_keys"
            " WHERE tenant_id = $1 AND ($2 OR revoked_at IS NULL) ORDER BY created_at, id",
            self.tenant_id,
            include_revoked,
        )
        return [AgentKey(**dict(r)) for r in rows]

    async def revoke(self, key_id: uuid.UUID) -> AgentKey | None:
        row = await self.conn.fetchrow(
            "UPDATE agent_keys SET revoked_at = coalesce(revoked_at, now()) WHERE tenant_id = $1 AND id = $2"
            " RETURNING id, name, user_id, teams, permissions, created_at, revoked_at",
            self.tenant_id,
            key_id,
        )
        return AgentKey(**dict(row)) if row is not None else None
