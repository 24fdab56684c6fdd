"""The JetStream pull runner (R-2.1): the transport under `engram.runtime.worker`.

A durable pull consumer: batch fetch, explicit ack, `nak(delay)` with capped exponential
backoff for transient failures, dead-letter (reason and original headers) plus `term()` for
poison, `in_progress()` while long work runs, and a clean stop on SIGTERM.

Outcomes are classified once (`engram.domain.deliveries.classify`): poison (an invalid event,
a 4xx other than 408 and 429) is dead-lettered at once; anything else is retried until
`max_deliver`, after which the message is dead-lettered too: nothing is dropped silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import structlog
from cloudevents.http import CloudEvent
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext

from engram.adapters.nats_binding import from_nats
from engram.domain import dead_letters as dlq
from engram.domain.deliveries import Erased, classify, reason
from engram.domain.errors import InvalidEvent, Poison
from engram.domain.subjects import dead_letter_subject
from engram.domain.text import clean
from engram.domain.topology import ConsumerSpec
from engram.instrumentation import metrics

log = structlog.get_logger(__name__)

Outcome = BaseException | None
# the events of a fetch and, for each, the subject it arrived on (what the bus's permissions vouch for)
BatchHandler = Callable[[list[CloudEvent], list[str]], Awaitable[Sequence[Outcome]]]
GaveUpHook = Callable[[CloudEvent, str], Awaitable[None]]
# (event or None when undecodable, reason, deliveries, poison: refused at once rather than given up)
DeadLetterHook = Callable[[CloudEvent | None, str, int, bool], Awaitable[None]]
GAVE_UP_HOOK_SECONDS = 5.0
PAUSE_CAP_SECONDS = 30.0


def is_poison(exc: BaseException) -> bool:
    """Invalid input that no retry can fix (`engram.domain.deliveries.classify`)."""
    return isinstance(classify(exc), Poison)


def reason_of(exc: BaseException) -> str:
    """One line of at most 1,000 characters that a NATS header and a telemetry row can hold."""
    return " ".join(clean(reason(exc)).split())[:1000]


def backoff_delay(num_delivered: int, base: float = 1.0, cap: float = 60.0) -> float:
    """1 s, 2 s, 4 s, ... capped: a flapping dependency is not hammered."""
    return float(min(cap, base * (2 ** max(0, num_delivered - 1))))


@dataclass
class RunnerStats:
    fetched: int = 0
    acked: int = 0
    nakked: int = 0
    dead_lettered: int = 0
    erased: int = 0  # given before its user's erasure: acknowledged and deleted from the stream
    batches: int = 0
    pauses: int = 0
    last_batch_ms: float = 0.0
    reasons: dict[str, int] = field(default_factory=dict)


class PullRunner:
    def __init__(
        self,
        js: JetStreamContext,
        spec: ConsumerSpec,
        handler: BatchHandler,
        *,
        batch_size: int = 100,
        fetch_timeout: float = 1.0,
        nak_base: float = 1.0,
        nak_cap: float = 60.0,
        on_gave_up: GaveUpHook | None = None,
        on_dead_letter: DeadLetterHook | None = None,
        pause_base: float = 1.0,
    ) -> None:
        self.js = js
        self.spec = spec
        self.handler = handler
        self.batch_size = batch_size
        self.fetch_timeout = fetch_timeout
        self.nak_base = nak_base
        self.nak_cap = nak_cap
        self.on_gave_up = on_gave_up
        self.on_dead_letter = on_dead_letter
        self.pause_base = pause_base
        self.outages = 0  # batches in a row that failed only because a dependency is down
        self.stats = RunnerStats()
        self.consuming = asyncio.Event()

    async def wait_for_consumer(self, stop: asyncio.Event) -> bool:
        """The durable is declared by `engram declare` (or NACK), never created here."""
        from nats.js.errors import NotFoundError

        warned = False
        while not stop.is_set():
            try:
                await self.js.consumer_info(self.spec.stream, self.spec.durable)
                return True
            except NotFoundError:
                if not warned:
                    log.warning("runner.waiting_for_consumer", consumer=self.spec.durable, hint="run `engram declare`")
                    warned = True
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
        return False

    async def run(self, stop: asyncio.Event) -> None:
        if not await self.wait_for_consumer(stop):
            return
        sub = await self.js.pull_subscribe_bind(durable=self.spec.durable, stream=self.spec.stream)
        self.consuming.set()
        log.info("runner.consuming", consumer=self.spec.durable, stream=self.spec.stream)
        try:
            while not stop.is_set():
                try:
                    msgs = await sub.fetch(self.batch_size, timeout=self.fetch_timeout)
                except (TimeoutError, NatsTimeoutError):
                    continue
                await self.process(msgs)
                if self.outages:
                    await self._pause(stop)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            log.info("runner.stopped", consumer=self.spec.durable, **self.stats.__dict__)

    async def process(self, msgs: list[Msg]) -> None:
        started = time.perf_counter()
        self.stats.fetched += len(msgs)
        self.stats.batches += 1
        metrics.WORKER_FETCHED.labels(self.spec.durable).inc(len(msgs))
        ready: list[tuple[Msg, CloudEvent]] = []
        for msg in msgs:
            try:
                ready.append((msg, from_nats(msg.headers, msg.data)))
            except InvalidEvent as exc:
                await self.dead_letter(msg, None, f"undecodable message: {reason_of(exc)}")
        if ready:
            outcomes = await self._handle([m for m, _ in ready], [e for _, e in ready])
            for (msg, event), outcome in zip(ready, outcomes, strict=True):
                await self._settle(msg, event, outcome)
            self._note_outage(outcomes)
        elapsed = time.perf_counter() - started
        self.stats.last_batch_ms = elapsed * 1000
        metrics.WORKER_BATCH.labels(self.spec.durable).observe(elapsed)
        log.debug("runner.batch", consumer=self.spec.durable, size=len(msgs), ms=round(self.stats.last_batch_ms, 1))

    def _note_outage(self, outcomes: Sequence[Outcome]) -> None:
        """A batch in which nothing succeeded and what failed failed because a dependency is down."""
        from engram.adapters.failures import failure_kind

        failed = [o for o in outcomes if o is not None and not is_poison(o)]
        if failed and len(failed) == len(outcomes) and all(failure_kind(o) == "outage" for o in failed):
            self.outages += 1
        else:
            self.outages = 0

    async def _pause(self, stop: asyncio.Event) -> None:
        """Stop fetching while a dependency is down (1 s, 2 s, 4 s, ... at most 30 s): the messages
        wait in the stream, nakked with backoff, instead of piling up in this process."""
        delay = min(PAUSE_CAP_SECONDS, self.pause_base * (2 ** (self.outages - 1)))
        self.stats.pauses += 1
        log.warning("runner.paused", consumer=self.spec.durable, seconds=delay, outages=self.outages)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)

    async def _handle(self, msgs: list[Msg], events: list[CloudEvent]) -> Sequence[Outcome]:
        """Run the handler while telling JetStream the batch is still in progress."""
        keepalive = asyncio.create_task(self._keep_alive(msgs))
        try:
            outcomes = await self.handler(events, [m.subject for m in msgs])
            if len(outcomes) != len(events):
                raise RuntimeError(f"handler returned {len(outcomes)} outcomes for {len(events)} events")
            return outcomes
        except Exception as exc:  # the whole batch failed: every event shares the error
            log.warning("runner.batch_failed", consumer=self.spec.durable, error=reason_of(exc))
            return [exc] * len(events)
        finally:
            keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keepalive

    async def _settle(self, msg: Msg, event: CloudEvent, outcome: Outcome) -> None:
        if isinstance(outcome, Erased):
            await self._delete(msg)  # its user was erased: the text leaves the stream too
            outcome = None
        if outcome is None:
            await msg.ack()
            self.stats.acked += 1
            metrics.WORKER_ACKED.labels(self.spec.durable).inc()
            return
        reason = reason_of(outcome)
        if is_poison(outcome):
            await self.dead_letter(msg, event, reason, poison=True)
            return
        delivered = msg.metadata.num_delivered
        if delivered >= self.spec.max_deliver:
            reason = f"gave up after {delivered} deliveries: {reason}"
            await self.dead_letter(msg, event, reason, poison=False)
            if self.on_gave_up is not None:
                # the handler saw this event fail every time and never got to record the end of it;
                # bounded, so an outage that blocks the hook too does not hold up the batch's settling
                try:
                    await asyncio.wait_for(self.on_gave_up(event, reason), GAVE_UP_HOOK_SECONDS)
                except Exception as exc:
                    log.warning("runner.gave_up_hook_failed", consumer=self.spec.durable, error=reason_of(exc))
            return
        delay = backoff_delay(delivered, self.nak_base, self.nak_cap)
        log.warning(
            "runner.retry",
            consumer=self.spec.durable,
            event_id=event["id"],
            delivered=delivered,
            delay=delay,
            error=reason,
        )
        await msg.nak(delay=delay)
        self.stats.nakked += 1
        metrics.WORKER_NAKKED.labels(self.spec.durable).inc()

    async def _delete(self, msg: Msg) -> None:
        from nats.js.errors import BadRequestError

        try:
            await self.js.delete_msg(msg.metadata.stream, msg.metadata.sequence.stream)
            self.stats.erased += 1
        except BadRequestError as exc:
            if getattr(exc, "err_code", None) != 10043:  # 10043: gone already (the erasure purged it)
                log.warning("runner.erased_delete_failed", consumer=self.spec.durable, error=reason_of(exc))
        except Exception as exc:  # acknowledged anyway; the stream's max age removes it in the end
            log.warning("runner.erased_delete_failed", consumer=self.spec.durable, error=reason_of(exc))

    async def dead_letter(self, msg: Msg, event: CloudEvent | None, reason: str, *, poison: bool = True) -> None:
        headers = dict(msg.headers or {})
        meta = msg.metadata
        headers.pop(dlq.MSG_ID, None)
        headers.update(
            {  # what `engram.domain.dead_letters.DeadLetter` reads back (engram dlq list|show|replay)
                dlq.REASON: reason.replace("\r", " ").replace("\n", " "),
                dlq.CONSUMER: self.spec.durable,
                dlq.SUBJECT: msg.subject,
                dlq.DELIVERIES: str(meta.num_delivered),
                dlq.STREAM_SEQ: str(meta.sequence.stream),
                dlq.MSG_ID: f"dlq:{self.spec.durable}:{meta.sequence.stream}",
            }
        )
        # the dead letter must be stored before the original is terminated
        # under the original subject's tenant and user, so erasing a user also finds its dead letters
        subject = dead_letter_subject(self.spec.dlq_subject, msg.subject)
        await self.js.publish(subject, msg.data, headers=headers, timeout=10)
        await msg.term()
        self.stats.dead_lettered += 1
        tenant = event.get("tenantid") if event is not None else None
        metrics.dead_lettered(self.spec.durable, poison=poison, tenant=tenant if isinstance(tenant, str) else None)
        key = reason.split(":")[0][:80]
        self.stats.reasons[key] = self.stats.reasons.get(key, 0) + 1
        log.warning("runner.dead_lettered", consumer=self.spec.durable, reason=reason, subject=msg.subject)
        if self.on_dead_letter is not None:  # counted in telemetry; bounded, the dead letter stands anyway
            try:
                await asyncio.wait_for(
                    self.on_dead_letter(event, reason, meta.num_delivered, poison), GAVE_UP_HOOK_SECONDS
                )
            except Exception as exc:
                log.warning("runner.dead_letter_hook_failed", consumer=self.spec.durable, error=reason_of(exc))

    async def _keep_alive(self, msgs: list[Msg]) -> None:
        interval = max(1.0, self.spec.ack_wait_seconds / 3)
        while True:
            await asyncio.sleep(interval)
            for msg in msgs:
                with contextlib.suppress(Exception):
                    await msg.in_progress()
