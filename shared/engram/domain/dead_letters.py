"""Dead letters as an operator sees them (R-3.4): what a worker refused or gave up on.

A dead letter is the original message (its payload and every original header) on
`dlq.engram.<consumer>.<original subject without "engram.">` in the `<stream>_DLQ` stream, with
`Engram-Dlq-*` headers that say why (`engram.runtime.jetstream.PullRunner.dead_letter`). This
module reads those headers, selects dead letters by consumer, type, tenant and reason, and
turns one back into the message that was refused: the original subject and headers, with a
message id of its own so a replay is not taken for the original publish inside the stream's
duplicate window (a replayed event is applied once all the same: every consumer keeps an inbox
of the event ids it applied).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from datetime import datetime

from engram.domain.subjects import PREFIX, token
from engram.domain.topology import DLQ_SUBJECT_PREFIX

REASON = "Engram-Dlq-Reason"
CONSUMER = "Engram-Dlq-Consumer"
SUBJECT = "Engram-Dlq-Subject"
DELIVERIES = "Engram-Dlq-Deliveries"
STREAM_SEQ = "Engram-Dlq-Stream-Seq"
MSG_ID = "Nats-Msg-Id"
_OWN = frozenset(h.lower() for h in (REASON, CONSUMER, SUBJECT, DELIVERIES, STREAM_SEQ, MSG_ID))


@dataclass(frozen=True)
class DeadLetter:
    seq: int  # in the dead-letter stream
    subject: str  # where it is stored (dlq.engram.<consumer>....)
    headers: dict[str, str]
    body: bytes
    stored_at: datetime | None = None

    def header(self, name: str) -> str:
        wanted = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == wanted), "")

    @property
    def consumer(self) -> str:
        return self.header(CONSUMER) or self.subject.removeprefix(f"{DLQ_SUBJECT_PREFIX}.").split(".")[0]

    @property
    def original_subject(self) -> str:
        """The subject the event was refused on (the header; else rebuilt from the dead letter's)."""
        if found := self.header(SUBJECT):
            return found
        rest = self.subject.removeprefix(f"{DLQ_SUBJECT_PREFIX}.{self.consumer}.")
        return f"{PREFIX}.{rest}"

    @property
    def reason(self) -> str:
        return self.header(REASON)

    @property
    def event_id(self) -> str:
        return unquote(self.header("ce-id"))

    @property
    def event_type(self) -> str:
        return unquote(self.header("ce-type"))

    @property
    def tenant(self) -> str:
        return unquote(self.header("ce-tenantid"))

    @property
    def deliveries(self) -> int:
        value = self.header(DELIVERIES)
        return int(value) if value.isdigit() else 0

    def replay_headers(self) -> dict[str, str]:
        """The original headers, without what dead-lettering added, and a message id of the replay."""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _OWN}
        headers[MSG_ID] = f"replay:{self.consumer}:{self.seq}"
        return headers

    def summary(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "consumer": self.consumer,
            "subject": self.original_subject,
            "type": self.event_type,
            "id": self.event_id,
            "tenant": self.tenant,
            "deliveries": self.deliveries,
            "reason": self.reason,
            "stored_at": self.stored_at.isoformat() if self.stored_at else None,
        }


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters: all fields optional; `reason` is a case-insensitive substring."""

    consumer: str | None = None
    event_type: str | None = None
    tenant: str | None = None
    reason: str | None = None

    @property
    def subject(self) -> str:
        """The narrowest subject filter: consumer and tenant are tokens of the dead letter's subject
        (`dlq.engram.<consumer>.<family>.<tenant>.>`); type and reason are checked on the headers."""
        consumer = self.consumer or "*"
        if self.tenant:
            return f"{DLQ_SUBJECT_PREFIX}.{consumer}.*.{token(self.tenant)}.>"
        return f"{DLQ_SUBJECT_PREFIX}.{consumer}.>"

    def matches(self, letter: DeadLetter) -> bool:
        if self.consumer and letter.consumer != self.consumer:
            return False
        if self.tenant and letter.tenant != self.tenant:
            return False
        if self.event_type and letter.event_type != self.event_type:
            return False
        return not self.reason or self.reason.lower() in letter.reason.lower()


def tenant_filters(tenant: str) -> tuple[str, str]:
    """The subjects of all of a tenant's messages: in the main stream and in the dead letters."""
    return f"{PREFIX}.*.{token(tenant)}.>", f"{DLQ_SUBJECT_PREFIX}.*.*.{token(tenant)}.>"


def unquote(value: str) -> str:
    """A percent-encoded header value (the NATS binding of CloudEvents) as text."""
    return urllib.parse.unquote(value, errors="replace")
