"""The LLM gateway (R-8.2-R-8.4): profiles with fallbacks, backoff, recovery, priorities, tools.

- A task ("chat_default", "advisor", "fast", "extraction", ...) names a profile; the profile's
  fallback chain is walked in order, cycle-safe.
- Chat calls (realtime) fail fast: no SDK retries, a timeout or provider error goes straight
  to the next profile. A 429/529 is waited out once when its retry-after is short, then the
  chain moves on. The model is put in cool-down for the retry-after, so concurrent turns skip
  it instead of hammering it (no retry storm).
- Background calls (extraction, summaries) pass a priority gate (`ENGRAM_LLM_BACKGROUND_LIMIT`
  concurrent) and may wait longer on rate limits; realtime calls never touch the gate.
- An empty answer counts as a failure (fallback); "prompt is too long" shrinks the request
  (older history, then the memory block) and is logged as `chat.ptl_recovery`.
- `run_tools` is the tool-use loop, with the `consult_advisor` tool (R-8.2) and
  `chat.compaction_fired` for compaction blocks (R-8.3).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from engram.domain.llm import (
    Attempt,
    Compaction,
    EmptyResponse,
    LlmConfig,
    LlmError,
    LlmReply,
    LlmRequest,
    LlmTimeout,
    LlmUnavailable,
    Message,
    Overloaded,
    Priority,
    Profile,
    PromptLibrary,
    PromptTooLong,
    RateLimited,
    StreamInterrupted,
    SystemBlock,
    ToolSpec,
    Usage,
)
from engram.domain.telemetry import (
    ChatAdvisorAutoTriggered,
    ChatCompactionFired,
    ChatError,
    ChatPtlRecovery,
    ChatToolUsed,
    _Meta,
)
from engram.ports import LLM

log = structlog.get_logger(__name__)

TextSink = Callable[[str], Awaitable[None]]
RequestSource = LlmRequest | Callable[[Profile], LlmRequest]

ADVISOR_TOOL = ToolSpec(
    name="consult_advisor",
    description=(
        "Ask a senior advisor model for a second opinion on a genuinely hard question: an "
        "architecture or strategy decision, a risk trade-off, or an ambiguous requirement. "
        "Do not use it for simple facts, greetings or anything you can answer confidently."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "the precise question, with the context it needs"},
            "reason": {
                "type": "string",
                "description": "why this needs an advisor (architecture, risk, strategy, ambiguity, ...)",
            },
        },
        "required": ["question"],
    },
)


@dataclass
class TelemetryBuffer:
    """Events collected during a call; the caller writes them in its own transaction."""

    events: list[_Meta] = field(default_factory=list)
    usage: dict[str, Usage] = field(default_factory=dict)  # every successful call, per model
    llm_ms: float = 0.0  # time spent in provider calls, waits and fallbacks included
    calls: int = 0

    def emit(self, meta: _Meta) -> None:
        self.events.append(meta)

    def account(self, reply: LlmReply) -> None:
        self.usage.setdefault(reply.model, Usage()).add(reply.usage)
        self.calls += 1

    def total(self) -> Usage:
        total = Usage()
        for usage in self.usage.values():
            total.add(usage)
        return total


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


@dataclass(frozen=True)
class ToolContext:
    executor_model: str
    telemetry: TelemetryBuffer


ToolHandler = Callable[[Mapping[str, Any], ToolContext], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    run: ToolHandler


@dataclass
class ToolCall:
    name: str
    duration_ms: int
    success: bool
    error: str | None = None


@dataclass
class TurnOutcome:
    text: str
    model: str
    profile: str | None
    usage: Usage
    stop_reason: str | None
    compactions: list[Compaction]
    tool_calls: list[ToolCall]
    content_blocks: list[dict[str, Any]]  # what the next turn sends back (compaction + text)
    llm_ms: float
    iterations: int


class LlmGateway:
    def __init__(
        self,
        config: LlmConfig,
        prompts: PromptLibrary,
        llm: LLM | None,
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
        self.llm = llm
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
        warm = getattr(self.llm, "warm", None)
        if warm is not None:
            await warm()

    async def close(self, drain_seconds: float = 5.0) -> None:
        """Let calls in progress finish (up to `drain_seconds`), then close the provider client."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), drain_seconds)
        closer = getattr(self.llm, "close", None)
        if closer is not None:
            await closer()

    # ---- configuration ------------------------------------------------------------------

    @property
    def available(self) -> bool:
        return self.llm is not None

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
            raise LlmUnavailable("no LLM provider is configured (ANTHROPIC_API_KEY is not set)")
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
            for profile in self.chain(task, model_override):
                built = request(profile) if callable(request) else request
                started = time.perf_counter()
                try:
                    reply = await self._attempt(profile, built, priority, sink, on_text, attempts, timeout)
                except StreamInterrupted:
                    raise
                except LlmError as exc:
                    if exc.emitted:
                        raise StreamInterrupted(str(exc), model=profile.model) from exc
                    continue
                finally:
                    sink.llm_ms += (time.perf_counter() - started) * 1000
                reply.profile = profile.name
                sink.account(reply)
                return reply
        summary = "; ".join(f"{a.profile}({a.model}): {a.outcome}" for a in attempts)
        raise LlmUnavailable(f"every profile failed for task {task!r}: {summary}", attempts)

    async def _attempt(
        self,
        profile: Profile,
        request: LlmRequest,
        priority: Priority,
        telemetry: TelemetryBuffer,
        on_text: TextSink | None,
        attempts: list[Attempt],
        timeout: float | None,
    ) -> LlmReply:
        assert self.llm is not None
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
            try:
                if on_text is not None:
                    reply = await self.llm.stream(
                        current, model=model, timeout=call_timeout, temperature=profile.temperature, on_text=on_text
                    )
                else:
                    reply = await self.llm.complete(
                        current, model=model, timeout=call_timeout, temperature=profile.temperature
                    )
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
                kind = {LlmTimeout: "timeout", EmptyResponse: "empty"}.get(type(exc), "error")
                self._failed(profile, exc, kind, started, attempts, telemetry)
                raise
            if recoveries:
                telemetry.emit(ChatPtlRecovery(model=model, dropped_messages=dropped, succeeded=True))
            attempts.append(Attempt(profile.name, model, "ok", duration_ms=(time.perf_counter() - started) * 1000))
            reply.request = current
            return reply

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

    # ---- the advisor (R-8.2) ------------------------------------------------------------------

    def advisor_tool(self, context: str = "") -> Tool:
        """`consult_advisor`: the executor asks the smart model; its answer goes back into the loop."""

        async def consult(arguments: Mapping[str, Any], ctx: ToolContext) -> str:
            question = str(arguments.get("question") or "").strip()
            if not question:
                raise ValueError("consult_advisor needs a 'question'")
            trigger = str(arguments.get("reason") or "executor tool call").strip()[:200]
            started = time.perf_counter()

            def build(profile: Profile) -> LlmRequest:
                system = self.prompts.render("advisor_v1", model=profile.model, provider=profile.provider)
                body = f"{question}\n\nContext from the conversation:\n{context}" if context else question
                return LlmRequest(
                    system=(SystemBlock(system, cache=True),),
                    turn=({"role": "user", "content": body},),
                    cache_history=False,
                )

            def triggered(advisor_model: str | None) -> ChatAdvisorAutoTriggered:
                return ChatAdvisorAutoTriggered(
                    trigger=trigger,
                    executor_model=ctx.executor_model,
                    duration_ms=int((time.perf_counter() - started) * 1000),
                    advisor_model=advisor_model,
                    succeeded=advisor_model is not None,
                )

            try:
                reply = await self.complete("advisor", build, telemetry=ctx.telemetry)
            except LlmError:  # triggered all the same; the tool reports the failure to the executor
                ctx.telemetry.emit(triggered(None))
                raise
            ctx.telemetry.emit(triggered(reply.model))
            return reply.text

        return Tool(ADVISOR_TOOL, consult)

    # ---- the tool-use loop ----------------------------------------------------------------------

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
        specs = tuple(t.spec for t in tools.values())

        def with_tools(profile: Profile) -> LlmRequest:
            base = request(profile) if callable(request) else request
            return replace(base, tools=specs) if specs else base

        source: RequestSource = with_tools
        loop_turns: list[Message] = []  # what the loop added to the turn (tool calls and results)

        def continued(used: LlmRequest, answered: str | None, new: tuple[Message, ...]) -> RequestSource:
            """The next round's request: what the answering profile was sent (smaller after a
            prompt-too-long recovery) plus this round; a fallback profile gets its own request,
            with the prompts resolved for its model, plus every round so far."""
            rounds = tuple(loop_turns)

            def build(profile: Profile) -> LlmRequest:
                if profile.name == answered:
                    return used.with_turn(*new)
                return with_tools(profile).with_turn(*rounds)

            return build

        usage = Usage()
        texts: list[str] = []
        compactions: list[Compaction] = []
        compaction_blocks: list[dict[str, Any]] = []
        calls: list[ToolCall] = []
        llm_ms = 0.0
        last: LlmReply | None = None
        streamed_any = False
        iteration = 0
        wrapped_sink = on_text

        if on_text is not None:

            async def separated(chunk: str) -> None:
                nonlocal streamed_any
                if not streamed_any and texts:
                    await on_text("\n\n")
                streamed_any = True
                await on_text(chunk)

            wrapped_sink = separated

        for iteration in range(1, max_iterations + 1):
            final_round = iteration == max_iterations
            current_source = source
            if final_round and last is not None and last.stop_reason == "tool_use":
                previous = source

                def no_more_tools(profile: Profile, previous: RequestSource = previous) -> LlmRequest:
                    built = previous(profile) if callable(previous) else previous
                    return replace(built, tool_choice={"type": "none"})

                current_source = no_more_tools
            streamed_any = False
            reply = await self.complete(
                task, current_source, telemetry=telemetry, model_override=model_override, on_text=wrapped_sink
            )
            last = reply
            usage.add(reply.usage)
            llm_ms += reply.duration_ms
            if reply.text.strip():
                texts.append(reply.text.strip())
            for found in reply.compactions:
                compactions.append(found)
                telemetry.emit(
                    ChatCompactionFired(
                        summary_chars=found.summary_chars,
                        iteration_input_tokens=found.iteration_input_tokens,
                        model=reply.model,
                    )
                )
            assistant = list(reply.content)  # whitelisted by the adapter
            blocks = [b for b in assistant if b.get("type") == "compaction"]
            if blocks:
                compaction_blocks = blocks[-1:]
            used = reply.request
            assert used is not None
            if reply.stop_reason == "tool_use" and reply.tool_uses and not final_round:
                results = []
                for use in reply.tool_uses:
                    results.append(await self._run_tool(use, tools, reply.model, telemetry, calls))
                new: tuple[Message, ...] = (
                    {"role": "assistant", "content": assistant},
                    {"role": "user", "content": results},
                )
                loop_turns.extend(new)
                source = continued(used, reply.profile, new)
                continue
            if reply.stop_reason in ("pause_turn", "compaction") and not final_round:
                new = ({"role": "assistant", "content": assistant},)
                loop_turns.extend(new)
                source = continued(used, reply.profile, new)
                continue
            break
        assert last is not None
        text = "\n\n".join(texts)
        return TurnOutcome(
            text=text,
            model=last.model,
            profile=last.profile,
            usage=usage,
            stop_reason=last.stop_reason,
            compactions=compactions,
            tool_calls=calls,
            content_blocks=[*compaction_blocks, {"type": "text", "text": text}] if text else compaction_blocks,
            llm_ms=llm_ms,
            iterations=iteration,
        )

    async def _run_tool(
        self,
        use: Mapping[str, Any],
        tools: Mapping[str, Tool],
        executor_model: str,
        telemetry: TelemetryBuffer,
        calls: list[ToolCall],
    ) -> dict[str, Any]:
        name = str(use.get("name"))
        started = time.perf_counter()
        tool = tools.get(name)
        error: str | None = None
        output = ""
        try:
            if tool is None:
                raise LookupError(f"unknown tool {name!r}")
            arguments = use.get("input") or {}
            if not isinstance(arguments, Mapping):
                raise ValueError("tool input must be an object")
            output = await tool.run(arguments, ToolContext(executor_model, telemetry))
        except Exception as exc:  # a failing tool is reported to the model, not to the user
            error = f"{type(exc).__name__}: {exc}"[:500]
            output = f"The tool failed: {error}"
        duration = int((time.perf_counter() - started) * 1000)
        calls.append(ToolCall(name, duration, error is None, error))
        telemetry.emit(ChatToolUsed(tool_name=name[:100], duration_ms=duration, success=error is None, error=error))
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": use.get("id"), "content": output or "(empty)"}
        if error is not None:
            result["is_error"] = True
        return result
