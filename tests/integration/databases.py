"""Databases of their own for the tests of migrations and rollout: made empty on the session's
PostgreSQL, so a test can migrate one step at a time."""

from __future__ import annotations

import uuid

import asyncpg


async def fresh_database(url: str, prefix: str) -> str:
    """A new, empty database beside the one at `url`; its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return url.rsplit("/", 1)[0] + f"/{name}"
