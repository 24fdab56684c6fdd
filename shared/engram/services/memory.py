"""Remember, list, profile and mark (R-1.3, R-5.3): the memory API's use cases."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from engram.domain.authorization import WriteRequest, authorize_write
from engram.domain.dates import names_past_span
from engram.domain.errors import Forbidden, NotFound, Unprocessable
from engram.domain.events import OBSERVATION_MARKED, ObservationMarked, change_events, new_event
from engram.domain.injection import MAX_TAGS
from engram.domain.observation import (
    Key,
    Observation,
    ObservationDraft,
    Priority,
    Provenance,
    Scope,
    Source,
    Tag,
    TeamId,
    TriggerSource,
    TypeName,
    Written,
    default_confidence,
)
from engram.domain.paging import TOTAL_CAP, PageMark, counted_total
from engram.domain.scopes import Permission, Principal, Visibility, require, require_sensitive
from engram.domain.zones import user_zone
from engram.ports import EventBus, UnitOfWork
from engram.services.profile import read_profile

SOURCE = "/engram/memory-api"


class RememberRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: TypeName = "note"
    title: str = Field(min_length=1, max_length=500)
    narrative: str = Field(default="", max_length=20_000)
    facts: list[str] = Field(default_factory=list, max_length=100)
    concepts: list[str] = Field(default_factory=list, max_length=100)
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    key: Key | None = None
    priority: Priority = Priority.normal
    scope: Scope = Scope.private
    team_ids: list[TeamId] = Field(default_factory=list, max_length=64)
    owner: Literal["me", "tenant"] = Field(
        default="me", description="'tenant' stores a tenant-wide observation (user_id NULL)"
    )
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    discovery_tokens: list[str] = Field(default_factory=list, max_length=100)
    valid_from: AwareDatetime | None = None
    expires_at: AwareDatetime | None = None
    said_at: AwareDatetime | None = Field(
        default=None,
        description="when the statement was made, for an import of history (default: now; a later time counts"
        " as now): what contradicts it is ordered by it, and a keyed write never replaces a statement made after it",
    )


class MarkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=20_000)
    title: str | None = Field(default=None, max_length=500)
    type: TypeName = "note"
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    scope: Scope = Scope.private
    team_ids: list[TeamId] = Field(default_factory=list, max_length=64)
    priority: Priority = Priority.normal
    key: Key | None = None
    chat_id: uuid.UUID | None = None
    chat_message_id: uuid.UUID | None = None


@dataclass(frozen=True)
class Page:
    """A page of the memory list: `total` matching memories, exact when `total_exact`, else at
    least that many (`paging.TOTAL_CAP`); `next` continues after the page's last one (None:
    nothing follows)."""

    items: list[Observation]
    total: int
    page: int
    size: int
    total_exact: bool = True
    next: str | None = None


class MemoryService:
    total_cap = TOTAL_CAP  # the memory list counts its matches up to here

    def __init__(self, uow: UnitOfWork, bus: EventBus, observation_types: frozenset[str], zone: tzinfo = UTC) -> None:
        self.uow = uow
        self.bus = bus
        self.observation_types = observation_types
        self.zone = zone  # the users' time zone where a caller names none (`ENGRAM_TIME_ZONE`)

    def _check_type(self, obs_type: str) -> None:
        if obs_type not in self.observation_types:
            raise Unprocessable(
                "type",
                f"unknown observation type {obs_type!r}; allowed: {', '.join(sorted(self.observation_types))}",
            )

    async def remember(self, principal: Principal, body: RememberRequest) -> Written:
        require(principal, Permission.create_observation)
        self._check_type(body.type)
        if body.owner == "tenant":
            user_id = None
        else:
            if principal.user_id is None:
                raise Unprocessable("owner", "this agent key acts for no user; use owner='tenant'")
            user_id = principal.user_id
        authorize_write(principal, WriteRequest.of(user_id, body.scope, body.team_ids))
        source = principal.source
        try:
            draft = ObservationDraft(
                tenant_id=principal.tenant_id,
                user_id=user_id,
                team_ids=body.team_ids,
                type=body.type,
                title=body.title,
                narrative=body.narrative,
                facts=body.facts,
                concepts=body.concepts,
                tags=body.tags,
                key=body.key,
                discovery_tokens=body.discovery_tokens,
                priority=body.priority,
                source=source,
                verified=principal.is_human,
                confidence=body.confidence if body.confidence is not None else default_confidence(source),
                scope=body.scope,
                trigger_source=TriggerSource.manual,
                valid_from=body.valid_from,
                expires_at=body.expires_at,
                said_at=min(body.said_at, datetime.now(UTC)) if body.said_at else None,
            )
        except ValueError as exc:
            raise Unprocessable("body", str(exc)) from exc
        async with self.uow.tenant(principal.tenant_id) as tx:
            if user_id is not None:  # before or after an erasure of this user, never across it
                await tx.erasures.hold([user_id])
            written = await tx.observations.write_many([draft])
            tx.emit(change_events([w.change for w in written], SOURCE))
        return written[0]

    async def list(
        self,
        principal: Principal,
        *,
        types: Sequence[str] = (),
        tags: Sequence[str] = (),
        scope: Scope | None = None,
        source: str | None = None,
        verified: bool | None = None,
        include_expired: bool = False,
        include_sensitive: bool = False,
        page: int = 1,
        size: int = 50,
        after: str | None = None,
    ) -> Page:
        """Pages count from the first memory, or from after `after` (the `next` of a page)."""
        require(principal, Permission.read_observation)
        require_sensitive(principal, include_sensitive, "listing sensitive observations")
        visibility = Visibility.for_principal(principal, want_sensitive=include_sensitive)
        mark = PageMark.decode(after) if after is not None else None
        async with self.uow.tenant(principal.tenant_id) as tx:
            items, counted = await tx.observations.list_visible(
                visibility,
                types=types,
                tags=tags,
                scope=scope.value if scope else None,
                source=source,
                verified=verified,
                include_expired=include_expired,
                now=datetime.now(UTC),
                limit=size + 1,  # one more tells whether a page follows
                offset=(page - 1) * size,
                after=mark,
                count_up_to=self.total_cap + 1,
            )
        total, exact = counted_total(counted, self.total_cap)
        following = None
        if len(items) > size:
            items = items[:size]
            following = PageMark(items[-1].created_at, items[-1].id).encode()
        return Page(items=items, total=total, page=page, size=size, total_exact=exact, next=following)

    async def get(self, principal: Principal, observation_id: uuid.UUID, *, want_sensitive: bool = True) -> Observation:
        """One observation the caller may see; anything else is 404 (existence is not leaked)."""
        require(principal, Permission.read_observation)
        async with self.uow.tenant(principal.tenant_id) as tx:
            obs = await tx.observations.get(observation_id)
        visibility = Visibility.for_principal(principal, want_sensitive=want_sensitive)
        if obs is None or not visibility.allows(obs):
            raise NotFound(f"observation {observation_id} not found")
        return obs

    async def zone_of(self, principal: Principal, name: str | None = None) -> tzinfo:
        """The user's time zone: the one named (ValueError if it is unknown), else the one the user
        named last in a chat turn (`TurnRequest.time_zone`), else the deployment's."""
        if name or principal.user_id is None:
            return user_zone(name, self.zone)
        async with self.uow.tenant(principal.tenant_id) as tx:
            stored = await tx.chats.user_time_zone(principal.user_id)
        return user_zone(None, self.zone, stored)

    async def search_zone(self, principal: Principal, name: str | None, text: str) -> tzinfo | None:
        """The zone a search of `text` reads days in: the one named (checked as `zone_of` checks
        it); without one, for a query that names days before now ("yesterday", the only kind it
        changes), the user's (`zone_of`); else None, and nothing is read."""
        return await self.zone_of(principal, name) if name or names_past_span(text) else None

    async def profile(self, principal: Principal, zone: tzinfo | None = None) -> Sequence[Observation]:
        """The caller's profile (`services.profile`): what an assistant should know of them unasked,
        its plans ahead of their today in their time zone (`zone`, else the deployment's)."""
        require(principal, Permission.read_observation)
        async with self.uow.tenant(principal.tenant_id) as tx:
            return await read_profile(tx, principal, self.observation_types, zone=zone or self.zone)

    async def mark(self, principal: Principal, body: MarkRequest) -> str:
        """Publish `observation.marked`; extract-observation turns it into a verified observation."""
        require(principal, Permission.create_observation)
        self._check_type(body.type)
        if not principal.is_human:
            raise Forbidden("marking ('merken') is a human action; agents use POST /api/ai/memory")
        if principal.user_id is None:
            raise Forbidden("marking needs a user")
        authorize_write(principal, WriteRequest.of(principal.user_id, body.scope, body.team_ids))
        data = ObservationMarked(**body.model_dump())
        event = new_event(
            OBSERVATION_MARKED,
            data,
            tenant_id=principal.tenant_id,
            source=SOURCE,
            user_id=principal.user_id,
            subject=f"chat/{body.chat_id}" if body.chat_id else None,
        )
        await self.bus.publish(event)
        return str(event["id"])


def marked_draft(
    tenant_id: str, user_id: str, data: ObservationMarked, event_id: str, said_at: datetime | None = None
) -> ObservationDraft:
    """A marked statement becomes a user-sourced, verified observation (R-5.3), said when it was
    marked (`said_at`: the event's time), however late the worker applies it."""
    text = " ".join(data.text.split())
    title = data.title or (text if len(text) <= 120 else text[:117].rsplit(" ", 1)[0] + "...")
    return ObservationDraft(
        tenant_id=tenant_id,
        user_id=user_id,
        team_ids=data.team_ids,
        type=data.type,
        title=title,
        narrative=data.text,
        tags=data.tags,
        key=data.key,
        priority=data.priority,
        source=Source.user,
        verified=True,
        confidence=1.0,
        scope=data.scope,
        trigger_source=TriggerSource.manual,
        provenance=Provenance(
            session_id=data.session_id, chat_message_id=data.chat_message_id, source_event_id=event_id
        ),
        said_at=said_at,
    )
