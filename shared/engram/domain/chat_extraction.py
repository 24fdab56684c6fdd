"""What a chat turn leaves behind (R-5.2, R-4.3): pure rules, no I/O.

- `ExtractionOutput`: the JSON schema of the LLM's `record_observations` tool, validated by
  pydantic; `to_drafts` turns it into observation drafts.
- `offline_observations`: without an LLM, salient statements of the user (decisions, dates,
  names, preferences, the user's own life (`personal_facts`), explicit "remember this") in
  German and English.
- `SummaryOutput` and `offline_summary`: a session's structured summary.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engram.domain import life_topics, session_summary
from engram.domain.dates import WEEKDAYS_DE, WEEKDAYS_EN
from engram.domain.life_topics import PROFILE_TYPES
from engram.domain.observation import (
    ObservationDraft,
    Priority,
    Provenance,
    Scope,
    Source,
    TriggerSource,
    is_unit_key,
)
from engram.domain.personal_facts import (
    IDENTITY_PATTERNS,
    PERSONAL_PATTERNS,
    PREFERENCE_PATTERNS,
    asks_about_life,
    corrects_profile,
    personal,
    premise,
    told_in_question,
    updates_profile,
)
from engram.domain.plan_topics import plan_topic
from engram.domain.secrets import without_secrets

# ---- LLM output schema --------------------------------------------------------------------------


class ExtractedObservation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="one of the allowed observation types")
    title: str = Field(min_length=3, max_length=300, description="one self-contained sentence")
    narrative: str = Field(default="", max_length=4_000)
    facts: list[str] = Field(default_factory=list, max_length=20)
    concepts: list[str] = Field(default_factory=list, max_length=20)
    tags: list[str] = Field(default_factory=list, max_length=10)
    key: str | None = Field(
        default=None,
        max_length=200,
        pattern=r"^[^\s].*$",
        description="stable identifier when this updates a known fact, e.g. 'preference:answer-style'",
    )
    priority: Priority = Priority.normal
    sensitive: bool = Field(default=False, description="health, HR or personal data that needs protection")
    team: bool = Field(default=False, description="meant for the user's whole team, not only the user")
    confidence: float = Field(
        default=0.7, ge=0.0, le=1.0, description="how sure you are that this is true and meant to be kept"
    )


class ExtractionOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    language: str = Field(default="", max_length=10, description="the conversation's language, e.g. de or en")
    observations: list[ExtractedObservation] = Field(default_factory=list, max_length=20)


def extraction_tool_schema(types: Sequence[str]) -> dict[str, Any]:
    """The tool's input schema; the `type` field is limited to the configured observation types."""
    schema = ExtractionOutput.model_json_schema()
    item = schema["$defs"]["ExtractedObservation"]
    item["properties"]["type"]["enum"] = sorted(types)
    return schema


class InvalidExtraction(ValueError):
    """The model's output does not fit the schema (or uses an unknown type)."""


def check_types(output: ExtractionOutput, types: frozenset[str]) -> None:
    unknown = sorted({o.type for o in output.observations} - types)
    if unknown:
        raise InvalidExtraction(f"unknown observation type(s) {unknown}; allowed: {sorted(types)}")


@dataclass(frozen=True)
class Origin:
    tenant_id: str
    user_id: str
    session_id: uuid.UUID | None
    message_id: uuid.UUID | None
    event_id: str
    team_ids: tuple[str, ...] = ()  # the user's teams: where a team item is proposed
    said_at: datetime | None = None  # when the turn took place (its event's time): the drafts' `said_at`


def to_drafts(output: ExtractionOutput, origin: Origin) -> list[ObservationDraft]:
    """Agent-sourced, unverified, private to the user (sensitive or for the user's teams when the
    model says so); never more confident than an agent's default."""
    drafts = []
    for item in output.observations:
        scope = Scope.sensitive if item.sensitive else Scope.team if item.team and origin.team_ids else Scope.private
        drafts.append(
            ObservationDraft(
                tenant_id=origin.tenant_id,
                user_id=origin.user_id,
                type=item.type,
                title=item.title.strip(),
                narrative=item.narrative.strip(),
                facts=item.facts,
                concepts=item.concepts,
                tags=item.tags,
                key=None if is_unit_key(item.key) else item.key,  # a unit's key would overwrite what was said
                priority=item.priority,
                team_ids=list(origin.team_ids) if scope is Scope.team else [],
                source=Source.agent,
                verified=False,
                confidence=min(0.7, item.confidence),
                scope=scope,
                trigger_source=TriggerSource.chat,
                provenance=Provenance(
                    session_id=origin.session_id, chat_message_id=origin.message_id, source_event_id=origin.event_id
                ),
                said_at=origin.said_at,
            )
        )
    return drafts


# ---- offline extraction -------------------------------------------------------------------------

_MONTHS = (
    "januar|februar|märz|maerz|april|mai|juni|juli|august|september|oktober|november|dezember|"
    "january|february|march|may|june|july|october|december"
)
_WEEKDAYS = "|".join((*WEEKDAYS_DE, *WEEKDAYS_EN))

# (observation type, key prefix, patterns): first matching rule wins for a sentence.
_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "note",
        "remember",
        (
            r"\bmerk(e)? dir\b",
            r"\bbitte merken\b",
            r"\bvergiss nicht\b",
            r"\bnicht vergessen\b",
            r"\bremember (that|this)\b",
            r"\bdon'?t forget\b",
            r"\bnote that\b",
            r"\bkeep in mind\b",
        ),
    ),
    (
        "decision",
        "decision",
        (
            r"\bwir haben (uns )?(entschieden|beschlossen)\b",
            r"\b(entschieden|beschlossen|festgelegt|vereinbart)\b",
            r"\bab (sofort|jetzt)\b",
            r"\bwir (stellen|steigen|wechseln|gehen) .* (um|über|auf)\b",
            r"\bwe (have )?(decided|agreed|settled)\b",
            r"\b(decided|agreed) to\b",
            r"\bfrom now on\b",
            r"\bgoing forward\b",
            r"\blet'?s go with\b",
            r"\bwe will (switch|move|use|bill|stop|start)\b",
        ),
    ),
    (
        "preference",
        "preference",
        (
            r"\bich (bevorzuge|mag|möchte lieber|hätte lieber|hasse)\b",
            r"\bmir ist (es )?wichtig\b",
            r"\bbitte (immer|nie|keine?n?)\b",
            r"\blieber\b.*\bals\b",
            r"\bi (prefer|like|love|hate|dislike|don'?t like|'d rather|would rather)\b",
            r"\bplease (always|never|don'?t)\b",
            r"\bit'?s important to me\b",
            *PREFERENCE_PATTERNS,
        ),
    ),
    ("identity", "identity", IDENTITY_PATTERNS),  # name, role, employer
    ("identity", "personal", PERSONAL_PATTERNS),  # family, pets, vehicles, routines, home, work
    (
        "fact",
        "contact",
        (
            r"\bansprechpartner(in)?\b",
            r"\bkontaktperson\b",
            r"\b(herr|frau|hr\.|fr\.) [A-ZÄÖÜ][\wäöüß-]+",
            r"\bcontact (person )?(is|at)\b",
            r"\b(mr|mrs|ms|dr)\.? [A-Z][\w-]+",
            r"\bmeeting with [A-Z][\w-]+",
            r"\btermin mit [A-ZÄÖÜ][\wäöüß-]+",
        ),
    ),
    (
        "event",
        "date",
        (
            r"\b\d{4}-\d{2}-\d{2}\b",
            r"\b\d{1,2}\.\s?\d{1,2}\.(\d{2,4})?\b",
            rf"\b\d{{1,2}}\.? ({_MONTHS})\b",
            rf"\b({_MONTHS}) \d{{1,2}}(st|nd|rd|th)?\b",
            rf"\b(am|bis|ab|on|by|until|next) ({_WEEKDAYS})\b",
            r"\b(deadline|frist|stichtag|termin|due)\b",
            r"\b(nächste|kommende|next) (woche|monat|week|month|quartal|quarter)\b",
        ),
    ),
)
_COMPILED = tuple((t, k, tuple(re.compile(p, re.IGNORECASE | re.UNICODE) for p in ps)) for t, k, ps in _RULES)
_BREAK = re.compile(r"[.!?]+\s+|\n+")
_ABBREVIATIONS = frozenset(
    "hr fr frau herr dr prof mr mrs ms st nr ca bzw evtl inkl ggf usw etc vs z.b u.a d.h e.g i.e".split()
)
# a German ordinal follows these ("am 3. März", "der 2. Platz", "seit dem 1. Mai"); "Model 3. What ..." ends a sentence
_BEFORE_ORDINAL = frozenset(
    "am im vom zum zur bis ab seit der die das den dem des ein eine einem einen einer jeden jede jedem".split()
)


def sentences(text: str) -> list[str]:
    """Sentences of at least 12 characters; "15. März", "Hr. Schneider", "z.B. so" and an initial
    ("Ursula K. Le Guin") do not end one, a number before a new sentence does ("I bought a Tesla
    Model 3. What ...")."""
    parts: list[str] = []
    start = 0
    for match in _BREAK.finditer(text):
        if not match.group().startswith("\n"):
            before = text[start : match.start()].split()
            last = before[-1].casefold().rstrip(".") if before else ""
            if last.isdigit() and match.group().startswith(".") and _ordinal(before, text[match.end() :]):
                continue
            if last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha()):  # "Ursula K. Le Guin"
                continue
        parts.append(text[start : match.start() + (1 if match.group()[0] in ".!?" else 0)])
        start = match.end()
    parts.append(text[start:])
    return [p.strip(" -*•\t") for p in parts if len(p.strip()) >= 12]


def _ordinal(before: Sequence[str], after: str) -> bool:
    """Whether the number that ends `before` is an ordinal or a date's day: followed by a
    lowercase word or a month, or after an article or preposition ("am 3. März", "der 2. Platz")."""
    following = after.split(maxsplit=1)[0].strip(",;:") if after.strip() else ""
    if not following or following[0].islower() or re.fullmatch(_MONTHS, following, re.IGNORECASE):
        return True
    return len(before) >= 2 and before[-2].casefold() in _BEFORE_ORDINAL


def salient(sentence: str) -> str | None:
    """The observation type a statement deserves, or None for small talk and questions."""
    if sentence.rstrip().endswith("?"):
        return None
    for obs_type, _key, patterns in _COMPILED:
        if any(p.search(sentence) for p in patterns):
            return obs_type
    return None


def _title(sentence: str) -> str:
    text = " ".join(sentence.split())
    for prefix in (r"^(bitte )?merk(e)? dir[,:]?\s*(dass\s*)?", r"^(please )?remember (that )?", r"^note that "):
        text = re.sub(prefix, "", text, flags=re.IGNORECASE)
    text = text[:1].upper() + text[1:] if text else text
    return text if len(text) <= 300 else text[:297].rsplit(" ", 1)[0] + "..."


def offline_observations(
    user_message: str,
    origin: Origin,
    allowed_types: frozenset[str],
    profile: Sequence[str] = (),
    asked: str | None = None,
) -> list[ObservationDraft]:
    """Salient statements of the user, one observation each (no LLM, so the pipeline works without a
    key). Identity also: a change of a fact in the user's `profile` (the titles of their stable
    memory), a question's premise about the user's life or such a change, titled by the
    premise (the question stays in the narrative), a no to the assistant's check of a profile
    fact (`asked`, the question the assistant ended its answer before with), and the answer to its
    question about the user's life (`asks_about_life`: "Which car do you drive?" - "A grey Ford
    Focus."), each titled by the question and the reply's first sentence. A new value of a fact of
    the profile (`life_topics`) is identity however it is worded ("From now on swimming is on
    Monday" reads like a decision), so consolidation compares it with the value it replaces. A plan
    (`plans.plan_topic`: the next trip, an appointment, with its day) is an event, also when told
    inside a question, so the stable block can hold it while it is ahead."""
    drafts: list[ObservationDraft] = []
    said = sentences(user_message)[:20]
    correcting = bool(said) and corrects_profile(asked, user_message, profile)
    answering = bool(said) and asks_about_life(asked) and not said[0].rstrip().endswith("?")
    for n, sentence in enumerate(said):
        obs_type = salient(sentence)
        stated = sentence
        if n == 0 and (correcting or (answering and obs_type is None)):
            obs_type, stated = "identity", f"{asked} {sentence}"
        elif obs_type is None:
            given = premise(sentence)
            if given is not None and (personal(given) or _changes_profile(given, profile)):
                obs_type, stated = "identity", given
            elif _changes_profile(sentence, profile) or told_in_question(sentence):
                obs_type = "identity"
            elif plan_topic(sentence) is not None:  # a plan, also inside a question (`plans`)
                obs_type, stated = "event", given if given is not None and plan_topic(given) else sentence
        if obs_type not in (None, *PROFILE_TYPES) and life_topics.gives_value_of(sentence, profile):
            obs_type = "identity"  # a fact of the user's life, though worded as a decision or a date
        if obs_type is None:
            continue
        if obs_type not in allowed_types:
            obs_type = "note" if "note" in allowed_types else next(iter(sorted(allowed_types)))
        title = _title(stated)
        if len(title) < 3:
            continue
        drafts.append(
            ObservationDraft(
                tenant_id=origin.tenant_id,
                user_id=origin.user_id,
                type=obs_type,
                title=title,
                narrative=sentence if sentence != title else "",
                tags=["chat"],
                source=Source.agent,
                verified=False,
                confidence=0.6,
                scope=Scope.private,
                trigger_source=TriggerSource.chat,
                provenance=Provenance(
                    session_id=origin.session_id, chat_message_id=origin.message_id, source_event_id=origin.event_id
                ),
                said_at=origin.said_at,
            )
        )
    return drafts


def _changes_profile(statement: str, profile: Sequence[str]) -> bool:
    """A change of a profile fact in any words (`updates_profile`), a value of one of its facts of
    life ("jetzt wo ich Lehrerin bin" after "Ich arbeite als Produktdesigner"), or the current value
    of one it does not hold yet (the event that told the old value may arrive after this one: the
    two must meet among the identities). A question gives no value ("Should I move my swimming?")."""
    if statement.rstrip().endswith("?"):
        return False
    return updates_profile(statement, profile) or life_topics.gives_value_of(statement, profile)


# ---- session summaries ----------------------------------------------------------------------------


class SummaryOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request: str = Field(max_length=2_000, description="what the user wanted in this session")
    investigated: str = Field(default="", max_length=4_000)
    learned: str = Field(default="", max_length=4_000)
    completed: str = Field(default="", max_length=4_000)
    next_steps: str = Field(default="", max_length=4_000)
    notes: str = Field(default="", max_length=4_000)

    def withheld(self) -> SummaryOutput:
        """The summary without the credentials, card numbers and tokens of the chat (`secrets`):
        its row in `summaries` is read back like a memory, as is its observation."""
        return self.model_copy(update={name: without_secrets(value) for name, value in self if isinstance(value, str)})


@dataclass(frozen=True)
class Turn:
    role: str
    content: str


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rsplit(" ", 1)[0] + "..."


_NEXT = re.compile(
    r"\b(next step|todo|to do|we still need|need to|will|nächste[rn]? schritt|muss noch|müssen noch|"
    r"noch zu tun|sollten wir|werde ich|werden wir)\b",
    re.IGNORECASE,
)


def offline_summary(turns: Sequence[Turn], language: str) -> SummaryOutput:
    """A summary without an LLM: the first request, the questions asked, salient statements, open items."""
    user = [t.content for t in turns if t.role == "user"]
    assistant = [t.content for t in turns if t.role == "assistant"]
    questions = [s for u in user for s in re.split(r"(?<=[?])\s+", u) if s.strip().endswith("?")]
    statements = [s for u in user for s in sentences(u) if salient(s)]
    next_steps = [s for text in user + assistant for s in sentences(text) if _NEXT.search(s)]
    de = language == "de"
    return SummaryOutput(
        request=_clip(user[0], 500) if user else "",
        investigated=_clip(" | ".join(questions[:10]), 2_000),
        learned=_clip(" | ".join(statements[:10]), 2_000),
        completed=(
            f"{len(assistant)} Antwort(en) auf {len(user)} Nachricht(en)"
            if de
            else f"{len(assistant)} answer(s) to {len(user)} message(s)"
        ),
        next_steps=_clip(" | ".join(next_steps[:5]), 2_000),
        notes="Offline-Zusammenfassung (ohne Sprachmodell)" if de else "offline summary (no language model)",
    )


def summary_draft(
    summary: SummaryOutput, origin: Origin, session_id: uuid.UUID, started: datetime | None = None
) -> ObservationDraft:
    """One `context` observation per session, keyed (`session_summary`: the narrative's layout and
    what of it is searched), valid from when the session `started` ("What did we talk about
    yesterday?" finds it within that day). Its model is the summary's record, not a search word."""
    sections = [
        ("Request", summary.request),
        ("Investigated", summary.investigated),
        ("Learned", summary.learned),
        ("Completed", summary.completed),
        ("Next steps", summary.next_steps),
        ("Notes", summary.notes),
    ]
    title = _clip(f"Session summary: {summary.request or 'chat session'}", 300)
    return ObservationDraft(
        tenant_id=origin.tenant_id,
        user_id=origin.user_id,
        type="context",
        title=title,
        narrative=session_summary.narrative(sections)[:20_000],
        tags=[session_summary.SUMMARY_TAG],
        key=f"{session_summary.SUMMARY_TAG}:{session_id}",
        source=Source.agent,
        verified=False,
        confidence=0.7,
        scope=Scope.private,
        trigger_source=TriggerSource.chat,
        provenance=Provenance(session_id=session_id, source_event_id=origin.event_id),
        said_at=origin.said_at,
        valid_from=started,
    )
