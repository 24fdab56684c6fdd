"""NATS subjects: every message says whose it is (R-16.3, R-16.5).

    engram.<family>.<tenant>.<user>.<rest>

| family | rest | published by |
| --- | --- | --- |
| `ingest` | the producer's event type | domain systems (producer users), memory-api (HTTP) |
| `mark` | `marked` | memory-api |
| `chat` | `turn.completed`, `session.ended`, `approval_decision` | chat-turn, the session sweep (retention-cron) |
| `observation` | `created`, `updated`, `deleted` | memory-api, extract-observation, record-feedback |
| `feedback` | the actor: `human`, `agent`, `system` | memory-api (`human` only it), chat-turn |

e.g. `engram.ingest.acme._.com.example.crm.customer.created.v1`, `engram.mark.acme.alice.marked`,
`engram.feedback.acme.alice.human`.

`<tenant>` and `<user>` are tokens (`token`): letters, digits and `-` stay, anything else is
`_` and two hex digits per UTF-8 byte (`alice@example.com` -> `alice_40example_2Ecom`); no
user is `_`. So:

- NATS permissions can bind a producer to its tenant (`engram.ingest.acme.>`) and keep human
  feedback to the memory API (`engram.feedback.*.*.human`);
- a worker checks that an event arrived on the subject its own attributes give (`subject_of`):
  a `tenantid`, `userid` or `actor` that the subject does not confirm is forged and dead-lettered;
- erasing a user purges that user's messages with a few subject filters (`user_filters`),
  also from the dead letters (`dlq.engram.<consumer>.<original subject without "engram.">`).
"""

from __future__ import annotations

import re
from typing import Any

from engram.domain.errors import InvalidEvent

PREFIX = "engram"
NO_USER = "_"
_PLAIN = re.compile(r"[A-Za-z0-9-]")
_TYPE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,254}$")
_TYPE_TOKEN = re.compile(r"[^A-Za-z0-9_\-.]")

# families whose messages carry a user's content or judgement (purged on erasure); observation
# changes carry ids only, and the erasure's own deletions travel there
USER_FAMILIES = ("ingest", "mark", "chat", "feedback")

# Engram's own event types -> (family, rest); feedback's rest is its actor
ENGRAM_SUBJECTS: dict[str, tuple[str, str]] = {
    "io.engram.observation.marked.v1": ("mark", "marked"),
    "io.engram.observation.created.v1": ("observation", "created"),
    "io.engram.observation.updated.v1": ("observation", "updated"),
    "io.engram.observation.deleted.v1": ("observation", "deleted"),
    "io.engram.chat.turn.completed.v1": ("chat", "turn.completed"),
    "io.engram.session.ended.v1": ("chat", "session.ended"),
    "io.engram.chat.approval_decision.v1": ("chat", "approval_decision"),
    "io.engram.feedback.recorded.v1": ("feedback", "{actor}"),
}
FEEDBACK_ACTORS = ("human", "agent", "system")


def token(value: str | None) -> str:
    """A tenant or user id as one subject token (injective; `_` for none)."""
    if not value:
        return NO_USER
    return "".join(ch if _PLAIN.fullmatch(ch) else "".join(f"_{b:02X}" for b in ch.encode()) for ch in value)


def type_tokens(event_type: str) -> str:
    """A producer's event type as the rest of its subject (validated as a reverse-DNS name)."""
    if event_type.startswith("io.engram."):
        raise InvalidEvent(f"unknown Engram event type {event_type!r}")
    if not _TYPE_NAME.match(event_type) or ".." in event_type or event_type.endswith("."):
        raise InvalidEvent(f"event type {event_type!r} is not a reverse-DNS name")
    return _TYPE_TOKEN.sub("_", event_type)


def subject(family: str, tenant: str, user: str | None, rest: str) -> str:
    return f"{PREFIX}.{family}.{token(tenant)}.{token(user)}.{rest}"


def subject_of(event_type: str, tenant: Any, user: Any, data: Any = None) -> str:
    """The subject an event with these attributes travels on (InvalidEvent if it has none)."""
    if not isinstance(tenant, str) or not tenant.strip():
        raise InvalidEvent("the 'tenantid' extension is required")
    who = str(user) if user else None
    known = ENGRAM_SUBJECTS.get(event_type)
    if known is None:
        return subject("ingest", tenant, who, type_tokens(event_type))
    family, rest = known
    if rest == "{actor}":
        actor = data.get("actor", "agent") if isinstance(data, dict) else getattr(data, "actor", "agent")
        if actor not in FEEDBACK_ACTORS:
            raise InvalidEvent(f"feedback actor {actor!r} is not one of {FEEDBACK_ACTORS}")
        rest = str(actor)
    return subject(family, tenant, who, rest)


def check_arrival(arrived_on: str, expected: str) -> None:
    """An event must arrive on the subject its attributes give: the bus's permissions vouch for
    the subject (who may publish there), not for what a publisher wrote into the event."""
    if arrived_on != expected:
        raise InvalidEvent(
            f"the event arrived on {arrived_on!r} but its attributes (tenantid, userid, type, actor) "
            f"belong on {expected!r}: refused as forged"
        )


def needs_bus_identity(subject: str) -> bool:
    """Human feedback verifies observations (R-12.1): only the memory API's bus identity may
    publish it, so it is never taken from a channel without one (a worker's HTTP entry point)."""
    return subject.startswith(f"{PREFIX}.feedback.") and subject.endswith(".human")


def user_filters(tenant: str, user: str) -> list[str]:
    """The subjects of one user's messages in the main stream (what erasure purges)."""
    return [f"{PREFIX}.{family}.{token(tenant)}.{token(user)}.>" for family in USER_FAMILIES]


def dead_letter_subject(prefix: str, original: str) -> str:
    """`dlq.engram.<consumer>.<family>.<tenant>.<user>...`: a dead letter stays findable by user."""
    rest = original.removeprefix(f"{PREFIX}.")
    return f"{prefix}.{rest}" if rest else prefix


def dead_letter_user_filters(dlq_prefix: str, tenant: str, user: str) -> list[str]:
    """The subjects of one user's dead letters, of every consumer (`dlq_prefix` = `dlq.engram`)."""
    return [f"{dlq_prefix}.*.{family}.{token(tenant)}.{token(user)}.>" for family in USER_FAMILIES]
