"""Fakes of the operations ports (`engram.ports.operations`): a dead-letter stream, a tenant's
rows, a stream purge and an archive, in memory."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

from engram.domain.bus_access import subject_regex
from engram.domain.dead_letters import DeadLetter
from engram.ports.operations import TenantRows


class FakeDeadLetters:
    def __init__(self, letters: list[DeadLetter] | None = None) -> None:
        self.letters = {letter.seq: letter for letter in letters or []}
        self.scanned: list[str] = []

    async def scan(self, subject_filter: str) -> AsyncIterator[DeadLetter]:
        self.scanned.append(subject_filter)
        pattern = re.compile(subject_regex(subject_filter))
        for seq in sorted(self.letters):
            if pattern.match(self.letters[seq].subject):
                yield self.letters[seq]

    async def get(self, seq: int) -> DeadLetter | None:
        return self.letters.get(seq)

    async def remove(self, seq: int) -> bool:
        return self.letters.pop(seq, None) is not None


class FakeTenantData:
    """Rows per tenant and table, as JSON objects."""

    def __init__(self, rows: dict[str, dict[str, list[dict[str, object]]]] | None = None) -> None:
        self.rows = rows or {}
        self.calls: list[str] = []

    async def tenants(self) -> list[TenantRows]:
        return [
            TenantRows(t, {table: len(r) for table, r in tables.items() if r})
            for t, tables in sorted(self.rows.items())
        ]

    async def export(self, tenant_id: str) -> AsyncIterator[tuple[str, str]]:
        for table, rows in sorted(self.rows.get(tenant_id, {}).items()):
            for row in rows:
                yield table, json.dumps(row)

    async def delete(self, tenant_id: str) -> dict[str, int]:
        self.calls.append("rows")
        tables = self.rows.pop(tenant_id, {})
        return {table: len(rows) for table, rows in tables.items() if rows}


class FakeStreams:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    async def purge_tenant(self, tenant_id: str) -> dict[str, int]:
        self.calls.append("streams")
        return {"ENGRAM": 2, "ENGRAM_DLQ": 1}


class FakeArchive:
    def __init__(self, calls: list[str], objects: int = 3) -> None:
        self.calls = calls
        self.objects = objects

    async def delete_tenant(self, tenant_id: str) -> int:
        self.calls.append("archive")
        return self.objects
