"""The small stores of a tenant transaction in memory: feedback rows, a consumer's inbox, the
embedding cache, agent keys and a user's personal data (`engram.ports`), as their PostgreSQL
versions in `engram.adapters.tenant_stores` and `personal_data_store`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from engram.domain.models import AgentKey, FeedbackKind, FeedbackRow
from engram.domain.observation import Observation
from engram.domain.search import Vector
from engram.ports import Erased
from tests.fakes.data import ConstraintViolation, FeedbackRecord, TenantData, TxState, observations_deleted


class InMemoryFeedbackStore:
    def __init__(self, tx: TxState) -> None:
        self.tx = tx

    async def add(self, rows: Sequence[FeedbackRow]) -> None:
        data = self.tx.rows()
        for r in rows:  # checked first: one bad row writes nothing, like the one INSERT
            if r.observation_id is not None and r.observation_id not in data.observations:
                raise ConstraintViolation(f"observation_feedback: observation {r.observation_id} does not exist")
            if r.rating is not None and not 1 <= r.rating <= 5:
                raise ConstraintViolation(f"observation_feedback: rating {r.rating} is not between 1 and 5")
        for r in rows:
            data.feedback.append(
                FeedbackRecord(
                    data.next_id(),
                    r.observation_id,
                    r.user_id,
                    FeedbackKind(r.kind),
                    r.rating,
                    r.query_id,
                    r.stream_origin,
                    self.tx.now,
                )
            )

    async def rejected_ids(self, user_id: str | None) -> frozenset[str]:
        if user_id is None:
            return frozenset()
        return frozenset(
            str(f.observation_id)
            for f in self.tx.rows().feedback
            if f.user_id == user_id and f.kind is FeedbackKind.rejected and f.observation_id is not None
        )


class InMemoryErasureStore:
    """The tombstones (one transaction at a time here, so holding them needs no lock)."""

    def __init__(self, tx: TxState) -> None:
        self.tx = tx

    async def hold(self, user_ids: Sequence[str]) -> dict[str, datetime]:
        erased = self.tx.rows().erasures
        return {u: erased[u] for u in user_ids if u in erased}


class InMemoryInbox:
    """`processed_events` of one consumer."""

    def __init__(self, tx: TxState, consumer: str) -> None:
        self.tx = tx
        self.consumer = consumer

    @property
    def applied(self) -> dict[str, list[uuid.UUID]]:
        return self.tx.rows().inbox.setdefault(self.consumer, {})

    async def seen(self, keys: Sequence[str]) -> dict[str, list[uuid.UUID]]:
        return {k: list(self.applied[k]) for k in keys if k in self.applied}

    async def record(self, produced: Mapping[str, Sequence[uuid.UUID]]) -> None:
        for key, ids in produced.items():
            self.applied.setdefault(key, list(ids))  # ON CONFLICT DO NOTHING

    async def claim(self, keys: Sequence[str]) -> set[str]:
        new = {k for k in keys if k not in self.applied}
        for k in new:
            self.applied[k] = []
        return new


class InMemoryEmbeddingCache:
    def __init__(self, tx: TxState) -> None:
        self.tx = tx

    async def cached(self, model: str, hashes: Sequence[str]) -> dict[str, Vector]:
        stored = self.tx.rows().embeddings
        return {h: stored[(model, h)].copy() for h in hashes if (model, h) in stored}

    async def store(self, model: str, entries: Mapping[str, Vector]) -> None:
        stored = self.tx.rows().embeddings
        for h, vector in entries.items():
            stored.setdefault((model, h), vector.copy())  # ON CONFLICT DO NOTHING


class InMemoryAgentKeyStore:
    def __init__(self, tx: TxState) -> None:
        self.tx = tx

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
        keys = self.tx.rows().agent_keys
        if key_id in keys or any(k["key_hash"] == key_hash for k in keys.values()):
            raise ConstraintViolation("agent_keys: duplicate key")
        keys[key_id] = {
            "id": key_id,
            "tenant_id": self.tx.tenant_id,
            "name": name,
            "key_hash": key_hash,
            "user_id": user_id,
            "teams": list(teams),
            "permissions": list(permissions),
            "created_at": self.tx.now,
            "revoked_at": None,
        }

    async def list(self, *, include_revoked: bool = False) -> list[AgentKey]:
        keys = sorted(self.tx.rows().agent_keys.values(), key=lambda k: (k["created_at"], str(k["id"])))
        return [_agent_key(k) for k in keys if include_revoked or k.get("revoked_at") is None]

    async def revoke(self, key_id: uuid.UUID) -> AgentKey | None:
        key = self.tx.rows().agent_keys.get(key_id)
        if key is None:
            return None
        key["revoked_at"] = key.get("revoked_at") or self.tx.now
        return _agent_key(key)


def _history(data: TenantData, tenant_id: str, name: str, user_id: str) -> list[dict[str, Any]]:
    """The user's `chats`, `messages`, `sessions` or `summaries` as rows, in export order: a
    chat's messages and a session's summary go with it, as do the user's own elsewhere."""
    chats = {c.id for c in data.chats.values() if c.user_id == user_id}
    sessions = {s.id for s in data.sessions.values() if s.user_id == user_id}
    if name == "chats":
        rows = [c.model_dump() for c in data.chats.values() if c.id in chats]
    elif name == "messages":
        rows = [m.as_row(tenant_id) for m in data.messages.values() if m.user_id == user_id or m.chat_id in chats]
    elif name == "sessions":
        rows = [s.model_dump() for s in data.sessions.values() if s.id in sessions]
    elif name == "summaries":
        rows = [s.model_dump() for s in data.summaries.values() if s.user_id == user_id or s.session_id in sessions]
    elif name == "proposals":
        rows = [
            {**p.__dict__, "draft": p.draft.model_dump(mode="json"), "tenant_id": tenant_id}
            for p in data.proposals.values()
            if p.user_id == user_id
        ]
    else:
        raise KeyError(name)
    return sorted(rows, key=lambda r: (r["created_at"], r["id"].int))


def _agent_key(row: dict[str, Any]) -> AgentKey:
    return AgentKey(**{k: row.get(k) for k in AgentKey.model_fields})


class InMemoryPersonalDataStore:
    """A user's personal memory: the observations they own, their feedback, history and telemetry."""

    def __init__(self, tx: TxState) -> None:
        self.tx = tx

    def _owned(self, user_id: str) -> list[Observation]:
        mine = [o for o in self.tx.rows().observations.values() if (o.user_id or "") == user_id]
        return sorted(mine, key=lambda o: (o.created_at, o.id.int))

    async def observations(self, user_id: str) -> AsyncIterator[Observation]:
        for o in self._owned(user_id):
            yield o

    async def feedback(self, user_id: str) -> AsyncIterator[Mapping[str, Any]]:
        for f in sorted(self.tx.rows().feedback, key=lambda f: (f.created_at, f.id)):
            if f.user_id == user_id:
                yield {
                    "observation_id": f.observation_id,
                    "kind": f.kind.value,
                    "rating": f.rating,
                    "query_id": f.query_id,
                    "stream_origin": f.stream_origin,
                    "created_at": f.created_at,
                }

    async def history(self, name: str, user_id: str) -> AsyncIterator[Mapping[str, Any]]:
        for row in _history(self.tx.rows(), self.tx.tenant_id, name, user_id):
            yield row

    async def telemetry(self, user_id: str) -> AsyncIterator[Mapping[str, Any]]:
        rows = [r for r in self.tx.rows().telemetry if r["user_id"] == user_id]
        for r in sorted(rows, key=lambda r: (r["created_at"], r["id"])):
            yield {k: r[k] for k in ("id", "event_name", "chat_id", "metadata", "created_at")}

    async def erase(self, user_id: str) -> Erased:
        data = self.tx.rows()
        owned = sorted(o.id for o in self._owned(user_id))
        gone = set(owned)
        before = len(data.feedback)
        data.feedback = [f for f in data.feedback if f.user_id != user_id and f.observation_id not in gone]
        feedback = before - len(data.feedback)
        data.erasures[user_id] = self.tx.now  # in-flight feedback given before now is dropped
        history = {name: len(_history(data, self.tx.tenant_id, name, user_id)) for name in ("messages", "summaries")}
        chats = {c.id for c in data.chats.values() if c.user_id == user_id}
        sessions = {s.id for s in data.sessions.values() if s.user_id == user_id}
        data.messages = {i: m for i, m in data.messages.items() if not (m.user_id == user_id or m.chat_id in chats)}
        data.summaries = {
            i: s for i, s in data.summaries.items() if not (s.user_id == user_id or s.session_id in sessions)
        }
        history["sessions"] = len(sessions)
        history["chats"] = len(chats)
        data.sessions = {  # another user's session in an erased chat keeps no chat (ON DELETE SET NULL)
            i: s.model_copy(update={"chat_id": None}) if s.chat_id in chats else s
            for i, s in data.sessions.items()
            if i not in sessions
        }
        data.chats = {i: c for i, c in data.chats.items() if i not in chats}
        data.proposals = {i: p for i, p in data.proposals.items() if p.chat_id not in chats}  # ON DELETE CASCADE
        before = len(data.telemetry)
        data.telemetry = [r for r in data.telemetry if r["user_id"] != user_id]
        history["telemetry_events"] = before - len(data.telemetry)
        deleted = [(i, data.observations.pop(i).user_id) for i in owned]
        observations_deleted(data, gone)
        return Erased(feedback=feedback, history=history, observations=deleted)
