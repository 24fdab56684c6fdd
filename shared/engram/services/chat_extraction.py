"""Chat extraction and session summaries in extract-observation (R-5.2, R-5.5, R-4.3).

`ChatExtractor` is the chat hook of `engram.services.extraction.Extraction`:

- `io.engram.chat.turn.completed.v1`: the turn's messages become memory units at once (below:
  its own, and the context of the turns before it); the LLM returns observations through the
  `record_observations` tool (JSON schema from pydantic, validated by pydantic); invalid output
  is retried once with the validation error, then the event is dead-lettered with the reason;
  when the model fails (invalid twice, or down), the turn's units are written all the same
  (`keep_units`).
  The known memories of the user go into the prompt, so the model reuses their keys; the
  store deduplicates by content hash and key. Without an API key, the offline extractor keeps
  the user's salient statements. What is sensitive, meant for the user's team or uncertain
  (confidence below 0.5) is not stored but proposed (`memory_proposals`): the chat's user
  approves or rejects it (`engram.services.proposals`).
- `io.engram.session.ended.v1`: the session gets a Summary (LLM through `record_summary`, or
  offline), stored in `summaries` and also as a keyed `context` observation, so summaries are
  recalled like observations. Its messages are written as memory units again (`conversation.chat_units`,
  unless `ENGRAM_CHAT_UNITS=false`; the same units the turns wrote, so unchanged): each user turn
  with its context, each answer as a low-priority unit, the user's statements; private to the
  chat's user, keyed by message, counted apart from what extraction kept (`units`). What
  extraction keeps is what it judged worth keeping; the units are what was said, so a fact the
  extractor passed over is still found (bench/RESULTS.md, "the chat path").

LLM calls run at background priority, so extraction never delays a chat turn, and outside any
database transaction: a connection is held for the short reads and writes around them only.
The turn's extraction status ("done" or "failed") is written by `Extraction` with the result.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel, ValidationError

from engram.domain.authorization import WriteRequest, extractor_for, may_write
from engram.domain.chat_extraction import (
    ExtractionOutput,
    InvalidExtraction,
    Origin,
    SummaryOutput,
    Turn,
    check_types,
    extraction_tool_schema,
    offline_observations,
    offline_summary,
    summary_draft,
    to_drafts,
)
from engram.domain.conversation import CHAT_SPEAKERS, DERIVED_KINDS, chat_units, closing_question
from engram.domain.deliveries import Delivery, EventMeta
from engram.domain.erasure import given_before_erasure
from engram.domain.errors import InvalidEvent
from engram.domain.events import ChatTurnCompleted, SessionEnded, change_events
from engram.domain.language import detect_language
from engram.domain.llm import LlmReply, LlmRequest, Priority, Profile, ToolSpec, Usage
from engram.domain.memory_units import PASSAGE_TYPE, UnitKind
from engram.domain.models import ChatMessage, Session, SessionStatus
from engram.domain.observation import ObservationDraft
from engram.domain.proposals import PROPOSAL_TTL, NewProposal, ProposalReason, approval_reason, proposal_id
from engram.domain.scopes import Principal
from engram.ports import TenantTx, UnitOfWork
from engram.services.extraction import CONSUMER, SOURCE, ChatEvent
from engram.services.extraction_plan import Extracted
from engram.services.gateway import LlmGateway
from engram.services.profile import profile_facts

log = structlog.get_logger(__name__)

EXTRACTION_TOOL = "record_observations"
SUMMARY_TOOL = "record_summary"
UNIT_MESSAGES = 1_000  # a session's messages read at its end (units; the summary reads the last 40)

M = TypeVar("M", bound=BaseModel)


class InvalidOutput(InvalidEvent):
    """The model's output was invalid twice: the event is poison; what the calls cost is kept
    for `memory.extraction` (R-5.5)."""

    def __init__(self, message: str, model: str, usage: Usage, duration_ms: int) -> None:
        super().__init__(message)
        self.model = model
        self.input_tokens = usage.input_tokens
        self.output_tokens = usage.output_tokens
        self.duration_ms = duration_ms


def permitted(author: Principal, drafts: list[ObservationDraft]) -> list[ObservationDraft]:
    """The drafts the user the extraction acts for could have stored through `remember` (R-16.4);
    the others (a sensitive item from a user who may not see sensitive memories) are dropped."""
    kept = [d for d in drafts if may_write(author, WriteRequest.of(d.user_id, d.scope, d.team_ids))]
    if len(kept) < len(drafts):
        log.info("chat_extraction.drafts_refused", tenant=author.tenant_id, refused=len(drafts) - len(kept))
    return kept


def proposed(
    author: Principal, drafts: list[ObservationDraft], data: ChatTurnCompleted, event_key: str, now: datetime
) -> tuple[list[ObservationDraft], list[NewProposal]]:
    """The drafts stored at once (those the user could have stored, R-16.4) and those proposed to
    the user: sensitive, team-wide or low-confidence ones. A sensitive item for a user who may not
    see sensitive memories is neither (the user could not approve it)."""
    kept: list[ObservationDraft] = []
    proposals: list[NewProposal] = []
    for index, draft in enumerate(drafts):
        reason = approval_reason(draft)
        if reason is None:
            kept.append(draft)
        elif reason is not ProposalReason.sensitive or data.may_store_sensitive:
            proposals.append(
                NewProposal(
                    id=proposal_id(event_key, index),
                    chat_id=data.chat_id,
                    user_id=author.user_id or "",
                    message_id=data.assistant_message_id,
                    reason=reason,
                    draft=draft,
                    expires_at=now + PROPOSAL_TTL,
                )
            )
    return permitted(author, kept), proposals


def _problems(exc: ValidationError | InvalidExtraction) -> str:
    if isinstance(exc, InvalidExtraction):
        return str(exc)
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors())[:1_000]


def asked_before(messages: Sequence[ChatMessage], message_id: uuid.UUID | None) -> str | None:
    """The question the assistant ended its answer before the user's message with
    (`conversation.closing_question`): a short reply ("A grey Ford Focus.") is a fact only
    together with it, and the turn the model sees holds only the reply and the answer after it."""
    at = next((i for i, m in enumerate(messages) if m.id == message_id), None)
    before = [m for m in messages[:at] if m.role in CHAT_SPEAKERS] if at else []
    if not before or before[-1].role != "assistant":
        return None
    return closing_question(before[-1].content)


class ChatExtractor:
    def __init__(
        self,
        uow: UnitOfWork,
        gateway: LlmGateway,
        observation_types: frozenset[str],
        *,
        chat_units: bool = True,
        answer_passages: bool = True,
    ) -> None:
        self.uow = uow
        self.gateway = gateway
        self.observation_types = observation_types
        self.chat_units = chat_units
        # the assistant's answers in passages too (`memory_units.passage_units`)
        self.unit_kinds = DERIVED_KINDS if answer_passages else DERIVED_KINDS - {UnitKind.passage}

    async def __call__(self, delivery: Delivery[ChatEvent]) -> Extracted:
        data = delivery.data
        if isinstance(data, ChatTurnCompleted):
            return await self.turn(delivery.tenant, delivery.meta, data)
        return await self.session(delivery.tenant, delivery.meta, data)

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
                log.info("chat_extraction.invalid_output", tool=tool.name, attempt=attempt, error=last_error)
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

    async def turn(self, tenant: str, meta: EventMeta, data: ChatTurnCompleted) -> Extracted:
        started = time.perf_counter()
        user = meta.user_id
        assert user is not None  # the decoder requires it
        origin = Origin(
            tenant,
            user,
            data.session_id,
            data.user_message_id,
            meta.id,
            tuple(data.team_ids),
            said_at=meta.said_by(datetime.now(UTC)),
        )
        language = data.language or detect_language(data.user_message)
        author = extractor_for(tenant, user, may_store_sensitive=data.may_store_sensitive)
        async with self.uow.tenant(tenant, consumer=CONSUMER) as tx:
            if await tx.inbox.seen([meta.key]):
                return Extracted([])  # redelivered: the inbox marks it as a duplicate, no second LLM call
            known = await self._known(tx, user) if self.gateway.available else ""
            # the offline rules read the user's profile: a change of its facts belongs in it too
            profile = [] if self.gateway.available else await profile_facts(tx, author, self.observation_types)
            session, messages = await self._turn_session(tx, data)
            units = (
                self._units(tenant, user, session, session.chat_id or data.chat_id, messages, data.user_message_id)
                if session
                else []
            )
        if not self.gateway.available:
            titles = [o.title for o in profile]
            asked = asked_before(messages, data.user_message_id)
            drafts = offline_observations(data.user_message, origin, self.observation_types, titles, asked)
            kept, proposals = proposed(author, drafts, data, meta.key, datetime.now(UTC))
            return Extracted(
                kept,
                proposals=proposals,
                model="offline",
                duration_ms=int((time.perf_counter() - started) * 1000),
                message_id=data.assistant_message_id,
                units=units,
            )
        tool = ToolSpec(
            EXTRACTION_TOOL,
            "Record the observations worth keeping from this chat turn (an empty list when there are none).",
            extraction_tool_schema(sorted(self.observation_types)),
        )
        try:
            output, reply, usage = await self._structured(
                "extraction",
                "extract_observations_v1",
                {
                    "language": language,
                    "known": known or "(none yet)",
                    "asked": asked_before(messages, data.user_message_id) or "(none)",
                    "user_message": data.user_message[:20_000],
                    "assistant_message": data.assistant_message[:20_000],
                },
                tool,
                ExtractionOutput,
                lambda o: check_types(o, self.observation_types),
            )
            drafts = to_drafts(output, origin)
        except ValidationError as exc:
            await self.keep_units(tenant, meta, user, units)
            raise InvalidEvent(f"extracted observations are invalid: {_problems(exc)}") from exc
        except Exception:
            await self.keep_units(tenant, meta, user, units)
            raise
        kept, proposals = proposed(author, drafts, data, meta.key, datetime.now(UTC))
        return Extracted(
            kept,
            proposals=proposals,
            model=reply.model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            duration_ms=int((time.perf_counter() - started) * 1000),
            message_id=data.assistant_message_id,
            units=units,
        )

    async def keep_units(self, tenant: str, meta: EventMeta, user: str, units: list[ObservationDraft]) -> None:
        """A turn's memory units written on their own when its extraction fails: the model is down
        (the event is retried, for hours in an outage) or its output was invalid twice (the event
        is dead-lettered). What the user said depends on no model, so it is recalled at once
        all the same; the event's outcome is unchanged, and the extraction that finally succeeds
        (a retry, a replay of the dead letter, the session's end) writes the same units again,
        unchanged: no new revision, no change event, nothing embedded twice. Not through the
        inbox, which would take the event for done. Best effort: a failure here is logged, and
        the event's own error decides what happens to it."""
        if not units:
            return
        try:
            async with self.uow.tenant(tenant) as tx:
                erased_at = await tx.erasures.hold([user])  # an erasure since the event wins
                if given_before_erasure([user], meta.occurred_at, erased_at):
                    return
                changes = await tx.observations.write_changes(units)
                tx.emit(change_events(changes, SOURCE))
        except Exception as exc:
            log.warning("chat_extraction.units_not_kept", tenant=tenant, units=len(units), error=str(exc)[:500])

    async def _turn_session(self, tx: TenantTx, data: ChatTurnCompleted) -> tuple[Session | None, list[ChatMessage]]:
        """The turn's session and its messages, when something needs them: the memory units the
        turn adds or changes (`chat_units(reaching=...)`: its own and the context of the turns
        before it, so what the user said is recalled before the session ends; the session's end
        writes them again, unchanged), and for the model the question the user's message may
        answer (`asked_before`)."""
        if data.session_id is None or data.user_message_id is None:
            return None, []
        if not (self.chat_units or self.gateway.available):
            return None, []
        session = await tx.chats.get_session(data.session_id)
        if session is None:
            return None, []
        return session, await tx.chats.session_messages(session.id, limit=UNIT_MESSAGES)

    def _units(
        self,
        tenant: str,
        user: str,
        session: Session,
        chat_id: uuid.UUID,
        messages: list[ChatMessage],
        reaching: uuid.UUID | None = None,
    ) -> list[ObservationDraft]:
        """A session's messages as the user's memory units (`conversation.chat_units`; with
        `reaching`, only those that message reaches), typed and as the user may store them.
        A completed turn and the session's end build them the same way, so the end rewrites none."""
        if not self.chat_units:
            return []
        units = chat_units(
            tenant_id=tenant,
            user_id=user,
            chat_id=chat_id,
            session_id=session.id,
            started_at=session.created_at,
            messages=[(m.id, m.role, m.content) for m in messages],
            kinds=self.unit_kinds,
            reaching=reaching,
        )
        return permitted(extractor_for(tenant, user, may_store_sensitive=False), self._typed(units))

    def _typed(self, drafts: list[ObservationDraft]) -> list[ObservationDraft]:
        """Summaries and units are `context`; a tenant without that type gets `note`. An
        assistant's passage keeps its own type, which only a question to the assistant searches
        (`addressee.unasked_types`)."""
        fallback = "note" if "note" in self.observation_types else None
        return [
            d.model_copy(update={"type": fallback})
            if d.type not in self.observation_types and d.type != PASSAGE_TYPE and fallback
            else d
            for d in drafts
        ]

    async def _known(self, tx: TenantTx, user_id: str) -> str:
        known = await tx.observations.known(user_id, 30)
        return "\n".join(f"- [{k.type}] {k.title}" + (f" (key: {k.key})" if k.key else "") for k in known)

    # ---- sessions ----------------------------------------------------------------------------------

    async def session(self, tenant: str, meta: EventMeta, data: SessionEnded) -> Extracted:
        started = time.perf_counter()
        async with self.uow.tenant(tenant, consumer=CONSUMER) as tx:
            if await tx.inbox.seen([meta.key]):
                return Extracted([])  # redelivered: the inbox marks it as a duplicate, no second LLM call
            session = await tx.chats.get_session(data.session_id)
            if session is None:
                raise InvalidEvent(f"session {data.session_id} does not exist in tenant {tenant}")
            if session.status is SessionStatus.active:
                await tx.chats.end_session(session.id)
            messages = await tx.chats.session_messages(session.id, limit=UNIT_MESSAGES)
        turns = [Turn(m.role, m.content) for m in messages if m.role in ("user", "assistant")]
        if not turns and session.user_prompt:
            turns = [Turn("user", session.user_prompt)]
        language = detect_language(" ".join(t.content for t in turns if t.role == "user")) if turns else "en"
        user = session.user_id or meta.user_id
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
        summary = summary.withheld()
        async with self.uow.tenant(tenant) as tx:
            await tx.chats.save_summary(session.id, session.user_id, summary.model_dump(), model_name)
        drafts: list[ObservationDraft] = []
        units: list[ObservationDraft] = []
        if user:
            origin = Origin(tenant, user, session.id, None, meta.id, said_at=meta.said_by(datetime.now(UTC)))
            author = extractor_for(tenant, user, may_store_sensitive=False)
            drafts = permitted(author, self._typed([summary_draft(summary, origin, session.id, session.created_at)]))
            units = self._units(tenant, user, session, session.chat_id or data.chat_id or session.id, messages)
        return Extracted(
            drafts,
            model=model_name,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            duration_ms=int((time.perf_counter() - started) * 1000),
            units=units,
        )
