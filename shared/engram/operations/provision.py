"""Bring a database and a NATS server to what this code needs (`engram migrate`, `engram declare`).

Used by the command line, the local stack, the test fixtures and the benchmarks; each prints
the one-line summary these return.
"""

from __future__ import annotations


async def apply_migrations(url: str) -> str:
    """Apply every SQL migration not yet applied (idempotent); a summary line."""
    from engram.operations.migrate import migrate

    applied = await migrate(url)
    names = f" ({', '.join(m.name for m in applied)})" if applied else " (up to date)"
    return f"migrations: {len(applied)} applied{names}"


async def declare_streams(url: str, stream: str) -> str:
    """Declare the JetStream streams and durable consumers (idempotent); a summary line."""
    from engram.adapters.nats_bus import connect, declare_topology

    nc = await connect(url)
    try:
        report = await declare_topology(nc.jetstream(), stream)
    finally:
        await nc.drain()
    streams = [s["name"] for s in report["streams"]]
    consumers = [c["name"] for c in report["consumers"]]
    return f"streams: {streams}, consumers: {consumers}"
