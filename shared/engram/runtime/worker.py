"""The event workers' one runtime (R-2.1): a worker declares what it consumes, this runs it.

An event function is a declaration:

    WORKER = Worker(durable="embed-index", decode=decode_change, handler=lambda s: s.indexing.handle)
    embed_index = WORKER.cloud_event("embed_index")   # the functions-framework entry point (HTTP)

`python -m functions.<name>` calls `WORKER.main()`: the JetStream pull runner on the durable
consumer, over the process's one NATS connection (the services' bus). Either way each event
is decoded once: its `tenantid` checked, its data parsed into the worker's type; the service
gets a `Batch` of typed deliveries grouped by tenant and marks what it could not apply. Poison
(an invalid event, a data error) is dead-lettered at the first delivery; anything transient is
retried with backoff and dead-lettered after `max_deliver`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import structlog
from cloudevents.http import CloudEvent

from engram.domain.deliveries import Batch, Delivery, Erased, EventMeta, Outcome, Rejected, classify
from engram.domain.errors import InvalidEvent, Poison
from engram.domain.events import subject_for
from engram.domain.subjects import check_arrival, needs_bus_identity
from engram.domain.text import event_fault
from engram.instrumentation import metrics, tracing
from engram.runtime.isolation import isolate

if TYPE_CHECKING:
    from engram.bootstrap import Services
    from engram.runtime.jetstream import BatchHandler, DeadLetterHook, GaveUpHook, PullRunner

log = structlog.get_logger(__name__)

T = TypeVar("T")

Handler = Callable[[Batch[T]], Awaitable[None]]
GaveUp = Callable[[Delivery[T], str], Awaitable[None]]
RejectedHook = Callable[[Sequence[Rejected]], Awaitable[None]]
EventFunction = Callable[[CloudEvent], Awaitable[None]]
OVER_HTTP = "(http)"  # the arrival of an event through the functions-framework entry point


def tenant_of(event: CloudEvent) -> str:
    tenant = event.get("tenantid")
    if not isinstance(tenant, str) or not tenant.strip():
        raise InvalidEvent("the 'tenantid' extension is required")
    return tenant


def meta_of(event: CloudEvent) -> EventMeta:
    # the attributes as the event's read-only view (no copy per event: a batch is hundreds)
    return EventMeta(str(event["id"]), str(event["source"]), str(event["type"]), event.get_attributes())


@dataclass(frozen=True)
class Worker(Generic[T]):
    """What an event function consumes and which service applies it.

    `handler`, `gave_up` and `rejected` take the process's services and return the service's
    method: `handler` applies a batch; `gave_up` hears of an event dead-lettered after its last
    delivery failed too; `rejected` hears of events refused before the handler saw them.
    """

    durable: str
    decode: Callable[[CloudEvent], T]
    handler: Callable[[Services], Handler[T]]
    gave_up: Callable[[Services], GaveUp[T]] | None = None
    rejected: Callable[[Services], RejectedHook] | None = None
    batch: int = 200

    def delivery(self, event: CloudEvent, subject: str | None = None) -> Delivery[T]:
        """The event decoded (InvalidEvent if it cannot be, or holds text that cannot be stored).
        `subject`: the NATS subject it arrived on, which must be the one its attributes give
        (`check_arrival`); `OVER_HTTP` for the functions-framework entry point, where no bus
        identity vouches for the sender, so what only a privileged publisher may send is refused;
        None for a call in the same process."""
        tenant = tenant_of(event)
        fault = event_fault(event.get_attributes(), event.get_data())
        if fault is not None:
            raise InvalidEvent(fault)
        if subject == OVER_HTTP:
            if needs_bus_identity(subject_for(event)):
                raise InvalidEvent("human feedback is accepted only over the bus, from the memory API")
        elif subject is not None:
            check_arrival(subject, subject_for(event))
        meta = meta_of(event)
        _ = meta.occurred_at  # parsed once, here (InvalidEvent if `time` is no timestamp); the services read it
        return Delivery(tenant, self.decode(event), meta)

    async def handle_events(
        self, services: Services, events: Sequence[CloudEvent], subjects: Sequence[str] | None = None
    ) -> list[Outcome]:
        """Decode, apply and report one outcome per event, in order (None: applied)."""
        rejected = self.rejected(services) if self.rejected is not None else None
        return await self.run(self.handler(services), events, rejected, subjects)

    async def run(
        self,
        handler: Handler[T],
        events: Sequence[CloudEvent],
        rejected: RejectedHook | None = None,
        subjects: Sequence[str] | None = None,
    ) -> list[Outcome]:
        """`handle_events` with the service's methods given (a benchmark's or test's own service)."""
        outcomes: list[Outcome] = [None] * len(events)
        batch: Batch[T] = Batch()
        slots: list[int] = []
        refused: list[Rejected] = []
        for i, event in enumerate(events):
            try:
                batch.deliveries.append(self.delivery(event, subjects[i] if subjects is not None else None))
                slots.append(i)
            except Exception as exc:
                outcome = classify(exc)
                outcomes[i] = outcome
                tenant = event.get("tenantid")
                if isinstance(outcome, Poison) and isinstance(tenant, str) and tenant:
                    refused.append(Rejected(tenant, meta_of(event), event.get_data(), str(outcome)))
        if refused and rejected is not None:
            try:
                await rejected(refused)
            except Exception as exc:  # what the service records of them; their dead letters stand
                log.warning("worker.rejected_hook_failed", consumer=self.durable, error=str(exc))
        if batch.deliveries:
            with tracing.consume(self.durable, events):  # what the handler publishes carries the trace on
                try:
                    await handler(batch)
                except Exception as exc:  # the whole batch failed: every event shares the error
                    log.warning("worker.batch_failed", consumer=self.durable, error=str(exc))
                    for d in batch:
                        d.retry(exc)
                await isolate(handler, batch.deliveries, self.durable)  # a bad event fails alone
        for d, i in zip(batch, slots, strict=True):
            outcomes[i] = d.outcome
        return outcomes

    def batch_handler(self, services: Services) -> BatchHandler:
        """The pull runner's view: CloudEvents in, outcomes out."""

        async def handle(events: list[CloudEvent], subjects: list[str]) -> Sequence[BaseException | None]:
            return await self.handle_events(services, events, subjects)

        return handle

    def gave_up_hook(self, services: Services) -> GaveUpHook | None:
        if self.gave_up is None:
            return None
        hook = self.gave_up(services)

        async def gave_up(event: CloudEvent, reason: str) -> None:
            tenant = tenant_of(event)
            await hook(Delivery(tenant, self.decode(event), meta_of(event)), reason)

        return gave_up

    def dead_letter_hook(self, services: Services) -> DeadLetterHook:
        """Every dead letter of this worker counted in telemetry (`event.dead_lettered`)."""
        from engram.services.dead_letters import DeadLetters

        counter = DeadLetters(services.uow)

        async def dead_lettered(event: CloudEvent | None, reason: str, deliveries: int, poison: bool) -> None:
            tenant = event.get("tenantid") if event is not None else None
            if event is None or not isinstance(tenant, str) or not tenant.strip():
                return  # no tenant to count it for: the dead letter and the log line say it
            await counter.record(tenant, self.durable, meta_of(event), reason, deliveries=deliveries, poison=poison)

        return dead_lettered

    def cloud_event(self, name: str) -> EventFunction:
        """The functions-framework CloudEvent function `name` (HTTP, Knative): 2xx applied, 422 for
        poison (not redelivered), 503 for a transient failure (redelivered)."""

        async def function(event: CloudEvent) -> None:
            from starlette.exceptions import HTTPException

            from engram.bootstrap import get_services

            services = await get_services()
            outcome = (await self.handle_events(services, [event], [OVER_HTTP]))[0]
            if isinstance(outcome, Poison):
                metrics.dead_lettered(self.durable, poison=True, tenant=event.get("tenantid"))
                await self.dead_letter_hook(services)(event, str(outcome), 1, True)
                raise HTTPException(status_code=422, detail=str(outcome))
            if outcome is not None and not isinstance(outcome, Erased):
                raise HTTPException(status_code=503, detail=str(outcome))

        function.__name__ = function.__qualname__ = name  # functions-framework registers by name
        from engram.runtime.cloud_event import cloud_event

        return cloud_event(function)

    def main(self) -> None:
        """`python -m functions.<name>`: consume the durable until SIGTERM/SIGINT."""
        from engram.runtime.logs import configure_logging

        configure_logging()
        tracing.setup(self.durable)
        ready = os.environ.get("ENGRAM_READY_FILE")
        batch = int(os.environ.get("ENGRAM_BATCH_SIZE", str(self.batch)))
        asyncio.run(serve(self, batch_size=batch, ready_file=Path(ready) if ready else None))


async def serve(worker: Worker[Any], *, batch_size: int, ready_file: Path | None = None) -> None:
    """Run one worker until SIGTERM/SIGINT, then finish the batch in hand and drain.

    `ready_file` exists exactly while the runner consumes: the Kubernetes readiness probe and
    `bench.cold_start` look for it (`ENGRAM_READY_FILE`).
    """
    from engram.bootstrap import get_services, shutdown
    from engram.domain.topology import consumer
    from engram.runtime.heap import settle_heap
    from engram.runtime.jetstream import PullRunner

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    marker: asyncio.Task[None] | None = None
    try:
        services = await get_services()
        port = services.settings.engram_metrics_port
        if port is not None:  # /metrics, and the consumer's lag refreshed every few seconds
            from engram.runtime.observability import serve_metrics, watch_lag

            serve_metrics(port)
            services.background.append(
                asyncio.create_task(watch_lag(services.nats.js, services.settings.engram_stream, worker.durable))
            )
        await services.wait_for_schema()
        services.start_outbox_relay()
        settle_heap()  # start-up objects out of the collector's way, as in the HTTP functions
        runner = PullRunner(
            services.nats.js,
            consumer(worker.durable, services.settings.engram_stream),
            worker.batch_handler(services),
            batch_size=batch_size,
            on_gave_up=worker.gave_up_hook(services),
            on_dead_letter=worker.dead_letter_hook(services),
        )
        services.start_pruning(worker.durable)
        marker = asyncio.create_task(_mark_ready(runner, ready_file))
        await runner.run(stop)
    finally:
        if marker is not None:
            marker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await marker
        if ready_file is not None:
            _flag(ready_file, ready=False)
        await shutdown()


async def _mark_ready(runner: PullRunner, ready_file: Path | None) -> None:
    await runner.consuming.wait()
    metrics.served()
    if ready_file is not None:
        _flag(ready_file, ready=True)


def _flag(path: Path, *, ready: bool) -> None:
    """An empty file on local disk: creating or removing it does not block the loop noticeably."""
    if ready:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    else:
        path.unlink(missing_ok=True)
