"""The in-memory observation store writes and reads like `PgObservationStore` (see the docstring of
`engram.adapters.observation_writes` for the rules it copies)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from engram.domain.models import FeedbackCounts, FeedbackKind, FeedbackRow
from engram.domain.observation import ObservationDraft, Priority, Provenance, Scope, WriteOutcome
from engram.domain.scopes import Visibility
from tests.fakes import FakeBus, InMemoryUnitOfWork

NOW = datetime.now(UTC)


def draft(tenant: str, title: str, **kw: Any) -> ObservationDraft:
    kw.setdefault("user_id", "alice")
    return ObservationDraft(tenant_id=tenant, title=title, **kw)


def seeing(tenant: str, user: str | None = "alice", **kw: Any) -> Visibility:
    kw.setdefault("teams", frozenset())
    kw.setdefault("include_sensitive", False)
    return Visibility(tenant_id=tenant, user_id=user, **kw)


async def write(uow: InMemoryUnitOfWork, tenant: str, *drafts: ObservationDraft) -> list[Any]:
    async with uow.tenant(tenant) as tx:
        return await tx.observations.write_many(list(drafts))


async def test_same_content_is_stored_once_per_owner(tenant: str) -> None:
    uow = InMemoryUnitOfWork(FakeBus())
    (first,) = await write(uow, tenant, draft(tenant, "Müller pays late"))
    again, bobs = await write(
        uow, tenant, draft(tenant, "  müller PAYS late "), draft(tenant, "Müller pays late", user_id="bob")
    )
    assert first.outcome is WriteOutcome.created
    assert again.outcome is WriteOutcome.deduplicated and again.observation == first.observation  # normalised hash
    assert bobs.outcome is WriteOutcome.created and bobs.observation.id != first.observation.id
    assert first.observation.confidence == 1.0 and first.observation.created_at == first.observation.updated_at


async def test_a_key_updates_in_place_or_deduplicates(tenant: str) -> None:
    uow = InMemoryUnitOfWork(FakeBus())
    session = uuid.uuid4()
    (v1,) = await write(
        uow, tenant, draft(tenant, "Lives in Stuttgart", key="city", provenance=Provenance(session_id=session))
    )
    (v2,) = await write(uow, tenant, draft(tenant, "Lives in Berlin", key="city", confidence=0.7))
    (v3,) = await write(uow, tenant, draft(tenant, "Lives in Berlin", key="city", confidence=0.7))
    assert (v1.outcome, v2.outcome, v3.outcome) == (
        WriteOutcome.created,
        WriteOutcome.updated,
        WriteOutcome.deduplicated,
    )
    new = v2.observation
    assert new.id == v1.observation.id and new.title == "Lives in Berlin"
    assert new.created_at == v1.observation.created_at and new.updated_at > v1.observation.updated_at
    assert new.provenance.session_id == session  # kept where the new draft has none
    assert abs(new.confidence - 0.7) < 1e-6 and new.confidence != 0.7  # a `real` column
    assert v3.observation.updated_at == new.updated_at
    (other,) = await write(uow, tenant, draft(tenant, "Speaks German"))
    async with uow.tenant(tenant) as tx:  # what made each revision, to announce it again
        current = {c.id: c for c in await tx.observations.current([new.id, other.observation.id, uuid.uuid4()])}
    assert current[new.id].outcome is WriteOutcome.updated and current[new.id].revision == new.updated_at
    assert current[other.observation.id].outcome is WriteOutcome.created and len(current) == 2


async def test_a_keyed_draft_whose_content_is_stored_elsewhere_is_a_dedup_hit(tenant: str) -> None:
    uow = InMemoryUnitOfWork(FakeBus())
    (plain,) = await write(uow, tenant, draft(tenant, "Prefers e-mail"))
    (keyed,) = await write(uow, tenant, draft(tenant, "Prefers e-mail", key="contact"))
    assert keyed.outcome is WriteOutcome.deduplicated and keyed.observation.id == plain.observation.id
    assert keyed.observation.key is None


async def test_a_batch_shares_rows_and_falls_back_to_one_draft_at_a_time(tenant: str) -> None:
    uow = InMemoryUnitOfWork(FakeBus())
    a1, a2, b = await write(
        uow, tenant, draft(tenant, "A", tags=["x"]), draft(tenant, "A", tags=["y"]), draft(tenant, "B")
    )
    assert a1 == a2 and a1.outcome is WriteOutcome.created and a1.observation.tags == ["y"]  # the last one wins
    assert b.observation.id != a1.observation.id
    # a keyless and a keyed draft with one content hash: a unique violation in the batch, then in turns
    plain, keyed = await write(uow, tenant, draft(tenant, "C"), draft(tenant, "C", key="c"))
    assert (plain.outcome, keyed.outcome) == (WriteOutcome.created, WriteOutcome.deduplicated)
    assert keyed.observation.id == plain.observation.id
    async with uow.tenant(tenant) as tx:
        changes = await tx.observations.write_changes([draft(tenant, "C"), draft(tenant, "D")])
    assert [c.outcome for c in changes] == [WriteOutcome.deduplicated, WriteOutcome.created]
    assert len(uow.data(tenant).observations) == 4


async def test_listing_applies_visibility_and_what_is_in_force(tenant: str) -> None:
    uow = InMemoryUnitOfWork(FakeBus())
    written = await write(
        uow,
        tenant,
        draft(tenant, "mine"),
        draft(tenant, "bob's", user_id="bob"),
        draft(tenant, "bob's team", user_id="bob", scope=Scope.team, team_ids=["sales"]),
        draft(tenant, "public", user_id="bob", scope=Scope.public),
        draft(tenant, "secret", scope=Scope.sensitive),
        draft(tenant, "expired", expires_at=NOW - timedelta(days=1)),
        draft(tenant, "not yet", valid_from=NOW + timedelta(days=1)),
        draft(tenant, "old", tags=["History"]),
    )
    by_title = {w.observation.title: w.observation for w in written}
    uow.alter(tenant, by_title["old"].id, superseded_by=by_title["mine"].id)

    async def titles(vis: Visibility, **kw: Any) -> set[str]:
        async with uow.tenant(tenant) as tx:
            found, total = await tx.observations.list_visible(vis, now=NOW, limit=50, offset=0, **kw)
        assert total == len(found)
        return {o.title for o in found}

    assert await titles(seeing(tenant)) == {"mine", "public"}
    assert await titles(seeing(tenant, teams=frozenset({"sales"}))) == {"mine", "public", "bob's team"}
    assert await titles(seeing(tenant, include_sensitive=True)) == {"mine", "public", "secret"}
    assert await titles(seeing(tenant, hidden_ids=frozenset({str(by_title["mine"].id)}))) == {"public"}
    assert await titles(seeing(tenant), include_expired=True) == {"mine", "public", "expired", "not yet", "old"}
    assert await titles(seeing(tenant), include_expired=True, tags=["history"]) == {"old"}
    async with uow.tenant(tenant) as tx:
        visible = await tx.observations.visible([str(o.id) for o in by_title.values()], seeing(tenant), NOW)
        assert {o.title for o in visible.values()} == {"mine", "public"}
        soon = await tx.observations.expiring(seeing(tenant), now=NOW - timedelta(days=2), until=NOW, limit=5)
        assert [o.title for o in soon] == ["expired"]
        assert set(await tx.observations.live_ids()) == {str(o.id) for t, o in by_title.items() if t != "old"}


async def test_the_profile_is_the_users_own_unrejected_memory_by_priority_then_newest(tenant: str) -> None:
    uow = InMemoryUnitOfWork(FakeBus())
    clock = iter(NOW + timedelta(seconds=i) for i in range(100))
    uow.clock = lambda: next(clock)
    for title, kw in [
        ("normal, oldest", {}),
        ("critical", {"priority": Priority.critical}),
        ("normal, newer", {}),
        ("rejected", {"priority": Priority.high}),
        ("sensitive", {"scope": Scope.sensitive}),
        ("a fact", {"type": "fact"}),
        ("bob's", {"user_id": "bob", "scope": Scope.public}),
    ]:
        await write(uow, tenant, draft(tenant, title, type=kw.pop("type", "preference"), **kw))
    rejected = next(o for o in uow.data(tenant).observations.values() if o.title == "rejected")
    async with uow.tenant(tenant) as tx:
        await tx.feedback.add([FeedbackRow(rejected.id, "alice", FeedbackKind.rejected)])
    async with uow.tenant(tenant) as tx:
        vis = seeing(tenant, include_sensitive=True)
        profile = await tx.observations.profile(vis, types=["preference"], now=NOW + timedelta(hours=1), limit=10)
        assert [o.title for o in profile] == ["critical", "normal, newer", "normal, oldest"]
        assert await tx.feedback.rejected_ids("alice") == {str(rejected.id)}
        assert [k.title for k in await tx.observations.known("alice", 2)] == ["a fact", "rejected"]  # never sensitive


async def test_feedback_counters_verification_and_deletion(tenant: str) -> None:
    uow = InMemoryUnitOfWork(FakeBus())
    a, b = (w.observation for w in await write(uow, tenant, draft(tenant, "A"), draft(tenant, "B", verified=True)))
    gone = uuid.uuid4()
    async with uow.tenant(tenant) as tx:
        locked = await tx.observations.lock([b.id, gone, a.id])
        assert list(locked) == sorted([a.id, b.id]) and locked[b.id].verified and not locked[a.id].verified
        revisions = await tx.observations.count_feedback(
            {
                a.id: FeedbackCounts(retrieved=2, confirmed=1, verify=True),
                b.id: FeedbackCounts(cited=1),
                gone: FeedbackCounts(),
            }
        )
        assert set(revisions) == {a.id, b.id} and revisions[a.id] > a.updated_at and revisions[b.id] == b.updated_at
        assert await tx.observations.verify(a.id) is None  # verified already
        await tx.feedback.add([FeedbackRow(a.id, "bob", FeedbackKind.cited)])
    stored = uow.data(tenant).observations[a.id]
    assert (stored.relevance_count, stored.confirmed_count, stored.verified) == (2, 1, True)
    uow.alter(tenant, b.id, superseded_by=a.id)
    async with uow.tenant(tenant) as tx:
        await tx.observations.delete(a.id)
    data = uow.data(tenant)
    assert a.id not in data.observations and data.feedback == []  # ON DELETE CASCADE
    assert data.observations[b.id].superseded_by is None  # ON DELETE SET NULL
