"""bench.chatgen: deterministic user-assistant chats with each question category, in LoCoMo's layout."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench.assistant_chats import by_form, stale_first
from bench.chatgen import CATEGORIES, LANGUAGES, REQUEST_CATEGORIES, generate, pack, referring
from bench.locomo import AskedAt, asked_at, gold_ids, sessions_of
from engram.domain.chat_extraction import sentences
from engram.domain.language import language_of

PRONOUNS = {"She", "He", "It", "It's", "Its", "Sie", "Er", "Es"}


@pytest.fixture(scope="module")
def samples() -> list[dict[str, Any]]:
    return generate(seed=7, conversations=3)


def turns_of(sample: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t.turn_id: {"speaker": t.speaker, "text": t.text} for s in sessions_of(sample) for t in s.turns}


def test_the_same_seed_gives_the_same_data_and_another_seed_other_data(samples: list[dict[str, Any]]) -> None:
    assert json.dumps(generate(seed=7, conversations=3)) == json.dumps(samples)
    assert json.dumps(generate(seed=8, conversations=3)) != json.dumps(samples)


def test_every_category_is_asked_in_both_languages(samples: list[dict[str, Any]]) -> None:
    asked = {qa["category"] for s in samples for qa in s["qa"]}
    assert asked == set(CATEGORIES)
    assert [s["sample_id"] for s in samples] == [f"chat-{lang}-{n}" for lang in LANGUAGES for n in (1, 2, 3)]


def test_evidence_is_a_user_turn_among_long_assistant_answers(samples: list[dict[str, Any]]) -> None:
    for sample in samples:
        turns = turns_of(sample)
        user = sample["conversation"]["speaker_a"]
        answers = [t["text"] for t in turns.values() if t["speaker"] != user]
        assert min(len(a.split()) for a in answers) >= 100 and len(answers) >= 20
        for qa in sample["qa"]:
            if CATEGORIES[qa["category"]].startswith("advice"):
                continue  # what the assistant said: below
            gold = gold_ids(qa["evidence"], set(turns))  # LoCoMo's own parser reads them
            assert gold == set(qa["evidence"]) and all(turns[g]["speaker"] == user for g in gold)
            assert len(gold) == (2 if CATEGORIES[qa["category"]].startswith("multi-hop") else 1)
            assert qa["answer"].casefold() not in qa["question"].casefold()


def test_an_advice_question_asks_for_the_one_answer_that_said_it_in_other_words(samples: list[dict[str, Any]]) -> None:
    asked = 0
    for sample in samples:
        turns = turns_of(sample)
        assistant = sample["conversation"]["speaker_b"]
        for qa in sample["qa"]:
            if not CATEGORIES[qa["category"]].startswith("advice"):
                continue
            asked += 1
            [gold] = gold_ids(qa["evidence"], set(turns))
            assert turns[gold]["speaker"] == assistant and qa["answer"] in turns[gold]["text"]
            assert [t for t, turn in turns.items() if qa["answer"] in turn["text"]] == [gold]  # said once
            assert qa["answer"].casefold() not in qa["question"].casefold()
    assert asked >= len(samples)
    # drawn apart: without them, the conversations and the other questions are the same
    plain = generate(seed=7, conversations=3, advice=0)
    for with_advice, without in zip(samples, plain, strict=True):
        assert with_advice["conversation"] == without["conversation"]
        assert [q for q in with_advice["qa"] if q["category"] < 7] == without["qa"]


def test_an_updated_fact_has_its_current_statement_after_the_stale_ones(samples: list[dict[str, Any]]) -> None:
    order = {}
    for sample in samples:
        for i, turn in enumerate(turns_of(sample)):
            order[(sample["sample_id"], turn)] = i
        for qa in sample["qa"]:
            if CATEGORIES[qa["category"]].startswith("updated"):
                [current] = qa["evidence"]
                assert qa["stale_evidence"]
                assert all(
                    order[(sample["sample_id"], s)] < order[(sample["sample_id"], current)]
                    for s in qa["stale_evidence"]
                )
            else:
                assert "stale_evidence" not in qa


def test_german_conversations_are_german(samples: list[dict[str, Any]]) -> None:
    for sample in samples:
        expected = "de" if sample["sample_id"].startswith("chat-de") else "en"
        texts = [t["text"] for t in turns_of(sample).values()] + [qa["question"] for qa in sample["qa"]]
        detected = [language_of(t) for t in texts]
        assert detected.count(expected) >= 0.9 * len(texts)


def test_every_template_fills_with_every_value() -> None:
    for language in LANGUAGES:
        for kind in pack(language).facts:
            for slots in kind.values:
                for template in [
                    *kind.say,
                    *kind.update,
                    *kind.asked,
                    *kind.asked_update,
                    *kind.ask,
                    *kind.mention,
                    *kind.echo,
                    *kind.requests,
                    kind.about,
                    kind.answer,
                    *kind.reply,
                    *kind.correct,
                ]:
                    template.format(**slots)
                for template in kind.referred:  # two sentences, the second opens with a pronoun
                    said = sentences(template.format(**referring(slots)))
                    assert len(said) == 2 and said[1].split()[0] in PRONOUNS, said
                for template in kind.clarify:  # the assistant's question names no value of the fact
                    question = template.format(**slots, your="your")
                    value = {w.casefold() for w in re.findall(r"\w{3,}", kind.answer.format(**slots))}
                    assert question.endswith("?") and not value & set(re.findall(r"\w{3,}", question.casefold()))
                for template in kind.check:
                    assert template.format(**slots, your="your").endswith("?")
            assert kind.clarify and kind.reply
            assert bool(kind.check) == bool(kind.correct) == bool(kind.update)  # every fact that changes
            assert bool(kind.update) == bool(kind.changes)
            assert all(t.endswith("?") for t in [*kind.asked, *kind.asked_update])
            assert bool(kind.asked_update) <= bool(kind.update)


def test_a_request_needs_a_fact_without_naming_it_and_changes_nothing_else(samples: list[dict[str, Any]]) -> None:
    asking = generate(seed=7, conversations=3, requests=True)
    for plain, with_requests in zip(samples, asking, strict=True):
        assert plain["conversation"] == with_requests["conversation"]
        assert [qa for qa in with_requests["qa"] if qa["category"] not in REQUEST_CATEGORIES] == plain["qa"]
        requests = [qa for qa in with_requests["qa"] if qa["category"] in REQUEST_CATEGORIES]
        language = with_requests["sample_id"].split("-")[1]
        assert len(requests) == 8 and {REQUEST_CATEGORIES[qa["category"]] for qa in requests} == {f"request {language}"}
        latest = {qa["answer"]: qa["evidence"] for qa in with_requests["qa"] if "asked" in qa}
        turns = turns_of(with_requests)
        for qa in requests:
            assert qa["question"].endswith("?") and qa["evidence"] == latest[qa["answer"]]
            assert turns[qa["evidence"][0]]["speaker"] == with_requests["conversation"]["speaker_a"]
            # no word of the fact's value in the request: only what the fact means links them
            value = {w.casefold() for w in re.findall(r"\w{3,}", qa["answer"])}
            assert not value & {w.casefold() for w in re.findall(r"\w{3,}", qa["question"])}, qa
    assert not any(qa["category"] in REQUEST_CATEGORIES for s in samples for qa in s["qa"])
    assert all(kind.requests for language in LANGUAGES for kind in pack(language).facts)


def test_a_third_of_the_facts_are_told_inside_a_question(samples: list[dict[str, Any]]) -> None:
    single = [(s, qa) for s in samples for qa in s["qa"] if "asked" in qa]
    told = [(s, qa) for s, qa in single if qa["asked"]]
    assert 0.2 <= len(told) / len(single) <= 0.45
    assert {qa["category"] for _, qa in told} == {1, 2, 4, 5}  # single-hop and updated, both languages
    for sample, qa in told:
        [gold] = qa["evidence"]
        said = sentences(turns_of(sample)[gold]["text"])
        words = [w.casefold() for w in re.findall(r"\w{4,}", qa["answer"])]
        # one question of the turn holds the whole answer
        assert any(s.endswith("?") and all(w in s.casefold() for w in words) for s in said), (qa, said)
    # with none told that way, the same conversations but for those sentences
    for plain, with_asked in zip(generate(seed=7, conversations=3, asked=0), samples, strict=True):
        assert not any(qa.get("asked") for qa in plain["qa"])
        a, b = turns_of(plain), turns_of(with_asked)
        assert a.keys() == b.keys() and [q["question"] for q in plain["qa"]] == [
            q["question"] for q in with_asked["qa"]
        ]
        differ = {t for t in a if a[t]["text"] != b[t]["text"]}
        assert differ == {t for t in b if t in differ and b[t]["speaker"] == plain["conversation"]["speaker_a"]}
        assert {qa["evidence"][0] for qa in with_asked["qa"] if qa.get("asked")} <= differ


def on_its_topic(language: str, session: list[dict[str, Any]], said: str) -> bool:
    """Whether `said` states a fact of a kind that belongs to the session's topic (the topic of its
    first request), without a "By the way" before it."""
    p = pack(language)
    [topic] = [t for t in p.topics if any(r in session[0]["text"] for r in t.requests)]
    templates = [t for k in p.facts if topic.key in k.topics for t in [*k.say, *k.update, *k.asked, *k.asked_update]]
    pieces = [max(re.split(r"\{\w+\}", t), key=len).strip(" .,?").casefold() for t in templates]
    return any(piece in said.casefold() for piece in pieces) and not any(lead in said for lead in p.leads)


def test_a_share_of_the_facts_is_stated_in_a_session_on_a_topic_it_belongs_to(samples: list[dict[str, Any]]) -> None:
    fitted = generate(seed=7, conversations=3, on_topic=0.5)
    single = [(s, qa) for s in fitted for qa in s["qa"] if "on_topic" in qa]
    assert not any(qa["on_topic"] for s in samples for qa in s["qa"] if "on_topic" in qa)
    assert 0.2 <= sum(qa["on_topic"] for _, qa in single) / len(single) <= 0.6
    for sample, qa in single:
        language = sample["sample_id"].split("-")[1]
        [gold] = qa["evidence"]
        session = sample["conversation"][f"session_{gold[1:].split(':')[0]}"]
        said = next(t["text"] for t in session if t["dia_id"] == gold)
        if qa["on_topic"]:
            assert on_its_topic(language, session, said), said
    # every question about the user's facts is the same, and so is every session without such a
    # statement (questions about the assistant's advice follow what the assistant said)
    for plain, with_topics in zip(samples, fitted, strict=True):
        language = plain["sample_id"].split("-")[1]
        facts = [[q["question"] for q in s["qa"] if q["category"] <= 6] for s in (plain, with_topics)]
        assert facts[0] == facts[1]
        a, b = turns_of(plain), turns_of(with_topics)
        assert a.keys() == b.keys()
        changed = {t.split(":")[0] for t in a if a[t]["text"] != b[t]["text"]}
        assert changed, "some session is on a fact's topic"
        for name in changed:
            session = with_topics["conversation"][f"session_{name[1:]}"]
            assert any(on_its_topic(language, session, t["text"]) for t in session[::2]), session[0]["text"]


def test_stale_first_counts_a_superseded_statement_ranked_above_the_current_one() -> None:
    samples = [{"sample_id": "s", "qa": [{"stale_evidence": ["D1:1"]}, {"stale_evidence": ["D1:3"]}, {}]}]
    rows = [
        {"id": "s:0", "gold": ["D2:1"], "ranked": {"hybrid": ["D1:1", "D2:1"], "vector": ["D2:1", "D1:1"]}},
        {"id": "s:1", "gold": ["D2:5"], "ranked": {"hybrid": ["D2:5"], "vector": ["D9:9"]}},
        {"id": "s:2", "gold": ["D3:1"], "ranked": {"hybrid": ["D1:1"], "vector": []}},
    ]
    assert stale_first(samples, rows) == {"hybrid": 0.5, "vector": 0.0}


def test_by_form_splits_the_single_fact_questions_by_how_their_evidence_says_it() -> None:
    samples = [
        {
            "sample_id": "s",
            "qa": [
                {"asked": True, "on_topic": False, "answered": False},
                {"asked": False, "on_topic": True, "answered": True},
                {},
            ],
        }
    ]
    rows = [
        {"id": "s:0", "gold": ["D1:1"], "ranked": {"hybrid": ["D1:1"]}},
        {"id": "s:1", "gold": ["D2:1"], "ranked": {"hybrid": ["D9:9", "D2:1"]}},
        {"id": "s:2", "gold": ["D3:1"], "ranked": {"hybrid": ["D3:1"]}},  # two facts: neither form
    ]
    figures = by_form(samples, rows)
    assert figures["hybrid.asked.count"] == 1 and figures["hybrid.stated.count"] == 1
    assert figures["hybrid.asked.recall@1"] == 1.0 and figures["hybrid.stated.recall@1"] == 0.0
    assert figures["hybrid.stated.recall@5"] == 1.0
    assert figures["hybrid.on_topic.recall@1"] == 0.0 and figures["hybrid.aside.recall@1"] == 1.0
    assert figures["hybrid.answered.recall@1"] == 0.0 and figures["hybrid.volunteered.recall@1"] == 1.0
    assert len(figures) == 24


def test_a_share_of_the_facts_is_the_users_short_answer_to_the_assistants_question(
    samples: list[dict[str, Any]],
) -> None:
    answering = generate(seed=7, conversations=3, answered=0.5)
    single = [(s, qa) for s in answering for qa in s["qa"] if "answered" in qa]
    told = [(s, qa) for s, qa in single if qa["answered"]]
    assert not any(qa["answered"] for s in samples for qa in s["qa"] if "answered" in qa)
    assert 0.15 <= len(told) / len(single) <= 0.5
    for sample, qa in told:
        language = sample["sample_id"].split("-")[1]
        kinds = pack(language).facts
        [gold] = qa["evidence"]
        session = sample["conversation"][f"session_{gold[1:].split(':')[0]}"]
        at = next(i for i, t in enumerate(session) if t["dia_id"] == gold)
        before, reply = session[at - 1], session[at]["text"]
        assert before["speaker"] == sample["conversation"]["speaker_b"]
        # the answer before ends with a question about the fact, the reply starts with its value
        asked = sentences(before["text"])[-1]
        clarify = [t for k in kinds for t in k.clarify]
        assert any(re.fullmatch(re.sub(r"\\\{\w+\\\}", ".+", re.escape(t)), asked, re.IGNORECASE) for t in clarify), (
            asked
        )
        assert asked.endswith("?") and qa["answer"].split()[0].casefold() in reply.casefold()
    # with none told that way, the same conversations but for those two turns of each
    for plain, with_answers in zip(samples, answering, strict=True):
        assert [q["question"] for q in plain["qa"]] == [q["question"] for q in with_answers["qa"]]
        a, b = turns_of(plain), turns_of(with_answers)
        differ = {t for t in a if a[t]["text"] != b[t]["text"]}
        users = {t for t in differ if b[t]["speaker"] == plain["conversation"]["speaker_a"]}
        stated = {
            t for qa in with_answers["qa"] if "answered" in qa for t in [*qa["evidence"], *qa.get("stale_evidence", [])]
        }
        # an answered statement of a fact that changed later is a stale one
        assert {qa["evidence"][0] for qa in with_answers["qa"] if qa.get("answered")} <= users <= stated
        assert len(differ) == 2 * len(users)


def test_a_share_of_the_facts_is_said_of_a_pronoun_for_whom_the_sentence_before_names(
    samples: list[dict[str, Any]],
) -> None:
    referred = generate(seed=7, conversations=3, referred=1.0)
    assert json.dumps(generate(seed=7, conversations=3, referred=0.0)) == json.dumps(samples)
    told = [(s, qa) for s in referred for qa in s["qa"] if qa.get("referred")]
    assert told and not any(qa.get("referred") for s in samples for qa in s["qa"])
    for sample, qa in told:
        [gold] = qa["evidence"]
        text = turns_of(sample)[gold]["text"]
        opening = [s.split()[0] for s in sentences(text)]
        assert any(word in PRONOUNS for word in opening[1:]), text  # a sentence after the first
        assert qa["answer"].split()[-1].casefold() in text.casefold()
    # the same conversations but for the user turns that say a fact that way
    changed = 0
    for plain, with_pronouns in zip(samples, referred, strict=True):
        assert [q["question"] for q in plain["qa"]] == [q["question"] for q in with_pronouns["qa"]]
        a, b = turns_of(plain), turns_of(with_pronouns)
        differ = {t for t in a if a[t]["text"] != b[t]["text"]}
        assert all(b[t]["speaker"] == plain["conversation"]["speaker_a"] for t in differ)
        changed += len(differ)
    assert changed >= len(told)


def test_questions_are_asked_days_after_the_last_session_or_now(samples: list[dict[str, Any]]) -> None:
    sessions = sessions_of(samples[0])
    last = max(s.started_at for s in sessions)
    assert asked_at(sessions, 7) == last + timedelta(days=7) and asked_at(sessions, None) is None
    clock = AskedAt()
    assert abs((clock.now() - datetime.now(UTC)).total_seconds()) < 60  # unset: the real clock
    clock.at = asked_at(sessions, 0.5)
    assert clock.now() == last + timedelta(hours=12)


def test_a_longer_history_has_more_sessions_and_the_same_kind_of_questions(samples: list[dict[str, Any]]) -> None:
    assert json.dumps(generate(seed=7, conversations=3, sessions=8)) == json.dumps(samples)  # the default
    for sample in generate(seed=7, conversations=2, sessions=24):
        conv = sample["conversation"]
        assert sum(1 for k in conv if k.startswith("session_") and not k.endswith("_date_time")) == 24
        assert len(turns_of(sample)) >= 24 * 6
        categories = set()
        for qa in sample["qa"]:
            categories.add(CATEGORIES[qa["category"]].split()[0])
            if CATEGORIES[qa["category"]].split()[0] in ("single-hop", "updated"):
                said = [*qa.get("stale_evidence", []), *qa["evidence"]]  # in the order said
                assert int(said[0][1:].split(":")[0]) <= 24 * 5 // 8  # stated in the first five eighths
        assert categories >= {"single-hop", "updated", "multi-hop"}
    with pytest.raises(ValueError, match="two sessions"):
        generate(seed=7, conversations=1, sessions=1)


def test_a_share_of_the_changes_answers_the_assistant_checking_the_old_value(samples: list[dict[str, Any]]) -> None:
    corrected = generate(seed=7, conversations=3, corrected=1.0)
    assert json.dumps(generate(seed=7, conversations=3, corrected=0.0)) == json.dumps(samples)
    told = [(s, qa) for s in corrected for qa in s["qa"] if qa.get("answered")]
    updated = [qa for s in corrected for qa in s["qa"] if qa.get("stale_evidence")]
    assert told and {qa["category"] for _, qa in told} <= {2, 5} and len(told) <= len(updated)
    for sample, qa in told:
        turns = [t for s in sessions_of(sample) for t in s.turns]
        at = next(i for i, t in enumerate(turns) if t.turn_id == qa["evidence"][0])
        check, reply = sentences(turns[at - 1].text)[-1], turns[at].text
        assert turns[at - 1].speaker == sample["conversation"]["speaker_b"] and check.endswith("?")
        # the check names the value as it was, the reply the new one
        new = qa["answer"].split()[-1].casefold()
        assert new in reply.casefold() and new not in check.casefold(), (check, reply, qa["answer"])


def test_a_plans_request_counts_only_while_the_plan_is_ahead() -> None:
    """ "What do I have coming up?" needs the dentist appointment only until its day: the request
    carries the plan's last day, read from the generator's own values as people say them."""
    from datetime import date

    from bench.chatgen import plan_until

    assert plan_until("dentist", {"date": "12 February"}, date(2025, 2, 2)) == date(2025, 2, 12)
    assert plan_until("dentist", {"date": "12. Februar"}, date(2025, 3, 2)) == date(2025, 2, 12)  # last month
    assert plan_until("trip", {"month": "März", "place": "Kreta"}, date(2025, 1, 20)) == date(2025, 3, 31)
    assert plan_until("pet", {"pet": "Clover"}, date(2025, 1, 20)) is None
    asking = generate(seed=7, conversations=3, requests=True)
    requests = [q for s in asking for q in s["qa"] if q["category"] in REQUEST_CATEGORIES]
    plans = [q for q in requests if "ahead_until" in q]
    assert plans and len(plans) < len(requests)
    assert all(date.fromisoformat(q["ahead_until"]) > date(2025, 1, 1) for q in plans)
