"""The newer of two near-duplicate statements first (`domain/recency`, `recall_scoring`)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from engram.domain import life_topics
from engram.domain.facts import content_tokens, corrected_check, says_changed
from engram.domain.observation import Observation, ObservationDraft, Priority, Provenance
from engram.domain.recall import RecallQuery, SearchHit
from engram.domain.recency import CHANGED_NEAR, NEAR_DUPLICATE, Said, newer_first, supersedes
from engram.domain.scopes import Visibility
from engram.domain.search import Ranked, SearchFilter
from engram.services.recall_plan import Plan
from engram.services.recall_scoring import later_statements_first, scored_hits

MAY = datetime(2025, 5, 6, tzinfo=UTC)
JUNE = MAY + timedelta(days=30)
QUESTION = content_tokens("When do I do yoga?")


def vec(*xs: float) -> Any:
    return np.asarray(xs, dtype=np.float32)


def said(text: str, at: datetime, v: Any, speaker: str = "user") -> Said:
    return Said(speaker, at, content_tokens(text), v)


OLD = said("Monday mornings are for yoga", MAY, vec(1.0, 0.1, 0.0))
NEW = said("I moved my yoga to Wednesday mornings", JUNE, vec(1.0, 0.12, 0.02))


def test_a_later_near_duplicate_of_the_same_speaker_sharing_a_question_word_supersedes() -> None:
    assert supersedes(NEW, OLD, QUESTION)
    assert not supersedes(OLD, NEW, QUESTION)  # said before it
    assert not supersedes(said("I moved my yoga to Wednesday", JUNE, NEW.vector, "anna"), OLD, QUESTION)
    assert not supersedes(NEW, OLD, content_tokens("What do I do on Mondays?"))  # no shared question word
    far = said("I moved my yoga to Wednesday mornings", JUNE, vec(0.2, 1.0, 0.0))
    assert float(far.vector @ OLD.vector) / float(np.linalg.norm(far.vector) * np.linalg.norm(OLD.vector)) < (
        NEAR_DUPLICATE
    )
    assert not supersedes(far, OLD, QUESTION)  # not a near duplicate


def cosine(a: Any, b: Any) -> float:
    return float(a @ b) / float(np.linalg.norm(a) * np.linalg.norm(b))


def test_a_later_statement_that_says_it_changed_supersedes_without_a_question_word() -> None:
    """Questions paraphrase: "Which vehicle is parked in my driveway?" shares no word with "I drive
    a blue Golf" or "I traded in my car, I have a black Audi A4 now"; the change marker stands in."""
    question = content_tokens("Which vehicle is parked in my driveway?")
    text = "I traded in my car, I have a black Audi A4 now"
    old = said("I drive a blue VW Golf", MAY, vec(1.0, 0.0, 0.0))
    new = Said("user", JUNE, content_tokens(text), vec(1.0, 0.41, 0.0), changed=says_changed(text))
    assert new.changed and NEAR_DUPLICATE > cosine(new.vector, old.vector) >= CHANGED_NEAR
    assert supersedes(new, old, question)
    assert not supersedes(dataclasses.replace(new, changed=False), old, question)  # no marker, no shared word
    assert not supersedes(dataclasses.replace(new, at=MAY - timedelta(days=1)), old, question)  # said before
    assert not supersedes(dataclasses.replace(new, speaker="anna"), old, question)
    apart = dataclasses.replace(new, vector=vec(1.0, 0.5, 0.0))  # a change of something else
    assert cosine(apart.vector, old.vector) < CHANGED_NEAR and not supersedes(apart, old, question)


def test_newer_first_moves_the_later_statement_just_above_the_earlier() -> None:
    ranked = [("a", 0.05), ("old", 0.04), ("b", 0.03), ("new", 0.02), ("c", 0.01)]
    moved = newer_first(ranked, {"old": [OLD], "new": [NEW]}, QUESTION)
    assert [k for k, _ in moved] == ["a", "new", "old", "b", "c"]
    assert dict(moved)["new"] > 0.04 > dict(moved)["b"]  # just above the one it overtakes
    assert newer_first(ranked, {"old": [NEW], "new": [OLD]}, QUESTION) == ranked  # already newer first
    assert newer_first(ranked, {}, QUESTION) == ranked


def stored(title: str, at: datetime, key: str, ref: str) -> Observation:
    draft = ObservationDraft(
        tenant_id="t",
        user_id="u",
        title=title,
        key=key,
        tags=["user"],
        valid_from=at,
        provenance=Provenance(source_event_id=ref),
    )
    data: dict[str, Any] = draft.model_dump()
    data.pop("merged_from", None)
    return Observation(
        **data,
        id=uuid.uuid4(),
        content_hash="h",
        relevance_count=0,
        superseded_by=None,
        created_at=at,
        updated_at=at,
    )


def plan_for(question: str, vectors: dict[str, Any]) -> Plan:
    """A hybrid plan for `question` that read these statement vectors."""
    return Plan(
        query=RecallQuery(text=question, limit=10, mode="hybrid"),
        text=question,
        vector_text=question,
        visibility=Visibility(tenant_id="t", user_id="u", teams=frozenset(), include_sensitive=False),
        where=SearchFilter(now=JUNE),
        pool=20,
        vectors=vectors,
    )


def test_recall_puts_the_turn_of_the_later_statement_first_and_names_the_boost() -> None:
    old = stored("user: Monday mornings are for yoga", MAY, "unit:statement:c:D1:1:0", "c#D1:1")
    new = stored("user: I moved my yoga to Wednesday mornings", JUNE, "unit:statement:c:D5:1:1", "c#D5:1")
    turn = stored("user: Monday mornings are for yoga. I never skip.", MAY, "turn:c:D1:1", "c#D1:1")
    hits = [SearchHit(observation=o, score=s, lexical_rank=1, vector_rank=1) for o, s in ((old, 0.04), (new, 0.03))]
    plan = plan_for("When do I do yoga?", {str(old.id): OLD.vector, str(new.id): NEW.vector})
    turns = [SearchHit(observation=turn, score=0.04, lexical_rank=1, vector_rank=1), hits[1]]
    first, second = later_statements_first(turns, hits, plan)
    assert first.observation is new and second.observation is turn
    assert first.boosts["newer"] == round(first.score / 0.03, 6) and first.score > 0.04
    # not near duplicates: a routine's day is a fact of the user's life all the same (`life_topics`)
    plan.vectors = {str(old.id): OLD.vector, str(new.id): vec(0.0, 0.0, 1.0)}
    assert later_statements_first(turns, hits, plan)[0].observation is new
    # other statements need the near vectors
    party = stored("user: the garden party is on the lawn", MAY, "unit:statement:c:D1:1:0", "c#D1:1")
    moved = stored("user: the garden party moved to the terrace", JUNE, "unit:statement:c:D5:1:1", "c#D5:1")
    hits = [SearchHit(observation=o, score=s, lexical_rank=1, vector_rank=1) for o, s in ((party, 0.04), (moved, 0.03))]
    plan = plan_for("Where is the garden party?", {str(party.id): OLD.vector, str(moved.id): vec(0.0, 0.0, 1.0)})
    assert later_statements_first(hits, hits, plan) == hits


def test_a_no_to_the_assistants_check_corrects_what_the_check_names() -> None:
    """'Is your sister still living in Porto?' - 'No, she moved to Leeds.': the reply holds the new
    value, the check the old one; the statement that named it is what the reply corrects."""
    check = "Is your sister still living in Porto?"
    words = corrected_check(check, "No, she moved to Leeds a while ago.")
    assert {"porto", "sist"} <= words
    assert corrected_check("Wohnt Ihre Schwester noch in Freiburg?", "Nicht mehr, jetzt Bremen.")
    assert corrected_check(check, "Moved to Leeds in May.")  # says that it changed, without a no
    assert not corrected_check(check, "Yes, still there.")  # confirmed
    assert not corrected_check("Where does your sister live?", "No idea, Leeds maybe.")  # no check
    old = said("my sister Lena just moved to Porto", MAY, vec(1.0, 0.0, 0.0))
    reply = Said("user", JUNE, frozenset(), None, corrects=words)
    assert supersedes(reply, old, frozenset())
    assert not supersedes(reply, said("my brother lives in Porto", MAY, vec(1.0, 0.0, 0.0)), frozenset())  # one word
    assert not supersedes(dataclasses.replace(reply, at=MAY - timedelta(days=1)), old, frozenset())
    assert not supersedes(old, reply, frozenset())  # a statement never restates a reply without a vector


def test_recall_puts_the_turn_that_corrects_a_check_above_the_statement_it_corrects() -> None:
    old = stored("user: my sister Lena just moved to Porto", MAY, "unit:statement:c:D1:1:0", "c#D1:1")
    other = stored("user: I drive a blue Golf", MAY, "unit:statement:c:D1:3:0", "c#D1:3")
    reply = stored("user: No, she moved to Leeds. Can you shorten it?", JUNE, "turn:c:D5:3", "c#D5:3")
    reply = reply.model_copy(
        update={
            "narrative": "On 5 June 2025, Assistant asked: Is your sister still living in Porto? user said: No, she"
            " moved to Leeds. Can you shorten it?"
        }
    )
    hits = [
        SearchHit(observation=o, score=s, lexical_rank=1, vector_rank=1)
        for o, s in ((old, 0.04), (other, 0.035), (reply, 0.03))
    ]
    plan = plan_for("Where does my sister live?", {str(old.id): OLD.vector, str(other.id): vec(0.0, 1.0, 0.0)})
    first, second, third = later_statements_first(hits, hits, plan)
    assert (first.observation, second.observation, third.observation) == (reply, old, other)
    assert "newer" in first.boosts


def test_a_later_statement_from_below_the_limit_moves_above_the_one_it_restates() -> None:
    """The current statement ranked 11th of a top 10 that holds the stale one: it takes its place
    above it (`RESTATED_DEPTH`); the hit it pushes out is the 10th."""
    old = stored("user: I drive a black Honda Civic", MAY, "unit:statement:c:D1:1:0", "c#D1:1")
    topics = "plants tea rain cats jazz chess bread maps ink".split()
    fillers = [stored(f"user: {w}", MAY, f"unit:statement:c:D2:{n}:0", f"c#D2:{n}") for n, w in enumerate(topics)]
    new = stored("user: I drive a blue Golf now", MAY + timedelta(days=1), "unit:statement:c:D5:1:0", "c#D5:1")
    ranked = [old, *fillers, new]
    plan = plan_for("Which car do I drive?", {str(old.id): vec(1.0, 0.0, 0.0), str(new.id): vec(1.0, 0.1, 0.0)})
    plan.vector = [Ranked(id=str(o.id), score=1.0 - n / 100) for n, o in enumerate(ranked)]
    plan.fuse()
    found = {str(o.id): o for o in ranked}
    hits = scored_hits(plan, found, JUNE)
    assert len(hits) == 10
    assert [h.observation for h in hits[:2]] == [new, old] and "newer" in hits[0].boosts
    assert fillers[-1] not in [h.observation for h in hits]
    plan.vectors = {str(old.id): vec(1.0, 0.0, 0.0), str(new.id): vec(0.0, 0.0, 1.0)}  # the car: a fact of life
    assert [h.observation for h in scored_hits(plan, found, JUNE)][:2] == [new, old]
    # from below the cut a change marker with a near vector is not enough: it needs a question word
    # (or a fact of life: "Sold it" does not say what)
    sold = stored("user: Sold it, it's a blue Golf now", MAY + timedelta(days=1), "unit:statement:c:D5:1:0", "c#D5:1")
    plan.vectors = {str(old.id): vec(1.0, 0.0, 0.0), str(sold.id): vec(1.0, 0.1, 0.0)}
    plan.vector[-1] = Ranked(id=str(sold.id), score=0.5)
    plan.fuse()
    assert [h.observation for h in scored_hits(plan, {**found, str(sold.id): sold}, JUNE)] == ranked[:10]


def test_a_check_without_still_and_a_reply_that_sold_or_cancelled_it() -> None:
    """'Bleibt es beim Zahnarzt am 3. März?' checks as 'noch' does; 'Sold it', 'Verkauft',
    'cancelled', 'storniert' say that something changed."""
    assert {"zahnarzt", "märz"} <= corrected_check("Bleibt es beim Zahnarzt am 3. März?", "Nein, verschoben.")
    assert corrected_check("Are you still driving the black Civic?", "Sold it, it's a blue Golf these days.")
    assert corrected_check("Fahren Sie noch einen weißen BMW i3?", "Verkauft, ich habe einen schwarzen Audi A4.")
    for text in ("The old trip is cancelled; Morocco in March is the new plan.", "Die alte Reise ist storniert."):
        assert says_changed(text)
    assert not says_changed("We booked a holiday in Lisbon for April.")


def test_a_later_value_of_a_fact_of_life_restates_the_earlier_whatever_the_vectors() -> None:
    """'I drive a red Toyota' / 'I sold my old car and bought a Tesla' share no question word and
    are no near duplicates; they give the same fact of the user's life (`life_topics`)."""

    def life(text: str, at: datetime) -> Said:
        return dataclasses.replace(
            said(text, at, vec(1.0, 0.0, 0.0)), life=life_topics.facts_of(text), current=life_topics.current(text)
        )

    toyota = life("By the way, I drive a red Toyota Corolla.", MAY)
    tesla = dataclasses.replace(life("I sold my old car and bought a white Tesla.", JUNE), vector=vec(0.0, 1.0, 0.0))
    assert supersedes(tesla, toyota, frozenset())
    assert not supersedes(toyota, tesla, frozenset())  # the earlier never restates the later
    lena = life("My sister Lena lives in Porto.", MAY)
    assert supersedes(life("My sister moved to Leeds.", JUNE), lena, frozenset())
    assert not supersedes(life("My sister Mia moved to Leeds.", JUNE), lena, frozenset())  # another sister
    also = life("I also have an old Fiat car for the allotment.", JUNE)  # one more, no current value
    assert not supersedes(dataclasses.replace(also, vector=vec(0.0, 1.0, 0.0)), toyota, frozenset())


def test_a_turn_without_its_statement_among_the_candidates_moves_by_its_fact_of_life() -> None:
    """The later turn's own sentence says the appointment moved: it goes above the turn that gave
    the old date, though no statement unit of either is among the candidates."""
    old = stored("user: My dentist appointment is on 5 August. What can I plant?", MAY, "turn:c:D4:1", "c#D4:1")
    other = stored("user: I drive a blue Golf", MAY, "unit:statement:c:D1:3:0", "c#D1:3")
    new = stored(
        "user: Oh, and the dentist moved my appointment to 3 March. What are the usual mistakes?",
        JUNE,
        "turn:c:D6:5",
        "c#D6:5",
    )
    hits = [
        SearchHit(observation=o, score=s, lexical_rank=1, vector_rank=1)
        for o, s in ((old, 0.04), (other, 0.035), (new, 0.03))
    ]
    plan = plan_for("On what date is my next check-up?", {str(other.id): vec(0.0, 1.0, 0.0)})
    assert [h.observation for h in later_statements_first(hits, hits, plan)] == [new, old, other]
    # a sentence of the later turn that does not say it moved leaves a plan where it is
    booked = new.model_copy(update={"title": "user: I also booked the dentist for 3 March. Thanks!"})
    hits[2] = dataclasses.replace(hits[2], observation=booked)
    assert [h.observation for h in later_statements_first(hits, hits, plan)] == [old, other, booked]
    # an assistant's turn (low priority) gives no fact of the user's life
    answer = new.model_copy(update={"priority": Priority.low})
    hits[2] = dataclasses.replace(hits[2], observation=answer)
    assert [h.observation for h in later_statements_first(hits, hits, plan)] == [old, other, answer]
