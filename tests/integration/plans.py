"""Statements run under EXPLAIN ANALYZE in place of a connection, and what their plans read."""

from __future__ import annotations

import json
from typing import Any


class Explaining:
    """Stands in for the connection an adapter's statement runs on (`PgVectorIndex.lexical_in`, a
    store): runs what it fetches (`fetch`, `fetchval`) under EXPLAIN (ANALYZE, BUFFERS, FORMAT
    JSON) and keeps the plans in order (`plan`: the last); what it executes (the statement's
    settings) runs as it is."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.plan: dict[str, Any] = {}
        self.plans: list[dict[str, Any]] = []

    async def _explain(self, sql: str, *args: Any) -> None:
        found = await self.conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args)
        self.plan = (json.loads(found) if isinstance(found, str) else found)[0]  # a pool may decode json
        self.plans.append(self.plan)

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        await self._explain(sql, *args)
        return []

    async def fetchval(self, sql: str, *args: Any) -> int:
        await self._explain(sql, *args)
        return 0

    async def execute(self, sql: str, *args: Any) -> str:
        result: str = await self.conn.execute(sql, *args)
        return result


def scans(node: dict[str, Any], relation: str) -> list[dict[str, Any]]:
    """The plan's nodes that scan `relation`."""
    own = [node] if node.get("Relation Name") == relation else []
    return own + [s for child in node.get("Plans", []) for s in scans(child, relation)]


def rows_read(node: dict[str, Any], relation: str) -> float:
    """Rows the plan's scans of `relation` read (returned or removed by a filter after their index
    conditions), over all their loops."""
    found = scans(node, relation)
    return float(sum((s["Actual Rows"] + s.get("Rows Removed by Filter", 0)) * s["Actual Loops"] for s in found))


def outline(node: dict[str, Any], depth: int = 0) -> str:
    """A plan as one line per node: its type, index and rows (for a failing assertion)."""
    line = f"{'  ' * depth}{node['Node Type']} {node.get('Index Name', '')} rows={node.get('Actual Rows')}"
    return "\n".join([line, *(outline(child, depth + 1) for child in node.get("Plans", []))])
