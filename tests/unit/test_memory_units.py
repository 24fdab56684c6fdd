"""Memory units beyond the single turn: building, reading back, and mapping hits back to turns."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram.domain.conversation import (
    BURST_CHARS,
    BURST_MESSAGES,
    ConversationSession,
    Turn,
    answered_question,
    bursts,
    chat_units,
    closing_question,
    derived_units,
    likely_assistants,
    session_uuid,
    turn_id_of,
    turn_units,
)
from engram.domain.memory_units import (
    EMBEDDED_TURN_CHARS,
    PASSAGE_CHARS,
    PASSAGE_TYPE,
    PASSAGES_PER_ANSWER,
    STATEMENTS_PER_TURN,
    SUPPORT_WEIGHT,
    UnitKind,
    collapse,
    embedded_by_title,
    names_in,
    source_ref,
    turn_of,
    unit_ref,
    unit_refs,
)
from engram.domain.observation import Observation, ObservationDraft, Priority, Provenance
from engram.domain.recall import RecallQuery, RecallResult, SearchHit
from engram.domain.search import passage_text
from engram.services.recall_plan import as_turns, merge_parts, with_parts
from tests.unit import recall_fixtures

DAY = datetime(2025, 1, 6, 9, 30, tzinfo=UTC)
PROSE = " ".join(f"Here is point number {n} about planning meals for a busy week." for n in range(30))


def stored(draft: ObservationDraft) -> Observation:
    """A draft as the store returns it (what recall hydrates)."""
    return recall_fixtures.stored(draft, DAY)


def chat() -> list[ConversationSession]:
    first = [
        Turn(
            "D1:1", "User", "Can you plan my meals for next week? By the way, I'm allergic to peanuts since childhood."
        ),
        Turn("D1:2", "Assistant", PROSE),
        Turn("D1:3", "User", "Thanks. My sister Lena lives in Porto and visits me in March."),
        Turn("D1:4", "Assistant", PROSE + " Lena will enjoy it."),
    ]
    second = [
        Turn("D2:1", "User", "I want to cook for Lena when she comes."),
        Turn("D2:2", "Assistant", PROSE),
    ]
    return [
        ConversationSession("session_1", DAY, first),
        ConversationSession("session_2", DAY + timedelta(days=9), second),
    ]


def base_args(sessions: list[ConversationSession]) -> dict[str, Any]:
    return {"tenant_id": "t", "user_id": "u", "conversation_id": "chat-1", "sessions": sessions}


def units(**kw: Any) -> list[ObservationDraft]:
    base: dict[str, Any] = {
        "tenant_id": "t",
        "user_id": "u",
        "conversation_id": "chat-1",
        "sessions": chat(),
        "kinds": frozenset(UnitKind),  # every kind (ingest derives the statements unless told)
    }
    return derived_units(**(base | kw))


def test_a_users_sentences_become_units_of_their_turn_the_assistants_prose_does_not() -> None:
    drafts = [d for d in units(assistants=frozenset({"Assistant"})) if d.key and d.key.startswith("unit:statement:")]
    # a question is a unit too: users tell facts inside requests ("plan my meals for next week");
    # D1:3 has one sentence besides a short "Thanks.", D2:1 one: their turn units are that sentence
    assert [d.title for d in drafts] == [
        "User: Can you plan my meals for next week?",
        "User: By the way, I'm allergic to peanuts since childhood.",
    ]
    request, peanuts = drafts
    assert request.key is not None and request.key.endswith(":0")  # numbered by its place in the turn
    assert peanuts.key is not None and peanuts.key.endswith(":1")
    assert turn_id_of(peanuts.provenance.source_event_id) == "D1:1"
    assert peanuts.tags == ["user"] and peanuts.valid_from == DAY and peanuts.discovery_tokens == []
    turn = turn_units(tenant_id="t", user_id="u", conversation_id="chat-1", sessions=chat())[0]
    assert peanuts.provenance.session_id == turn.provenance.session_id  # the session support counts it
    ref = unit_ref(stored(peanuts))
    assert ref is not None and ref.kind is UnitKind.statement and ref.turns == ("D1:1",) and ref.single
    # between people (no assistant named) nothing is split: their turns are short already
    assert not [d for d in units() if d.key and d.key.startswith("unit:statement:")]


def test_an_assistants_answer_in_passages_of_whole_sentences_mapped_to_its_turn() -> None:
    drafts = [d for d in units(assistants=frozenset({"Assistant"})) if d.key and d.key.startswith("unit:passage:")]
    first = [d for d in drafts if turn_id_of(d.provenance.source_event_id) == "D1:2"]
    sentences = [f"Here is point number {n} about planning meals for a busy week." for n in range(30)]
    # whole sentences, in order, each said once, up to PASSAGE_CHARS per passage
    assert " ".join(d.title.removeprefix("Assistant: ") for d in first) == " ".join(sentences)
    assert all(len(d.title) <= len("Assistant: ") + PASSAGE_CHARS for d in first) and len(first) > 5
    assert all(d.priority is Priority.low and d.tags == ["assistant"] for d in drafts)
    ref = unit_ref(stored(first[0]))
    assert ref is not None and ref.kind is UnitKind.passage and ref.turns == ("D1:2",) and ref.single
    assert not embedded_by_title(stored(first[0]))  # a passage is embedded: that is what it is for
    # a person's turns and a chat between people have none
    assert {turn_id_of(d.provenance.source_event_id) for d in drafts} == {"D1:2", "D1:4", "D2:2"}
    assert not [d for d in units() if d.key and d.key.startswith("unit:passage:")]


def test_a_pasted_document_makes_a_bounded_number_of_units() -> None:
    """A turn of many sentences keeps `STATEMENTS_PER_TURN` statements: what the person says of
    themselves, then the first and last sentences, each numbered by its place in the turn; an
    answer longer than `PASSAGES_PER_ANSWER` passages keeps its first ones."""
    pasted = " ".join(f"Clause {n} of the rental contract covers the heating costs of the flat." for n in range(80))
    text = f"Can you check this contract for me? {pasted} I prefer a short summary in German. Thanks a lot for that."
    answer = " ".join(f"Clause {n} of the contract means that the landlord pays the repairs." for n in range(200))
    sessions = [ConversationSession("session_1", DAY, [Turn("D1:1", "User", text), Turn("D1:2", "Assistant", answer)])]
    drafts = units(sessions=sessions, assistants=frozenset({"Assistant"}))
    statements = [d for d in drafts if d.key and d.key.startswith("unit:statement:")]
    assert len(statements) == STATEMENTS_PER_TURN
    titles = [d.title.removeprefix("User: ") for d in statements]
    assert "I prefer a short summary in German." in titles  # salient
    assert titles[0] == "Can you check this contract for me?" and titles[-1] == "Thanks a lot for that."
    places = [int((d.key or "").rsplit(":", 1)[1]) for d in statements]
    assert places == sorted(places) and places[0] == 0 and places[-1] == 82  # the turn's 83 sentences
    passages = [d for d in drafts if d.key and d.key.startswith("unit:passage:")]
    assert len(passages) == PASSAGES_PER_ANSWER
    assert passages[0].title.startswith("Assistant: Clause 0 of the contract")
    # the user's turn unit embeds the first EMBEDDED_TURN_CHARS of its narrative; BM25 reads all
    (turn,) = [d for d in turn_units(**base_args(sessions)) if d.key and d.key.endswith(":D1:1")]
    embedded = passage_text(stored(turn))
    assert turn.narrative is not None and len(turn.narrative) > EMBEDDED_TURN_CHARS + 1_000
    assert len(embedded) <= len(turn.title) + EMBEDDED_TURN_CHARS + 10 and "Clause 0 of" in embedded
    assert "Clause 79 of" not in embedded
    # a turn under the bounds keeps everything (the chat above: every sentence, every passage)
    assert len([d for d in units(assistants=frozenset({"Assistant"})) if d.key and ":D1:1:" in d.key]) == 2


def test_session_and_entity_units_map_to_their_session_and_turns() -> None:
    drafts = units(assistants=frozenset({"Assistant"}))
    sessions = [d for d in drafts if d.key and d.key.startswith("unit:session:")]
    assert len(sessions) == 2
    assert sessions[0].title.startswith("Session on 6 January 2025: User: Can you plan my meals")
    assert "Assistant" not in sessions[0].title  # the people's requests and statements only
    ref = unit_ref(stored(sessions[0]))
    assert ref is not None and ref.kind is UnitKind.session and ref.turns == ()
    entities = {d.title.split(":")[0]: d for d in drafts if d.key and d.key.startswith("unit:entity:")}
    assert list(entities) == ["About Lena"]  # Porto and March are said once; the speakers are no entity
    lena = entities["About Lena"]
    assert "Porto" in lena.title and "cook for Lena" in lena.title
    assert lena.provenance.session_id is None  # it joins sessions
    ref = unit_ref(stored(lena))
    assert ref is not None and ref.turns == ("D1:3", "D2:1") and not ref.single
    assert units(kinds=frozenset()) == []
    by_default = derived_units(
        tenant_id="t", user_id="u", conversation_id="c", sessions=chat(), assistants=frozenset({"Assistant"})
    )
    assert {(d.key or "").split(":")[1] for d in by_default} == {"statement", "passage"}
    assert {d.key for d in units()} == {d.key for d in units()}  # stable keys: re-ingesting updates in place


def test_names_are_capitalised_words_inside_a_sentence() -> None:
    assert names_in("We met Anna Berg in Porto. Then we left.") == ["Anna Berg", "Porto"]
    assert names_in("Ich besuche meine Schwester in Köln.") == [
        "Schwester",
        "Köln",
    ]  # German nouns: kept only if repeated


def test_a_source_ref_holds_as_many_turns_as_fit() -> None:
    ref = source_ref("c", [f"D{n}:{n}" for n in range(200)])
    assert len(ref) <= 512 and ref.startswith("c#D0:0 D1:1")


def hit(o: Observation, score: float) -> SearchHit:
    return SearchHit(observation=o, score=score, lexical_rank=1, vector_rank=None)


def test_hits_on_units_become_hits_on_turns() -> None:
    everything = units(assistants=frozenset({"Assistant"})) + turn_units(
        tenant_id="t", user_id="u", conversation_id="chat-1", sessions=chat()
    )
    by_key = {d.key: stored(d) for d in everything}
    turn1, turn3, turn4 = by_key["turn:chat-1:D1:1"], by_key["turn:chat-1:D1:3"], by_key["turn:chat-1:D1:4"]
    peanuts = by_key["unit:statement:chat-1:D1:1:1"]
    lena, session = by_key["unit:entity:chat-1:Lena"], by_key["unit:session:chat-1:session_1"]
    other = stored(ObservationDraft(tenant_id="t", user_id="u", title="A note that is no unit"))
    merged = as_turns([hit(peanuts, 0.05), hit(turn1, 0.02), hit(turn4, 0.03), hit(lena, 0.02), hit(session, 0.04)])
    # the turn unit stands for its turn at its statement's score; the session unit only supports
    assert [h.observation.key for h in merged] == ["turn:chat-1:D1:1", "turn:chat-1:D1:4", "unit:entity:chat-1:Lena"]
    assert merged[0].score == pytest.approx(0.05)
    # the entity unit names D1:3 (a candidate) and D2:1: it supports D1:3 and is no hit itself;
    # above, with neither candidate, it stayed a hit of its own
    merged = as_turns([hit(turn3, 0.01), hit(turn4, 0.035), hit(lena, 0.04), hit(other, 0.025)])
    assert [h.observation.key for h in merged] == ["turn:chat-1:D1:4", "turn:chat-1:D1:3", None]
    assert merged[1].score == pytest.approx(0.01 + SUPPORT_WEIGHT * 0.04)
    assert merged[1].boosts["support"] == pytest.approx((0.01 + SUPPORT_WEIGHT * 0.04) / 0.01)
    assert turn_of(peanuts) == turn_of(turn1) == ("chat-1", "D1:1") and turn_of(other) == other.id


def test_a_question_to_the_assistant_is_also_searched_among_its_passages_alone() -> None:
    asked = RecallQuery("What was your tip for keeping herbs fresh?")
    expanded, owners = with_parts([asked, RecallQuery("Which instrument am I learning?")])
    assert expanded[2:] == [dataclasses.replace(asked, types=(PASSAGE_TYPE,))] and owners == [0, 1, 0]
    # a query that names its types, or a stream's template, is searched as it is
    typed = RecallQuery("What was your tip for keeping herbs fresh?", types=("fact",))
    assert with_parts([typed])[0] == [typed]
    template = RecallQuery("What was your tip?", vector_text="herbs")
    assert with_parts([template])[0] == [template]


def test_collapse_keeps_what_is_no_unit_and_orders_by_score() -> None:
    out = collapse([("x", 0.2, None), ("y", 0.3, None)])
    assert out == [("y", 0.3, {}), ("x", 0.2, {})]


def test_a_question_naming_two_things_is_searched_in_parts_and_fused() -> None:
    queries = [RecallQuery("What are my employer and where my sister lives?"), RecallQuery("What is my job?")]
    expanded, owners = with_parts(queries)
    assert [q.text for q in expanded[2:]] == ["What are my employer", "where my sister lives?"]
    assert owners == [0, 1, 0, 0]
    assert with_parts([RecallQuery("a and b c", vector_text="x y")])[0] == [RecallQuery("a and b c", vector_text="x y")]
    a, b, c = (stored(ObservationDraft(tenant_id="t", user_id="u", title=f"memory {n}")) for n in "abc")
    qid = uuid.uuid4()
    results: list[RecallResult | Exception] = [
        RecallResult(qid, [hit(c, 0.05), hit(a, 0.04)]),
        RecallResult(uuid.uuid4(), [hit(c, 0.05)]),
        RecallResult(uuid.uuid4(), [hit(a, 0.04)]),
        RecallResult(uuid.uuid4(), [hit(b, 0.04), hit(a, 0.03)]),
    ]
    merged = merge_parts(queries, owners, results)
    first = merged[0]
    assert isinstance(first, RecallResult) and first.query_id == qid
    assert [h.observation.title for h in first.hits] == ["memory a", "memory c", "memory b"]  # in 3 lists, 1, 1
    assert first.hits[0].boosts["parts"] == pytest.approx(first.hits[0].score / 0.04)
    assert merged[1] is results[1]  # no parts: unchanged
    failed = merge_parts(queries, owners, [ValueError("x"), results[1], results[2], results[3]])
    assert isinstance(failed[0], ValueError)
    partial = merge_parts(queries, owners, [results[0], results[1], ValueError("part"), results[3]])
    assert isinstance(partial[0], RecallResult) and len(partial[0].hits) == 3


def test_an_assistants_turn_units_are_low_priority() -> None:
    drafts = turn_units(
        tenant_id="t", user_id="u", conversation_id="c", sessions=chat(), assistants=frozenset({"Assistant"})
    )
    assert {d.tags[0]: d.priority.value for d in drafts} == {"user": "normal", "assistant": "low"}
    plain = turn_units(tenant_id="t", user_id="u", conversation_id="c", sessions=chat())
    assert {d.priority.value for d in plain} == {"normal"}


def conversation(*turns: tuple[str, str]) -> list[ConversationSession]:
    return [ConversationSession("s1", DAY, [Turn(f"D1:{i}", who, text) for i, (who, text) in enumerate(turns, 1)])]


def test_the_assistant_of_an_imported_chat_is_found_by_name_or_by_its_long_turns() -> None:
    short = "I moved to Porto last week, can you plan my meals?"
    # named like one (whatever the length), as long as someone else speaks too
    assert likely_assistants(conversation(("user", short), ("ChatGPT", "Sure."))) == {"ChatGPT"}
    assert likely_assistants(conversation(("Nutzer", short), ("KI", "Gern."), ("Nutzer", short))) == {"KI"}
    assert likely_assistants(conversation(("Assistant", short))) == frozenset()  # nobody else speaks
    # unnamed: the speaker whose turns run long, against short ones
    assert likely_assistants(conversation(("Jon", short), ("Helper", PROSE), ("Jon", "Thanks!"))) == {"Helper"}
    # people chatting have none: similar lengths, or long turns only three times not reached
    chat = conversation(("Caroline", short), ("Melanie", short + " " + short), ("Caroline", short))
    assert likely_assistants(chat) == frozenset()
    medium = " ".join(["word"] * 70)
    assert likely_assistants(conversation(("A", " ".join(["word"] * 30)), ("B", medium))) == frozenset()
    three = conversation(("A", short), ("B", PROSE), ("C", short))
    assert likely_assistants(three) == frozenset()  # three people, nobody named like an assistant
    assert likely_assistants([]) == frozenset()


def messenger_chat() -> list[ConversationSession]:
    """A chat app's log: the user sends a thought as several short messages."""
    turns = [
        Turn("m1", "User", "guess what"),
        Turn("m2", "User", "I got the job at Siemens!! My friend Lena helped me with the interview."),
        Turn("m3", "User", ""),  # an empty message (a deleted one, a sticker without text)
        Turn("m4", "User", "I start in May, my manager is Jonas."),
        Turn("m5", "Assistant", "Congratulations! " + PROSE),
        Turn("m6", "User", "btw Lena says hi"),
    ]
    return [ConversationSession("s1", DAY, turns)]


def test_one_speakers_consecutive_messages_are_one_unit_citing_them_all() -> None:
    drafts = turn_units(tenant_id="t", user_id="u", conversation_id="c", sessions=messenger_chat())
    assert [d.key for d in drafts] == ["turn:c:m1", "turn:c:m5", "turn:c:m6"]  # keyed by the first message
    burst = drafts[0]
    assert burst.title == (
        "User: guess what I got the job at Siemens!! My friend Lena helped me with the interview."
        " I start in May, my manager is Jonas."
    )
    assert burst.provenance.source_event_id == "c#m1 m2 m4"
    ref = unit_ref(stored(burst))
    assert ref is not None and ref.kind is UnitKind.turn and ref.turns == ("m1", "m2", "m4") and ref.single
    assert turn_of(stored(burst)) == ("c", "m1")
    # turns that alternate between speakers (LoCoMo) are units of their own, as before
    plain = turn_units(tenant_id="t", user_id="u", conversation_id="c", sessions=chat())
    assert [turn_id_of(d.provenance.source_event_id) for d in plain] == ["D1:1", "D1:2", "D1:3", "D1:4", "D2:1", "D2:2"]


def test_a_bursts_statements_and_names_map_back_to_its_unit() -> None:
    sessions = messenger_chat()
    everything = turn_units(tenant_id="t", user_id="u", conversation_id="c", sessions=sessions) + derived_units(
        tenant_id="t",
        user_id="u",
        conversation_id="c",
        sessions=sessions,
        kinds=frozenset(UnitKind),
        assistants=frozenset({"Assistant"}),
    )
    by_key = {d.key: stored(d) for d in everything}
    statements = [k for k in by_key if k and k.startswith("unit:statement:")]
    assert statements == [f"unit:statement:c:m1:{n}" for n in range(3)]  # the burst's sentences
    jonas = by_key["unit:statement:c:m1:2"]
    assert jonas.title == "User: I start in May, my manager is Jonas." and turn_of(jonas) == ("c", "m1")
    lena = by_key["unit:entity:c:Lena"]
    ref = unit_ref(lena)
    assert ref is not None and ref.turns == ("m1", "m2", "m4", "m6")
    burst, last = by_key["turn:c:m1"], by_key["turn:c:m6"]
    merged = as_turns([hit(jonas, 0.05), hit(burst, 0.02), hit(lena, 0.04), hit(last, 0.01)])
    # the statement's turn is the burst (its unit stands for it); the name supports the burst once
    # although it names three of its messages, and the last message too
    assert [h.observation.key for h in merged] == ["turn:c:m1", "turn:c:m6"]
    assert merged[0].score == pytest.approx(0.05 + SUPPORT_WEIGHT * 0.04)
    assert merged[1].score == pytest.approx(0.01 + SUPPORT_WEIGHT * 0.04)


def test_the_other_persons_reaction_inside_a_burst_is_folded_in_where_it_was_said() -> None:
    turns = [
        Turn("m1", "Ana", "guess what"),
        Turn("m2", "Ben", "what?"),
        Turn("m3", "Ana", "I got the job at Siemens!!"),
        Turn("m4", "Ben", "oh wow"),
        Turn("m5", "Ana", "ok"),  # then a reaction again: Ben's run ends, Ana's begins
        Turn("m6", "Ben", "so proud"),
        Turn("m7", "Ana", "thanks!! starting in May"),
        Turn("m8", "Ben", "haha", image_caption="a cake"),  # a photo is more than a reaction
        Turn("m9", "Ben", "Where do we celebrate?"),
    ]
    got = [(t.turn_id, t.speaker, t.text) for t in bursts(turns)]
    assert got == [
        ("m1 m2 m3", "Ana", "guess what [Ben: what?] I got the job at Siemens!!"),
        ("m4", "Ben", "oh wow"),
        ("m5 m6 m7", "Ana", "ok [Ben: so proud] thanks!! starting in May"),
        ("m8 m9", "Ben", "haha [shares a photo: a cake] Where do we celebrate?"),
    ]
    units = turn_units(tenant_id="t", user_id="u", conversation_id="c", sessions=[ConversationSession("s", DAY, turns)])
    assert units[0].provenance.source_event_id == "c#m1 m2 m3" and units[0].title.startswith("Ana: guess what [Ben:")


def test_an_assistants_answer_is_embedded_by_its_opening_and_kept_whole() -> None:
    drafts = turn_units(
        tenant_id="t", user_id="u", conversation_id="chat-1", sessions=chat(), assistants=frozenset({"Assistant"})
    )
    by_key = {d.key: stored(d) for d in drafts}
    answer, request = by_key["turn:chat-1:D1:2"], by_key["turn:chat-1:D1:1"]
    assert embedded_by_title(answer) and not embedded_by_title(request)
    assert passage_text(answer) == f"{answer.title}\nassistant" and len(answer.title) <= 500
    assert PROSE in answer.narrative  # stored, shown and read by BM25 in full
    assert request.narrative in passage_text(request)  # a person's turn: title, narrative and tag
    # low priority alone is not enough: a digest (no conversation unit) is embedded whole
    digest = stored(
        ObservationDraft(tenant_id="t", user_id="u", title="Digest: meals", narrative="- a\n- b", priority=Priority.low)
    )
    assert not embedded_by_title(digest) and "- a" in passage_text(digest)


def test_a_reply_says_which_question_of_the_turn_before_it_answers() -> None:
    asked = f"{PROSE} Which car do you drive?"
    sessions = conversation(
        ("User", "Plan my week, please."),
        ("Assistant", asked),
        ("User", "A grey Ford Focus. Thanks, that helps."),
        ("Assistant", PROSE),
        ("User", "Can you make it shorter?"),
    )
    drafts = turn_units(
        tenant_id="t", user_id="u", conversation_id="c", sessions=sessions, assistants=frozenset({"Assistant"})
    )
    by_key = {d.key: stored(d) for d in drafts}
    reply = by_key["turn:c:D1:3"]
    assert reply.title == "User: A grey Ford Focus. Thanks, that helps."  # what was said, as it was said
    said = "Assistant asked: Which car do you drive? User said: A grey Ford Focus. Thanks, that helps."
    assert reply.narrative == f"On {DAY.day} January 2025, {said}"
    assert "Which car do you drive?" in passage_text(reply)  # embedded with it
    # read back (recall's corrections), whatever the case of the speaker's tag
    answered = ("Which car do you drive?", "A grey Ford Focus. Thanks, that helps.")
    assert answered_question(reply.narrative, "user") == answered == answered_question(reply.narrative, "User")
    assert answered_question(by_key["turn:c:D1:5"].narrative, "User") is None
    # an answer that ends without a question, the first turn and the assistant's own turns say nothing more
    assert by_key["turn:c:D1:5"].narrative.endswith(", User said: Can you make it shorter?")
    assert "asked" not in by_key["turn:c:D1:1"].narrative and "asked:" not in by_key["turn:c:D1:4"].narrative
    # between people the same: the next speaker's turn carries the question it answers
    people = conversation(
        ("Jon", "Back from my trip! Guess where I went?"), ("Gina", "Was it Paris again?"), ("Jon", "Lisbon!")
    )
    drafts = turn_units(tenant_id="t", user_id="u", conversation_id="c", sessions=people)
    narratives = {d.key: d.narrative for d in drafts}
    assert narratives["turn:c:D1:2"].endswith("Jon asked: Guess where I went? Gina said: Was it Paris again?")
    assert narratives["turn:c:D1:3"].endswith("Gina asked: Was it Paris again? Jon said: Lisbon!")
    assert "asked:" not in narratives["turn:c:D1:1"]
    # one speaker's consecutive messages are one turn (`bursts`): no question of their own to answer
    alone = conversation(("Jon", "Where is it? Never mind."), ("Jon", "Found it."))
    assert all(
        "asked:" not in d.narrative for d in turn_units(tenant_id="t", user_id="u", conversation_id="c", sessions=alone)
    )
    assert closing_question(asked) == "Which car do you drive?"
    # one of the last two sentences; an offer after it does not hide it, one earlier is not it
    assert closing_question("Here is the plan. Which day suits you? I can adjust it.") == "Which day suits you?"
    assert closing_question("Which day suits you? Here is the plan. I can adjust it later.") is None
    assert closing_question("Shall I shorten it?") == "Shall I shorten it?"
    assert closing_question("") is None


def test_a_burst_ends_at_its_size_limit() -> None:
    long = [Turn(f"m{n}", "User", "word " * 60) for n in range(4)]  # 300 characters each
    shorts = [Turn(f"s{n}", "User", "ok") for n in range(BURST_MESSAGES + 1)]
    assert [t.turn_id for t in bursts(long)] == ["m0", "m1", "m2", "m3"]
    assert [len(t.turn_id.split()) for t in bursts(shorts)] == [BURST_MESSAGES, 1]
    assert all(len(t.spoken()) <= BURST_CHARS for t in bursts([*long, *shorts]))
    # chat message ids are often UUIDs: a burst cites as many as fit its provenance
    ids = [Turn(str(uuid.uuid4()), "User", "ok") for _ in range(BURST_MESSAGES)]
    joined = bursts(ids)
    assert [len(t.turn_id.split()) for t in joined] == [10, 10]
    session = ConversationSession("s", DAY, ids)
    refs = [
        d.provenance.source_event_id or ""
        for d in turn_units(tenant_id="t", user_id="u", conversation_id="c" * 100, sessions=[session])
    ]
    assert len(refs) == 2 and all(len(r) <= 512 for r in refs)


def test_a_chat_sessions_messages_become_units_citing_them() -> None:
    chat, session = uuid.uuid4(), uuid.uuid4()
    m1, m2, m3, m4 = (uuid.uuid4() for _ in range(4))
    at = datetime(2026, 5, 8, 9, 30, tzinfo=UTC)
    drafts = chat_units(
        tenant_id="t",
        user_id="alice",
        chat_id=chat,
        session_id=session,
        started_at=at,
        messages=[
            (uuid.uuid4(), "system", "You are a helpful assistant."),
            (m1, "user", "I got the job at Siemens!"),
            (m2, "user", "I start in May and will move to Munich for it."),
            (m3, "assistant", "Congratulations! " + "Here is how to plan the move. " * 20),
            (m4, "user", "   "),
        ],
    )
    turns = [d for d in drafts if d.key and d.key.startswith("turn:")]
    assert [d.key for d in turns] == [f"turn:{chat}:{m1}", f"turn:{chat}:{m3}"]  # one burst, one answer
    burst, answer = turns
    assert burst.provenance.source_event_id == f"{chat}#{m1} {m2}" and burst.provenance.chat_message_id == m1
    assert "User said: I got the job at Siemens! I start in May" in burst.narrative and burst.valid_from == at
    assert answer.priority is Priority.low and burst.priority is Priority.normal
    assert {d.provenance.session_id for d in drafts} == {session}  # the chat's own session, not a derived id
    assert {(d.user_id, d.scope.value) for d in drafts} == {("alice", "private")}
    statements = [d for d in drafts if d.key and d.key.startswith("unit:statement:")]
    assert len(statements) == 2 and all(d.provenance.chat_message_id == m1 for d in statements)
    assert not any("helpful assistant" in d.narrative for d in drafts)
    assert chat_units(tenant_id="t", user_id="a", chat_id=chat, session_id=session, started_at=at, messages=[]) == []
    assert (
        session_uuid("conv-26", "session_1") == session_uuid("conv-26", "session_1") != session_uuid("c", "session_1")
    )


def test_the_units_a_chat_message_reaches_are_its_turns_those_after_and_the_context_before() -> None:
    """`chat_units(reaching=m)`: what a completed turn writes at once. The units of m's turn, of
    the turns after it, and of the TURN_WINDOW turns before it (their 'After' context holds m),
    each exactly as the whole session gives it, so the session's end rewrites none of them."""
    chat, session = uuid.uuid4(), uuid.uuid4()
    ids = [uuid.uuid4() for _ in range(8)]
    said = [
        (m, "user" if n % 2 == 0 else "assistant", f"Message {n}: " + ("I play the ukulele. " * (1 + n % 2) * 4))
        for n, m in enumerate(ids)
    ]

    def units(**extra: Any) -> list[ObservationDraft]:
        return chat_units(
            tenant_id="t", user_id="alice", chat_id=chat, session_id=session, started_at=DAY, messages=said, **extra
        )

    everything = {d.key: d for d in units()}
    reached = units(reaching=ids[6])  # the fourth user message: turns 4 to 7 (TURN_WINDOW = 2 before it)
    assert {d.provenance.chat_message_id for d in reached} == set(ids[4:])
    assert all(everything[d.key] == d for d in reached)  # the same drafts the session's end writes
    assert {d.provenance.chat_message_id for d in units(reaching=ids[0])} == set(ids)
    assert units(reaching=uuid.uuid4()) == []  # not a message of the session


def test_what_extraction_kept_of_a_message_takes_its_turns_place_once() -> None:
    chat_id, session = uuid.uuid4(), uuid.uuid4()
    m1, m2, m3 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    drafts = chat_units(
        tenant_id="t",
        user_id="u",
        chat_id=chat_id,
        session_id=session,
        started_at=DAY,
        messages=[(m1, "user", "I moved to Hamburg."), (m2, "assistant", "Welcome to Hamburg!")],
    )
    by_key = {d.key: stored(d) for d in drafts}
    mine = by_key[f"turn:{chat_id}:{m1}"]

    def extracted(message: uuid.UUID) -> Observation:
        return stored(
            ObservationDraft(
                tenant_id="t",
                user_id="u",
                title="The user moved to Hamburg",
                provenance=Provenance(session_id=session, chat_message_id=message, source_event_id="evt-1"),
            )
        )

    fact, elsewhere = extracted(m1), extracted(m3)
    merged = as_turns([hit(fact, 0.05), hit(mine, 0.03), hit(elsewhere, 0.02)])
    # the turn unit stands for its turn at the extracted fact's score; a fact of a message no
    # candidate unit holds stays a hit of its own
    assert [h.observation.id for h in merged] == [mine.id, elsewhere.id]
    assert merged[0].score == pytest.approx(0.05)
    assert unit_refs([elsewhere]) == [None]


def test_what_extraction_kept_of_a_message_takes_one_place_with_its_statement_unit_too() -> None:
    chat_id, session, m1 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    said = "Quick update: we fly to Iceland in June. Can you turn that into a checklist?"
    drafts = chat_units(
        tenant_id="t", user_id="u", chat_id=chat_id, session_id=session, started_at=DAY, messages=[(m1, "user", said)]
    )
    statement = next(stored(d) for d in drafts if d.key and d.key.startswith("unit:statement:"))
    event = stored(
        ObservationDraft(
            tenant_id="t",
            user_id="u",
            type="event",
            title="Quick update: we fly to Iceland in June.",
            provenance=Provenance(session_id=session, chat_message_id=m1, source_event_id="evt-1"),
        )
    )
    merged = as_turns([hit(statement, 0.04), hit(event, 0.03)])
    assert [h.observation.id for h in merged] == [statement.id]  # one place, the better of the two
    assert merged[0].score == pytest.approx(0.04)


def test_a_question_that_names_a_day_is_also_searched_within_it() -> None:
    from datetime import UTC, datetime

    dated = RecallQuery("What movie did Joanna watch on 1 May, 2022?")
    expanded, owners = with_parts([dated, RecallQuery("Which instrument am I learning?")])
    window = (datetime(2022, 4, 30, tzinfo=UTC), datetime(2022, 5, 3, tzinfo=UTC))
    assert expanded[2:] == [dataclasses.replace(dated, said_within=window)] and owners == [0, 1, 0]
    # a window's own search is not split again, nor a stream's template
    assert with_parts([expanded[2]])[0] == [expanded[2]]
    template = RecallQuery("What happened on 1 May, 2022?", vector_text="events")
    assert with_parts([template])[0] == [template]
    # a chat stream's query whose templates are the message itself: the message, windows and parts
    message = "What did I say about my sister and my employer on 1 May, 2022?"
    stream = RecallQuery(message, vector_text=message, types=("fact",), stream_origin="facts")
    expanded, owners = with_parts([stream])
    assert [(q.text, q.vector_text, q.said_within, q.types) for q in expanded[1:]] == [
        ("What did I say about my sister", None, None, ("fact",)),
        ("my employer on 1 May, 2022?", None, None, ("fact",)),
        (message, message, window, ("fact",)),
    ] and owners == [0, 0, 0, 0]


def test_yesterday_is_the_day_before_the_recalls_instant_in_the_askers_zone() -> None:
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    asked = RecallQuery("What did I tell you yesterday?", zone=ZoneInfo("UTC"))
    now = datetime(2026, 12, 7, 10, tzinfo=UTC)
    expanded, _ = with_parts([asked], now)
    window = (datetime(2026, 12, 6, tzinfo=UTC), datetime(2026, 12, 7, tzinfo=UTC))
    assert expanded[1:] == [dataclasses.replace(asked, said_within=window)]
    as_of = dataclasses.replace(asked, as_of=datetime(2026, 3, 2, tzinfo=UTC))  # "yesterday" as of then
    then = (datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC))
    assert with_parts([as_of], now)[0][1].said_within == then
    tokyo = dataclasses.replace(asked, zone=ZoneInfo("Asia/Tokyo"))  # 19:00 there
    assert with_parts([tokyo], now)[0][1].said_within == (
        datetime(2026, 12, 5, 15, tzinfo=UTC),
        datetime(2026, 12, 6, 15, tzinfo=UTC),
    )
    anywhere = with_parts([dataclasses.replace(asked, zone=None)], now)[0][1].said_within
    # no zone: every zone's yesterday, from UTC+13:45's (still the 7th there) to UTC+14's (the 8th began now)
    assert anywhere == (datetime(2026, 12, 5, 10, 15, tzinfo=UTC), now)
    assert with_parts([asked])[0] == [asked]  # no instant: no relative day


async def test_streams_searched_together_within_a_day_keep_the_window() -> None:
    """Two streams of one turn that search the same text within the same day share one search
    (`recall_plan.shared_list`), and that search keeps the window."""
    from engram.domain.scopes import Visibility
    from engram.domain.search import Ranked, SearchFilter
    from engram.services.recall_plan import Plan, groups, shared_list

    window = (datetime(2026, 12, 5, tzinfo=UTC), datetime(2026, 12, 8, tzinfo=UTC))
    now = datetime(2026, 12, 7, tzinfo=UTC)
    seen: list[SearchFilter] = []

    async def search(_: Visibility, __: str, where: SearchFilter, limit: int) -> list[Ranked]:
        seen.append(where)
        return []

    plans = [
        Plan(
            query=RecallQuery("What did I tell you yesterday?", types=(t,), said_within=window),
            text="What did I tell you yesterday?",
            vector_text="What did I tell you yesterday?",
            visibility=Visibility("t", "u", frozenset(), False),
            where=SearchFilter(now=now, types=(t,), within=window),
            pool=10,
        )
        for t in ("fact", "event")
    ]
    plain = dataclasses.replace(plans[0], where=SearchFilter(now=now, types=("fact",)))
    assert [len(g) for g in groups([*plans, plain], "text")] == [2, 1]  # a window searches apart
    await shared_list(plans, plans[0].text, search)
    assert seen and all(w.within == window for w in seen)
