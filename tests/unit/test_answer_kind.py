"""What kind of answer a question asks for (`engram.domain.answer_kind`): a conversation's
utterance that holds a time or a number ranks up for a question that asks for one, unless most
candidates hold one; paragraphs and notes never."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engram.domain.answer_kind import ANSWER_WEIGHT, AnswerKind, answer_support, asked_kind, holds
from engram.domain.conversation import ConversationSession, Turn, turn_units
from engram.domain.observation import Observation, ObservationDraft
from engram.domain.recall import SearchHit
from tests.unit import recall_fixtures

DAY = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("On what date is my next check-up at the practice?", AnswerKind.time),
        ("When does my partner celebrate getting older?", AnswerKind.time),
        ("And when did Caroline go to the support group?", AnswerKind.time),
        ("What year did she move to Porto?", AnswerKind.time),
        ("How long ago did I start the cello?", AnswerKind.time),
        ("Wann muss ich meine Zähne kontrollieren lassen?", AnswerKind.time),
        ("An welchem Tag soll ich die Feier für Julia planen?", AnswerKind.time),
        ("In welchem Jahr bin ich nach Freiburg gezogen?", AnswerKind.time),
        ("How many games has John mentioned winning?", AnswerKind.quantity),
        ("How old is my daughter?", AnswerKind.quantity),
        ("Wie viele Katzen haben wir?", AnswerKind.quantity),
        ("Wie alt ist meine Tochter?", AnswerKind.quantity),
        ("What did I do when I was in Paris?", None),  # "when" inside: no time asked
        ("Whose novels do I like best?", None),  # names are not told (German capitalises nouns)
        ("Wo wohnt meine Schwester?", None),
    ],
)
def test_the_kind_a_question_asks_for(question: str, kind: AnswerKind | None) -> None:
    assert asked_kind(question) is kind


@pytest.mark.parametrize(
    ("text", "time", "quantity"),
    [
        ("I finally booked the dentist for 12 February.", True, True),
        ("Sam turns forty on 23 September.", True, True),
        ("Mein Zahnarzttermin ist am 18. April.", True, True),
        ("We moved in 1998, back in the 1990s.", True, True),
        ("Anfang Mai fliegen wir.", True, False),
        ("I went hiking last weekend.", True, False),
        ("Letzte Woche war ich krank.", True, False),
        ("Can you turn that into a simple checklist?", False, False),
        ("I may go to the gym.", False, False),  # "may" is a verb
        ("I won three games.", False, True),
    ],
)
def test_what_a_text_holds(text: str, time: bool, quantity: bool) -> None:
    assert holds(text, AnswerKind.time) is time
    assert holds(text, AnswerKind.quantity) is quantity


def stored(draft: ObservationDraft) -> Observation:
    return recall_fixtures.stored(draft, DAY)


def turns(*texts: str) -> list[Observation]:
    # two speakers in turn (one speaker's messages in a row are one turn)
    said = [Turn(f"D1:{i}", ("Anna", "Ben")[i % 2], text) for i, text in enumerate(texts, 1)]
    session = ConversationSession("s1", DAY, said)
    return [stored(d) for d in turn_units(tenant_id="t", user_id="u", conversation_id="c", sessions=[session])]


def test_an_utterance_that_holds_the_answer_kind_ranks_up_by_its_own_words() -> None:
    date, request, mention, other = turns(
        "I finally booked the dentist for 12 February.",
        "Can you turn that into a simple checklist?",
        "The dentist's waiting room was full.",
        "My sister likes the sea.",
    )
    # every turn unit's narrative begins "On 2 March 2026, Ben said": only the title counts
    assert "2026" in request.narrative
    assert answer_support([date, request, mention, other], AnswerKind.time) == {date.id: ANSWER_WEIGHT}
    assert answer_support([date, request, mention, other], None) == {}


def test_no_weight_where_most_candidates_hold_one_or_for_paragraphs() -> None:
    dated = turns("We met on 3 May.", "The call is on 4 June.", "I paid on 5 July.", "Nothing new here.")
    assert answer_support(dated, AnswerKind.time) == {}  # three of four hold one: it tells nothing
    note = stored(
        ObservationDraft(tenant_id="t", user_id="u", title="Dentist", narrative="The appointment is on 12 February.")
    )
    assert answer_support([note, *turns("My sister likes the sea.")], AnswerKind.time) == {}


def test_recall_ranks_the_utterance_that_holds_the_asked_kind_first() -> None:
    """Through hybrid scoring: the request both lists rank first falls behind the turn with the
    date when the question asks "when", and keeps its place when it asks for neither kind."""
    date, request, other = turns(
        "I finally booked the dentist for 12 February.",
        "Can you turn that into a simple checklist?",
        "My sister likes the sea.",
    )

    def ranked(question: str) -> list[SearchHit]:
        lexical, vector = [request, date], [request, date, other]
        return recall_fixtures.scored(question, [date, request, other], lexical, vector, DAY, limit=3)

    first, *_ = ranked("When is my next check-up at the practice?")
    assert first.observation.id == date.id and first.boosts["answer"] == ANSWER_WEIGHT
    first, *_ = ranked("Where is my next check-up?")
    assert first.observation.id == request.id and "answer" not in first.boosts
