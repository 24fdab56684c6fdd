"""What a chat turn leaves behind without an LLM, and the LLM's output schema (R-5.2, R-4.3)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from engram.domain.chat_extraction import (
    ExtractionOutput,
    InvalidExtraction,
    Origin,
    Turn,
    check_types,
    extraction_tool_schema,
    offline_observations,
    offline_summary,
    sentences,
    summary_draft,
    to_drafts,
)
from engram.domain.language import detect_language
from engram.domain.observation import DEFAULT_OBSERVATION_TYPES, Scope, Source, TriggerSource
from engram.domain.personal_facts import told_in_question

ORIGIN = Origin("t1", "alice", uuid.uuid4(), uuid.uuid4(), "evt-1")


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Wir haben entschieden, dass wir ab Januar quartalsweise abrechnen.", "de"),
        ("Können Sie mir bitte die Rechnung schicken?", "de"),
        ("We decided to bill Müller quarterly from January.", "en"),
        ("What is the status of the order?", "en"),
    ],
)
def test_language_detection(text: str, language: str) -> None:
    assert detect_language(text) == language


def test_what_a_turn_gives_is_dated_by_the_turn() -> None:
    said = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
    origin = dataclasses.replace(ORIGIN, said_at=said)
    message = "Ich bevorzuge kurze Antworten. Ich wohne in Kiel."
    drafts = offline_observations(message, origin, DEFAULT_OBSERVATION_TYPES)
    assert len(drafts) == 2 and {d.said_at for d in drafts} == {said}
    output = ExtractionOutput.model_validate({"observations": [{"type": "fact", "title": "Lives in Kiel"}]})
    assert [d.said_at for d in to_drafts(output, origin)] == [said]
    assert [d.said_at for d in to_drafts(output, ORIGIN)] == [None]  # an event without a time: said when written


def test_offline_extractor_keeps_salient_german_statements() -> None:
    message = (
        "Hallo! Wir haben entschieden, Müller ab Januar quartalsweise abzurechnen. "
        "Ich bevorzuge kurze Antworten mit Stichpunkten. "
        "Unser Ansprechpartner bei Müller ist Herr Schneider. "
        "Die Frist für das Angebot ist der 15. März. "
        "Wie ist das Wetter heute? "
        "Merk dir, dass die Lieferadresse jetzt Stuttgart-Vaihingen ist."
    )
    drafts = offline_observations(message, ORIGIN, DEFAULT_OBSERVATION_TYPES)
    by_type = {d.type: d.title for d in drafts}
    assert set(by_type) == {"decision", "preference", "fact", "event", "note"}
    assert "quartalsweise" in by_type["decision"]
    assert "Stichpunkten" in by_type["preference"]
    assert "Schneider" in by_type["fact"]
    assert "15. März" in by_type["event"]
    assert by_type["note"].startswith("Die Lieferadresse")  # "merk dir, dass" is not part of the memory
    assert not any("Wetter" in d.title for d in drafts)  # a question is not a memory
    for d in drafts:
        assert d.user_id == "alice" and d.scope is Scope.private and d.source is Source.agent
        assert d.trigger_source is TriggerSource.chat and not d.verified
        assert d.provenance.session_id == ORIGIN.session_id and d.provenance.source_event_id == "evt-1"


def test_offline_extractor_keeps_salient_english_statements() -> None:
    message = (
        "Thanks. We decided to move the kickoff to next week. I prefer emails over phone calls. "
        "My name is Alice Brown and I work at Müller as head of purchasing. "
        "The contact person is Mr. Schneider. Can you summarise the order?"
    )
    types = sorted(d.type for d in offline_observations(message, ORIGIN, DEFAULT_OBSERVATION_TYPES))
    assert types == ["decision", "fact", "identity", "preference"]


@pytest.mark.parametrize(
    "sentence",
    [
        "My daughter Mia turns six in May, so the house will be loud.",
        "Tom, my husband, works at the harbour authority.",
        "I have two kids and a very patient neighbour.",
        "Our old cat sleeps on my keyboard all day.",
        "We rescued a greyhound puppy last winter.",
        "I ride an e-bike to work when it is dry.",
        "I've been taking pottery classes since autumn.",
        "I go climbing with friends on most weekends.",
        "We live near the river, on the quiet side of town.",
        "For three years now I have been working as a translator.",
        "Mein Vater wohnt seit letztem Jahr im Allgäu.",
        "Ich habe zwei Töchter, beide im Kindergarten.",
        "Unsere Katze schläft am liebsten auf der Heizung.",
        "Ich spiele seit der Schulzeit Posaune im Musikverein.",
        "Ich wohne in Freiburg, nah am Bahnhof.",
        "Seit März bin ich als Elektrikerin bei den Stadtwerken.",
    ],
)
def test_what_the_user_tells_of_their_life_is_identity(sentence: str) -> None:
    """Family, pets, vehicles, routines, home and work: the stable memory block's facts."""
    [draft] = offline_observations(sentence, ORIGIN, DEFAULT_OBSERVATION_TYPES)
    assert draft.type == "identity" and draft.scope is Scope.private


@pytest.mark.parametrize(
    ("sentence", "kind"),
    [
        ("My favourite band is still Portishead.", "preference"),
        ("I am vegetarian, and so is my flatmate.", "preference"),
        ("Mein Lieblingsessen ist Linsensuppe mit Spätzle.", "preference"),
        ("Krimis von Nele Neuhaus mag ich sehr.", "preference"),
    ],
)
def test_favourites_and_diet_are_preferences(sentence: str, kind: str) -> None:
    assert [d.type for d in offline_observations(sentence, ORIGIN, DEFAULT_OBSERVATION_TYPES)] == [kind]


@pytest.mark.parametrize(
    "sentence",
    [
        "I talked to my sister on the phone yesterday.",  # a relative without a fact about them
        "My pet peeve is people who reply all.",
        "Ich habe meine Mutter gestern angerufen.",
        "I'm allergic to hazelnuts, sadly.",  # health: for an LLM to mark sensitive, not the profile
        "Do you think my dog would like a bigger bed?",  # a question is not a statement...
        "Since when do cats sleep this much?",  # ... nor is a premise that is not about the user's life
        "Since it rains all day, should I walk my dog later?",  # (the dog is in the question, not the premise)
        "My daughter loves horses, what should I get her for her birthday?",  # a statement, but no fact of life
        "Can you help me with my car, what should I check first?",  # a request before the question
        "Wo wohnt meine Schwester jetzt eigentlich?",  # "wo" asks here
    ],
)
def test_what_is_no_personal_fact_stays_out(sentence: str) -> None:
    assert [d.type for d in offline_observations(sentence, ORIGIN, DEFAULT_OBSERVATION_TYPES)] == []


def test_a_change_of_a_fact_in_the_profile_is_identity_however_it_is_phrased() -> None:
    profile = ["I go swimming every Friday morning.", "Ich fahre einen blauen VW Golf."]
    said = [
        ("I moved my swimming to Monday mornings.", ["identity"]),
        ("Ich fahre jetzt einen roten Opel Corsa, der alte Golf ist weg.", ["identity"]),
        ("I moved the dentist to Monday morning.", []),  # a change, but of nothing in the profile
        ("Swimming was lovely today.", []),  # the profile's topic, but no change
        ("Now that I moved my swimming to Mondays, what should I eat before?", ["identity"]),  # its premise
        ("Should I move my swimming to Mondays?", []),  # a question
    ]
    for sentence, types in said:
        drafts = offline_observations(sentence, ORIGIN, DEFAULT_OBSERVATION_TYPES, profile)
        assert [d.type for d in drafts] == types, sentence
    # without the profile too: the day of the user's routine is a fact of their life, and the
    # event that told the old day may arrive after this one (a redelivery) and must meet it
    assert [d.type for d in offline_observations(said[0][0], ORIGIN, DEFAULT_OBSERVATION_TYPES)] == ["identity"]
    assert offline_observations(said[3][0], ORIGIN, DEFAULT_OBSERVATION_TYPES) == []


def test_a_new_value_of_a_profile_fact_worded_as_a_decision_is_identity() -> None:
    """ "From now on swimming is on Monday" matches the decision rules; as a decision it was never
    compared with the profile entry it replaces (consolidation compares one type with itself)."""
    profile = ["Also, I go swimming every Saturday morning.", "Ich gehe jeden Mittwoch früh zum Yoga."]
    said = [
        ("From now on swimming is on Monday, the old slot didn't work.", "identity"),
        ("Ach ja, ab jetzt ist Yoga am Montag, der alte Termin hat nicht gepasst.", "identity"),
        ("From now on we bill the Acme project monthly.", "decision"),  # no fact of the profile
        # a routine the profile does not hold yet: the user's life all the same (the old day may
        # come later, from a late event, and must meet it among the identities)
        ("Ab jetzt ist Klettern am Montag.", "identity"),
        ("From now on the team stand-up is on Monday.", "decision"),  # not the user's routine
    ]
    for sentence, obs_type in said:
        drafts = offline_observations(sentence, ORIGIN, DEFAULT_OBSERVATION_TYPES, profile)
        assert [d.type for d in drafts] == [obs_type], sentence
    # a premise that gives a new value of a profile fact, without a word in common with it
    drafts = offline_observations(
        "Wie passe ich meinen Lebenslauf an, jetzt wo ich die Stelle gewechselt habe und Lehrerin bin?",
        ORIGIN,
        DEFAULT_OBSERVATION_TYPES,
        ["Ich arbeite jetzt als Produktdesigner bei Formwerk."],
    )
    assert [(d.type, d.title) for d in drafts] == [
        ("identity", "Jetzt wo ich die Stelle gewechselt habe und Lehrerin bin")
    ]
    # German puts the verb first after an adverbial: still a statement about work, home or the car
    for sentence in ("Seit Montag arbeite ich als Lehrerin an der Lindenschule.", "Jetzt fahre ich einen roten Golf."):
        assert [d.type for d in offline_observations(sentence, ORIGIN, DEFAULT_OBSERVATION_TYPES)] == ["identity"]


@pytest.mark.parametrize(
    ("question", "title"),
    [
        ("Now that my daughter started school, how do we plan our mornings?", "Now that my daughter started school"),
        ("Since we adopted a kitten, which plants should go?", "Since we adopted a kitten"),
        (
            "When should I sleep, given that I work as a paramedic on nights?",
            "Given that I work as a paramedic on nights",
        ),
        ("Jetzt wo ich in Leipzig wohne, welche Ausflüge lohnen sich?", "Jetzt wo ich in Leipzig wohne"),
        ("Seit ich Geige lerne, stört das die Nachbarn?", "Seit ich Geige lerne"),
        # a change told while asking: a statement before the question, a trailing "wo", "to work as"
        (
            "I just traded in my old car for a white Tesla Model 3, so which insurance should I look at?",
            "I just traded in my old car for a white Tesla Model 3",
        ),
        (
            "Ich habe das alte Auto verkauft und mir einen roten Opel Corsa gekauft, welche Versicherung passt?",
            "Ich habe das alte Auto verkauft und mir einen roten Opel Corsa gekauft",
        ),
        (
            "Wie bleiben wir in Kontakt, wo mein Bruder Felix inzwischen in Salzburg lebt?",
            "Wo mein Bruder Felix inzwischen in Salzburg lebt",
        ),
        (
            "Since I left my old position to work as a nurse at St. Mary's Hospital, what do I tell my clients?",
            "Since I left my old position to work as a nurse at St. Mary's Hospital",
        ),
        # "when"/"wenn" with a word that it is so now ("if", or "when" without it, is a supposition)
        (
            "Welcher Abend eignet sich zum Ausruhen, wenn Schwimmen ab jetzt am Donnerstag ist?",
            "Wenn Schwimmen ab jetzt am Donnerstag ist",
        ),
        ("How should I plan my week when swimming is now on Thursday?", "When swimming is now on Thursday"),
    ],
)
def test_a_questions_premise_about_the_users_life_is_identity(question: str, title: str) -> None:
    """Titled by its premise; the question stays in the narrative."""
    [draft] = offline_observations(question, ORIGIN, DEFAULT_OBSERVATION_TYPES)
    assert (draft.type, draft.title, draft.narrative) == ("identity", title, question)


@pytest.mark.parametrize(
    "question",
    [
        "What should I pack if I move to Berlin now?",
        "Was soll ich kochen, wenn Gäste kommen?",
        "When is the best time to visit Rome?",
        "Wie plane ich die Woche, falls Schwimmen jetzt am Donnerstag ist?",
    ],
)
def test_a_supposition_is_no_premise(question: str) -> None:
    assert offline_observations(question, ORIGIN, DEFAULT_OBSERVATION_TYPES) == []


@pytest.mark.parametrize(
    ("question", "told"),
    [
        ("How do I recover after my swimming every Monday morning?", True),
        ("Is my blue Volkswagen Golf good enough for a long road trip?", True),
        ("Wie frage ich als Produktdesigner bei Formwerk nach einer Gehaltserhöhung?", True),
        ("What's a good housewarming gift for my brother Jonah, who just moved to Denver?", True),
        ("Should I move my swimming to Monday?", False),  # whether to change it
        ("Soll ich das Schwimmen auf Montag verlegen?", False),
        ("Where does my sister live?", False),  # asks for it
        ("On which day do I go swimming every week?", False),
        ("Is your sister still living in Porto?", False),  # someone else's
        ("Wie plane ich die Woche, falls Schwimmen jetzt am Donnerstag ist?", False),  # a supposition
        ("Which vaccinations do we need before we fly to Iceland in June?", False),  # a plan (an event)
    ],
)
def test_a_question_that_takes_a_fact_of_the_users_life_as_given_is_identity(question: str, told: bool) -> None:
    """A question never retires the fact it asks about: consolidation supersedes an identity by a
    later value of its fact (`life_topics`), so only a question that gives the value counts."""
    assert told_in_question(question) is told
    types = [d.type for d in offline_observations(question, ORIGIN, DEFAULT_OBSERVATION_TYPES)]
    assert ("identity" in types) is told


def test_a_no_to_the_assistants_check_of_a_profile_fact_is_identity_with_the_check() -> None:
    """'Is your sister still living in Porto?' - 'No, she moved to Leeds a while ago.': the reply
    shares no word with the profile's entry, the check does; titled by both, it is the new value."""
    profile = ["My sister Lena just moved to Porto for a new start."]
    check = "Is your sister still living in Porto?"
    reply = "No, she moved to Leeds a while ago. Can you make the plan shorter?"
    [draft] = offline_observations(reply, ORIGIN, DEFAULT_OBSERVATION_TYPES, profile, check)
    assert draft.type == "identity" and draft.title == f"{check} No, she moved to Leeds a while ago."
    assert draft.narrative == "No, she moved to Leeds a while ago."
    german = ["Meine Schwester Aylin hat endlich eine Wohnung in Freiburg gefunden."]
    [draft] = offline_observations(
        "Nicht mehr, jetzt Bremen.", ORIGIN, DEFAULT_OBSERVATION_TYPES, german, "Wohnt Ihre Schwester noch in Freiburg?"
    )
    assert draft.type == "identity" and draft.title.endswith("Nicht mehr, jetzt Bremen.")
    # confirmed, no check, or a check of nothing the profile holds: nothing
    assert offline_observations("Yes, still there. Thanks!", ORIGIN, DEFAULT_OBSERVATION_TYPES, profile, check) == []
    assert offline_observations(reply, ORIGIN, DEFAULT_OBSERVATION_TYPES, profile, None) == []
    other = "Is the trip to Lisbon still on?"
    assert offline_observations("No, cancelled.", ORIGIN, DEFAULT_OBSERVATION_TYPES, profile, other) == []


def test_small_talk_leaves_nothing() -> None:
    assert offline_observations("Hallo, wie geht's? Danke dir, bis später!", ORIGIN, DEFAULT_OBSERVATION_TYPES) == []


def test_extraction_schema_limits_types_and_validates() -> None:
    schema = extraction_tool_schema(["fact", "decision"])
    assert schema["$defs"]["ExtractedObservation"]["properties"]["type"]["enum"] == ["decision", "fact"]
    output = ExtractionOutput.model_validate(
        {
            "language": "de",
            "observations": [
                {"type": "decision", "title": "Müller wird quartalsweise abgerechnet", "key": "billing:mueller"},
                {"type": "fact", "title": "Gehalt von Bob", "sensitive": True},
                {"type": "fact", "title": "Umzug nach Hamburg", "key": "turn:chat-1:m1"},
            ],
        }
    )
    drafts = to_drafts(output, ORIGIN)
    assert [d.scope for d in drafts] == [Scope.private, Scope.sensitive, Scope.private]
    assert drafts[0].key == "billing:mueller" and drafts[0].confidence == 0.7
    assert drafts[2].key is None  # a memory unit's key: the model may not overwrite what was said
    with pytest.raises(ValidationError):
        ExtractionOutput.model_validate({"observations": [{"type": "fact", "title": ""}]})
    with pytest.raises(ValidationError):
        ExtractionOutput.model_validate({"observations": [{"type": "fact", "title": "ok title", "colour": "red"}]})
    with pytest.raises(InvalidExtraction, match="gossip"):
        check_types(
            ExtractionOutput.model_validate({"observations": [{"type": "gossip", "title": "x y z"}]}),
            frozenset({"fact"}),
        )


def test_offline_summary_and_its_recallable_observation() -> None:
    turns = [
        Turn("user", "Wie rechnen wir Müller ab? Wir haben entschieden, ab Januar quartalsweise abzurechnen."),
        Turn("assistant", "Notiert. Als nächster Schritt muss noch der Vertrag angepasst werden."),
        Turn("user", "Wann läuft der Vertrag aus?"),
        Turn("assistant", "Im Dezember."),
    ]
    summary = offline_summary(turns, "de")
    assert summary.request.startswith("Wie rechnen wir Müller ab?")
    assert "Wann läuft der Vertrag aus?" in summary.investigated
    assert "quartalsweise" in summary.learned
    assert "2 Antwort(en) auf 2 Nachricht(en)" == summary.completed
    assert "Vertrag angepasst" in summary.next_steps
    session = uuid.uuid4()
    draft = summary_draft(summary, ORIGIN, session)
    assert draft.type == "context" and draft.key == f"session-summary:{session}"
    assert draft.title.startswith("Session summary: Wie rechnen wir") and "Learned:" in draft.narrative
    # valid from when the session started: a question about that day searches within it
    started = datetime(2026, 12, 6, 18, tzinfo=UTC)
    assert summary_draft(summary, ORIGIN, session, started).valid_from == started


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "I sold my old car and bought a white Tesla Model 3. What would you change if I had half the time?",
            ["I sold my old car and bought a white Tesla Model 3.", "What would you change if I had half the time?"],
        ),
        (
            "Es kostet am Ende 30. Das ist mir zu viel, ehrlich.",
            ["Es kostet am Ende 30.", "Das ist mir zu viel, ehrlich."],
        ),
        # a date's day and a German ordinal end nothing
        (
            "Verschoben auf den 3. März. Kannst du das notieren?",
            ["Verschoben auf den 3. März.", "Kannst du das notieren?"],
        ),
        ("Wir haben den 2. Platz gemacht, toll.", ["Wir haben den 2. Platz gemacht, toll."]),
        ("The meeting on 12. March works for me.", ["The meeting on 12. March works for me."]),
        ("Ursula K. Le Guin wrote it. Hr. Schneider agrees.", ["Ursula K. Le Guin wrote it.", "Hr. Schneider agrees."]),
    ],
)
def test_sentences_end_after_a_number_but_not_after_an_ordinal_or_a_day(text: str, said: list[str]) -> None:
    assert sentences(text) == said


@pytest.mark.parametrize(
    ("question", "reply", "title"),
    [
        ("Which car do you drive?", "A grey Ford Focus. Thanks!", "Which car do you drive? A grey Ford Focus."),
        ("Which city does your sister live in at the moment?", "Leeds, since May.", None),
        ("Was machen Sie beruflich, und wo?", "Krankenpflegerin beim Klinikum Nord.", None),
        ("An welchem Tag machen Sie normalerweise Sport?", "Dienstags früh, Schwimmen.", None),
    ],
)
def test_the_answer_to_the_assistants_question_about_the_users_life_is_identity(
    question: str, reply: str, title: str | None
) -> None:
    """A short reply says nothing alone ("A grey Ford Focus."); read with the question it is a fact
    of the user's life, whatever the profile holds."""
    [draft] = offline_observations(reply, ORIGIN, DEFAULT_OBSERVATION_TYPES, (), question)
    first = reply.split(". ")[0].rstrip(".") + "."
    assert draft.type == "identity" and draft.title == (title or f"{question} {first}")


@pytest.mark.parametrize(
    ("question", "reply"),
    [
        ("When works for you?", "Tuesday at three, please."),  # a time, not the user's life
        ("Shall I go into more detail?", "Thanks, that's helpful."),  # an offer
        ("Soll ich das kürzer fassen?", "Ja, gerne etwas kürzer."),  # an offer
        ("Is your sister still living in Porto?", "Yes, still there."),  # a check confirmed
        ("Which car do you drive?", "Why do you ask that?"),  # a question back
    ],
)
def test_other_replies_to_the_assistants_questions_leave_nothing(question: str, reply: str) -> None:
    assert offline_observations(reply, ORIGIN, DEFAULT_OBSERVATION_TYPES, (), question) == []


@pytest.mark.parametrize(
    ("message", "title"),
    [
        ("We booked a holiday in Lisbon for April.", "We booked a holiday in Lisbon for April."),
        ("Wir haben für Juli einen Urlaub gebucht.", "Wir haben für Juli einen Urlaub gebucht."),
        (
            "Which vaccinations do we need before we fly to Iceland in June?",
            "Which vaccinations do we need before we fly to Iceland in June?",
        ),  # a plan inside a question, told by nothing else
        (
            "Since I had to reschedule the dentist to 7 May, do I need a new referral?",
            "Since I had to reschedule the dentist to 7 May",
        ),  # the premise, when it holds the plan
    ],
)
def test_a_plan_is_an_event_also_inside_a_question(message: str, title: str) -> None:
    [draft] = offline_observations(message, ORIGIN, DEFAULT_OBSERVATION_TYPES)
    assert (draft.type, draft.title.rstrip(".?")) == ("event", title.rstrip(".?"))


def test_a_trip_that_was_or_has_no_day_is_no_plan() -> None:
    for message in ("We went on holiday to Crete in May.", "Is my old Golf good enough for a long road trip?"):
        assert offline_observations(message, ORIGIN, DEFAULT_OBSERVATION_TYPES) == []
