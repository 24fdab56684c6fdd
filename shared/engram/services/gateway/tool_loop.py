"""The tool-use loop (R-8.2, R-8.3): call the model, run the tools it asks for, call it again.

Each round goes through the fallback chain (`LlmGateway.complete`). The next round continues
what the answering profile was sent; a fallback profile gets its own request (prompts resolved
for its model) plus every round so far. The last round may not call tools; `pause_turn` and
`compaction` stops are continued like tool calls. Compaction blocks are reported as
`chat.compaction_fired`, and the last one is kept for the next turn.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from engram.domain.llm import Compaction, LlmReply, LlmRequest, Message, Profile, Usage
from engram.domain.telemetry import ChatCompactionFired, ChatToolUsed
from engram.services.gateway.calls import (
    Completes,
    RequestSource,
    TelemetryBuffer,
    TextSink,
    Tool,
    ToolCall,
    ToolContext,
    TurnOutcome,
)


class ToolLoop:
    """One run of the loop; `run` returns what the turn produced. The attributes are its state."""

    def __init__(
        self,
        gateway: Completes,
        task: str,
        request: RequestSource,
        tools: Mapping[str, Tool],
        *,
        telemetry: TelemetryBuffer,
        model_override: str | None,
        on_text: TextSink | None,
        max_iterations: int,
    ) -> None:
        self.gateway = gateway
        self.task = task
        self.request = request
        self.tools = tools
        self.specs = tuple(t.spec for t in tools.values())
        self.telemetry = telemetry
        self.model_override = model_override
        self.on_text = on_text
        self.max_iterations = max_iterations
        self.source: RequestSource = self.with_tools  # the next round's request
        self.loop_turns: list[Message] = []  # what the loop added to the turn (tool calls and results)
        self.usage = Usage()
        self.texts: list[str] = []
        self.compactions: list[Compaction] = []
        self.compaction_blocks: list[dict[str, Any]] = []
        self.calls: list[ToolCall] = []
        self.llm_ms = 0.0
        self.last: LlmReply | None = None
        self.streamed_any = False  # this round has streamed text already

    async def run(self) -> TurnOutcome:
        iteration = 0
        for iteration in range(1, self.max_iterations + 1):
            final_round = iteration == self.max_iterations
            reply = await self.call(final_round)
            self.record(reply)
            if not await self.continue_after(reply, final_round):
                break
        return self.outcome(iteration)

    # ---- the steps of a round ----------------------------------------------------------------

    async def call(self, final_round: bool) -> LlmReply:
        """One round through the fallback chain; a last round after tool calls may not call tools."""
        source = self.source
        if final_round and self.last is not None and self.last.stop_reason == "tool_use":
            source = partial(self.without_tools, source)
        self.streamed_any = False
        return await self.gateway.complete(
            self.task,
            source,
            telemetry=self.telemetry,
            model_override=self.model_override,
            on_text=self.separated if self.on_text is not None else None,
        )

    def record(self, reply: LlmReply) -> None:
        """The round's usage, text and compactions (each one reported, the last block kept)."""
        self.last = reply
        self.usage.add(reply.usage)
        self.llm_ms += reply.duration_ms
        if reply.text.strip():
            self.texts.append(reply.text.strip())
        for found in reply.compactions:
            self.compactions.append(found)
            self.telemetry.emit(
                ChatCompactionFired(
                    summary_chars=found.summary_chars,
                    iteration_input_tokens=found.iteration_input_tokens,
                    model=reply.model,
                )
            )
        blocks = [b for b in reply.content if b.get("type") == "compaction"]
        if blocks:
            self.compaction_blocks = blocks[-1:]

    async def continue_after(self, reply: LlmReply, final_round: bool) -> bool:
        """Run the tools a `tool_use` stop asks for, or take up a `pause_turn`/`compaction` stop,
        and set the next round's request; False when the reply ends the turn."""
        used = reply.request
        assert used is not None
        if final_round:
            return False
        assistant: Message = {"role": "assistant", "content": list(reply.content)}  # whitelisted by the adapter
        new: tuple[Message, ...]
        if reply.stop_reason == "tool_use" and reply.tool_uses:
            results = []
            for use in reply.tool_uses:
                results.append(await self.run_tool(use, reply.model))
            new = (assistant, {"role": "user", "content": results})
        elif reply.stop_reason in ("pause_turn", "compaction"):
            new = (assistant,)
        else:
            return False
        self.loop_turns.extend(new)
        self.source = partial(self.continued, used, reply.profile, new, tuple(self.loop_turns))
        return True

    async def run_tool(self, use: Mapping[str, Any], executor_model: str) -> dict[str, Any]:
        """One tool call, as the `tool_result` block for the model; a failure is reported to it."""
        name = str(use.get("name"))
        started = time.perf_counter()
        tool = self.tools.get(name)
        error: str | None = None
        output = ""
        try:
            if tool is None:
                raise LookupError(f"unknown tool {name!r}")
            arguments = use.get("input") or {}
            if not isinstance(arguments, Mapping):
                raise ValueError("tool input must be an object")
            output = await tool.run(arguments, ToolContext(executor_model, self.telemetry))
        except Exception as exc:  # a failing tool is reported to the model, not to the user
            error = f"{type(exc).__name__}: {exc}"[:500]
            output = f"The tool failed: {error}"
        duration = int((time.perf_counter() - started) * 1000)
        self.calls.append(ToolCall(name, duration, error is None, error))
        self.telemetry.emit(
            ChatToolUsed(tool_name=name[:100], duration_ms=duration, success=error is None, error=error)
        )
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": use.get("id"), "content": output or "(empty)"}
        if error is not None:
            result["is_error"] = True
        return result

    def outcome(self, iterations: int) -> TurnOutcome:
        last = self.last
        assert last is not None
        text = "\n\n".join(self.texts)
        blocks = [*self.compaction_blocks, {"type": "text", "text": text}] if text else self.compaction_blocks
        return TurnOutcome(
            text=text,
            model=last.model,
            profile=last.profile,
            usage=self.usage,
            stop_reason=last.stop_reason,
            compactions=self.compactions,
            tool_calls=self.calls,
            content_blocks=blocks,  # what the next turn sends back (compaction + text)
            llm_ms=self.llm_ms,
            iterations=iterations,
        )

    # ---- request sources and the text sink ---------------------------------------------------

    def with_tools(self, profile: Profile) -> LlmRequest:
        """The caller's request for this profile, with the loop's tools."""
        base = self.request(profile) if callable(self.request) else self.request
        return replace(base, tools=self.specs) if self.specs else base

    def continued(
        self,
        used: LlmRequest,
        answered: str | None,
        new: tuple[Message, ...],
        rounds: tuple[Message, ...],
        profile: Profile,
    ) -> LlmRequest:
        """The next round's request: what the answering profile was sent (smaller after a
        prompt-too-long recovery) plus this round; a fallback profile gets its own request,
        with the prompts resolved for its model, plus every round so far."""
        if profile.name == answered:
            return used.with_turn(*new)
        return self.with_tools(profile).with_turn(*rounds)

    @staticmethod
    def without_tools(previous: RequestSource, profile: Profile) -> LlmRequest:
        built = previous(profile) if callable(previous) else previous
        return replace(built, tool_choice={"type": "none"})

    async def separated(self, chunk: str) -> None:
        """Streamed text, with a blank line between the text of successive rounds."""
        assert self.on_text is not None
        if not self.streamed_any and self.texts:
            await self.on_text("\n\n")
        self.streamed_any = True
        await self.on_text(chunk)
