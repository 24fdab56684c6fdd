"""The errors every layer raises and the entry points map: one module, no imports.

HTTP functions map them to RFC 9457 problems (`engram.runtime.http`); the event workers map
`Poison` to a dead letter at the first delivery and `Transient` to a retry with backoff
(`engram.runtime.worker`). Services raise them; adapters translate their own technology's
errors into them where the caller must tell the two apart.
"""

from __future__ import annotations


class Poison(Exception):
    """An event that no retry can fix: dead-lettered with this reason at its first delivery."""


class InvalidEvent(Poison, ValueError):
    """An event that can never be processed (bad attributes, data or mapping); HTTP 422."""


class Transient(Exception):
    """A dependency is unavailable (database, bus, a downstream service): retried with backoff."""


class TelemetryError(ValueError):
    """An unknown telemetry event name or malformed metadata: rejected in code, never stored."""


class TenantRequired(ValueError):
    """A tenant-scoped transaction was asked for without a tenant."""


class Unauthorized(Exception):
    """No valid credentials (HTTP 401)."""


class Forbidden(PermissionError):
    """The caller is authenticated but may not do this (HTTP 403)."""


class NotFound(LookupError):
    """No such resource in the caller's tenant, or not visible to the caller (HTTP 404)."""


class Conflict(RuntimeError):
    """The request is valid, but the resource's state does not allow it now (HTTP 409): an
    undo of what was undone already, a decision on what was decided already."""


class Unprocessable(ValueError):
    """Well-formed but semantically invalid input (HTTP 422), with the field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class RecallUnavailable(RuntimeError):
    """No recall service is wired (`Services.recall` is None): nothing can be recalled (HTTP 503)."""


class ArchiveError(RuntimeError):
    """The telemetry archive did not confirm an object, or cannot be read (HTTP 503 where asked for)."""


class EmbeddingRejected(ValueError):
    """The embedding service refused the input for good (HTTP 400/413/422): retrying cannot help."""

    status_code = 422


class EmbeddingUnavailable(RuntimeError):
    """The embedding service is down or overloaded and stayed so through the retries."""

    status_code = 503
