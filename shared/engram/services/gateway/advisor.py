"""The advisor (R-8.2): the `consult_advisor` tool, with which the executor model asks the smart
model a hard question inside the tool-use loop; every consultation is reported as
`chat.advisor_auto_triggered`, failed ones included."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from engram.domain.llm import LlmError, LlmRequest, Profile, SystemBlock, ToolSpec
from engram.domain.telemetry import ChatAdvisorAutoTriggered
from engram.services.gateway.calls import Completes, Tool, ToolContext

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


def advisor_tool(gateway: Completes, context: str = "") -> Tool:
    """`consult_advisor`: the executor asks the smart model; its answer goes back into the loop."""
    return Tool(ADVISOR_TOOL, _Consult(gateway, context))


@dataclass(frozen=True)
class _Consult:
    """The tool's handler, for one conversation's context."""

    gateway: Completes
    context: str

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        question = str(arguments.get("question") or "").strip()
        if not question:
            raise ValueError("consult_advisor needs a 'question'")
        trigger = str(arguments.get("reason") or "executor tool call").strip()[:200]
        started = time.perf_counter()
        try:
            reply = await self.gateway.complete("advisor", partial(self.request, question), telemetry=ctx.telemetry)
        except LlmError:  # triggered all the same; the tool reports the failure to the executor
            ctx.telemetry.emit(_triggered(trigger, ctx, started, None))
            raise
        ctx.telemetry.emit(_triggered(trigger, ctx, started, reply.model))
        return reply.text

    def request(self, question: str, profile: Profile) -> LlmRequest:
        """The question for the advisor profile being called, its system prompt resolved for that model."""
        system = self.gateway.prompts.render("advisor_v1", model=profile.model, provider=profile.provider)
        body = f"{question}\n\nContext from the conversation:\n{self.context}" if self.context else question
        return LlmRequest(
            system=(SystemBlock(system, cache=True),),
            turn=({"role": "user", "content": body},),
            cache_history=False,
        )


def _triggered(trigger: str, ctx: ToolContext, started: float, advisor_model: str | None) -> ChatAdvisorAutoTriggered:
    return ChatAdvisorAutoTriggered(
        trigger=trigger,
        executor_model=ctx.executor_model,
        duration_ms=int((time.perf_counter() - started) * 1000),
        advisor_model=advisor_model,
        succeeded=advisor_model is not None,
    )
