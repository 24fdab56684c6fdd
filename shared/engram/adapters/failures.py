"""What a failure of PostgreSQL, NATS, an HTTP service or Elasticsearch means for an event.

The worker runtime asks `failure_kind(error)` of every failed delivery (the error and the
errors it was raised from):

- `data`: the event's own data cannot be stored (invalid text, a number out of range, a
  constraint that retrying cannot satisfy, a value the driver cannot encode): poison, dead-
  lettered at its first delivery once the runtime has found which event of a batch it is;
- `outage`: a dependency is unavailable (a connection refused or lost, a timeout, too many
  connections, the server shutting down or starting, a serialization conflict, JetStream
  without responders): retried with backoff, and the runner pauses its fetches;
- `unknown`: anything else; the runtime isolates the event (its neighbours are applied) and
  retries it alone with backoff until `max_deliver`.

SQLSTATE classes are the SQL standard's: 22 data exception, 23 integrity constraint
violation (23505 unique_violation may be a race between writers and is left `unknown`),
08 connection exception, 40 transaction rollback, 53 insufficient resources, 57 operator
intervention, 58 system error.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import ValidationError

from engram.domain.errors import EmbeddingRejected, EmbeddingUnavailable, Poison, Transient

FailureKind = Literal["data", "outage", "unknown"]

_DATA_SQLSTATE_CLASSES = ("22", "23")
_RACE_SQLSTATES = ("23505", "23P01")  # unique / exclusion: a concurrent writer may have won
_OUTAGE_SQLSTATE_CLASSES = ("08", "40", "53", "57", "58")
_OUTAGE_SQLSTATES = ("55P03", "55006")  # lock not available, object in use


def causes(error: BaseException) -> Iterator[BaseException]:
    """`error` and what it was raised from or during, outermost first (at most 10)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < 10:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _kind_of_one(error: BaseException) -> FailureKind | None:
    sqlstate = getattr(error, "sqlstate", None)
    if isinstance(sqlstate, str) and len(sqlstate) == 5:
        if sqlstate in _RACE_SQLSTATES:
            return "unknown"
        if sqlstate[:2] in _DATA_SQLSTATE_CLASSES:
            return "data"
        if sqlstate[:2] in _OUTAGE_SQLSTATE_CLASSES or sqlstate in _OUTAGE_SQLSTATES:
            return "outage"
    if isinstance(error, Poison | ValidationError | UnicodeError | OverflowError | EmbeddingRejected):
        return "data"
    if isinstance(error, EmbeddingUnavailable | ConnectionError | TimeoutError | OSError):
        return "outage"
    module = type(error).__module__
    if module.startswith("asyncpg"):
        import asyncpg

        if isinstance(error, asyncpg.exceptions.InterfaceError | asyncpg.exceptions.PostgresConnectionError):
            return "outage"  # the connection is closed or was never made
        if isinstance(error, asyncpg.exceptions.DataError) or "invalid input for query argument" in str(error):
            return "data"  # the driver cannot encode the value (client side)
    if module.startswith("nats"):
        return "outage"  # not connected, no responders, no ack in time, JetStream unavailable
    if module.startswith(("httpx", "httpcore")):
        import httpx

        if isinstance(error, httpx.TransportError):
            return "outage"
    if module.startswith(("elasticsearch", "elastic_transport")):
        status = getattr(error, "status_code", None) or getattr(getattr(error, "meta", None), "status", None)
        if isinstance(status, int) and 400 <= status < 500 and status not in (408, 409, 429):
            return "data"
        return "outage"
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        if status in (408, 429) or status >= 500:
            return "outage"
        if 400 <= status < 500:
            return "data"
    return None


def failure_kind(error: BaseException) -> FailureKind:
    """The first verdict along the error's chain; a bare `Transient` says outage."""
    for cause in causes(error):
        kind = _kind_of_one(cause)
        if kind is not None:
            return kind
        if isinstance(cause, Transient) and cause.__cause__ is None and cause.__context__ is None:
            return "outage"
    return "unknown"
