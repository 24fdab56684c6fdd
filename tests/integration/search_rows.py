"""Rows the search-index and plan tests store: observations for the documents to point at, a
user's private rows in bulk, and a note's index document (public, alice's, english)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from engram.domain.search import IndexDocument


async def insert_notes(db: Any, tenant: str, ids: Sequence[uuid.UUID]) -> None:
    """One public note of alice's per id, so index documents have their observation."""
    async with db.system() as conn:
        await conn.execute(
            "INSERT INTO observations (id, tenant_id, user_id, type, title, content_hash, source, scope,"
            " trigger_source) SELECT id, $1, 'alice', 'note', 'n', md5(id::text), 'user', 'public', 'manual'"
            " FROM unnest($2::uuid[]) AS id",
            tenant,
            list(ids),
        )


async def insert_private(conn: Any, tenant: str, user: str, kind: str, count: int) -> None:
    """`count` private rows of `user` of the type `kind`, written by one statement (so they share
    their `created_at`, as a batch written in one transaction does)."""
    await conn.execute(
        "INSERT INTO observations (id, tenant_id, user_id, type, title, content_hash, source, scope, trigger_source)"
        " SELECT gen_random_uuid(), $1, $2, $3, 'note ' || g, md5($1 || $2 || $3 || g), 'user', 'private', 'manual'"
        " FROM generate_series(1, $4) g",
        tenant,
        user,
        kind,
        count,
    )


def note_document(
    tenant: str, oid: uuid.UUID, embedding: np.ndarray, revision: datetime, title: str = "note", body: str = "a note"
) -> IndexDocument:
    return IndexDocument(
        observation_id=oid,
        tenant_id=tenant,
        user_id="alice",
        team_ids=[],
        scope="public",
        type="note",
        valid_from=None,
        expires_at=None,
        revision=revision,
        title=title,
        body=body,
        language="english",
        embedding=embedding,
    )
