"""Chat extraction and session summaries in extract-observation (R-5.2, R-5.5, R-4.3).

`ChatMemory` is the `chat_extractor` hook of `engram.services.extraction.Extraction`:

- `io.engram.chat.turn.completed.v1`: the LLM returns observations through the
  `record_observations` tool (JSON schema from pydantic, validated by pydantic); invalid output
  is retried once with the validation error, then the event is dead-lettered with the reason.
  The known memories of the user go into the prompt, so the model reuses their keys; the
  store deduplicates by content hash and key. Without an API key, the offline extractor keeps
  the user's salient statements.
- `io.engram.session.ended.v1`: the session gets a Summary (LLM through `record_summary`, or
  offline), stored in `summaries` and also as a keyed `context` observation, so summaries are
  recalled like observations.

LLM calls run at background priority, so extraction never delays a chat turn, and outside any
database transaction: a connection is held for the short reads and writes around them only.
The turn's extraction status ("done" or "failed") is written by `Extraction` with the result.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import structlog
from cloudevents.http import CloudEvent
from pydantic import BaseModel, ValidationError

from engram.adapters.chats import ChatStore
from engram.adapters.postgres import Connection, Database
from engram.domain.chat_extraction import (
    ExtractionOutput,
    InvalidExtraction,
    Origin,
    SummaryOutput,
    Turn,
    check_types,
    detect_language,
    extraction_tool_schema,
    offline_observations,
    offline_summary,
    summary_draft,
    to_drafts,
)
from engram.domain.events import (
    CHAT_TURN_COMPLETED,
    SESSION_ENDED,
    ChatTurnCompleted,
    InvalidEvent,
    SessionEnded,
    parse_data,
)
from engram.domain.llm import LlmReply, LlmRequest, Priority, Profile, ToolSpec, Usage
from engram.domain.models import SessionStatus
from engram.domain.observation import ObservationDraft
from engram.services.gateway import LlmGateway

log = structlog.get_logger(__name__)

EXTRACTION_TOOL = "record_observations"
SUMMARY_TOOL = "record_summary"

M = TypeVar("M", bound=BaseModel)


@dataclass
class Extracted:
    """What the chat hook returns: drafts plus what `memory.extraction` reports about the call."""

    drafts: list[ObservationDraft]
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: int = 0
    message_id: uuid.UUID | None = None  # a chat turn's assistant message (its trace shows the status)


class InvalidOutput(InvalidEvent):
    """The model's output was invalid twice: the event is poison; what the calls cost is kept
    for `memory.extraction` (R-5.5)."""

    def __init__(self, message: str, model: str, usage: Usage, duration_ms: int) -> None:
        super().__init__(message)
        self.model = model
        self.input_tokens = usage.input_tokens
        self.output_tokens = usage.output_tokens
        self.duration_ms = duration_ms


def _problems(exc: ValidationError | InvalidExtraction) -> str:
    if isinstance(exc, InvalidExtraction):
        return str(exc)
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors())[:1_000]


class ChatMemory:
    def __init__(self, gateway: LlmGateway, observation_types: frozenset[str]) -> None:
        self.gateway = gateway
        self.observation_types = observation_types

    async def __call__(self, db: Database, event: CloudEvent) -> Extracted:
        etype = event["type"]
        if etype == CHAT_TURN_COMPLETED.type:
            return await self.turn(db, event)
        if etype == SESSION_ENDED.type:
            return await self.session(db, event)
        raise InvalidEvent(f"extract-observation does not handle {etype}")

    async def _already_applied(self, conn: Connection, event: CloudEvent) -> bool:
        from engram.services.extraction import applied

        return await applied(conn, event)

    # ---- one LLM call with a forced tool, validated, retried once -------------------------------

    async def _structured(
        self,
        task: str,
        prompt_key: str,
        variables: dict[str, Any],
        tool: ToolSpec,
        model: type[M],
        check: Callable[[M], None] = lambda _m: None,
    ) -> tuple[M, LlmReply, Usage]:
        started = time.perf_counter()
        usage = Usage()
        correction: list[dict[str, Any]] = []
        last_error = ""
        model_name = ""
        for attempt in (1, 2):

            def build(profile: Profile, extra: list[dict[str, Any]] = correction) -> LlmRequest:
                text = self.gateway.prompts.render(
                    prompt_key, model=profile.model, provider=profile.provider, **variables
                )
                return LlmRequest(
                    turn=({"role": "user", "content": text}, *extra),
                    tools=(tool,),
                    tool_choice={"type": "tool", "name": tool.name},
                    cache_history=False,
                )

            reply = await self.gateway.complete(task, build, priority=Priority.background)
            usage.add(reply.usage)
            model_name = reply.model
            uses = [u for u in reply.tool_uses if u.get("name") == tool.name]
            try:
                if not uses:
                    raise InvalidExtraction(f"the model did not call {tool.name}")
                parsed = model.model_validate(uses[0].get("input") or {})
                check(parsed)
                return parsed, reply, usage
            except (ValidationError, InvalidExtraction) as exc:
                last_error = _problems(exc)
                log.info("chat_memory.invalid_output", tool=tool.name, attempt=attempt, error=last_error)
                if uses:
                    correction[:] = [
                        {"role": "assistant", "content": [dict(uses[0])]},
                        {
                            "role": "user",
                            "content": [
                                {
                                    "type": "tool_result",
                                    "tool_use_id": uses[0].get("id"),
                                    "is_error": True,
                                    "content": f"Invalid input: {last_error}. Call {tool.name} again with valid input.",
                                }
                            ],
                        },
                    ]
                else:
                    correction[:] = [
                        {"role": "assistant", "content": reply.text or "(no tool call)"},
                        {"role": "user", "content": f"You must call the tool {tool.name} exactly once."},
                    ]
        raise InvalidOutput(
            f"{tool.name}: the model's output was invalid twice: {last_error}",
            model_name,
            usage,
            int((time.perf_counter() - started) * 1000),
        )

    # ---- chat turns ------------------------------------------------------------------------------

    async def turn(self, db: Database, event: CloudEvent) -> Extracted:
        started = time.perf_counter()
        data = cast(ChatTurnCompleted, parse_data(event["type"], event.get_data()))
        user = event.get("userid")
        if not user:
            raise InvalidEvent("a chat turn event needs the 'userid' extension")
        origin = Origin(str(event["tenantid"]), str(user), data.session_id, data.user_message_id, str(event["id"]))
        language = data.language or detect_language(data.user_message)
        async with db.tenant(str(event["tenantid"])) as conn:
            if await self._already_applied(conn, event):
                return Extracted([])  # redelivered: the inbox marks it as a duplicate, no second LLM call
            known = await self._known(conn, str(user)) if self.gateway.available else ""
        if not self.gateway.available:
            drafts = offline_observations(data.user_message, origin, self.observation_types)
            return Extracted(
                drafts,
                model="offline",
                duration_ms=int((time.perf_counter() - started) * 1000),
                message_id=data.assistant_message_id,
            )
        tool = ToolSpec(
            EXTRACTION_TOOL,
            "Record the observations worth keeping from this chat turn (an empty list when there are none).",
            extraction_tool_schema(sorted(self.observation_types)),
        )
        output, reply, usage = await self._structured(
            "extraction",
            "extract_observations_v1",
            {
                "language": language,
                "known": known or "(none yet)",
                "user_message": data.user_message[:20_000],
                "assistant_message": data.assistant_message[:20_000],
            },
            tool,
            ExtractionOutput,
            lambda o: check_types(o, self.observation_types),
        )
        try:
            drafts = to_drafts(output, origin)
        except ValidationError as exc:
            raise InvalidEvent(f"extracted observations are invalid: {_problems(exc)}") from exc
        return Extracted(
            drafts,
            model=reply.model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            duration_ms=int((time.perf_counter() - started) * 1000),
            message_id=data.assistant_message_id,
        )

    async def _known(self, conn: Connection, user_id: str) -> str:
        rows = await conn.fetch(
            "SELECT type, title, key FROM observations WHERE user_id = $1 AND superseded_by IS NULL"
            " AND scope <> 'sensitive' ORDER BY updated_at DESC LIMIT 30",
            user_id,
        )
        return "\n".join(f"- [{r['type']}] {r['title']}" + (f" (key: {r['key']})" if r["key"] else "") for r in rows)

    # ---- sessions ----------------------------------------------------------------------------------

    async def session(self, db: Database, event: CloudEvent) -> Extracted:
        started = time.perf_counter()
        data = cast(SessionEnded, parse_data(event["type"], event.get_data()))
        async with db.tenant(str(event["tenantid"])) as conn:
            if await self._already_applied(conn, event):
                return Extracted([])  # redelivered: the inbox marks it as a duplicate, no second LLM call
            store = ChatStore(conn)
            session = await store.get_session(data.session_id)
            if session is None:
                raise InvalidEvent(f"session {data.session_id} does not exist in tenant {event['tenantid']}")
            if session.status is SessionStatus.active:
                await store.end_session(session.id)
            messages = await store.session_messages(session.id)
        turns = [Turn(m.role, m.content) for m in messages if m.role in ("user", "assistant")]
        if not turns and session.user_prompt:
            turns = [Turn("user", session.user_prompt)]
        language = detect_language(" ".join(t.content for t in turns if t.role == "user")) if turns else "en"
        user = session.user_id or event.get("userid")
        model_name = "offline"
        usage = Usage()
        if self.gateway.available and turns:
            transcript = "\n".join(f"{t.role}: {' '.join(t.content.split())[:2_000]}" for t in turns[-40:])
            tool = ToolSpec(SUMMARY_TOOL, "Record the session summary.", SummaryOutput.model_json_schema())
            summary, reply, usage = await self._structured(
                "summary", "summarize_session_v1", {"language": language, "transcript": transcript}, tool, SummaryOutput
            )
            model_name = reply.model
        else:
            summary = offline_summary(turns, language)
        async with db.tenant(str(event["tenantid"])) as conn:
            await ChatStore(conn).save_summary(
                str(event["tenantid"]), session.id, session.user_id, summary.model_dump(), model_name
            )
        drafts: list[ObservationDraft] = []
        if user:
            origin = Origin(str(event["tenantid"]), str(user), session.id, None, str(event["id"]))
            draft = summary_draft(summary, origin, session.id, model_name)
            if draft.type not in self.observation_types:
                draft = draft.model_copy(update={"type": "note" if "note" in self.observation_types else draft.type})
            drafts.append(draft)
        return Extracted(
            drafts,
            model=model_name,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            duration_ms=int((time.perf_counter() - started) * 1000),
        )
