"""The LLM path of consolidation (R-15.1): the model judges what the rules left open.

One call per cluster (the new observation and its open candidates; a digest group), through
the gateway's `consolidation` task (the extraction profile and its fallback chain) at
background priority, so consolidation never delays a chat turn. The answer is a forced tool
call validated by pydantic. There is no second call: an invalid answer raises
`JudgementFailed` with what the call cost, and the caller keeps the rules' verdicts.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from engram.domain.consolidation import Verdict
from engram.domain.consolidation_judgement import (
    CONSOLIDATION_TOOL,
    DIGEST_TOOL,
    ConsolidationOutput,
    DigestOutput,
    InvalidJudgement,
    describe,
    verdicts_of,
)
from engram.domain.consolidation_plan import topic_of
from engram.domain.language import detect_language
from engram.domain.llm import LlmRequest, Priority, Profile, ToolSpec, Usage
from engram.domain.observation import Observation
from engram.services.gateway import LlmGateway

TASK = "consolidation"

M = TypeVar("M", bound=BaseModel)


@dataclass
class Cost:
    model: str | None = None
    usage: Usage = field(default_factory=Usage)
    duration_ms: int = 0


@dataclass
class Judgement:
    verdicts: dict[uuid.UUID, Verdict]
    merged_text: tuple[str, str] | None
    cost: Cost


class JudgementFailed(Exception):
    """The call failed or its answer was invalid; `cost` is what it used."""

    def __init__(self, message: str, cost: Cost) -> None:
        super().__init__(message)
        self.cost = cost


class ConsolidationJudge:
    def __init__(self, gateway: LlmGateway) -> None:
        self.gateway = gateway

    @property
    def available(self) -> bool:
        return self.gateway.available

    async def _call(self, prompt: str, variables: dict[str, Any], tool: ToolSpec, model: type[M]) -> tuple[M, Cost]:
        started = time.perf_counter()
        cost = Cost()

        def build(profile: Profile) -> LlmRequest:
            text = self.gateway.prompts.render(prompt, model=profile.model, provider=profile.provider, **variables)
            return LlmRequest(
                turn=({"role": "user", "content": text},),
                tools=(tool,),
                tool_choice={"type": "tool", "name": tool.name},
                cache_history=False,
            )

        try:
            reply = await self.gateway.complete(TASK, build, priority=Priority.background)
        except Exception as exc:
            cost.duration_ms = int((time.perf_counter() - started) * 1000)
            raise JudgementFailed(f"the model could not be reached: {exc}", cost) from exc
        cost.model, cost.usage = reply.model, reply.usage
        cost.duration_ms = int((time.perf_counter() - started) * 1000)
        uses = [u for u in reply.tool_uses if u.get("name") == tool.name]
        if not uses:
            raise JudgementFailed(f"the model did not call {tool.name}", cost)
        try:
            return model.model_validate(uses[0].get("input") or {}), cost
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors())
            raise JudgementFailed(f"invalid {tool.name} input: {problems[:800]}", cost) from exc

    async def judge(self, new: Observation, candidates: Sequence[Observation]) -> Judgement:
        tool = ToolSpec(
            CONSOLIDATION_TOOL,
            "Record how the new memory entry relates to each candidate.",
            ConsolidationOutput.model_json_schema(),
        )
        listed = "\n\n".join(f"[{i}]\n{describe(c)}" for i, c in enumerate(candidates, 1))
        output, cost = await self._call(
            "consolidate_memories_v1", {"new": describe(new), "candidates": listed}, tool, ConsolidationOutput
        )
        try:
            verdicts = verdicts_of(output, new, candidates)
        except InvalidJudgement as exc:
            raise JudgementFailed(str(exc), cost) from exc
        merged = None
        if output.merged_title:
            merged = (output.merged_title, output.merged_narrative or "")
        return Judgement(verdicts, merged, cost)

    async def digest(self, members: Sequence[Observation], days: int) -> tuple[DigestOutput, Cost]:
        tool = ToolSpec(DIGEST_TOOL, "Record the digest entry.", DigestOutput.model_json_schema())
        entries = "\n".join(
            f"- {m.created_at:%Y-%m-%d}: {' '.join(m.title.split())}"
            + (f" — {' '.join(m.narrative.split())[:400]}" if m.narrative.strip() else "")
            for m in members
        )
        language = detect_language(" ".join(m.title for m in members))
        variables = {
            "count": str(len(members)),
            "topic": topic_of(members[0]),
            "days": str(days),
            "language": language,
            "entries": entries[:40_000],
        }
        return await self._call("summarize_digest_v1", variables, tool, DigestOutput)
