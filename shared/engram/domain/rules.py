"""Declarative mapping of domain events to observations (R-5.1).

A rule names an event type (exact, or a glob such as `com.acme.crm.*`) and templates for the
observation's fields. Templates use `{path}` placeholders over the event:
`{data.customer.name}`, `{type}`, `{source}`, `{subject}`, `{id}`, `{time:%Y-%m-%d}`,
`{tenantid}`, `{userid}`; `{data.city|unknown}` gives a default for a missing value.
A placeholder with no value and no default makes the event invalid (dead-lettered with the
reason), so a rule never writes a half-filled observation.
"""

from __future__ import annotations

import fnmatch
import string
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from engram.domain.deliveries import occurrence_time
from engram.domain.errors import InvalidEvent
from engram.domain.observation import Priority, Scope, TypeName


class MissingValue(InvalidEvent):
    pass


def _lookup(field_name: str, context: Mapping[str, Any]) -> Any:
    path, sep, default = field_name.partition("|")
    value: Any = context
    for part in path.strip().split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            value = None
            break
    if value is None or value == "":
        if sep:
            return default
        raise MissingValue(f"template field {path.strip()!r} has no value in the event")
    return value


def _format(value: Any, spec: str) -> str:
    if not spec:
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, list):
            return ", ".join(map(str, value))
        return str(value)
    return format(value, spec)


Segment = tuple[str, str | None, str]


@lru_cache(maxsize=4096)
def _compile(template: str) -> tuple[Segment, ...]:
    """Parse a template once: (literal, field or None, format spec) segments."""
    segments: list[Segment] = []
    for literal, field, spec, conversion in string.Formatter().parse(template):
        if conversion:
            raise ValueError(f"conversions like !{conversion} are not supported")
        if field is not None and ("{" in (spec or "") or field == "" or field.isdigit()):
            raise ValueError("positional or nested fields are not supported")
        segments.append((literal, field, spec or ""))
    return tuple(segments)


def render(template: str, context: Mapping[str, Any]) -> str:
    try:
        parts = []
        for literal, field, spec in _compile(template):
            parts.append(literal)
            if field is not None:
                parts.append(_format(_lookup(field, context), spec))
        return "".join(parts).strip()
    except MissingValue:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise InvalidEvent(f"template {template!r} cannot be rendered: {exc}") from exc


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    event_type: str = Field(min_length=1)
    observation_type: TypeName
    title: str = Field(min_length=1)
    narrative: str = ""
    facts: list[str] = Field(default_factory=list)
    concepts: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    discovery_tokens: list[str] = Field(default_factory=list)
    scope: Scope = Scope.public
    team_ids: list[str] = Field(default_factory=list)
    priority: Priority = Priority.normal
    key: str | None = None
    owner: str | None = Field(default=None, description="template for user_id; none = tenant-wide")

    @field_validator("title", "narrative", "key", "owner")
    @classmethod
    def _parsable(cls, template: str | None) -> str | None:
        if template is not None:
            try:
                _compile(template)
            except ValueError as exc:
                raise ValueError(f"bad template {template!r}: {exc}") from exc
        return template

    def matches(self, event_type: str) -> bool:
        return fnmatch.fnmatchcase(event_type, self.event_type)


class RuleSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[Rule] = Field(default_factory=list)

    @classmethod
    def from_yaml(cls, text: str) -> RuleSet:
        return cls.model_validate(yaml.safe_load(text) or {})

    def for_type(self, event_type: str) -> list[Rule]:
        return [r for r in self.rules if r.matches(event_type)]


class RenderedObservation(BaseModel):
    """A rule applied to one event: the fields of an observation draft, tenant and provenance aside."""

    model_config = ConfigDict(frozen=True)

    type: str
    title: str
    narrative: str
    facts: list[str]
    concepts: list[str]
    tags: list[str]
    discovery_tokens: list[str]
    scope: Scope
    team_ids: list[str]
    priority: Priority
    key: str | None
    user_id: str | None


def event_context(attributes: Mapping[str, Any], data: Any) -> dict[str, Any]:
    """What a rule's templates read: the event's attributes, `time` as a datetime where it is an
    RFC 3339 timestamp (`deliveries.occurrence_time`, as the worker reads it), and `data`."""
    context = dict(attributes)
    time = context.get("time")
    if isinstance(time, str):
        try:
            context["time"] = occurrence_time(time)
        except InvalidEvent:  # the worker refuses such an event; a template shows the text
            pass
    context["data"] = data
    return context


def apply_rule(rule: Rule, context: Mapping[str, Any]) -> RenderedObservation:
    def many(templates: list[str]) -> list[str]:
        return [v for v in (render(t, context) for t in templates) if v]

    return RenderedObservation(
        type=rule.observation_type,
        title=render(rule.title, context)[:500],
        narrative=render(rule.narrative, context),
        facts=many(rule.facts),
        concepts=many(rule.concepts),
        tags=many(rule.tags),
        discovery_tokens=many(rule.discovery_tokens),
        scope=rule.scope,
        team_ids=many(rule.team_ids),
        priority=rule.priority,
        key=render(rule.key, context) if rule.key else None,
        user_id=(render(rule.owner, context) or None) if rule.owner else None,
    )
