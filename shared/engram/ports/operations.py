"""What the operations commands (`engram dlq|tenants|tenant|reindex`) need from outside."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from engram.domain.dead_letters import DeadLetter


class DeadLetterQueue(Protocol):
    """The dead-letter stream, read without a consumer (nothing of it is acknowledged away)."""

    def scan(self, subject_filter: str) -> AsyncIterator[DeadLetter]:
        """Dead letters on subjects matching the NATS filter, oldest first, up to the last one
        stored when the scan began (a letter dead-lettered again during a replay is not seen twice)."""
        ...

    async def get(self, seq: int) -> DeadLetter | None: ...

    async def remove(self, seq: int) -> bool:
        """Delete one dead letter; False if it was gone already."""
        ...


class StreamPurge(Protocol):
    async def purge_tenant(self, tenant_id: str) -> dict[str, int]:
        """Remove every message of the tenant (its subjects) from every stream; the count per stream."""
        ...


@dataclass(frozen=True)
class TenantRows:
    tenant_id: str
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows

    @property
    def total(self) -> int:
        return sum(self.rows.values())


class TenantData(Protocol):
    """Every row of a tenant, in every table that has a `tenant_id` (as the tables' owner)."""

    async def tenants(self) -> list[TenantRows]: ...

    def export(self, tenant_id: str) -> AsyncIterator[tuple[str, str]]:
        """(table, the row as a JSON object's text) for every row of the tenant."""
        ...

    async def delete(self, tenant_id: str) -> dict[str, int]:
        """Delete every row of the tenant in one transaction; rows deleted per table."""
        ...


class TenantArchive(Protocol):
    async def delete_tenant(self, tenant_id: str) -> int:
        """Delete the tenant's archive objects; how many."""
        ...
