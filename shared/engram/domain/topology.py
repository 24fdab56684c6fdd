"""Streams and durable consumers, declared once as data (R-3.5).

`engram declare` applies these to a NATS server (idempotent); the Kubernetes manifests in
`k8s/base/nats/` say the same for the NACK controller, and a test compares the two. Workers
bind to their durable consumer and never create one, so KEDA always sees the real lag.

`replicas` (ENGRAM_STREAM_REPLICAS) is how many servers of a NATS cluster keep each stream and
each consumer's state: 1 on a single server, 3 on the production cluster (k8s/components/ha),
where one server can be lost without losing a stored event or an acknowledgement (R3 keeps a
quorum of two).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

DLQ_SUBJECT_PREFIX = "dlq.engram"


@dataclass(frozen=True)
class StreamSpec:
    name: str
    subjects: tuple[str, ...]
    max_age_seconds: int
    duplicate_window_seconds: int = 120
    max_bytes: int = -1
    storage: str = "file"
    retention: str = "limits"
    replicas: int = 1


@dataclass(frozen=True)
class ConsumerSpec:
    durable: str
    stream: str
    filter_subjects: tuple[str, ...]
    ack_wait_seconds: int = 60
    max_deliver: int = 8
    max_ack_pending: int = 2_000
    description: str = ""
    replicas: int = 1
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def dlq_subject(self) -> str:
        """The prefix of its dead letters: `<prefix>.<original subject without "engram.">`."""
        return f"{DLQ_SUBJECT_PREFIX}.{self.durable}"


def streams(main: str = "ENGRAM", replicas: int = 1) -> tuple[StreamSpec, StreamSpec]:
    _check(replicas)
    return (
        StreamSpec(name=main, subjects=("engram.>",), max_age_seconds=7 * 24 * 3600, replicas=replicas),
        StreamSpec(
            name=f"{main}_DLQ",
            subjects=(f"{DLQ_SUBJECT_PREFIX}.>",),
            max_age_seconds=30 * 24 * 3600,
            replicas=replicas,
        ),
    )


def _check(replicas: int) -> None:
    if replicas not in (1, 3, 5):
        raise ValueError(f"JetStream replicas are 1, 3 or 5 (an odd quorum), not {replicas}")


def consumers(main: str = "ENGRAM", replicas: int = 1) -> tuple[ConsumerSpec, ...]:
    """The durable consumers, their state kept on as many servers as the streams (`replicas`)."""
    _check(replicas)
    specs = (
        ConsumerSpec(
            durable="extract-observation",
            stream=main,
            filter_subjects=(
                "engram.ingest.>",
                "engram.mark.>",
                "engram.chat.*.*.turn.completed",
                "engram.chat.*.*.session.ended",
            ),
            ack_wait_seconds=120,
            description="domain events, marks and chat turns -> observations",
        ),
        ConsumerSpec(
            durable="embed-index",
            stream=main,
            filter_subjects=("engram.observation.>",),
            ack_wait_seconds=120,
            description="observation changes -> search index",
        ),
        ConsumerSpec(
            durable="record-feedback",
            stream=main,
            filter_subjects=("engram.feedback.>",),
            ack_wait_seconds=60,
            description="feedback -> counters and verification",
        ),
        ConsumerSpec(
            durable="consolidate-memory",
            stream=main,
            filter_subjects=("engram.observation.*.*.created", "engram.observation.*.*.updated"),
            ack_wait_seconds=180,
            max_ack_pending=1_000,
            description="new and changed observations -> merged, superseded, linked (consolidation)",
        ),
    )
    return tuple(replace(spec, replicas=replicas) for spec in specs)


def consumer(durable: str, main: str = "ENGRAM") -> ConsumerSpec:
    for spec in consumers(main):
        if spec.durable == durable:
            return spec
    raise KeyError(f"no durable consumer named {durable!r}")


def redelivery_horizon_seconds(durable: str, main: str = "ENGRAM") -> int:
    """How long after an event was applied the same event can still arrive again: a re-publish
    within the stream's duplicate window is dropped by JetStream, later ones reach the consumer;
    a delivery whose ack was lost is redelivered after `ack_wait`, and each further attempt after
    at most `ack_wait` plus the runner's longest backoff (60 s), up to `max_deliver` times.
    The consumer's inbox (`processed_events`) must keep an entry at least this long."""
    spec = consumer(durable, main)
    stream = next(s for s in streams(main) if s.name == spec.stream)
    return stream.duplicate_window_seconds + spec.max_deliver * (spec.ack_wait_seconds + 60)
