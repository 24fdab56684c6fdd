"""INTERVIEW mode (source document 004, 1.1): a message that names an object type (the types'
`detection_keywords` in `decision_engine.yaml`) and asks no question is data to capture, not a
question to answer. The turn reads the type's fields out of the message, asks for the required
ones still missing, and once they are all there stores the object as an observation. What is
known so far stays with the chat's session (`metadata.interview`) between turns. Pure rules.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engram.domain.observation import ObservationDraft, Provenance, Scope, Source, TriggerSource

MAX_VALUE = 500

# a message opening with one of these asks something (besides any "?")
_QUESTION_WORDS = (
    "wer wie was wann wo warum wieso weshalb welche welcher welches wozu woher wohin kann kannst könnte "
    "soll sollte sollen darf hast hat habe ist sind gibt weißt "
    "who what when where why which how can could should would will is are do does did have has may tell"
).split()


class FieldSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    de: str = Field(min_length=1, max_length=100)
    en: str = Field(min_length=1, max_length=100)
    required: bool = False

    def label(self, language: str) -> str:
        return self.de if language == "de" else self.en


class InterviewType(BaseModel):
    """An observation type the interview captures: how it is recognised, what it consists of."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    detection_keywords: tuple[str, ...] = Field(min_length=1)
    fields: dict[str, FieldSpec] = Field(min_length=1)
    title_field: str  # the field that names the object in its title
    label: FieldSpec  # the type's name for the person ("Projekt" / "project")


class InterviewSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    task: str = "fast"  # the profile that reads the fields out of the message
    prompt_key: str = "interview_capture_v1"
    timeout_seconds: float = Field(default=20.0, gt=0, le=120)
    types: dict[str, InterviewType] = Field(default_factory=dict)


@functools.lru_cache(maxsize=1024)
def _keyword(keyword: str) -> re.Pattern[str]:
    # at a word start, so German compounds count ("Projektstart" names a project)
    return re.compile(rf"(?<![\w]){re.escape(keyword.casefold())}", re.UNICODE)


def is_question(text: str) -> bool:
    folded = text.casefold().strip()
    if "?" in folded:
        return True
    first = re.match(r"[\w']+", folded)
    return first is not None and first.group(0) in _QUESTION_WORDS


def detect(text: str, spec: InterviewSpec) -> tuple[str, tuple[str, ...]] | None:
    """The type a statement names (most keywords, YAML order on ties); None for a question."""
    if not spec.enabled or is_question(text):
        return None
    folded = " ".join(text.casefold().split())
    best: tuple[int, str, tuple[str, ...]] | None = None
    for name, kind in spec.types.items():
        hits = tuple(k for k in kind.detection_keywords if _keyword(k).search(folded))
        if hits and (best is None or len(hits) > best[0]):
            best = (len(hits), name, hits)
    return (best[1], best[2]) if best else None


@dataclass(frozen=True)
class InterviewState:
    """What is known of the object so far (kept in the session between turns)."""

    type: str
    fields: Mapping[str, str]

    def as_metadata(self) -> dict[str, Any]:
        return {"type": self.type, "fields": dict(self.fields)}

    @classmethod
    def from_metadata(cls, raw: Any, spec: InterviewSpec) -> InterviewState | None:
        if not isinstance(raw, Mapping) or raw.get("type") not in spec.types:
            return None
        fields = raw.get("fields") if isinstance(raw.get("fields"), Mapping) else {}
        return cls(str(raw["type"]), {str(k): str(v) for k, v in (fields or {}).items()})

    def merged(self, found: Mapping[str, Any], spec: InterviewSpec) -> InterviewState:
        """With the values a message gave (known fields only, non-empty text, bounded)."""
        known = spec.types[self.type].fields
        fields = dict(self.fields)
        for name, value in found.items():
            if name in known and isinstance(value, str | int | float) and str(value).strip():
                fields[name] = " ".join(str(value).split())[:MAX_VALUE]
        return InterviewState(self.type, fields)

    def missing(self, spec: InterviewSpec) -> list[str]:
        return [n for n, f in spec.types[self.type].fields.items() if f.required and n not in self.fields]


def fields_schema(kind: InterviewType) -> dict[str, Any]:
    """The capture tool's input schema: one optional string per field."""
    return {
        "type": "object",
        "properties": {n: {"type": "string", "description": f.en} for n, f in kind.fields.items()},
        "additionalProperties": False,
    }


def ask_for_missing(state: InterviewState, missing: list[str], spec: InterviewSpec, language: str) -> str:
    kind = spec.types[state.type]
    labels = ", ".join(kind.fields[n].label(language) for n in missing)
    have = "; ".join(f"{kind.fields[n].label(language)}: {v}" for n, v in state.fields.items())
    if language == "de":
        head = f"Ich lege das als {kind.label.de} an."
        known = f" Bisher: {have}." if have else ""
        return f"{head}{known} Mir fehlt noch: {labels}. Magst du es mir sagen?"
    known = f" So far: {have}." if have else ""
    return f"I'm recording this as a {kind.label.en}.{known} Still missing: {labels}. Could you tell me?"


def confirmation(state: InterviewState, spec: InterviewSpec, language: str) -> str:
    kind = spec.types[state.type]
    have = "; ".join(f"{kind.fields[n].label(language)}: {v}" for n, v in state.fields.items())
    if language == "de":
        return f"Gespeichert: {kind.label.de} – {have}."
    return f"Saved: {kind.label.en} – {have}."


def captured_draft(
    state: InterviewState,
    spec: InterviewSpec,
    *,
    tenant_id: str,
    user_id: str,
    language: str,
    verified: bool,
    session_id: Any = None,
) -> ObservationDraft:
    """The object as the user's own private observation: what the person said, verified when a
    person (not an agent key) said it."""
    kind = spec.types[state.type]
    name = state.fields.get(kind.title_field) or next(iter(state.fields.values()), "")
    facts = [f"{kind.fields[n].label(language)}: {v}" for n, v in state.fields.items()]
    return ObservationDraft(
        tenant_id=tenant_id,
        user_id=user_id,
        type=state.type,
        title=f"{kind.label.label(language)}: {name}"[:500],
        narrative="; ".join(facts),
        facts=facts,
        tags=["interview"],
        source=Source.user,
        verified=verified,
        confidence=1.0,
        scope=Scope.private,
        trigger_source=TriggerSource.chat,
        provenance=Provenance(session_id=session_id),
    )
