"""One authorization rule for every write path (R-16.4): a property test over random principals
and requests, on the in-memory fakes.

For every path that creates an observation (remember, mark over HTTP, a mark through
`POST /api/ai/events` and the extraction worker, chat extraction) and every principal and
request: whatever the path creates, `remember` would have let the same principal create (the
same owner, scope and teams), and the path accepts exactly when the one rule does.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from cloudevents.http import CloudEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.domain.authorization import WriteRequest, authorize_write, extractor_for, may_write
from engram.domain.chat_extraction import ExtractionOutput, Origin, to_drafts
from engram.domain.errors import Forbidden, Unprocessable
from engram.domain.events import OBSERVATION_MARKED, new_event
from engram.domain.observation import Observation, Scope
from engram.domain.rules import RuleSet
from engram.domain.scopes import Permission, Principal, PrincipalKind
from engram.services.chat_extraction import permitted
from engram.services.extraction import Extraction
from engram.services.ingest import EventIngest
from engram.services.memory import MarkRequest, MemoryService, RememberRequest
from functions.extract_observation.main import WORKER
from tests.fakes import FakeBus, InMemoryUnitOfWork

TENANT = "t-auth"
TEAMS = ("sales", "hr", "ops")
TYPES = frozenset({"note", "fact", "preference"})
PERMISSIONS = (
    Permission.create_observation.value,
    Permission.manage_observation.value,
    Permission.view_sensitive.value,
    Permission.create_event.value,
)

principals = st.builds(
    Principal,
    tenant_id=st.just(TENANT),
    user_id=st.sampled_from(["alice", "bob", None]),
    kind=st.sampled_from(list(PrincipalKind)),
    teams=st.frozensets(st.sampled_from(TEAMS)),
    permissions=st.frozensets(st.sampled_from(PERMISSIONS)),
)
scopes = st.sampled_from(list(Scope))
team_sets = st.lists(st.sampled_from(TEAMS), unique=True, max_size=3)

Refused = (Forbidden, Unprocessable)


def rule_allows(principal: Principal, owner: str | None, scope: Scope, teams: list[str]) -> bool:
    return may_write(principal, WriteRequest.of(owner, scope, teams))


def as_remember_would(principal: Principal, obs: Observation) -> bool:
    """`remember` by the same principal would have created this owner, scope and team set."""
    return rule_allows(principal, obs.user_id, obs.scope, obs.team_ids)


async def extracted(uow: InMemoryUnitOfWork, bus: FakeBus) -> list[Observation]:
    """Run what is on the bus through extract-observation; the observations it created."""
    extraction = Extraction(uow, RuleSet.from_yaml("rules: []"), TYPES)
    marks = bus.of_type(OBSERVATION_MARKED.type)
    await WORKER.run(extraction.handle, marks)
    return list(uow.data(TENANT).observations.values())


async def remember(principal: Principal, scope: Scope, teams: list[str], owner: str) -> list[Observation]:
    memory = MemoryService(InMemoryUnitOfWork(FakeBus()), FakeBus(), TYPES)
    body = RememberRequest(title="Q3 budget is frozen", scope=scope, team_ids=teams, owner=owner)  # type: ignore[arg-type]
    return [(await memory.remember(principal, body)).observation]


async def mark(principal: Principal, scope: Scope, teams: list[str]) -> list[Observation]:
    bus = FakeBus()
    uow = InMemoryUnitOfWork(bus)
    await MemoryService(uow, bus, TYPES).mark(
        principal, MarkRequest(text="Q3 budget is frozen", scope=scope, team_ids=teams)
    )
    return await extracted(uow, bus)


async def mark_as_event(principal: Principal, scope: Scope, teams: list[str]) -> list[Observation]:
    bus = FakeBus()
    uow = InMemoryUnitOfWork(bus)
    event: CloudEvent = new_event(
        OBSERVATION_MARKED,
        {"text": "Q3 budget is frozen", "scope": scope.value, "team_ids": teams},
        tenant_id=TENANT,
        source="/crm",
        user_id=principal.user_id,
    )
    await EventIngest(bus).accept(principal, event)
    return await extracted(uow, bus)


def outcome(path: Any) -> tuple[bool, list[Observation]]:
    try:
        return True, asyncio.run(path)
    except Refused:
        return False, []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(principal=principals, scope=scopes, teams=team_sets, owner=st.sampled_from(["me", "tenant"]))
def test_remember_accepts_exactly_what_the_rule_allows(
    principal: Principal, scope: Scope, teams: list[str], owner: str
) -> None:
    if owner == "me" and principal.user_id is None:
        return  # refused for want of a user before any rule: nothing to compare
    accepted, created = outcome(remember(principal, scope, teams, owner))
    assert accepted == rule_allows(principal, principal.user_id if owner == "me" else None, scope, teams)
    assert all(as_remember_would(principal, o) for o in created)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(principal=principals, scope=scopes, teams=team_sets, via_events=st.booleans())
def test_marks_create_nothing_remember_would_refuse(
    principal: Principal, scope: Scope, teams: list[str], via_events: bool
) -> None:
    path = mark_as_event if via_events else mark
    accepted, created = outcome(path(principal, scope, teams))
    human_with_user = principal.is_human and principal.user_id is not None
    if via_events and not principal.has(Permission.create_event):
        assert not accepted  # the events endpoint's own permission comes first
    elif not human_with_user:
        assert not accepted  # marking is a human action
    else:
        assert accepted == rule_allows(principal, principal.user_id, scope, teams)
    if accepted:
        assert len(created) == 1
    assert all(as_remember_would(principal, o) for o in created)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    principal=principals.filter(lambda p: p.user_id is not None and p.has(Permission.create_observation)),
    sensitive=st.lists(st.booleans(), min_size=1, max_size=4),
)
def test_chat_extraction_keeps_only_what_the_user_could_remember(principal: Principal, sensitive: list[bool]) -> None:
    assert principal.user_id is not None
    output = ExtractionOutput.model_validate(
        {"observations": [{"type": "fact", "title": f"fact {i}", "sensitive": s} for i, s in enumerate(sensitive)]}
    )
    drafts = to_drafts(output, Origin(TENANT, principal.user_id, None, None, str(uuid.uuid4())))
    author = extractor_for(TENANT, principal.user_id, may_store_sensitive=principal.has(Permission.view_sensitive))
    kept = permitted(author, drafts)
    for draft in kept:
        assert rule_allows(principal, draft.user_id, draft.scope, draft.team_ids)
    assert len(kept) == sum(1 for s in sensitive if not s or principal.has(Permission.view_sensitive))


def test_the_rule_names_what_is_missing() -> None:
    alice = Principal(TENANT, "alice", teams=frozenset({"sales"}), permissions=frozenset({"create:AiObservation"}))
    for request, message in (
        (WriteRequest.of("alice", Scope.team, ["hr"]), "not a member of team(s) ['hr']"),
        (WriteRequest.of(None, Scope.public), "tenant-wide"),
        (WriteRequest.of("bob", Scope.private), "another user's memory"),
        (WriteRequest.of("alice", Scope.sensitive), "view:SensitiveAiMemory"),
    ):
        try:
            authorize_write(alice, request)
        except Forbidden as exc:
            assert message in str(exc)
        else:
            raise AssertionError(f"{request} was allowed")
    try:
        authorize_write(alice, WriteRequest.of("alice", Scope.team))
    except Unprocessable as exc:
        assert exc.field == "team_ids"
    authorize_write(alice, WriteRequest.of("alice", Scope.team, ["sales"]))
