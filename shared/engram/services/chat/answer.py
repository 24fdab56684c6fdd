"""Step 2 of a chat turn: recall, then the model's answer with tools (R-7.4, R-8.1-R-8.4).

Memory reaches the prompt in two places: the stable block (the user's preferences and
identity) in the cached system prefix, and the per-turn multi-stream recall in front of the
user's message, after the cache breakpoints. Both are standard context: sensitive
observations never appear, whatever the caller's permissions (R-7.2).

Without a provider (`ANTHROPIC_API_KEY`, `ENGRAM_OPENAI_BASE_URL`, `ENGRAM_LOCAL_LLM_BASE_URL`),
or when every profile fails, the answer is built from recalled memory and marked as offline.
An INTERVIEW turn (`interview`) captures an object instead of answering. A failure after
tokens have streamed is not hidden by a fallback: `StreamInterrupted` reaches the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

from engram.domain.dates import weekday_name
from engram.domain.language import detect_language
from engram.domain.llm import LlmRequest, LlmUnavailable, Profile, SystemBlock, ToolSpec
from engram.domain.observation import Observation
from engram.domain.recall import RecallQuery, SearchHit
from engram.domain.streams import render_observations, standard_context_filter
from engram.domain.telemetry import ChatError
from engram.services.chat.interview import Interviewed, Interviewer
from engram.services.chat.prepare import model_override
from engram.services.chat.turn import OfflineReason, PreparedTurn, TextSink
from engram.services.gateway import LlmGateway, Tool, ToolContext, TurnOutcome
from engram.services.multistream import MultiStreamResult
from engram.services.profile import stable_block

SEARCH_MEMORY = ToolSpec(
    name="search_memory",
    description="Search Engram's memory of this user and tenant: facts, decisions, preferences.",
    input_schema={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "what to look for"}},
        "required": ["query"],
    },
)


@dataclass
class Answered:
    """What the turn produced before it is stored."""

    recalled: MultiStreamResult | None
    outcome: TurnOutcome | None  # None: answered offline
    answer: str
    model: str
    offline_reason: OfflineReason | None
    tool_hits: list[SearchHit] = field(default_factory=list)
    interview: Interviewed | None = None  # INTERVIEW mode: what it captured, or asks for

    @property
    def blocks(self) -> list[dict[str, Any]] | None:
        return self.outcome.content_blocks if self.outcome is not None else None


def offline_answer(message: str, memory: list[Observation], reason: str, zone: tzinfo = UTC) -> str:
    german = detect_language(message) == "de"
    if reason == "no_api_key":
        head = (
            "[Offline-Modus: kein Sprachmodell konfiguriert (weder ANTHROPIC_API_KEY noch "
            "ENGRAM_LOCAL_LLM_BASE_URL ist gesetzt).]"
            if german
            else "[Offline mode: no language model is configured (neither ANTHROPIC_API_KEY nor "
            "ENGRAM_LOCAL_LLM_BASE_URL is set).]"
        )
    else:
        head = (
            "[Offline-Modus: das Sprachmodell ist gerade nicht erreichbar.]"
            if german
            else "[Offline mode: the language model is unavailable right now.]"
        )
    if not memory:
        body = (
            "Zu dieser Nachricht habe ich noch nichts im Gedächtnis."
            if german
            else "I have no memories that match this message yet."
        )
        return f"{head}\n{body}"
    intro = "Das habe ich zu deiner Nachricht im Gedächtnis:" if german else "Here is what I remember about this:"
    return f"{head}\n{intro}\n{render_observations(memory, 4_000, zone=zone)}"


class TurnAnswer:
    def __init__(
        self,
        gateway: LlmGateway,
        strategy_profile: Callable[[str], str | None] = lambda _i: None,
        interviewer: Interviewer | None = None,
    ) -> None:
        self.gateway = gateway
        self.strategy_profile = strategy_profile  # intent -> the strategy's llm_profile
        self.interviewer = interviewer

    async def answer(self, prepared: PreparedTurn, on_text: TextSink | None) -> Answered:
        t0 = time.perf_counter()
        recalled = await prepared.recalling if prepared.recalling is not None else None
        # "recall": what the turn still waited for after preparing; "recall_total": all of it
        prepared.timings["recall"] = (time.perf_counter() - t0) * 1000
        if recalled is not None:
            prepared.timings["recall_total"] = recalled.duration_ms
            prepared.timings["intent"] = recalled.router_ms
        if recalled is not None and prepared.decision.tier != "override":  # a model the caller chose stays
            prepared.synthesis_profile = self.strategy_profile(recalled.intent.name)
        tool_hits: list[SearchHit] = []
        outcome: TurnOutcome | None = None
        offline_reason: OfflineReason | None = None
        t1 = time.perf_counter()
        interviewed = await self._interview(prepared, on_text)
        if interviewed is not None and interviewed.outcome is not None:
            outcome = interviewed.outcome
        elif not self.gateway.available:
            offline_reason = "no_api_key"
        else:
            try:
                outcome = await self._model(prepared, recalled, tool_hits, on_text)
            except LlmUnavailable as exc:  # StreamInterrupted is not hidden: the caller hears of it
                offline_reason = "llm_unavailable"
                prepared.buffer.emit(
                    ChatError(
                        stage="llm",
                        error_type="llm_unavailable",
                        message=str(exc)[:2000],
                        model=self.executor(prepared),
                    )
                )
        prepared.timings["llm_wall"] = (time.perf_counter() - t1) * 1000
        if outcome is not None:
            answer, model = outcome.text, outcome.model
        else:
            memory = [h.observation for s in (recalled.streams if recalled else []) for h in s.hits]
            answer = offline_answer(prepared.body.message, memory, offline_reason or "no_api_key", prepared.zone)
            model = "offline"
            if on_text is not None:
                await on_text(answer)
        return Answered(
            recalled,
            outcome,
            answer if answer.strip() else "(no answer)",
            model,
            offline_reason,
            tool_hits,
            interviewed,
        )

    async def _interview(self, prepared: PreparedTurn, on_text: TextSink | None) -> Interviewed | None:
        begun = self.interviewer.begin(prepared) if self.interviewer is not None else None
        if begun is None or self.interviewer is None:
            return None
        return await self.interviewer.run(prepared, *begun, on_text)

    def executor(self, prepared: PreparedTurn) -> str:
        """The model the turn's chain starts with."""
        return self.gateway.chain(prepared.profile, model_override(self.gateway, prepared.body))[0].model

    async def _model(
        self,
        prepared: PreparedTurn,
        recalled: MultiStreamResult | None,
        tool_hits: list[SearchHit],
        on_text: TextSink | None,
    ) -> TurnOutcome:
        return await self.gateway.run_tools(
            prepared.profile,
            self._request(prepared, recalled.memory if recalled else None),
            self._tools(prepared, self.executor(prepared), tool_hits),
            telemetry=prepared.buffer,
            model_override=model_override(self.gateway, prepared.body),
            on_text=on_text,
        )

    def _tools(self, prepared: PreparedTurn, executor_model: str, found: list[SearchHit]) -> dict[str, Tool]:
        tools: dict[str, Tool] = {}
        recall = prepared.recall
        if recall is not None:
            principal = prepared.principal

            async def search_memory(arguments: Mapping[str, Any], _ctx: ToolContext) -> str:
                query = str(arguments.get("query") or "").strip()
                if not query:
                    raise ValueError("search_memory needs a 'query'")
                result = await recall.search(
                    principal,
                    RecallQuery(
                        text=query[:2_000], limit=8, want_sensitive=False, stream_origin="tool", zone=prepared.zone
                    ),
                )
                hits = standard_context_filter(principal, result.hits)  # rejected ones: hidden by recall
                found.extend(hits)
                if not hits:
                    return "No matching memories."
                return render_observations([h.observation for h in hits], 3_000, zone=prepared.zone)

            tools["search_memory"] = Tool(SEARCH_MEMORY, search_memory)
        if executor_model != self.gateway.profile("advisor").model:
            tools["consult_advisor"] = self.gateway.advisor_tool(prepared.body.message[:2_000])
        return tools

    def _request(self, prepared: PreparedTurn, memory: str | None) -> Callable[[Profile], LlmRequest]:
        profile_block = stable_block(prepared.stable, prepared.zone) if prepared.stable else ""
        # the user's today, in their time zone, with its weekday as recall text shows a plan's day
        # ("(day: 2025-02-06, Thursday)"): "next Friday" needs it, and a model counts weekdays badly
        day = datetime.now(prepared.zone).date()
        today = f"{weekday_name(day)}, {day.isoformat()}"
        history = tuple(prepared.history)
        message = prepared.body.message
        prompts = self.gateway.prompts

        def build(profile: Profile) -> LlmRequest:
            system = [
                SystemBlock(
                    prompts.render("chat_system_v1", model=profile.model, provider=profile.provider, today=today),
                    cache=True,
                )
            ]
            if profile_block:
                system.append(
                    SystemBlock(
                        prompts.render(
                            "stable_memory_v1", model=profile.model, provider=profile.provider, profile=profile_block
                        ),
                        cache=True,
                    )
                )
            return LlmRequest(
                system=tuple(system),
                history=history,
                memory=memory,
                turn=({"role": "user", "content": message},),
                max_tokens=profile.max_tokens,
            )

        return build
