"""Events as a worker's service receives them: decoded once into (tenant, typed data).

The worker runtime (`engram.runtime.worker`) reads each CloudEvent of a fetch, checks its
`tenantid`, decodes its data with the worker's decoder and hands the service a `Batch` of
`Delivery` items grouped by tenant. The service marks the items it could not apply
(`poison`: dead-lettered at once; `retry`: redelivered with backoff); the rest are
acknowledged. Services never see a raw CloudEvent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from engram.domain.errors import InvalidEvent, Poison, Transient

T = TypeVar("T")


class Erased(Exception):
    """An event given before its user's personal memory was erased (R-16.5): acknowledged,
    applied to nothing, and deleted from the stream, so the user's text does not stay there."""


Outcome = Poison | Transient | Erased | None


def reason(error: BaseException) -> str:
    """An error as a dead letter's or a retry's reason (an HTTP error's detail, else its text)."""
    detail = getattr(error, "detail", None)
    return str(detail) if detail else (str(error) or type(error).__name__)


def classify(error: BaseException) -> Poison | Transient | Erased:
    """Poison when no retry can fix it: an invalid event, data that fails its model, a 4xx other
    than 408 and 429 (how the Knative broker reads an HTTP function's answer); else transient."""
    if isinstance(error, Poison | Transient | Erased):
        return error
    status = getattr(error, "status_code", None)
    poison = isinstance(error, ValidationError) or (
        isinstance(status, int) and 400 <= status < 500 and status not in (408, 429)
    )
    outcome: Poison | Transient = InvalidEvent(reason(error)) if poison else Transient(reason(error))
    outcome.__cause__ = error
    return outcome


# RFC 3339's date-time (section 5.6): an offset is required; a space for the "T" is allowed (5.6, note)
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d)[Tt ](\d\d:\d\d:\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)")


def occurrence_time(value: object) -> datetime | None:
    """A CloudEvent's `time`, "when the occurrence happened" (RFC 3339), as an aware datetime
    (to the microsecond); None when the event has none. InvalidEvent when it is not such a
    timestamp: the event is dead-lettered at its first delivery."""
    if value is None:
        return None
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidEvent(f"time: {str(value)[:64]!r} is not an RFC 3339 timestamp with an offset")
    day, clock, fraction, offset = match.groups()
    try:
        return datetime.fromisoformat(f"{day}T{clock}{(fraction or '')[:7]}{offset.upper()}")
    except ValueError as exc:  # a 13th month, a 25th hour
        raise InvalidEvent(f"time: {str(value)[:64]!r} is not a valid timestamp ({exc})") from exc


@dataclass(frozen=True)
class EventMeta:
    """A CloudEvent's attributes, without its data."""

    id: str
    source: str
    type: str
    attributes: Mapping[str, Any]

    @cached_property
    def key(self) -> str:
        """The event's identity in a consumer's inbox (`processed_events`): source and id."""
        return f"{self.source}\x1f{self.id}"

    @property
    def user_id(self) -> str | None:
        user = self.attributes.get("userid")
        return str(user) if user else None

    @property
    def time(self) -> str | None:
        sent = self.attributes.get("time")
        return str(sent) if sent else None

    @cached_property
    def occurred_at(self) -> datetime | None:
        """When the occurrence happened (`occurrence_time`; the worker refused an event whose
        `time` is not a timestamp)."""
        return occurrence_time(self.time)

    def said_by(self, now: datetime) -> datetime | None:
        """When what the event reports was said, never after `now` (a sender's clock ahead of
        ours): an observation's `said_at`."""
        at = self.occurred_at
        return None if at is None else min(at, now)


@dataclass(eq=False)
class Delivery(Generic[T]):
    """One event of a batch: its tenant, typed data and attributes, and what became of it."""

    tenant: str
    data: T
    meta: EventMeta
    outcome: Outcome = None

    @property
    def key(self) -> str:
        return self.meta.key

    def poison(self, reason: str | Poison) -> None:
        """This event can never be applied: dead-letter it with `reason`."""
        self.outcome = reason if isinstance(reason, Poison) else InvalidEvent(reason)

    def erased(self) -> None:
        """Given before its user's erasure: acknowledge it, apply nothing, delete the message."""
        self.outcome = Erased(f"given before user {self.meta.user_id!r} was erased")

    def retry(self, error: BaseException) -> None:
        """This event could not be applied now: redeliver it with backoff (unless the error says
        that no retry can help, see `classify`)."""
        self.outcome = classify(error)

    @property
    def failed(self) -> bool:
        return self.outcome is not None and not isinstance(self.outcome, Erased)


@dataclass
class Batch(Generic[T]):
    """The decoded events of one fetch, in order."""

    deliveries: list[Delivery[T]] = field(default_factory=list)

    def __iter__(self) -> Iterator[Delivery[T]]:
        return iter(self.deliveries)

    def __len__(self) -> int:
        return len(self.deliveries)

    def by_tenant(self) -> dict[str, list[Delivery[T]]]:
        """The deliveries grouped by tenant, each group in batch order."""
        groups: dict[str, list[Delivery[T]]] = {}
        for delivery in self.deliveries:
            groups.setdefault(delivery.tenant, []).append(delivery)
        return groups


@dataclass(frozen=True)
class Rejected:
    """An event refused before its service saw it (no data model fits, bad attributes), with
    its tenant when it names one: the service may still record that it failed."""

    tenant: str
    meta: EventMeta
    data: Any
    reason: str
