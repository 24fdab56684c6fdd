"""Who may do what on the bus (R-16.3): one NATS user per function and per producer.

Every client authenticates with an NKey (its seed is a Secret; the server knows only public
keys) and gets exactly the subjects its work needs (`engram.domain.subjects` names them):

| user | publishes | consumes |
| --- | --- | --- |
| memory-api | marks, domain events (HTTP), observation changes, feedback (the only `human` one); purges | - |
| memory-mcp | marks, observation changes, feedback (`human` for a person's token): its tools' events | - |
| chat-turn | chat turns, ended sessions, approval decisions; observations stored in a chat; `system` feedback | - |
| telemetry-query | - | - |
| extract-observation | observation changes, its dead letters | `extract-observation` |
| embed-index | its dead letters | `embed-index` |
| record-feedback | observation changes, its dead letters | `record-feedback` |
| retention-cron | ended sessions (the session sweep) | - |
| consolidate-memory | observation changes, its dead letters | `consolidate-memory` |
| outbox-relay | what any function's outbox holds (the union of their event subjects) | - |
| engram (admin) | everything: `engram declare`, the tests' own processes | everything |
| producer `<tenant>/<name>` | `engram.ingest.<tenant>.>`: its tenant's domain events only | - |

Each user also gets its own reply inbox (`_INBOX_<name>.>`, the client's `inbox_prefix`), so no
client can read another's replies or pulled messages; the outbox relay of a process publishes
only what its user may (`relayable`). The standalone relay (`engram outbox relay`, for clusters
where every function is scaled to zero) is its own user, `outbox-relay`: it may publish every
event subject a function may, and nothing else (no purge, no consumer, no dead letter).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engram.domain.subjects import token
from engram.domain.topology import DLQ_SUBJECT_PREFIX

ADMIN = "engram"
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")


@dataclass(frozen=True)
class BusUser:
    name: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...] = ()
    description: str = ""

    @property
    def inbox_prefix(self) -> str:
        return inbox_prefix(self.name)

    @property
    def key_variable(self) -> str:
        """The server config's variable for this user's public key (set from the environment)."""
        return "ENGRAM_NKEY_" + re.sub(r"[^A-Z0-9]", "_", self.name.upper())

    @property
    def subscribe_allowed(self) -> tuple[str, ...]:
        return (f"{self.inbox_prefix}.>", *self.subscribe)


def inbox_prefix(name: str) -> str:
    """The reply inbox of a user (its client's `inbox_prefix`): no other user may read it."""
    return "_INBOX_" + re.sub(r"[^A-Za-z0-9]", "_", name)


def _consumes(stream: str, durable: str) -> tuple[str, ...]:
    """Bind to, fetch from, ack on and dead-letter for one durable; delete a message of an
    erased user that arrived after the erasure (`$JS.API.STREAM.MSG.DELETE`)."""
    return (
        f"$JS.API.CONSUMER.INFO.{stream}.{durable}",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}",
        f"$JS.ACK.{stream}.{durable}.>",
        f"$JS.ACK.*.*.{stream}.{durable}.>",  # the acknowledgement subjects with domain and account
        f"$JS.API.STREAM.MSG.DELETE.{stream}",
        f"{DLQ_SUBJECT_PREFIX}.{durable}.>",
    )


RELAY = "outbox-relay"


def function_users(stream: str = "ENGRAM") -> tuple[BusUser, ...]:
    """Each function's user, and the standalone outbox relay's (what any of them may publish)."""
    functions = _functions(stream)
    subjects = dict.fromkeys(s for u in functions for s in relayable(u))
    relay = BusUser(RELAY, tuple(subjects), description="the standalone outbox relay (engram outbox relay)")
    return (*functions, relay)


def _functions(stream: str) -> tuple[BusUser, ...]:
    dlq = f"{stream}_DLQ"
    return (
        BusUser(
            "memory-api",
            (
                "engram.mark.>",
                "engram.ingest.>",
                "engram.observation.>",
                "engram.feedback.>",
                f"$JS.API.STREAM.INFO.{stream}",
                f"$JS.API.STREAM.INFO.{dlq}",
                f"$JS.API.STREAM.PURGE.{stream}",
                f"$JS.API.STREAM.PURGE.{dlq}",
            ),
            description="the HTTP API; the only publisher of human feedback; purges on erasure",
        ),
        BusUser(
            "memory-mcp",
            ("engram.mark.>", "engram.observation.>", "engram.feedback.>"),
            description="the MCP server: what memory-api publishes for the same tools (marks, changes, feedback)",
        ),
        BusUser(
            "chat-turn",
            (
                "engram.chat.>",
                "engram.feedback.*.*.system",
                # what a person approved (a memory proposal) or an interview captured in a chat
                "engram.observation.*.*.created",
                "engram.observation.*.*.updated",
            ),
            description="chat turns, ended sessions, approval decisions, observations approved or captured"
            " in a chat, and recall's retrieved feedback",
        ),
        BusUser("telemetry-query", (), description="reads PostgreSQL only"),
        BusUser(
            "extract-observation",
            ("engram.observation.>", *_consumes(stream, "extract-observation")),
            description="domain events, marks and chat turns -> observations",
        ),
        BusUser("embed-index", _consumes(stream, "embed-index"), description="observation changes -> index"),
        BusUser(
            "record-feedback",
            ("engram.observation.*.*.updated", *_consumes(stream, "record-feedback")),
            description="feedback -> counters and verification",
        ),
        BusUser(
            "retention-cron",
            ("engram.chat.*.*.session.ended",),
            description="the session sweep ends idle sessions",
        ),
        BusUser(
            "consolidate-memory",
            ("engram.observation.>", *_consumes(stream, "consolidate-memory")),
            description="observation changes -> merged, superseded, linked; the nightly sweep and digests",
        ),
    )


def admin_user() -> BusUser:
    return BusUser(ADMIN, (">",), (">",), description="operations (engram declare) and test processes")


def producer_name(tenant: str, name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"a producer name is 1..63 lowercase letters, digits and '-', not {name!r}")
    return f"producer-{token(tenant)}-{name}".lower()


def producer_user(tenant: str, name: str) -> BusUser:
    """A domain system (CRM, orders, invoicing) of one tenant: its tenant's domain events only."""
    return BusUser(
        producer_name(tenant, name),
        (f"engram.ingest.{token(tenant)}.>",),
        description=f"producer {name} of tenant {tenant}",
    )


def user(name: str, stream: str = "ENGRAM") -> BusUser:
    """A function's (or the admin's) user by name."""
    for candidate in (*function_users(stream), admin_user()):
        if candidate.name == name:
            return candidate
    raise KeyError(f"no bus user named {name!r}")


def relayable(bus_user: BusUser) -> tuple[str, ...]:
    """The event subjects (`engram.>`) this user may publish: what its outbox relay takes."""
    return tuple(p for p in bus_user.publish if p == ">" or p.startswith("engram."))


def subject_regex(pattern: str) -> str:
    """A NATS subject pattern as an anchored POSIX regex (`*` one token, `>` one or more)."""
    parts = []
    for part in pattern.split("."):
        if part == ">":
            parts.append(r"[^.]+(\.[^.]+)*")
        elif part == "*":
            parts.append(r"[^.]+")
        else:
            parts.append(re.escape(part))
    return "^" + r"\.".join(parts) + "$"
