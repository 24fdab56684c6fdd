"""consolidate-memory on the fakes: each decision, redelivery, history, unmerge, the sweep and
digests, the LLM path with a fake provider, and scope safety as a property (R-15)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from cloudevents.http import CloudEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.domain.errors import Conflict, Forbidden
from engram.domain.events import OBSERVATION_CREATED, OBSERVATION_UPDATED, observation_changed
from engram.domain.llm import LlmConfig, LlmReply, LlmRequest, PromptLibrary, Usage
from engram.domain.observation import Observation, ObservationDraft, Priority, Scope, Source, TriggerSource
from engram.domain.recall_text import render_observations
from engram.domain.scopes import Permission, Principal, PrincipalKind, Visibility
from engram.services.consolidation import Consolidator
from engram.services.consolidation_llm import ConsolidationJudge
from engram.services.consolidation_sweep import ConsolidationSweep
from engram.services.gateway import LlmGateway
from engram.services.memory_history import MemoryHistory
from functions.consolidate_memory.main import WORKER
from tests.fakes import FakeBus, InMemoryUnitOfWork, PinnedEmbedder

DIMS = 64


@pytest.fixture
def embedder() -> PinnedEmbedder:
    return PinnedEmbedder()


@pytest.fixture
def consolidator(uow: InMemoryUnitOfWork, embedder: PinnedEmbedder) -> Consolidator:
    return Consolidator(uow, embedder)


def human(tenant: str, user: str = "alice", **kw: Any) -> Principal:
    perms = frozenset({Permission.read_observation.value, Permission.update_observation.value})
    return Principal(tenant_id=tenant, user_id=user, permissions=kw.pop("permissions", perms), **kw)


async def store(uow: InMemoryUnitOfWork, tenant: str, *drafts: ObservationDraft) -> list[Observation]:
    async with uow.tenant(tenant) as tx:
        return [w.observation for w in await tx.observations.write_many(list(drafts))]


def draft(tenant: str, title: str, **kw: Any) -> ObservationDraft:
    kw.setdefault("user_id", "alice")
    return ObservationDraft(tenant_id=tenant, title=title, **kw)


def age(uow: InMemoryUnitOfWork, o: Observation, days: float) -> Observation:
    when = o.created_at - timedelta(days=days)
    return uow.alter(o.tenant_id, o.id, created_at=when, updated_at=when)


def event(o: Observation, etype: Any = OBSERVATION_CREATED) -> CloudEvent:
    return observation_changed(
        etype, o.id, o.updated_at.isoformat(), tenant_id=o.tenant_id, source="/test", user_id=o.user_id
    )


def rows(uow: InMemoryUnitOfWork, tenant: str) -> dict[uuid.UUID, Observation]:
    return uow.data(tenant).observations


def current(uow: InMemoryUnitOfWork, tenant: str) -> list[Observation]:
    return [o for o in rows(uow, tenant).values() if o.is_current]


# ---- each decision ---------------------------------------------------------------------------------


async def test_duplicates_become_one_consolidated_observation_and_the_sources_stay(
    uow: InMemoryUnitOfWork, bus: FakeBus, consolidator: Consolidator, tenant: str
) -> None:
    old, new = await store(
        uow,
        tenant,
        draft(tenant, "Customer 1001 is Müller GmbH", facts=["customer_id=1001", "city=Stuttgart"], tags=["crm"]),
        draft(
            tenant,
            "Müller GmbH (1001) is a customer",
            facts=["customer_id=1001", "city=Stuttgart", "customer_name=Müller GmbH"],
            priority=Priority.high,
        ),
    )
    uow.alter(tenant, old.id, relevance_count=3, cited_count=1)
    consolidator.embedder.pins = {"Müller GmbH": "mueller"}  # type: ignore[attr-defined]
    [outcome] = await WORKER.run(consolidator.handle, [event(new)])
    assert outcome is None
    [merged] = current(uow, tenant)
    assert merged.trigger_source is TriggerSource.consolidation and merged.priority is Priority.high
    assert set(merged.merged_from) == {old.id, new.id} and merged.relevance_count == 3 and merged.cited_count == 1
    assert set(merged.facts) == {"customer_id=1001", "city=Stuttgart", "customer_name=Müller GmbH"}
    assert merged.tags == ["crm"]
    for source in (old, new):
        stored = rows(uow, tenant)[source.id]
        assert stored.superseded_by == merged.id and stored.valid_to is not None and stored.title == source.title
    published = {(e["type"], e.get_data()["observation_id"]) for e in bus.events}
    assert (OBSERVATION_CREATED.type, str(merged.id)) in published
    assert {(OBSERVATION_UPDATED.type, str(o.id)) for o in (old, new)} <= published
    [row] = [t for t in uow.data(tenant).telemetry if t["event_name"] == "memory.consolidation"]
    assert row["metadata"]["decision"] == "duplicate" and row["metadata"]["clusterSize"] == 3


async def test_an_ordered_update_supersedes_the_older_with_valid_to(
    uow: InMemoryUnitOfWork, consolidator: Consolidator, tenant: str
) -> None:
    [old] = await store(uow, tenant, draft(tenant, "Müller in Stuttgart", facts=["customer_id=1", "city=Stuttgart"]))
    old = age(uow, old, 30)
    [new] = await store(uow, tenant, draft(tenant, "Müller in Hamburg", facts=["customer_id=1", "city=Hamburg"]))
    outcome = await consolidator.consolidate(tenant, new.id, trigger="event")
    assert [s.decision.value for s in outcome.steps] == ["update"]
    stored = rows(uow, tenant)[old.id]
    assert stored.superseded_by == new.id and stored.valid_to == new.created_at
    assert [o.id for o in current(uow, tenant)] == [new.id]


async def test_a_conflict_without_order_links_both_and_recall_text_marks_them(
    uow: InMemoryUnitOfWork, consolidator: Consolidator, tenant: str
) -> None:
    a, b = await store(
        uow,
        tenant,
        draft(tenant, "Contact at Müller is Schmidt", facts=["customer_id=1", "contact=Schmidt"]),
        draft(tenant, "Contact at Müller is Weber", facts=["customer_id=1", "contact=Weber"]),
    )
    outcome = await consolidator.consolidate(tenant, b.id, trigger="event")
    assert [s.decision.value for s in outcome.steps] == ["conflict"]
    a2, b2 = rows(uow, tenant)[a.id], rows(uow, tenant)[b.id]
    assert a2.conflicts_with == [b.id] and b2.conflicts_with == [a.id] and a2.is_current and b2.is_current
    text = render_observations([a2, b2])
    assert '(conflicting: "Contact at Müller is Weber")' in text
    assert '(conflicting: "Contact at Müller is Schmidt")' in text


async def test_unrelated_observations_and_other_audiences_stay_as_they_are(
    uow: InMemoryUnitOfWork, consolidator: Consolidator, tenant: str
) -> None:
    consolidator.embedder.pins = {"prefers short answers": "same"}  # type: ignore[attr-defined]
    stored = await store(
        uow,
        tenant,
        draft(tenant, "Customer 1 is in Stuttgart", facts=["customer_id=1", "city=Stuttgart"]),
        draft(tenant, "Alice prefers short answers", scope=Scope.team, team_ids=["sales"]),
        draft(tenant, "Alice prefers short answers", user_id="bob"),
        draft(tenant, "Alice prefers short answers", type="preference"),
        draft(tenant, "Customer 2 is in Stuttgart", facts=["customer_id=2", "city=Stuttgart"]),
        draft(tenant, "Alice prefers short answers."),
    )
    for o in stored:
        await consolidator.consolidate(tenant, o.id, trigger="event")
    assert len(current(uow, tenant)) == len(stored)  # different ids, teams, owners, types: nothing merged


# ---- redelivery, history, unmerge -----------------------------------------------------------------


async def test_a_redelivered_event_changes_nothing_twice(
    uow: InMemoryUnitOfWork, consolidator: Consolidator, embedder: PinnedEmbedder, tenant: str
) -> None:
    _a, b = await store(
        uow,
        tenant,
        draft(tenant, "Budget of Apollo", facts=["project_id=7", "budget=50000"]),
        draft(tenant, "Apollo budget", facts=["project_id=7", "budget=50000"]),
    )
    embedder.pins = {"Apollo": "apollo"}
    ev = event(b)
    assert await WORKER.run(consolidator.handle, [ev, ev]) == [None, None]
    commits = uow.commits
    assert await WORKER.run(consolidator.handle, [ev]) == [None]
    assert len(uow.data(tenant).consolidations) == 1 and uow.commits == commits + 1  # read, found superseded
    [merged] = current(uow, tenant)
    event_of_merge = event(merged)
    await WORKER.run(consolidator.handle, [event_of_merge, event_of_merge])
    assert len(uow.data(tenant).consolidations) == 1


async def test_history_shows_versions_and_decisions_and_unmerge_restores_for_good(
    uow: InMemoryUnitOfWork, bus: FakeBus, consolidator: Consolidator, embedder: PinnedEmbedder, tenant: str
) -> None:
    a, b = await store(
        uow,
        tenant,
        draft(tenant, "Alice likes brief replies", facts=["person_id=alice", "answer_style=brief"]),
        draft(tenant, "Alice prefers short answers", facts=["person_id=alice", "answer_style=brief"]),
    )
    embedder.pins = {"Alice": "alice"}
    await consolidator.consolidate(tenant, b.id, trigger="event")
    [merged] = current(uow, tenant)
    history = MemoryHistory(uow)
    seen = await history.history(human(tenant), a.id)
    assert {v.observation.id for v in seen.versions} == {a.id, b.id, merged.id}
    assert {v.status for v in seen.versions} == {"superseded", "current"}
    [decision] = seen.decisions
    assert decision.decision == "duplicate" and decision.actor == "consolidate-memory" and decision.reason
    before = len(bus.events)
    undone = await history.unmerge(human(tenant), merged.id)
    assert set(undone.restored) == {a.id, b.id} and undone.retired == [merged.id]
    assert {o.id for o in current(uow, tenant)} == {a.id, b.id}
    assert rows(uow, tenant)[merged.id].valid_to is not None  # retired, still stored
    assert {e.get_data()["observation_id"] for e in bus.events[before:]} == {str(a.id), str(b.id), str(merged.id)}
    for o in (a, b):  # a person separated them: never merged again, also not by the sweep
        await consolidator.consolidate(tenant, o.id, trigger="sweep")
    assert {o.id for o in current(uow, tenant)} == {a.id, b.id}
    after = await history.history(human(tenant), merged.id)
    assert after.decisions[0].undone_by == "alice" and after.decisions[0].undone_at is not None
    assert {v.status for v in after.versions if v.observation.id == merged.id} == {"retired"}
    with pytest.raises(Conflict):
        await history.unmerge(human(tenant), merged.id)


async def test_unmerge_is_for_humans_who_may_see_it(
    uow: InMemoryUnitOfWork, consolidator: Consolidator, embedder: PinnedEmbedder, tenant: str
) -> None:
    a, b = await store(
        uow,
        tenant,
        draft(tenant, "Apollo ends in May", facts=["project_id=1", "end=may"]),
        draft(tenant, "Apollo ends May", facts=["project_id=1", "end=may"]),
    )
    embedder.pins = {"Apollo": "apollo"}
    await consolidator.consolidate(tenant, b.id, trigger="event")
    [merged] = current(uow, tenant)
    history = MemoryHistory(uow)
    agent = human(tenant, kind=PrincipalKind.agent)
    with pytest.raises(Forbidden):
        await history.unmerge(agent, merged.id)
    from engram.domain.errors import NotFound

    with pytest.raises(NotFound):
        await history.unmerge(human(tenant, "bob"), merged.id)
    with pytest.raises(NotFound):
        await history.history(human(tenant, "bob"), a.id)


async def test_undoing_an_update_brings_the_older_back(
    uow: InMemoryUnitOfWork, consolidator: Consolidator, tenant: str
) -> None:
    [old] = await store(uow, tenant, draft(tenant, "Sprint 7 ends 1 April", facts=["sprint_id=7", "end=1 April"]))
    old = age(uow, old, 20)
    [new] = await store(uow, tenant, draft(tenant, "Sprint 7 ends 5 April", facts=["sprint_id=7", "end=5 April"]))
    await consolidator.consolidate(tenant, new.id, trigger="event")
    undone = await MemoryHistory(uow).unmerge(human(tenant), old.id)
    assert undone.restored == [old.id] and undone.retired == []
    assert {o.id for o in current(uow, tenant)} == {old.id, new.id}


# ---- the sweep and digests ---------------------------------------------------------------------------


async def test_the_sweep_catches_what_the_worker_missed_and_digests_old_low_priority_ones(
    uow: InMemoryUnitOfWork, consolidator: Consolidator, tenant: str
) -> None:
    [old] = await store(uow, tenant, draft(tenant, "Müller in Stuttgart", facts=["customer_id=1", "city=Stuttgart"]))
    age(uow, old, 10)
    await store(uow, tenant, draft(tenant, "Müller in Hamburg", facts=["customer_id=1", "city=Hamburg"]))
    notes = await store(
        uow,
        tenant,
        *(draft(tenant, f"Lunch idea {i}: soup", priority=Priority.low, tags=["lunch"]) for i in range(4)),
    )
    for n in notes:
        age(uow, n, 45)
    sweep = ConsolidationSweep(consolidator, None, digest_days=30)
    report = await sweep.run(tenants=[tenant])
    assert report.decisions["update"] == 1 and report.decisions["digest"] == 1 and report.digested == 4
    digest = next(o for o in current(uow, tenant) if "digest" in o.tags)
    assert set(digest.merged_from) == {n.id for n in notes} and digest.priority is Priority.low
    assert all(rows(uow, tenant)[n.id].superseded_by == digest.id for n in notes)
    again = await sweep.run(tenants=[tenant])  # nothing left to do: the inbox knows what was handled
    assert sum(again.decisions.values()) == 0


async def test_memory_units_are_neither_consolidated_nor_candidates_nor_digested(
    uow: InMemoryUnitOfWork, consolidator: Consolidator, tenant: str
) -> None:
    """Turn units record what was said when: two turns saying the same are both kept, a fact
    stated again elsewhere is not merged into them, and an assistant's old answers stay."""

    def unit(turn: str, title: str, **kw: Any) -> ObservationDraft:
        return draft(tenant, title, type="context", key=f"turn:chat-1:{turn}", facts=["customer_id=1"], **kw)

    first, again = await store(
        uow, tenant, unit("m1", "Müller moved to Hamburg"), unit("m2", "Müller moved to Hamburg")
    )
    answers = await store(
        uow,
        tenant,
        *(unit(f"a{i}", f"Answer {i}: here is a plan", priority=Priority.low, tags=["Assistant"]) for i in range(4)),
    )
    for a in answers:
        age(uow, a, 45)
    [fact] = await store(uow, tenant, draft(tenant, "Müller moved to Hamburg", type="context", facts=["customer_id=1"]))
    assert (await consolidator.consolidate(tenant, again.id, trigger="event")).skipped == "memory unit"
    assert (await consolidator.consolidate(tenant, fact.id, trigger="event")).steps == []
    report = await ConsolidationSweep(consolidator, None, digest_days=30).run(tenants=[tenant])
    assert sum(report.decisions.values()) == 0 and report.digested == 0
    assert {o.id for o in current(uow, tenant)} == {first.id, again.id, fact.id, *(a.id for a in answers)}


# ---- the LLM path (a fake provider; the real SDK is tested against the scripted server) -------------


class ScriptedLLM:
    provider = "anthropic"

    def __init__(self, answer: dict[str, Any] | None) -> None:
        self.answer = answer
        self.requests: list[LlmRequest] = []

    async def complete(self, request: LlmRequest, *, model: str, timeout: float, temperature: float | None) -> LlmReply:
        self.requests.append(request)
        name = request.tools[0].name
        content = [{"type": "tool_use", "id": "t1", "name": name, "input": self.answer}] if self.answer else []
        return LlmReply(model=model, content=content, stop_reason="tool_use", usage=Usage(120, 30))

    async def stream(self, request: LlmRequest, **kw: Any) -> LlmReply:
        raise NotImplementedError


def judge_with(llm: ScriptedLLM, settings: Any) -> ConsolidationJudge:
    from engram.bootstrap import load_llm_config

    config: LlmConfig = load_llm_config(settings)
    prompts = PromptLibrary.from_yaml(settings.engram_prompts_path.read_text(encoding="utf-8"))
    return ConsolidationJudge(LlmGateway(config, prompts, llm))


async def test_the_llm_path_decides_free_text_with_one_call_per_cluster(
    uow: InMemoryUnitOfWork, embedder: PinnedEmbedder, settings: Any, tenant: str
) -> None:
    embedder.pins = {"answers": "style", "replies": "style"}
    a, b = await store(
        uow, tenant, draft(tenant, "Alice wants short answers"), draft(tenant, "Keep Alice's replies brief")
    )
    llm = ScriptedLLM(
        {
            "decisions": [{"candidate": 1, "decision": "duplicate", "reason": "both say: answer briefly"}],
            "merged_title": "Alice wants brief answers",
            "merged_narrative": "Keep answers to Alice short.",
        }
    )
    consolidator = Consolidator(uow, embedder, judge=judge_with(llm, settings))
    outcome = await consolidator.consolidate(tenant, b.id, trigger="event")
    assert len(llm.requests) == 1 and [s.decision.value for s in outcome.steps] == ["duplicate"]
    prompt = llm.requests[0].turn[0]["content"]
    assert "Alice wants short answers" in prompt and "Keep Alice's replies brief" in prompt
    [merged] = current(uow, tenant)
    assert merged.title == "Alice wants brief answers" and set(merged.merged_from) == {a.id, b.id}
    [record] = uow.data(tenant).consolidations.values()
    assert record.path == "llm" and record.model and record.reason == "both say: answer briefly"
    [row] = [t for t in uow.data(tenant).telemetry if t["event_name"] == "memory.consolidation"]
    assert row["metadata"]["path"] == "llm" and row["metadata"]["inputTokens"] == 120


async def test_an_invalid_model_answer_keeps_the_rules_verdict_and_is_reported(
    uow: InMemoryUnitOfWork, embedder: PinnedEmbedder, settings: Any, tenant: str
) -> None:
    embedder.pins = {"answers": "style", "replies": "style"}
    _a, b = await store(uow, tenant, draft(tenant, "Alice wants short answers"), draft(tenant, "Alice's replies brief"))
    llm = ScriptedLLM({"decisions": [{"candidate": 9, "decision": "duplicate", "reason": "?"}]})
    consolidator = Consolidator(uow, embedder, judge=judge_with(llm, settings))
    outcome = await consolidator.consolidate(tenant, b.id, trigger="event")
    assert outcome.steps == [] and len(llm.requests) == 1  # no second call
    [row] = [t for t in uow.data(tenant).telemetry if t["event_name"] == "memory.consolidation"]
    assert row["metadata"]["status"] == "failed" and "candidate 9" in row["metadata"]["error"]


# ---- scope safety as a property (R-15.2) -------------------------------------------------------------

AUDIENCES = [
    ("alice", Scope.private, ()),
    ("bob", Scope.private, ()),
    ("alice", Scope.team, ("sales",)),
    ("alice", Scope.team, ("sales", "support")),
    ("bob", Scope.team, ("support",)),
    (None, Scope.public, ()),
    (None, Scope.team, ("sales",)),
    ("alice", Scope.sensitive, ()),
    ("alice", Scope.public, ()),
]
VIEWERS = [
    Visibility("t", user, frozenset(teams), include_sensitive=sensitive)
    for user in ("alice", "bob", "carol", None)
    for teams in ((), ("sales",), ("support",))
    for sensitive in (False, True)
]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.integers(0, len(AUDIENCES) - 1), st.sampled_from(["1", "2"])), min_size=2, max_size=8),
    st.randoms(use_true_random=False),
)
async def test_consolidation_never_shows_anyone_what_they_could_not_see_in_every_source(
    audiences: list[tuple[int, str]], rnd: Any
) -> None:
    uow = InMemoryUnitOfWork(FakeBus())
    embedder = PinnedEmbedder({"Customer": "all"})  # every observation is near every other
    consolidator = Consolidator(uow, embedder)
    tenant = "t"
    drafts = []
    for i, (k, customer) in enumerate(audiences):
        user, scope, teams = AUDIENCES[k]
        drafts.append(
            ObservationDraft(
                tenant_id=tenant,
                user_id=user,
                scope=scope,
                team_ids=list(teams),
                title=f"Customer {customer} note {i}",
                facts=[f"customer_id={customer}", "city=Stuttgart"],
                source=rnd.choice([Source.user, Source.agent]),
            )
        )
    stored = await store(uow, tenant, *drafts)
    for o in rnd.sample(stored, len(stored)):
        await consolidator.consolidate(tenant, o.id, trigger="event")
    everything = rows(uow, tenant)
    groups: dict[tuple[Any, ...], int] = {}
    for o in everything.values():
        if o.is_current:
            key = (o.user_id, o.scope, tuple(sorted(o.team_ids)), o.facts[0])
            groups[key] = groups.get(key, 0) + 1
    assert all(n == 1 for n in groups.values()), groups  # within one audience the duplicates did merge
    for made in everything.values():
        if not made.merged_from:
            continue
        sources = [everything[s] for s in made.merged_from]
        for viewer in VIEWERS:
            if viewer.allows(made):
                assert all(viewer.allows(s) for s in sources), (made, viewer)
    for o in everything.values():
        if o.superseded_by is not None:
            successor = everything[o.superseded_by]
            assert all(v.allows(o) for v in VIEWERS if v.allows(successor))
