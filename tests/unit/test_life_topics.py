"""`life_topics`: which fact of the user's life a statement gives a value for, and consolidation's
rule on it (a later message that says the fact changed supersedes the earlier value)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from engram.domain.consolidation import Decision, Pool, decide
from engram.domain.facts import says_changed
from engram.domain.life_topics import names, shared_topic, topics
from engram.domain.observation import Observation, Provenance, Source
from tests.unit.test_consolidation_domain import obs, r


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My sister Lena lives in Porto.", {"home:sister"}),
        ("Is your sister still living in Porto? No, she moved to Leeds a while ago.", {"home:sister"}),
        ("Lena packed up and left, so my sister is in Leeds these days.", {"home:sister"}),
        ("Meine Schwester Lena ist schon wieder umgezogen, sie wohnt jetzt in Köln.", {"home:sister"}),
        ("Wo lebt Ihre Schwester inzwischen?", {"home:sister"}),
        ("My older brother Tom works at Siemens.", {"work:older brother"}),
        ("I sold my old car and bought a white Tesla Model 3.", {"vehicle:car"}),
        ("What are you driving these days? A blue Volkswagen Golf.", {"vehicle:car"}),
        ("Ich habe mein altes Auto verkauft und mir einen roten Opel Corsa gekauft.", {"vehicle:car"}),
        ("I go swimming every Friday morning.", {"routine:swimming"}),
        ("ich gehe jeden Freitag früh zum Schwimmen.", {"routine:swimming"}),
        ("I switched jobs, I'm now a nurse at St. Mary's.", {"work:me"}),
        ("ich habe die Stelle gewechselt, ich bin jetzt Pflegerin bei Siemens.", {"work:me"}),
        ("We moved to Leeds last year.", {"home:me"}),
        ("Also, since I joined St. Mary's Hospital as a nurse, my days have been long.", {"work:me"}),
        ("Jetzt wo ich einen weißen BMW i3 statt des alten Wagens fahre", {"vehicle:car"}),
        ("Ich wohne seit März in Leipzig.", {"home:me"}),
        ("Nur zur Info: ich habe vor zwei Wochen als Lehrerin an der Lindenschule angefangen.", {"work:me"}),
        ("Ich arbeite seit Mai als Ärztin am Klinikum Nord.", {"work:me"}),
        ("Also, my grey Ford Focus is finally paid off.", {"vehicle:car"}),
        ("Ich war als Letzter am Bahnhof.", set()),  # an order, no job
        # the noun alone gives no value
        ("My car needs new tyres.", set()),
        ("I love swimming.", set()),
        ("ich lebe jetzt vegan", set()),
        ("I talked to my sister yesterday.", set()),
        ("I have to take my car to the garage tomorrow.", set()),
        ("I drive my car to work every day.", set()),
        ("My sister lives far away.", set()),
        ("I skipped swimming on Monday.", set()),
        ("Ich war am Montag schwimmen.", set()),
        ("Monday mornings are for yoga, I never skip them.", {"routine:yoga"}),
        ("Since yoga is on Monday from now on, which evening is best for a rest?", {"routine:yoga"}),
        ("Welcher Abend eignet sich, wenn Schwimmen ab jetzt am Donnerstag ist?", {"routine:swimming"}),
        ("Nur zur Info: der Samstagmorgen gehört dem Schwimmen.", {"routine:swimming"}),
        ("Gehen Sie noch am Samstag zum Yoga? Nein, jetzt am Donnerstag.", {"routine:yoga"}),
        ("Do you still go climbing on Saturdays? No, now on Thursday.", {"routine:climbing"}),
        ("Ab jetzt ist Klettern am Montag, der alte Termin hat nicht gepasst.", {"routine:climbing"}),
        ("Not related, but I traded in my car; I have a blue Volkswagen Golf now.", {"vehicle:car"}),
        ("Ich fahre jetzt einen roten Opel Corsa, der alte Wagen ist weg.", {"vehicle:car"}),
        # someone else's sister: "ihre" in lower case is "her", not the formal "your"
        ("Anna sagt, ihre Schwester wohnt in Köln.", set()),
        # an appointment is the dentist or the doctor with a date
        ("Can I eat normally before the dentist on 3 March?", {"appointment:dentist"}),
        ("The vet appointment for our dog is on 3 March.", {"appointment:vet"}),
        ("Ich habe am Freitag ein Vorstellungsgespräch bei Siemens.", {"appointment:interview"}),
        ("My exam is in two weeks.", {"appointment:exam"}),
        ("I have an appointment at the bank on Monday.", {"appointment:other"}),  # no kind: any other
        ("Ich habe endlich einen Termin beim Zahnarzt, am 3. März.", {"appointment:dentist"}),  # the kind wins
        ("Ab jetzt ist Klettern am Montag, der alte Termin hat nicht gepasst.", {"routine:climbing"}),
        ("The dentist moved my appointment to April 18.", {"appointment:dentist"}),
        ("Darf ich vor dem Zahnarzt am 3. März normal essen?", {"appointment:dentist"}),
        ("Die Zahnarztpraxis hat meinen Termin auf den 18.4. verschoben.", {"appointment:dentist"}),
        ("Ich bin am Montag bei meiner Hausärztin.", {"appointment:doctor"}),
        ("My dentist said my teeth are fine.", set()),  # no date: no appointment
        ("On 3 March we went to the zoo.", set()),
        # a make after "my" is the user's car; a trip's verb may come four words before "nach" or last
        ("Is my green Skoda Octavia good enough for the motorway?", {"vehicle:car"}),  # a make they call theirs
        ("Mein grüner Skoda braucht neue Reifen.", {"vehicle:car"}),
        ("My old Skoda was better.", set()),
        ("My car needs new tyres.", set()),  # which car, it does not say
        ("Wir fahren jetzt doch im April nach Lissabon.", {"trip:next"}),  # four words before "nach"
        ("Welche Impfungen brauchen wir, bevor wir im August nach Kreta fliegen?", {"trip:next"}),  # the verb last
        ("Now that Morocco in March is the new plan, what should we pack?", {"trip:next"}),  # a place and a month
        ("Lohnt sich eine Reiseversicherung, jetzt wo Kreta im August der neue Plan ist?", {"trip:next"}),
        ("We plan to renovate the kitchen in May.", set()),
    ],
)
def test_the_topic_wants_the_verb_that_gives_the_value(text: str, expected: set[str]) -> None:
    assert topics(text) == expected


def test_a_relative_with_another_name_or_adjective_is_another_person() -> None:
    assert names("my sister Lena lives in Porto") == {"sister": "Lena"}
    assert shared_topic("My sister Lena lives in Porto.", "My sister moved to Leeds.") == "home:sister"
    assert shared_topic("My sister Lena lives in Porto.", "My sister Mia moved to Leeds.") is None
    assert shared_topic("My sister lives in Porto.", "My older sister moved to Leeds.") is None
    assert shared_topic("My sister lives in Porto.", "My brother moved to Leeds.") is None


def _said(title: str, *, age: timedelta, message: uuid.UUID | None = None) -> Observation:
    o = obs(title, user_id="alice", type="identity", age=age)
    return o.model_copy(update={"provenance": Provenance(chat_message_id=message or uuid.uuid4())})


def _pool(*said: Observation) -> Pool:
    return Pool.of([r(o) for o in said])


def test_a_later_message_that_says_the_fact_changed_supersedes_the_earlier_value() -> None:
    old = _said("My sister Lena lives in Porto.", age=timedelta(days=20))
    new = _said("Is your sister still living in Porto? No, she moved to Leeds a while ago.", age=timedelta(days=2))
    v = decide(r(new), r(old), 0.80, _pool(old, new))  # far apart for a vector: no other rule sees it
    assert (v.decision, v.current) == (Decision.update, new.id), v.reason
    assert "home:sister" in v.reason
    car = _said("What are you driving these days? A blue Volkswagen Golf.", age=timedelta(days=9))
    tesla = _said("I sold my old car and bought a white Tesla Model 3.", age=timedelta(days=1))
    v = decide(r(car), r(tesla), 0.79, _pool(car, tesla))
    assert (v.decision, v.current) == (Decision.update, tesla.id), v.reason


def test_a_later_current_value_holds_without_a_change_marker() -> None:
    """One value at a time: the later message's is the current one, however it is worded."""
    old = _said("Also, my brother Jonah just moved to Vancouver for a new start.", age=timedelta(days=20))
    new = _said(
        "Quick update: Jonah packed up and left, so my brother is in Edinburgh these days.", age=timedelta(days=3)
    )
    v = decide(r(new), r(old), 0.81, _pool(old, new))  # the older says "moved", the newer no marker
    assert (v.decision, v.current) == (Decision.update, new.id), v.reason
    # said again in other words: the later statement stands for both
    lena = _said("My sister Lena lives in Porto.", age=timedelta(days=20))
    again = _said("My sister lives in Porto, near the river.", age=timedelta(days=2))
    assert decide(r(again), r(lena), 0.90, _pool(lena, again)).current == again.id
    # the past, or one more of a kind, is no current value
    past = _said("My sister lived in Leeds back then, before Porto.", age=timedelta(days=2))
    assert decide(r(past), r(lena), 0.85, _pool(lena, past)).decision is not Decision.update
    golf = _said("I drive a blue Volkswagen Golf.", age=timedelta(days=9))
    fiat = _said("I also have an old Fiat car for the allotment.", age=timedelta(days=1))
    assert decide(r(fiat), r(golf), 0.80, _pool(golf, fiat)).decision is not Decision.update
    # a person's remembered statement is not overruled by an agent's inference without a marker
    told = golf.model_copy(update={"source": Source.user, "verified": True})
    guessed = _said("I drive a grey Skoda Octavia.", age=timedelta(days=1)).model_copy(
        update={"source": Source.agent, "verified": False, "confidence": 0.6}
    )
    assert decide(r(guessed), r(told), 0.84, _pool(told, guessed)).decision is Decision.conflict


def test_no_supersession_for_another_person_another_fact_or_one_message() -> None:
    old = _said("My sister Lena lives in Porto.", age=timedelta(days=20))
    mia = _said("My sister Mia moved to Leeds.", age=timedelta(days=2))
    assert decide(r(mia), r(old), 0.80, _pool(old, mia)).decision is not Decision.update
    brother = _said("My brother moved to Leeds.", age=timedelta(days=2))
    assert decide(r(brother), r(old), 0.80, _pool(old, brother)).decision is not Decision.update
    tyres = _said("My car now needs new tyres.", age=timedelta(days=2))
    golf = _said("I drive a blue Volkswagen Golf.", age=timedelta(days=9))
    assert decide(r(tyres), r(golf), 0.82, _pool(golf, tyres)).decision is not Decision.update
    # two sentences of one message: "I traded in my car. Now I drive a Tesla." have no order
    one = uuid.uuid4()
    traded = _said("I traded in my car.", age=timedelta(seconds=1), message=one)
    drive = _said("Now I drive a white Tesla.", age=timedelta(seconds=0), message=one)
    assert decide(r(drive), r(traded), 0.85, _pool(traded, drive)).decision is not Decision.update
    # another owner's statement is never compared
    bob = obs("My sister moved to Leeds.", user_id="bob", type="identity")
    assert decide(r(bob), r(old), 0.80).decision is Decision.unrelated


def test_a_session_summary_is_no_fact_of_the_profile() -> None:
    """Summaries name many facts; one that mentions a change supersedes no other summary."""
    old = obs("Session summary: plants. Learned: I drive a blue Golf.", user_id="a", type="context")
    new = obs("Session summary: email. Learned: I traded in my car; I have a Tesla now.", user_id="a", type="context")
    old = old.model_copy(update={"created_at": new.created_at - timedelta(days=3)})
    assert decide(r(new), r(old), 0.84, _pool(old, new)).decision is not Decision.update


def test_a_cars_make_a_new_start_and_the_next_trip() -> None:
    assert topics("Ach ja, ich habe einen weißen BMW i3, endlich abbezahlt.") == {"vehicle:car"}
    assert topics("Where I just started as a data analyst, how do I introduce myself?") == {"work:me"}
    assert topics("I'm taking the seat by the window.") == set()  # no make that is a common word
    assert "trip:next" in topics("Which vaccinations do we need before we fly to Iceland in June?")
    assert "trip:next" in topics("Die alte Reise ist storniert; Island im Juni ist der neue Plan.")


@pytest.mark.parametrize(
    ("booked", "another", "moved"),
    [
        (
            "Not related, but we booked a holiday in Lisbon for April.",
            "We're flying to Iceland in June, by the way.",
            "The old trip is cancelled; Morocco in March is the new plan.",
        ),
        (
            "My dentist appointment is on 3 March.",
            "I also booked the dentist for 12 May, for the cleaning.",
            "The dentist moved my appointment to 18 April.",
        ),
    ],
)
def test_a_later_plan_replaces_the_booked_one_only_when_it_says_so(booked: str, another: str, moved: str) -> None:
    """Two trips, or a check-up in May beside the dentist on 3 March, can both hold: a plan (the next
    trip, an appointment) is replaced only when the later one says it changed."""
    first = _said(booked, age=timedelta(days=20))
    second = _said(another, age=timedelta(days=5))
    assert decide(r(second), r(first), 0.80, _pool(first, second)).decision is not Decision.update
    later = _said(moved, age=timedelta(days=2))
    v = decide(r(later), r(first), 0.80, _pool(first, later))
    assert (v.decision, v.current) == (Decision.update, later.id), v.reason


def test_a_change_someone_had_to_make_says_it_changed() -> None:
    assert says_changed("Brauche ich eine Überweisung, wo ich den Zahnarzttermin auf den 5. August verlegen musste?")
    assert says_changed("I had to reschedule the dentist, it's on 12 May.")
    assert not says_changed("Can you reschedule my meeting?")  # a request, no change yet
