"""INTERVIEW mode in the chat turn (`engram.domain.interview`): capture an object instead of
answering a question.

A turn interviews when its message names a configured type and asks nothing, or when the chat's
session holds an interview the message goes on with. The interview's profile (`task`, a forced
`record_fields` tool, prompt resolved for the model called) reads the fields out of the message;
the answer asks for the required fields still missing or confirms the captured object, which the
turn's record transaction stores as the user's observation. A message that continues nothing
(no new field) ends the open interview and is answered as usual; so does a model failure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from engram.domain.interview import (
    InterviewSpec,
    InterviewState,
    ask_for_missing,
    captured_draft,
    confirmation,
    detect,
    fields_schema,
    is_question,
)
from engram.domain.language import detect_language
from engram.domain.llm import LlmError, LlmRequest, Profile, ToolSpec
from engram.domain.observation import ObservationDraft
from engram.domain.scopes import Permission
from engram.services.chat.turn import PreparedTurn, TextSink
from engram.services.gateway import LlmGateway, TurnOutcome

log = structlog.get_logger(__name__)

CAPTURE_TOOL = "record_fields"


@dataclass
class Interviewed:
    """What the interview made of the turn; `outcome` None: answer it as usual (and end the interview)."""

    state: InterviewState
    missing: list[str]
    outcome: TurnOutcome | None = None
    captured: ObservationDraft | None = None

    @property
    def open_state(self) -> dict[str, Any] | None:
        """What the session keeps for the next turn (None: the interview is over)."""
        return self.state.as_metadata() if self.outcome is not None and self.captured is None else None

    def trace(self) -> dict[str, Any]:
        return {
            "type": self.state.type,
            "fields": dict(self.state.fields),
            "missing": list(self.missing),
            "status": "abandoned" if self.outcome is None else "captured" if self.captured else "asking",
        }


class Interviewer:
    def __init__(self, gateway: LlmGateway, spec: InterviewSpec) -> None:
        self.gateway = gateway
        self.spec = spec

    def begin(self, prepared: PreparedTurn) -> tuple[InterviewState, bool] | None:
        """The interview this turn starts or goes on with (and whether it goes on), if any."""
        principal = prepared.principal
        if not (self.spec.enabled and self.gateway.available and principal.has(Permission.create_observation)):
            return None
        message = prepared.body.message
        ongoing = InterviewState.from_metadata(prepared.session.metadata.get("interview"), self.spec)
        found = detect(message, self.spec)
        if found is not None:
            if ongoing is not None and ongoing.type == found[0]:
                return ongoing, True
            return InterviewState(found[0], {}), False
        if ongoing is not None and not is_question(message):
            return ongoing, True
        return None

    async def run(
        self, prepared: PreparedTurn, state: InterviewState, ongoing: bool, on_text: TextSink | None
    ) -> Interviewed:
        message = prepared.body.message
        try:
            found = await self._capture(prepared, state)
        except LlmError as exc:
            log.info("interview.capture_failed", error=str(exc)[:300])
            return Interviewed(state, state.missing(self.spec))
        merged = state.merged(found[0], self.spec)
        missing = merged.missing(self.spec)
        if ongoing and merged.fields == state.fields:  # the message does not go on with the interview
            return Interviewed(state, missing)
        language = detect_language(message)
        captured = None
        if missing:
            answer = ask_for_missing(merged, missing, self.spec, language)
        else:
            answer = confirmation(merged, self.spec, language)
            captured = captured_draft(
                merged,
                self.spec,
                tenant_id=prepared.principal.tenant_id,
                user_id=prepared.user_id,
                language=language,
                verified=prepared.principal.is_human,
                session_id=prepared.session.id,
            )
        reply = found[1]
        outcome = TurnOutcome(
            text=answer,
            model=reply.model,
            profile=reply.profile,
            usage=reply.usage,
            stop_reason="end_turn",
            compactions=[],
            tool_calls=[],
            content_blocks=[{"type": "text", "text": answer}],
            llm_ms=reply.duration_ms,
            iterations=1,
        )
        if on_text is not None:
            await on_text(answer)
        return Interviewed(merged, missing, outcome, captured)

    async def _capture(self, prepared: PreparedTurn, state: InterviewState) -> tuple[Mapping[str, Any], Any]:
        kind = self.spec.types[state.type]
        tool = ToolSpec(CAPTURE_TOOL, f"Record the fields of the {state.type} the user gave.", fields_schema(kind))
        fields = ", ".join(f"{name} ({spec.en})" for name, spec in kind.fields.items())
        variables = {
            "type": state.type,
            "fields": fields,
            "known": json.dumps(dict(state.fields), ensure_ascii=False) if state.fields else "(nothing yet)",
            "message": prepared.body.message[:4_000],
        }

        def build(profile: Profile) -> LlmRequest:
            text = self.gateway.prompts.render(
                self.spec.prompt_key, model=profile.model, provider=profile.provider, **variables
            )
            return LlmRequest(
                turn=({"role": "user", "content": text},),
                tools=(tool,),
                tool_choice={"type": "tool", "name": CAPTURE_TOOL},
                max_tokens=600,
                cache_history=False,
            )

        reply = await self.gateway.complete(
            self.spec.task, build, telemetry=prepared.buffer, timeout=self.spec.timeout_seconds
        )
        uses = [u for u in reply.tool_uses if u.get("name") == CAPTURE_TOOL]
        found = uses[0].get("input") if uses else None
        return (found if isinstance(found, Mapping) else {}), reply
