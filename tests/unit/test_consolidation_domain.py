"""Consolidation's pure rules (R-15.1): facts, anchors, each decision, the plan, digests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from engram.domain.consolidation import (
    Decision,
    DecisionPath,
    Pool,
    Verdict,
    decide,
    merged_draft,
    swapped_words,
)
from engram.domain.consolidation_judgement import ConsolidationOutput, InvalidJudgement, verdicts_of
from engram.domain.consolidation_plan import digest_groups, offline_digest, plan
from engram.domain.facts import Facts, Reading, minimal_pair, name_anchors, number_anchors, parse_fact, says_changed
from engram.domain.observation import Observation, Priority, Scope, Source, TriggerSource
from tests.fakes import observation

T = "t-domain"
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def obs(title: str, *, facts: tuple[str, ...] = (), age: timedelta = timedelta(days=1), **kw: Any) -> Observation:
    o = observation(T, title, **{k: v for k, v in kw.items() if k in ("scope", "user_id", "team_ids", "type")})
    created = NOW - age
    extra = {k: v for k, v in kw.items() if k not in ("scope", "user_id", "team_ids", "type")}
    return o.model_copy(update={"facts": list(facts), "created_at": created, "updated_at": created, **extra})


def r(o: Observation) -> Reading:
    return Reading(o)


# ---- facts and anchors ---------------------------------------------------------------------------


def test_facts_are_parsed_folded_and_split_into_identity_and_attributes() -> None:
    assert parse_fact("Customer ID = 1001") == ("customer_id", "1001")
    assert parse_fact("city: Stuttgart.") == ("city", "stuttgart")
    assert parse_fact("budget=50.000 EUR") == ("budget", "50000 eur")
    assert parse_fact("Alice likes tea") is None
    assert parse_fact("Note: call back tomorrow") == ("note", "call back tomorrow")
    facts = Facts.of(["customer_id=1001", "customer_name=Müller GmbH", "city=Stuttgart", "free words"])
    assert facts.identity(2) == {"customer_id": frozenset({"1001"})}
    assert facts.identity(1) == {"customer_name": frozenset({"müller gmbh"})}
    assert facts.attributes(names_too=False) == {"city": frozenset({"stuttgart"})}
    assert set(facts.attributes(names_too=True)) == {"city", "customer_name"}


def test_anchors_numbers_dates_names_and_change_markers() -> None:
    assert number_anchors("Budget 50.000 EUR, due 3. Juni 2023") >= {"50000", "2023-06-03"}
    assert name_anchors("We chose PostgreSQL for Alice's team, ticket PRJ-42.") >= {"postgresql", "prj-42"}
    assert "Die" not in name_anchors("Die Antwort ist kurz.")  # German nouns are no names
    assert says_changed("The sprint moved to 5 April") and says_changed("Ab sofort zahlt der Kunde per SEPA")
    assert not says_changed("The sprint ends on 1 April")
    assert minimal_pair(r(obs("Alice prefers short answers")).tokens, r(obs("Bob prefers short answers")).tokens)


# ---- each decision --------------------------------------------------------------------------------


def test_identical_text_is_a_duplicate_whatever_the_vectors() -> None:
    v = decide(r(obs("Alice prefers short answers.")), r(obs("alice  prefers short answers")), None)
    assert v.decision is Decision.duplicate


def test_the_same_entity_with_no_fact_in_disagreement_is_a_duplicate() -> None:
    a = obs("Customer Müller was created", facts=("customer_id=1001", "city=Stuttgart"))
    b = obs("New customer Müller GmbH in Stuttgart", facts=("customer_id=1001", "city=Stuttgart", "industry=tools"))
    assert decide(r(a), r(b), 0.90).decision is Decision.duplicate
    assert decide(r(a), r(b), 0.70).decision is Decision.unrelated  # the text says something else


def test_different_ids_are_different_entities_even_with_equal_vectors() -> None:
    a = obs("Customer created", facts=("customer_id=1001", "city=Stuttgart"))
    b = obs("Customer created", facts=("customer_id=1002", "city=Stuttgart"), narrative="x")
    v = decide(r(a), r(b), 1.0)
    assert (v.decision, v.certain) == (Decision.unrelated, True) and "different entities" in v.reason


def test_another_value_for_the_same_attribute_recorded_later_is_an_update() -> None:
    old = obs("Müller is in Stuttgart", facts=("customer_id=1001", "city=Stuttgart"), age=timedelta(days=30))
    new = obs("Müller moved to Hamburg", facts=("customer_id=1001", "city=Hamburg"))
    v = decide(r(new), r(old), 0.9)
    assert (v.decision, v.current) == (Decision.update, new.id) and "city" in v.reason


def test_no_clear_order_is_a_conflict() -> None:
    a = obs("Contact is Schmidt", facts=("customer_id=1", "contact=Schmidt"), age=timedelta(minutes=3))
    b = obs("Contact is Weber", facts=("customer_id=1", "contact=Weber"), age=timedelta(minutes=1))
    assert decide(r(a), r(b), 0.9).decision is Decision.conflict  # recorded at the same time
    verified = obs("Contact is Schmidt", facts=("customer_id=1", "contact=Schmidt"), age=timedelta(days=9))
    guess = obs("Contact is Weber", facts=("customer_id=1", "contact=Weber"), source=Source.agent, verified=False)
    v = decide(r(guess), r(verified), 0.9)
    assert v.decision is Decision.conflict and "less trusted" in v.reason
    said = guess.model_copy(update={"title": "Contact is now Weber"})  # a statement of change settles it
    assert decide(r(said), r(verified), 0.9).decision is Decision.update


def test_valid_from_orders_before_the_recording_time() -> None:
    later = obs("Sprint ends 5 April", facts=("sprint_id=7", "end=2026-04-05"), valid_from=NOW - timedelta(days=2))
    earlier = obs("Sprint ends 1 April", facts=("sprint_id=7", "end=2026-04-01"), valid_from=NOW - timedelta(days=9))
    later = later.model_copy(update={"created_at": NOW - timedelta(days=20)})  # stored first, holds later
    v = decide(r(earlier), r(later), 0.9)
    assert (v.decision, v.current) == (Decision.update, later.id)


def test_when_it_was_said_orders_before_when_it_was_written() -> None:
    """A late event (a redelivery, a replayed dead letter) writes what was said first last: the
    statement said later holds, whichever row is newer."""
    said_later = obs("Müller moved to Hamburg", facts=("customer_id=1", "city=Hamburg"), age=timedelta(days=20))
    said_first = obs("Müller is in Stuttgart", facts=("customer_id=1", "city=Stuttgart"), age=timedelta(hours=1))
    said_later = said_later.model_copy(update={"said_at": NOW - timedelta(days=21)})
    said_first = said_first.model_copy(update={"said_at": NOW - timedelta(days=40)})  # written last
    for a, b in ((said_first, said_later), (said_later, said_first)):
        v = decide(r(a), r(b), 0.9)
        assert (v.decision, v.current) == (Decision.update, said_later.id)
    # two statements said within `order_gap` of each other have no clear order, however far apart written
    close = said_first.model_copy(update={"said_at": said_later.said_at - timedelta(minutes=2)})  # type: ignore[operator]
    plain = said_later.model_copy(update={"title": "Müller is in Hamburg"})
    assert decide(r(close), r(plain), 0.9).decision is Decision.conflict
    # a merge was said as late as its latest source; an update as late as its newer one
    assert merged_draft([said_first, said_later]).said_at == said_later.said_at
    [step] = plan(said_first, [(said_later, Verdict(Decision.update, "city", current=said_later.id))], NOW)
    assert step.result is said_later and step.valid_to[said_first.id] == said_first.created_at


def pool_of(*texts: str) -> Pool:
    """A pool of an audience: the texts plus background that makes template words common."""
    background = [obs(f"{name} prefers short answers and likes brief replies") for name in "ABCDEFGHIJKLMNOPQRST"]
    return Pool.of([r(o) for o in background] + [r(obs(t)) for t in texts])


def test_free_text_duplicates_need_close_vectors_the_same_values_and_the_same_specific_words() -> None:
    a, b = r(obs("Alice prefers short answers")), r(obs("Alice likes brief replies"))
    pool = pool_of(a.observation.title, b.observation.title)
    assert decide(a, b, 0.96, pool).decision is Decision.duplicate  # paraphrase: only common words swapped
    assert decide(a, b, 0.85, pool).decision is Decision.unrelated  # not close enough
    bob = r(obs("Bob prefers short answers"))  # one (specific) word swapped: another person
    v = decide(a, bob, 0.99, pool)
    assert v.decision is Decision.unrelated and not v.certain  # open: the LLM path may be asked
    budget = decide(r(obs("Budget of Apollo is 50000 EUR")), r(obs("Budget of Apollo is 500000 EUR")), 0.99, pool)
    assert budget.decision is Decision.unrelated and "different values" in budget.reason
    billing, reporting = r(obs("PostgreSQL for the billing service")), r(obs("PostgreSQL for the reporting service"))
    assert decide(billing, reporting, 0.98, pool).decision is Decision.unrelated
    assert decide(a, b, 0.99).decision is Decision.unrelated  # without a pool every word is specific
    assert swapped_words(a, b) == (["answers", "prefers", "short"], ["brief", "likes", "replies"])


def test_a_free_text_statement_of_change_about_the_same_thing_is_an_update() -> None:
    old = obs("The Apollo deadline is 1 April 2026", age=timedelta(days=5))
    new = obs("The Apollo deadline was moved to 5 April 2026")
    pool = Pool.of([r(old), r(new), *(r(obs(f"The {p} deadline is 3 May 2026")) for p in "BCDEFGHIJKLMNOPQRSTUVWXYZ")])
    v = decide(r(new), r(old), 0.93, pool)
    assert (v.decision, v.current) == (Decision.update, new.id)
    other = obs("The Borealis deadline was moved to 5 April 2026")  # another project moved
    assert decide(r(other), r(old), 0.93, pool).decision is Decision.unrelated


def test_different_audiences_or_types_are_never_compared() -> None:
    mine = obs("Alice prefers short answers", user_id="alice")
    team = obs("Alice prefers short answers", user_id="alice", scope=Scope.team, team_ids=["x"])
    other = obs("Alice prefers short answers", user_id="bob")
    typed = obs("Alice prefers short answers", user_id="alice", type="preference")
    for b in (team, other, typed):
        assert decide(r(mine), r(b), 1.0).decision is Decision.unrelated


# ---- merging and planning --------------------------------------------------------------------------


def test_a_merge_unites_facts_takes_the_highest_priority_and_lists_every_source() -> None:
    a = obs("Alice likes brief replies", facts=("lang=de",), priority=Priority.high, verified=False, tags=["style"])
    b = obs("Alice prefers short answers", facts=("lang=de", "tone=formal"), confidence=0.7, concepts=["answers"])
    draft = merged_draft([a, b])
    assert draft.trigger_source is TriggerSource.consolidation and draft.priority is Priority.high
    assert draft.facts == ["lang=de", "tone=formal"] or set(draft.facts) == {"lang=de", "tone=formal"}
    assert set(draft.merged_from) == {a.id, b.id} and draft.key is None
    assert draft.content_hash not in (a.content_hash, b.content_hash)
    assert merged_draft([b, a]).content_hash == draft.content_hash  # the same sources: the same row


def test_the_plan_merges_duplicates_supersedes_the_outdated_and_links_conflicts() -> None:
    new = obs("Müller moved to Hamburg", facts=("customer_id=1", "city=Hamburg"))
    dup = obs("Müller's new address is Hamburg", facts=("customer_id=1", "city=Hamburg"))
    old = obs("Müller is in Stuttgart", facts=("customer_id=1", "city=Stuttgart"), age=timedelta(days=40))
    rival = obs("Contact maybe Weber", facts=("customer_id=1", "contact=Weber"))
    steps = plan(
        new,
        [
            (dup, Verdict(Decision.duplicate, "same")),
            (old, Verdict(Decision.update, "city", current=new.id)),
            (rival, Verdict(Decision.conflict, "contact")),
        ],
        NOW,
    )
    assert [s.decision for s in steps] == [Decision.duplicate, Decision.update, Decision.conflict]
    assert {s.id for s in steps[0].sources} == {new.id, dup.id}
    assert steps[1].sources == [old] and steps[1].result is steps[0].result  # superseded by the merge
    assert steps[1].valid_to[old.id] == new.created_at


def test_an_outdated_new_observation_is_superseded_by_the_current_one_alone() -> None:
    new = obs("Müller is in Stuttgart", facts=("customer_id=1", "city=Stuttgart"), valid_from=NOW - timedelta(days=90))
    current = obs("Müller is in Hamburg", facts=("customer_id=1", "city=Hamburg"), valid_from=NOW - timedelta(days=3))
    steps = plan(new, [(current, Verdict(Decision.update, "city", current=current.id))], NOW)
    assert len(steps) == 1 and steps[0].sources == [new] and steps[0].result is current


def test_an_update_that_does_not_mention_everything_carries_the_rest_over() -> None:
    old = obs("Müller", facts=("customer_id=1", "city=Stuttgart", "industry=tools"), age=timedelta(days=40))
    new = obs("Müller moved to Hamburg", facts=("customer_id=1", "city=Hamburg"))
    [step] = plan(new, [(old, Verdict(Decision.update, "city", current=new.id))], NOW)
    assert {s.id for s in step.sources} == {old.id, new.id}
    assert "industry=tools" in step.result.facts and "city=Stuttgart" not in step.result.facts  # type: ignore[union-attr]


def test_the_models_answer_is_checked_against_the_candidates_it_saw() -> None:
    new, a, b = obs("n"), obs("a"), obs("b")
    out = ConsolidationOutput.model_validate(
        {
            "decisions": [
                {"candidate": 1, "decision": "duplicate", "reason": "same"},
                {"candidate": 2, "decision": "update", "current": "new", "reason": "moved"},
            ]
        }
    )
    verdicts = verdicts_of(out, new, [a, b])
    assert verdicts[a.id].decision is Decision.duplicate and verdicts[a.id].path is DecisionPath.llm
    assert verdicts[b.id].current == new.id
    for bad in (
        {"decisions": [{"candidate": 3, "decision": "duplicate", "reason": "x"}]},
        {"decisions": [{"candidate": 1, "decision": "update", "reason": "x"}]},
        {"decisions": [{"candidate": 1, "decision": "conflict", "reason": "x"}] * 2},
    ):
        try:
            verdicts_of(ConsolidationOutput.model_validate(bad), new, [a, b])
        except InvalidJudgement:
            continue
        raise AssertionError(f"accepted {bad}")


def test_digests_group_old_low_priority_memories_by_audience_and_topic() -> None:
    cutoff = NOW - timedelta(days=30)
    old = [obs(f"Lunch note {i}", priority=Priority.low, tags=["lunch"], age=timedelta(days=40 + i)) for i in range(4)]
    young = obs("Lunch note new", priority=Priority.low, tags=["lunch"], age=timedelta(days=2))
    normal = obs("Lunch note important", tags=["lunch"], age=timedelta(days=50))
    bobs = [
        obs(f"Lunch {i}", priority=Priority.low, tags=["lunch"], user_id="bob", age=timedelta(days=50))
        for i in range(2)
    ]
    groups = digest_groups([*old, young, normal, *bobs], older_than=cutoff, min_size=3)
    assert len(groups) == 1 and {o.id for o in groups[0]} == {o.id for o in old}
    draft = offline_digest(groups[0])
    assert draft.tags[0] == "digest" and draft.priority is Priority.low and len(draft.merged_from) == 4
    assert all(o.title in draft.narrative for o in old) and draft.title.startswith("Digest: lunch (4 memories")
    # a note written last but said first (a late event) is listed first, under the day it was said
    said_first = old[0].model_copy(update={"said_at": NOW - timedelta(days=90)})
    [group] = digest_groups([said_first, *old[1:]], older_than=cutoff, min_size=3)
    assert group[0] is said_first
    lines = offline_digest(group).narrative.splitlines()
    assert lines[0] == f"- {NOW - timedelta(days=90):%Y-%m-%d}: Lunch note 0"
