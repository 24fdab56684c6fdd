"""The LLM gateway's fallback chain (R-8.4): one call walks a task's profiles in order.

- A task ("chat_default", "advisor", "fast", "extraction", ...) names a profile; the profile's
  fallback chain is walked in order, cycle-safe.
- Chat calls (realtime) fail fast: no SDK retries, a timeout or provider error goes straight
  to the next profile. A 429/529 is waited out once when its retry-after is short, then the
  chain moves on. The model is put in cool-down for the retry-after, so concurrent turns skip
  it instead of hammering it (no retry storm).
- Background calls (extraction, summaries) pass a priority gate (`ENGRAM_LLM_BACKGROUND_LIMIT`
  concurrent) and may wait longer on rate limits; realtime calls never touch the gate.
- An empty answer counts as a failure (fallback), and so does a refusal that carries text
  (`stop_reason: refusal`, a content filter): the content fallback asks the next profile,
  which may be another provider. "prompt is too long" shrinks the request (older history,
  then the memory block) and is logged as `chat.ptl_recovery`.
- Each profile names its provider (`anthropic`, `openai`, `local`); the gateway holds one
  adapter per configured provider, and a profile whose provider is not configured is skipped
  (`skipped_unconfigured`), so a shipped chain may end in a local model nobody runs.

`LlmGateway` is the service; its tool-use loop (`tool_loop`) and advisor tool (`advisor`) are
built on `complete`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from engram.domain.llm import (
    Attempt,
    ContentRefused,
    EmptyResponse,
    LlmConfig,
    LlmError,
    LlmReply,
    LlmRequest,
    LlmTimeout,
    LlmUnavailable,
    Overloaded,
    Priority,
    Profile,
    PromptLibrary,
    PromptTooLong,
    RateLimited,
    StreamInterrupted,
)
from engram.domain.llm.billing import cost_usd
from engram.domain.telemetry import ChatError, ChatPtlRecovery
from engram.instrumentation import metrics, tracing
from engram.ports import LLM
from engram.services.gateway import advisor, tool_loop
from engram.services.gateway.calls import RequestSource, TelemetryBuffer, TextSink, Tool, TurnOutcome

log = structlog.get_logger(__name__)

# one provider for every profile (tests, a single deployment), or one per provider name
Providers = LLM | Mapping[str, LLM] | None


@dataclass
class _Emitted:
    """Whether a streamed call has passed text to the caller (a refusal after that is no fallback)."""

    sink: TextSink
    any: bool = False

    async def __call__(self, chunk: str) -> None:
        self.any = True
        await self.sink(chunk)


class PriorityGate:
    """Background calls share `limit` slots; realtime calls pass straight through."""

    def __init__(self, background_limit: int) -> None:
        self.limit = background_limit
        self._slots = asyncio.Semaphore(background_limit)
        self.background_active = 0
        self.background_peak = 0
        self.background_waiting = 0

    @contextlib.asynccontextmanager
    async def slot(self, priority: Priority) -> AsyncIterator[None]:
        if priority is Priority.realtime:
            yield
            return
        self.background_waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.background_waiting -= 1
        self.background_active += 1
        self.background_peak = max(self.background_peak, self.background_active)
        try:
            yield
        finally:
            self.background_active -= 1
            self._slots.release()


class LlmGateway:
    def __init__(
        self,
        config: LlmConfig,
        prompts: PromptLibrary,
        llm: Providers,
        *,
        background_limit: int = 2,
        realtime_wait_cap: float = 2.0,
        background_wait_cap: float = 60.0,
        background_retries: int = 3,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.prompts = prompts
        if isinstance(llm, Mapping):
            self.providers: dict[str, LLM] = dict(llm)
            self.llm: LLM | None = next(iter(self.providers.values()), None)
            self._per_provider = True
        else:
            self.providers = {llm.provider: llm} if llm is not None else {}
            self.llm = llm
            self._per_provider = False
        self.gate = PriorityGate(background_limit)
        self.realtime_wait_cap = realtime_wait_cap
        self.background_wait_cap = background_wait_cap
        self.background_retries = background_retries
        self._sleep = sleep
        self._clock = clock
        self._cooldown: dict[str, float] = {}
        self.inflight = 0  # calls in progress (drained before the client is closed)
        self._idle = asyncio.Event()
        self._idle.set()

    async def warm(self) -> None:
        """Load the provider's client ahead of the first call (chat-turn does this at start-up)."""
        for llm in self.providers.values():
            warm = getattr(llm, "warm", None)
            if warm is not None:
                await warm()

    async def close(self, drain_seconds: float = 5.0) -> None:
        """Let calls in progress finish (up to `drain_seconds`), then close the provider client."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), drain_seconds)
        for llm in self.providers.values():
            closer = getattr(llm, "close", None)
            if closer is not None:
                await closer()

    # ---- configuration ------------------------------------------------------------------

    @property
    def available(self) -> bool:
        return self.llm is not None

    def provider_for(self, profile: Profile) -> LLM | None:
        """The adapter that serves a profile: its provider's, or the one provider given for all."""
        if not self._per_provider:
            return self.llm
        return self.providers.get(profile.provider)

    @property
    def provider(self) -> str:
        return self.llm.provider if self.llm is not None else "offline"

    def profile(self, task: str) -> Profile:
        return self.config.profiles[self.config.profile_for(task)]

    def chain(self, task: str, model_override: str | None = None) -> list[Profile]:
        chain = self.config.chain(self.config.profile_for(task))
        if model_override and model_override != chain[0].model:
            # the caller's model first, with the task's profile settings and fallbacks behind it
            pinned = chain[0].model_copy(update={"name": f"{chain[0].name}:{model_override}", "model": model_override})
            chain = [pinned, *chain]
        return chain

    def cooling(self, model: str) -> float:
        """Seconds left in a model's rate-limit cool-down (0 when it may be called)."""
        until = self._cooldown.get(model)
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            self._cooldown.pop(model, None)
            return 0.0
        return left

    def _cool(self, model: str, seconds: float) -> None:
        until = self._clock() + seconds
        self._cooldown[model] = max(until, self._cooldown.get(model, 0.0))

    # ---- one call through the fallback chain -----------------------------------------------

    async def complete(
        self,
        task: str,
        request: RequestSource,
        *,
        priority: Priority = Priority.realtime,
        telemetry: TelemetryBuffer | None = None,
        model_override: str | None = None,
        on_text: TextSink | None = None,
        timeout: float | None = None,
    ) -> LlmReply:
        if self.llm is None:
            raise LlmUnavailable(
                "no LLM provider is configured (ANTHROPIC_API_KEY, ENGRAM_OPENAI_BASE_URL and "
                "ENGRAM_LOCAL_LLM_BASE_URL are not set)"
            )
        attempts: list[Attempt] = []
        sink = telemetry or TelemetryBuffer()
        self.inflight += 1
        self._idle.clear()
        try:
            return await self._complete(task, request, priority, sink, attempts, model_override, on_text, timeout)
        finally:
            self.inflight -= 1
            if not self.inflight:
                self._idle.set()

    async def _complete(
        self,
        task: str,
        request: RequestSource,
        priority: Priority,
        sink: TelemetryBuffer,
        attempts: list[Attempt],
        model_override: str | None,
        on_text: TextSink | None,
        timeout: float | None,
    ) -> LlmReply:
        async with self.gate.slot(priority):
            position = -1  # among the profiles tried: a skipped one (not configured here) is no fallback
            for profile in self.chain(task, model_override):
                llm = self.provider_for(profile)
                if llm is None:  # its provider is not configured here: skipped, not a failure
                    attempts.append(Attempt(profile.name, profile.model, "skipped_unconfigured", profile.provider))
                    continue
                position += 1
                built = request(profile) if callable(request) else request
                started = time.perf_counter()
                try:
                    with tracing.span(
                        f"llm {profile.name}", gen_ai__request__model=profile.model, engram__llm__task=task
                    ):
                        reply = await self._attempt(llm, profile, built, priority, sink, on_text, attempts, timeout)
                except StreamInterrupted:
                    metrics.LLM_REQUESTS.labels(task, "failed").inc()
                    raise
                except LlmError as exc:
                    if exc.emitted:
                        metrics.LLM_REQUESTS.labels(task, "failed").inc()
                        raise StreamInterrupted(str(exc), model=profile.model) from exc
                    continue
                finally:
                    sink.llm_ms += (time.perf_counter() - started) * 1000
                reply.profile = profile.name
                sink.account(reply)
                self._measured(task, position, profile, reply)
                return reply
        metrics.LLM_REQUESTS.labels(task, "failed").inc()
        summary = "; ".join(f"{a.profile}({a.model}): {a.outcome}" for a in attempts)
        raise LlmUnavailable(f"every profile failed for task {task!r}: {summary}", attempts)

    async def _attempt(
        self,
        llm: LLM,
        profile: Profile,
        request: LlmRequest,
        priority: Priority,
        telemetry: TelemetryBuffer,
        on_text: TextSink | None,
        attempts: list[Attempt],
        timeout: float | None,
    ) -> LlmReply:
        model = profile.model
        left = self.cooling(model)
        if left > 0:
            if priority is Priority.realtime:
                attempts.append(Attempt(profile.name, model, "skipped_cooldown", f"{left:.1f}s left"))
                raise RateLimited(f"{model} is cooling down", model=model, retry_after=left)
            await self._sleep(min(left, self.background_wait_cap))
        rate_retries = 1 if priority is Priority.realtime else self.background_retries
        wait_cap = self.realtime_wait_cap if priority is Priority.realtime else self.background_wait_cap
        call_timeout = min(profile.timeout, timeout) if timeout else profile.timeout
        recoveries = 0
        dropped = 0
        current = request
        while True:
            started = time.perf_counter()
            emitted = _Emitted(on_text) if on_text is not None else None
            try:
                if emitted is not None:
                    reply = await llm.stream(
                        current, model=model, timeout=call_timeout, temperature=profile.temperature, on_text=emitted
                    )
                else:
                    reply = await llm.complete(
                        current, model=model, timeout=call_timeout, temperature=profile.temperature
                    )
                if reply.stop_reason == "refusal":
                    refused = ContentRefused(f"{model} refused: {reply.text[:200]!r}", model=model, refusal=reply.text)
                    refused.emitted = emitted is not None and emitted.any
                    raise refused
                if reply.is_empty():
                    raise EmptyResponse(f"{model} returned no content (stop_reason={reply.stop_reason})", model=model)
            except PromptTooLong as exc:
                shrunk = current.shrunk() if recoveries < 3 else None
                if shrunk is None:
                    telemetry.emit(ChatPtlRecovery(model=model, dropped_messages=dropped, succeeded=False))
                    self._failed(profile, exc, "prompt_too_long", started, attempts, telemetry)
                    raise
                current, cut = shrunk
                dropped += cut
                recoveries += 1
                log.info("llm.ptl_recovery", model=model, dropped=cut, attempt=recoveries)
                continue
            except RateLimited as exc:
                backoff = exc.retry_after if exc.retry_after is not None else 1.0
                self._cool(model, backoff)
                outcome = "overloaded" if isinstance(exc, Overloaded) else "rate_limited"
                if rate_retries > 0 and backoff <= wait_cap and not exc.emitted:
                    rate_retries -= 1
                    attempts.append(Attempt(profile.name, model, f"{outcome}_retry", f"waited {backoff:.2f}s"))
                    await self._sleep(backoff)
                    continue
                self._failed(profile, exc, outcome, started, attempts, telemetry)
                raise
            except LlmError as exc:
                kind = {LlmTimeout: "timeout", EmptyResponse: "empty", ContentRefused: "refused"}.get(
                    type(exc), "error"
                )
                self._failed(profile, exc, kind, started, attempts, telemetry)
                raise
            if recoveries:
                telemetry.emit(ChatPtlRecovery(model=model, dropped_messages=dropped, succeeded=True))
            attempts.append(Attempt(profile.name, model, "ok", duration_ms=(time.perf_counter() - started) * 1000))
            reply.request = current
            return reply

    def _measured(self, task: str, position: int, profile: Profile, reply: LlmReply) -> None:
        """A successful call in the metrics: by model and profile, its tokens and cost (R-17.1)."""
        metrics.LLM_REQUESTS.labels(task, "first" if position == 0 else "fallback").inc()
        metrics.llm_call(reply.model, profile.name, "ok")
        cost = cost_usd(self.config.price(reply.model), reply.usage)
        metrics.llm_usage(reply.model, profile.name, reply.usage.as_dict(), cost)

    def _failed(
        self,
        profile: Profile,
        exc: LlmError,
        outcome: str,
        started: float,
        attempts: list[Attempt],
        telemetry: TelemetryBuffer,
    ) -> None:
        elapsed = (time.perf_counter() - started) * 1000
        attempts.append(Attempt(profile.name, profile.model, outcome, str(exc)[:300], elapsed))
        metrics.llm_call(profile.model, profile.name, outcome)
        telemetry.emit(
            ChatError(stage=f"llm:{profile.name}", error_type=outcome, message=str(exc)[:2000], model=profile.model)
        )
        log.warning("llm.attempt_failed", profile=profile.name, model=profile.model, outcome=outcome, error=str(exc))

    # ---- prompts from the library -------------------------------------------------------------

    async def prompt(
        self,
        task: str,
        prompt_key: str,
        variables: Mapping[str, Any],
        *,
        priority: Priority = Priority.realtime,
        timeout: float | None = None,
        max_tokens: int | None = None,
        telemetry: TelemetryBuffer | None = None,
    ) -> LlmReply:
        """One user prompt rendered for the model actually called (lazy prompt resolution)."""

        def build(profile: Profile) -> LlmRequest:
            text = self.prompts.render(prompt_key, model=profile.model, provider=profile.provider, **variables)
            return LlmRequest(turn=({"role": "user", "content": text},), max_tokens=max_tokens, cache_history=False)

        return await self.complete(task, build, priority=priority, timeout=timeout, telemetry=telemetry)

    # ---- the advisor and the tool-use loop ---------------------------------------------

    def advisor_tool(self, context: str = "") -> Tool:
        """`consult_advisor`: the executor asks the smart model; its answer goes back into the loop."""
        return advisor.advisor_tool(self, context)

    async def run_tools(
        self,
        task: str,
        request: RequestSource,
        tools: Mapping[str, Tool],
        *,
        telemetry: TelemetryBuffer,
        model_override: str | None = None,
        on_text: TextSink | None = None,
        max_iterations: int = 6,
    ) -> TurnOutcome:
        """The tool-use loop (R-8.2, R-8.3): see `tool_loop.ToolLoop`."""
        loop = tool_loop.ToolLoop(
            self,
            task,
            request,
            tools,
            telemetry=telemetry,
            model_override=model_override,
            on_text=on_text,
            max_iterations=max_iterations,
        )
        return await loop.run()
