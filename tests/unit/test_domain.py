from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from engram.domain.hashing import content_hash, normalise_text
from engram.domain.observation import Observation, ObservationDraft, Priority, Provenance, Scope, Source
from engram.domain.scopes import Permission, Principal, PrincipalKind, Visibility


def test_hash_ignores_case_whitespace_and_fact_order() -> None:
    a = content_hash("fact", "Customer  Müller", "Lives in   Stuttgart", ["b=2", "a=1"])
    b = content_hash("fact", "customer müller", "lives in stuttgart ", ["a=1", "b=2", "a=1"])
    assert a == b
    assert a != content_hash("decision", "customer müller", "lives in stuttgart", ["a=1", "b=2"])


@given(st.text())
def test_normalise_is_idempotent(text: str) -> None:
    assert normalise_text(normalise_text(text)) == normalise_text(text)


def test_draft_rules() -> None:
    with pytest.raises(ValidationError, match="private observation needs a user_id"):
        ObservationDraft(tenant_id="t", title="x", scope=Scope.private)
    with pytest.raises(ValidationError, match="team observation needs"):
        ObservationDraft(tenant_id="t", user_id="u", title="x", scope=Scope.team)
    d = ObservationDraft(tenant_id="t", user_id="u", title="x", tags=["CRM", "crm", "Sales"])
    assert d.tags == ["crm", "sales"]
    with pytest.raises(ValidationError):
        ObservationDraft(tenant_id="t", user_id="u", title="x", type="Not A Type")


def _obs(scope: Scope, user: str | None = "owner", teams: list[str] | None = None, tenant: str = "t") -> Observation:
    now = datetime.now(UTC)
    return Observation(
        id=uuid.uuid4(),
        tenant_id=tenant,
        user_id=user,
        team_ids=teams or [],
        type="fact",
        title="x",
        narrative="",
        facts=[],
        concepts=[],
        tags=[],
        key=None,
        content_hash="h",
        discovery_tokens=[],
        relevance_count=0,
        priority=Priority.normal,
        source=Source.user,
        verified=True,
        confidence=1.0,
        scope=scope,
        trigger_source="manual",
        provenance=Provenance(),
        valid_from=None,
        expires_at=None,
        superseded_by=None,
        created_at=now,
        updated_at=now,
    )


def test_visibility_rules() -> None:
    owner = Principal("t", "owner")
    colleague = Principal("t", "bob", teams=frozenset({"sales"}))
    hr = Principal("t", "hr", permissions=frozenset({Permission.view_sensitive.value}))
    stranger = Principal("other", "owner")

    def sees(p: Principal, o: Observation, sensitive: bool = False) -> bool:
        return Visibility.for_principal(p, want_sensitive=sensitive).allows(o)

    private = _obs(Scope.private)
    assert sees(owner, private) and not sees(colleague, private)
    team = _obs(Scope.team, teams=["sales"])
    assert sees(colleague, team) and sees(owner, team) and not sees(hr, team)
    public_tenant_wide = _obs(Scope.public, user=None)
    assert sees(colleague, public_tenant_wide) and not sees(stranger, public_tenant_wide)
    sensitive = _obs(Scope.sensitive)
    assert not sees(owner, sensitive)  # without the permission, even the creator does not
    assert not sees(hr, sensitive)  # never in standard context
    assert sees(hr, sensitive, sensitive=True)
    assert not sees(colleague, sensitive, sensitive=True)


def test_permissions_manage_implies_actions() -> None:
    p = Principal("t", "u", permissions=frozenset({"manage:AiObservation"}))
    assert p.has(Permission.create_observation) and p.has(Permission.delete_observation)
    assert not p.has(Permission.view_devtools)
    assert Principal("t", "u", permissions=frozenset({"manage:all"})).has(Permission.view_devtools)
    agent = Principal("t", None, kind=PrincipalKind.agent)
    assert agent.source is Source.agent


def test_is_live() -> None:
    now = datetime.now(UTC)
    o = _obs(Scope.public)
    assert o.is_live(now)
    assert not o.model_copy(update={"expires_at": now - timedelta(seconds=1)}).is_live(now)
    assert not o.model_copy(update={"superseded_by": uuid.uuid4()}).is_live(now)
    assert not o.model_copy(update={"valid_from": now + timedelta(days=1)}).is_live(now)


def test_feedback_event_shape_per_kind() -> None:
    import uuid

    import pytest
    from pydantic import ValidationError

    from engram.domain.events import FeedbackRecorded

    assert FeedbackRecorded(kind="cited", observation_id=uuid.uuid4()).actor == "agent"  # verifies nothing
    FeedbackRecorded(kind="rated", rating=5, query_id=uuid.uuid4(), stream_origin="facts")
    for bad in (
        {"kind": "rated", "rating": 3},
        {"kind": "rated", "query_id": str(uuid.uuid4())},
        {"kind": "confirmed"},
        {"kind": "cited", "observation_id": str(uuid.uuid4()), "rating": 4},
        {"kind": "cited", "observation_id": str(uuid.uuid4()), "actor": "robot"},
        # a search's hits in one event: 'retrieved' only, 1..100 distinct ids, not beside observation_id
        {"kind": "cited", "observation_ids": [str(uuid.uuid4())]},
        {"kind": "rated", "rating": 3, "query_id": str(uuid.uuid4()), "observation_ids": [str(uuid.uuid4())]},
        {"kind": "retrieved", "observation_ids": []},
        {"kind": "retrieved", "observation_ids": [str(uuid.uuid4()) for _ in range(101)]},
        {"kind": "retrieved", "observation_ids": [str(one := uuid.uuid4()), str(one)]},
        {"kind": "retrieved", "observation_id": str(uuid.uuid4()), "observation_ids": [str(uuid.uuid4())]},
    ):
        with pytest.raises(ValidationError):
            FeedbackRecorded.model_validate(bad)
    hits = [uuid.uuid4() for _ in range(100)]
    assert FeedbackRecorded(kind="retrieved", observation_ids=hits, actor="system").observation_ids == hits
