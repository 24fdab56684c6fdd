"""Whom a question asks about (`engram.domain.addressee`): what the assistant said, found again
when the user asks for it; the user's own facts first otherwise."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench.chatgen_advice import ADVICE
from engram.domain.addressee import (
    ADDRESSED_WEIGHT,
    UNASKED_WEIGHT,
    addressee_support,
    asks_about_user,
    asks_assistant,
    unasked_types,
)
from engram.domain.conversation import ConversationSession, Turn, chat_units, derived_units, turn_units
from engram.domain.memory_units import PASSAGE_TYPE, UnitKind
from engram.domain.observation import Observation, ObservationDraft
from tests.unit import recall_fixtures

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
DAY = NOW - timedelta(days=20)


@pytest.mark.parametrize(
    "question",
    [
        "What was your trick for keeping fresh herbs from wilting?",
        "How long did you say a nap can be before it ruins the night?",
        "What did you recommend so I don't spend too much on food shopping?",
        "Which recipe did you give me last week?",
        "You mentioned a book about habits, which one was it?",
        "Was hast du mir gegen die Rückenschmerzen empfohlen?",
        "Welche Raumtemperatur sollte ich laut dir zum Schlafen haben?",
        "Wie war nochmal dein Tipp für die Kräuter?",
        "Was hattest du über Meetings ohne Agenda gesagt?",
        # a subordinate clause (the verb last), an earlier chat named, what the assistant gave
        "Kannst du mich erinnern, welches Restaurant du mir in Rom empfohlen hast?",
        "I'm going back to our previous conversation about sourdough. Can you remind me of the flour ratio?",
        "In unserem letzten Gespräch ging es um Steuern: welche Frist galt noch mal?",
        "What was the name of the hotel from your list?",
        # what it made or handed over, not only what it said
        "What was the 7th job in the list of jobs you provided earlier?",
        "Can you remind me of the itinerary you put together for Lisbon?",
        "Which three books did you list for me?",
        "The recipe you shared called for how much flour?",
        "What was your itinerary for day two?",
        "Welche Restaurants hast du mir für Lissabon aufgelistet?",
        "Wie hoch war die Miete, die du für Hamburg geschätzt hast?",
        "Was war nochmal dein Zeitplan für den Umzug?",
    ],
)
def test_a_question_about_what_the_assistant_said(question: str) -> None:
    assert asks_assistant(question)


@pytest.mark.parametrize(
    "question",
    [
        "Which instrument am I learning?",
        "Where does my sister live these days?",
        "What did Caroline say about the adoption agency?",  # a person, in the third person
        "Did Melanie recommend a book to Caroline?",
        "Wo wohnt meine Schwester zurzeit?",
        "Was hat Jon über sein Tanzstudio gesagt?",
        "Do you know when my next check-up is?",  # asks the assistant for the user's fact
        # a request to the assistant now, the user's message in a chat: not about its earlier answers
        "Could you suggest a recipe? I'm allergic to nuts.",
        "Do you think I should move?",
        "What's your advice on budgeting?",
        "Would you write me an email to my landlord?",
        "Have you got any tips for my garden?",
        "Kannst du mir etwas gegen Rückenschmerzen empfehlen?",
        "Was ist dein Rat?",
        "In your opinion, should I move?",
        "Kannst du mir sagen, was du davon hältst?",
        "Can you put together an itinerary for Lisbon?",
        "Kannst du eine Liste erstellen?",
        "I made a list of my goals, can you look at it?",
        "Which plan did I choose for my phone?",
    ],
)
def test_a_question_about_the_user_or_other_people(question: str) -> None:
    assert not asks_assistant(question)


def test_the_bench_advice_questions_all_ask_the_assistant() -> None:
    assert all(asks_assistant(q) for questions in ADVICE.values() for qs in questions.values() for q in qs)


def stored(draft: ObservationDraft) -> Observation:
    return recall_fixtures.stored(draft, DAY)


def chat() -> list[Observation]:
    turns = [
        Turn("D1:1", "User", "How should I keep herbs? By the way, I'm learning the cello."),
        Turn("D1:2", "Assistant", "Good question. Fresh herbs last longer in a glass of water in the fridge. " * 3),
    ]
    sessions = [ConversationSession("s1", DAY, turns)]
    common = {"tenant_id": "t", "user_id": "u", "conversation_id": "c", "sessions": sessions}
    assistants = frozenset({"Assistant"})
    drafts = turn_units(**common, assistants=assistants)
    drafts += derived_units(**common, assistants=assistants, kinds=frozenset({UnitKind.passage}))
    return [stored(d) for d in drafts]


def test_an_assistants_units_rank_up_when_asked_and_down_for_the_users_own_facts() -> None:
    request, answer, *passages = chat()
    for asked, about_user in ((True, False), (False, True), (False, False)):
        assert addressee_support(request, asked, about_user) == 1.0  # the user's words: never moved
    assert addressee_support(answer, asked=True) == ADDRESSED_WEIGHT
    assert addressee_support(answer, asked=False, about_user=True) == UNASKED_WEIGHT
    assert addressee_support(answer, asked=False, about_user=False) == 1.0  # low priority only, as before
    assert passages and all(addressee_support(p, asked=True) == ADDRESSED_WEIGHT for p in passages)
    assert all(addressee_support(p, asked=False) == UNASKED_WEIGHT for p in passages)


@pytest.mark.parametrize(
    ("question", "about_user"),
    [
        ("Which instrument am I learning?", True),
        ("Wo wohnt meine Schwester zurzeit?", True),
        ("Was ist das Ziel unserer nächsten Reise?", True),
        ("What was your trick for keeping herbs fresh?", False),  # asks the assistant
        ("Was hast du mir gegen Rückenschmerzen empfohlen?", False),
        ("How long do roasted vegetables keep?", False),  # neither
        ("What did Caroline paint?", False),
    ],
)
def test_a_question_about_the_users_own_facts(question: str, about_user: bool) -> None:
    assert asks_about_user(question) is about_user


@pytest.mark.parametrize(
    ("question", "first"),
    [
        ("What was your trick for keeping herbs fresh?", "answer"),
        ("How do I keep my herbs fresh?", "request"),
        ("How long do fresh herbs keep?", "request"),
    ],
)
def test_hybrid_recall_puts_the_answer_first_only_when_the_assistant_is_asked(question: str, first: str) -> None:
    request, answer, *_ = chat()
    hits = scored(question, [request, answer], lexical=[request, answer], vector=[request, answer])
    assert hits[0].observation.id == {"answer": answer, "request": request}[first].id
    assert ("addressee" in hits[0].boosts) is (first == "answer")


def scored(question: str, candidates: list[Observation], lexical: list[Observation], vector: list[Observation]) -> Any:
    return recall_fixtures.scored(question, candidates, lexical, vector, NOW)


def test_a_chat_can_keep_its_answers_in_passages_as_each_turn_completes() -> None:
    user, answer = uuid.uuid4(), uuid.uuid4()
    messages = [(user, "user", "How do I keep herbs?"), (answer, "assistant", "Put them in water. " * 40)]
    common = {"tenant_id": "t", "user_id": "u", "chat_id": uuid.uuid4(), "session_id": uuid.uuid4()}
    plain = chat_units(
        **common, started_at=DAY, messages=messages, reaching=user, kinds=frozenset({UnitKind.statement})
    )
    both = chat_units(**common, started_at=DAY, messages=messages, reaching=user)  # passages by default
    assert not [d for d in plain if (d.key or "").startswith("unit:passage:")]
    passages = [d for d in both if (d.key or "").startswith("unit:passage:")]
    assert len(passages) > 1 and all(d.provenance.chat_message_id == answer for d in passages)
    # their own type: searched only by a question that asks the assistant (`unasked_types`)
    assert {d.type for d in passages} == {PASSAGE_TYPE} and PASSAGE_TYPE not in {d.type for d in plain}


@pytest.mark.parametrize(
    ("question", "left_out"),
    [
        ("What was your trick for keeping herbs fresh?", ()),
        ("Was hast du mir gegen Rückenschmerzen empfohlen?", ()),
        ("Which instrument am I learning?", (PASSAGE_TYPE,)),
        ("How long do roasted vegetables keep?", (PASSAGE_TYPE,)),
        ("Could you suggest a recipe?", (PASSAGE_TYPE,)),  # a request now, not a question about its answers
    ],
)
def test_only_a_question_to_the_assistant_searches_its_passages(question: str, left_out: tuple[str, ...]) -> None:
    assert unasked_types(question) == left_out


@pytest.mark.parametrize(
    ("question", "first"),
    [("How do I keep my herbs fresh?", "request"), ("How long do fresh herbs keep?", "answer")],
)
def test_a_question_about_the_users_facts_puts_their_words_above_an_answer_both_lists_found(
    question: str, first: str
) -> None:
    """The answer tops both lists (it shares the question's words); the user's turn is only the
    kNN list's second. For a question in the first person the user's words come first; for a
    question in neither person the fusion stays as it was."""
    request, answer, *_ = chat()
    hits = scored(question, [request, answer], lexical=[answer], vector=[answer, request])
    assert hits[0].observation.id == {"answer": answer, "request": request}[first].id
