"""Deterministic generator of long user-assistant chats with questions about the user's facts.

Why: LoCoMo is two people chatting in short turns. An assistant's memory looks different: the
user mentions a fact about their life in one sentence of a request ("Can you plan my meals?
By the way, I'm allergic to peanuts."), the assistant answers with hundreds of words, and
weeks later the user asks about it. The facts change (a new job, a move), and some questions
need two facts at once. `generate(seed)` builds such conversations in English and German from
templates (`bench.chatgen_en`, `bench.chatgen_de`): no downloads, same seed, same data.

The output has LoCoMo's layout (`sample_id`, `conversation` with `session_<n>` turn lists and
`session_<n>_date_time`, `qa` with `question`, `answer`, `evidence` turn ids, `category`), so
`bench.locomo`'s evaluation scores it. Categories (`CATEGORIES`), per language:

- single-hop: the answer is one user sentence, buried among long assistant turns;
- updated: the user stated the fact and later changed it; the evidence is the latest statement
  (recall@1 = "the current value ranks first"), `stale_evidence` the superseded ones;
- multi-hop: the question asks for two facts; the evidence is both user turns;
- advice: the user asks what the assistant said ("What was your trick for keeping herbs
  fresh?"); the evidence is the one assistant turn with that sentence (`bench.chatgen_advice`).
  Drawn from a random stream of their own, so the other questions and the conversations are
  the same with or without them (`advice=0`).

Questions paraphrase the facts (different words, the same meaning) and the user mentions each
topic elsewhere without the fact ("I talked to my sister yesterday"), so keyword overlap alone
does not find the answer.
"""

from __future__ import annotations

import calendar
import importlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

CATEGORIES = {
    1: "single-hop en",
    2: "updated en",
    3: "multi-hop en",
    4: "single-hop de",
    5: "updated de",
    6: "multi-hop de",
    7: "advice en",
    8: "advice de",
}
KINDS = ("single-hop", "updated", "multi-hop")
# `generate(requests=True)`: requests that need a fact the user told (after `bench.pasted`'s 9 and 10)
REQUEST_CATEGORIES = {11: "request en", 12: "request de"}
LANGUAGES = ("en", "de")
START = datetime(2025, 1, 6, 9, 30, tzinfo=UTC)


@dataclass(frozen=True)
class FactKind:
    """One kind of personal fact and how the user says it, changes it and asks about it."""

    key: str
    values: Sequence[dict[str, str]]  # slot fillings, e.g. {"rel": "sister", "name": "Lena", "city": "Porto"}
    say: Sequence[str]  # sentences stating the fact ({slot} placeholders)
    ask: Sequence[str]  # questions about it, in other words than `say`
    about: str  # the fact as a noun phrase, for questions about two facts ("my employer")
    mention: Sequence[str]  # the user on the topic, without the fact ("I talked to my {rel} yesterday.")
    echo: Sequence[str]  # the assistant on the topic, without the fact ("I hope your {rel} settles in.")
    update: Sequence[str] = ()  # sentences stating a changed value (empty: the fact never changes)
    changes: Sequence[str] = ()  # the slots an update changes
    answer: str = ""  # the slots that answer a question, as a template
    asked: Sequence[str] = ()  # a request that states the fact in passing, as a question
    asked_update: Sequence[str] = ()  # the same for a changed value
    topics: Sequence[str] = ()  # the sessions' topics (`Topic.key`) a request about it belongs to
    requests: Sequence[str] = ()  # a request whose good answer needs the fact, without naming it
    clarify: Sequence[str] = ()  # the assistant asks for the fact at the end of an answer (no value in it)
    reply: Sequence[str] = ()  # the user's short answer to that: the value, hardly a word of the topic
    check: Sequence[str] = ()  # the assistant asks whether a remembered value still holds (the old value)
    correct: Sequence[str] = ()  # the user's short answer to that: the new value
    # the fact in the second of two sentences, said of whom (or what) the first one names by a
    # pronoun that opens it ("I called my sister Lena. She just moved to Porto."); {Pron} is
    # {pron} capitalised
    referred: Sequence[str] = ()


@dataclass(frozen=True)
class Topic:
    """What a session is about: the user's requests and the assistant's sentences on it."""

    requests: Sequence[str]
    sentences: Sequence[str]
    key: str = ""  # what `FactKind.topics` names it by


@dataclass(frozen=True)
class Pack:
    """Everything one language needs (`bench.chatgen_en.PACK`, `bench.chatgen_de.PACK`)."""

    language: str
    user: str
    assistant: str
    facts: Sequence[FactKind]
    topics: Sequence[Topic]
    leads: Sequence[str]  # "By the way," before a fact sentence
    follow_ups: Sequence[tuple[str, str]]  # user turns after the first (and the reply's first sentence)
    intros: Sequence[str]  # the assistant's first sentence of a session
    outros: Sequence[str]
    multi_hop: Sequence[str]  # questions with {a} and {b} (`FactKind.about`)


@dataclass
class _Fact:
    kind: FactKind
    slots: dict[str, str]
    turns: list[str] = field(default_factory=list)  # dia_ids of its statements, oldest first
    updated: bool = False
    asked: set[str] = field(default_factory=set)  # dia_ids that state it inside a question
    on_topic: set[str] = field(default_factory=set)  # dia_ids in a session on a topic it belongs to
    answered: set[str] = field(default_factory=set)  # dia_ids that answer the assistant's question for it
    referred: set[str] = field(default_factory=set)  # dia_ids that say it of a pronoun (`FactKind.referred`)


@dataclass
class _Turn:
    speaker: str
    text: str
    fact: _Fact | None = None  # the fact this user turn states (first or changed)
    dia_id: str = ""
    asked: bool = False  # it states the fact inside a question
    on_topic: bool = False  # the session is on a topic the fact belongs to
    answered: bool = False  # it answers the assistant's question for the fact (`FactKind.reply`)
    referred: bool = False  # it says the fact of a pronoun that refers to the sentence before


def rows(spec: str, *slots: str) -> list[dict[str, str]]:
    """Slot fillings from "a|b; c|d" (one row per `;`, one slot per `|`), for compact templates."""
    return [dict(zip(slots, (v.strip() for v in row.split("|")), strict=True)) for row in spec.split(";")]


def pack(language: str) -> Pack:
    module = importlib.import_module(f"bench.chatgen_{language}")
    found: Pack = module.PACK
    return found


def locomo_date(when: datetime) -> str:
    """LoCoMo's session time, "1:56 pm on 8 May, 2023" (English month names in both languages)."""
    hour = when.hour % 12 or 12
    return f"{hour}:{when.minute:02d} {'am' if when.hour < 12 else 'pm'} on {when.day} {when:%B}, {when.year}"


def referring(slots: dict[str, str]) -> dict[str, str]:
    """`slots` with `{Pron}`, the pronoun capitalised, for a sentence that opens with it
    (`FactKind.referred`)."""
    return {**slots, "Pron": slots.get("pron", "").title()}


def fill(template: str, slots: dict[str, str]) -> str:
    text = template.format(**slots)
    return text[:1].upper() + text[1:]


SESSIONS = 8


ADVICE_QUESTIONS = 2  # per conversation
ASKED = 1 / 3  # the share of statements of a fact made inside a question
ON_TOPIC = 0.0  # about the share of statements of a fact made in a session on a topic it belongs to
ANSWERED = 0.0  # about the share of first statements made as a short answer to the assistant's question
CORRECTED = 0.0  # about the share of changes told as a short answer to the assistant's check of the old value
REFERRED = 0.0  # about the share of first statements (of facts with such forms) said of a pronoun


def generate(
    seed: int = 21,
    conversations: int = 10,
    languages: Sequence[str] = LANGUAGES,
    sessions: int = SESSIONS,
    advice: int = ADVICE_QUESTIONS,
    asked: float = ASKED,
    on_topic: float = ON_TOPIC,
    requests: bool = False,
    answered: float = ANSWERED,
    corrected: float = CORRECTED,
    referred: float = REFERRED,
) -> list[dict[str, Any]]:
    """`conversations` samples per language, all drawn from one `random.Random(seed)`, of
    `sessions` sessions each (about eight turns per session). More sessions make a longer
    history with the same eight facts: the facts are stated in the first five eighths of it,
    and the sessions between are requests on the topics, with the user mentioning the facts'
    topics without the facts.

    A share `asked` of the statements are made inside a question, as users do ("What should we
    pack for our trip to Crete in August?"); which ones is drawn from a stream of its own, so
    with `asked=0` the conversations are the same but for those sentences.

    About a share `on_topic` of the statements are made in a session on a topic the fact belongs
    to ("I'm allergic to peanuts" while planning meals, no "By the way"), where the assistant's
    answers share the question's words; the others are asides to an unrelated request. Also
    drawn from a stream of its own: `on_topic=0` changes nothing.

    About a share `answered` of the first statements of a fact are the user's short answer to a
    question the assistant ended its previous answer with ("Which city does your sister live in
    at the moment?" - "Porto, since the spring."): the fact is in the user's turn only together
    with what it answers, as in real chats with an assistant. Only where the fact's exchange is
    not the session's first (an answer comes before it); a stream of its own: `answered=0`
    changes nothing. About a share `corrected` of the changes are told the same way, to the
    assistant checking the value it remembers ("Is your sister still living in Porto?" - "No,
    she moved to Leeds a while ago."); a stream of its own too. About a share `referred` of the
    first statements of the facts that have such forms (a relative's city, a pet, a car) are
    said of a pronoun for whom the sentence before names ("I called my sister Lena yesterday.
    She just moved to Porto."), as people talk; a stream of its own (`referred=0` changes nothing).

    With `requests`, each fact also gets a request whose good answer needs it but that does not
    name it ("Can you suggest a dinner I could cook tonight?" for an allergy, "Which houseplants
    are safe to keep in our flat?" for a pet; `REQUEST_CATEGORIES`): what a chat turn's memory
    has to bring without being asked, as LongMemEval's preference questions do. The evidence is
    the fact's latest statement. Drawn from a stream of its own, so the rest is the same."""
    if sessions < 2:
        raise ValueError("a conversation needs at least two sessions (a fact and its change)")
    rng = random.Random(seed)
    samples = []
    for language in languages:
        for n in range(conversations):
            sample_id = f"chat-{language}-{n + 1}"
            forms = _Forms(
                random.Random(f"{seed}:{sample_id}:asked"),
                asked,
                random.Random(f"{seed}:{sample_id}:topic"),
                on_topic,
                random.Random(f"{seed}:{sample_id}:answered"),
                answered,
                random.Random(f"{seed}:{sample_id}:corrected"),
                corrected,
                random.Random(f"{seed}:{sample_id}:referred"),
                referred,
            )
            asks = random.Random(f"{seed}:{sample_id}:requests") if requests else None
            sample = _conversation(rng, pack(language), sample_id, sessions, forms, asks)
            own = random.Random(f"{seed}:{sample['sample_id']}:advice")
            sample["qa"].extend(_advice_questions(own, language, sample["conversation"], advice))
            samples.append(sample)
    return samples


def _advice_questions(
    rng: random.Random, language: str, conversation: dict[str, Any], count: int
) -> list[dict[str, Any]]:
    """`count` questions about sentences the assistant said in exactly one answer (so the answer
    is one turn: recall counts the share of the evidence found, and a sentence repeated in
    several answers would ask for all of them)."""
    from bench.chatgen_advice import ADVICE

    assistant = conversation["speaker_b"]
    turns = [t for k, v in conversation.items() if k.startswith("session_") and isinstance(v, list) for t in v]
    said = {
        sentence: [t["dia_id"] for t in turns if t["speaker"] == assistant and sentence in t["text"]]
        for sentence in ADVICE[language]
    }
    once = sorted(sentence for sentence, ids in said.items() if len(ids) == 1)
    return [
        {
            "question": rng.choice(ADVICE[language][sentence]),
            "answer": sentence,
            "evidence": said[sentence],
            "category": 7 + LANGUAGES.index(language),
        }
        for sentence in rng.sample(once, k=min(count, len(once)))
    ]


@dataclass
class _Forms:
    """Which statements of a fact are made inside a question (`rng`, `share`), in which words,
    which in a session on a topic the fact belongs to (`topic_rng`, `on_topic`), and which as a
    short reply to the assistant's question (`answer_rng`, `answered_share`) or check of the old
    value (`correct_rng`, `corrected_share`)."""

    rng: random.Random
    share: float
    topic_rng: random.Random
    on_topic: float
    answer_rng: random.Random
    answered_share: float
    correct_rng: random.Random
    corrected_share: float
    refer_rng: random.Random
    referred_share: float

    def topic(self, p: Pack, events: list[tuple[_Fact, str]]) -> tuple[Topic, tuple[_Fact, str]] | None:
        """A topic that the first fact statement drawn for it (in session order) belongs to, and
        that statement's event; None: the session's own topic stands."""
        for event in events:
            fact, what = event
            if what != "mention" and fact.kind.topics and self.topic_rng.random() < self.on_topic:
                key = self.topic_rng.choice(list(fact.kind.topics))
                return next(t for t in p.topics if t.key == key), event
        return None

    def asked(self, fact: _Fact, what: str) -> str | None:
        templates = {"say": fact.kind.asked, "update": fact.kind.asked_update}.get(what, ())
        if not templates or self.rng.random() >= self.share:
            return None
        return fill(self.rng.choice(templates), fact.slots)

    def referred(self, fact: _Fact, what: str) -> str | None:
        """A first statement of the fact said of a pronoun (`FactKind.referred`), or None."""
        if what != "say" or not fact.kind.referred or self.refer_rng.random() >= self.referred_share:
            return None
        return fill(self.refer_rng.choice(fact.kind.referred), referring(fact.slots))

    def answered(self, fact: _Fact, what: str, before: dict[str, str]) -> tuple[str, str] | None:
        """The assistant's question and the user's short answer: for a fact's first statement a
        question for it, for a change a check of the value `before` it."""
        if what == "say" and fact.kind.reply and self.answer_rng.random() < self.answered_share:
            rng, asking, answers, old = self.answer_rng, fact.kind.clarify, fact.kind.reply, fact.slots
        elif what == "update" and fact.kind.correct and self.correct_rng.random() < self.corrected_share:
            rng, asking, answers, old = self.correct_rng, fact.kind.check, fact.kind.correct, before
        else:
            return None
        question = fill(rng.choice(asking), {**old, "your": _YOUR.get(old.get("my", ""), "your")})
        return question, fill(rng.choice(answers), fact.slots)


_YOUR = {"meine": "Ihre", "mein": "Ihr"}  # German templates' "{my}" as the assistant says it (formal)


def _conversation(
    rng: random.Random, p: Pack, sample_id: str, sessions: int, forms: _Forms, asks: random.Random | None = None
) -> dict[str, Any]:
    kinds = list(p.facts)
    updatable = [k for k in kinds if k.update]
    changing = rng.sample(updatable, 3)
    rest = rng.sample([k for k in kinds if k not in changing], 5)
    facts = [_Fact(k, dict(rng.choice(k.values))) for k in [*changing, *rest]]
    rng.shuffle(facts)
    # each fact is stated in one of the first five eighths of the sessions (five of eight); each
    # change in a later session than the one before
    stated = min(sessions - 1, sessions * 5 // 8)  # at least 1: `generate` asks for two sessions
    plan: dict[int, list[tuple[_Fact, str]]] = {s: [] for s in range(1, sessions + 1)}
    for fact in facts:
        first = rng.randint(1, stated)
        plan[first].append((fact, "say"))
        if fact.kind in changing:
            plan[rng.randint(first + 1, sessions)].append((fact, "update"))
    for fact in facts:
        plan[rng.randint(1, sessions)].append((fact, "mention"))
    conversation: dict[str, Any] = {"speaker_a": p.user, "speaker_b": p.assistant}
    when = START + timedelta(days=rng.randint(0, 20))
    said: dict[str, date] = {}  # each session's day, by its turns' prefix ("D3")
    for s in range(1, sessions + 1):
        turns = _session(rng, p, plan[s], forms)
        for i, turn in enumerate(turns, 1):
            turn.dia_id = f"D{s}:{i}"
        for turn in turns:
            if turn.fact is not None:
                turn.fact.turns.append(turn.dia_id)
                turn.fact.updated = len(turn.fact.turns) > 1
                if turn.asked:
                    turn.fact.asked.add(turn.dia_id)
                if turn.on_topic:
                    turn.fact.on_topic.add(turn.dia_id)
                if turn.answered:
                    turn.fact.answered.add(turn.dia_id)
                if turn.referred:
                    turn.fact.referred.add(turn.dia_id)
        conversation[f"session_{s}"] = [{"speaker": t.speaker, "dia_id": t.dia_id, "text": t.text} for t in turns]
        conversation[f"session_{s}_date_time"] = locomo_date(when)
        said[f"D{s}"] = when.date()
        when += timedelta(days=rng.randint(3, 12), minutes=rng.randint(0, 600))
    qa = _questions(rng, p, facts) + (_requests(asks, p, facts, said) if asks is not None else [])
    return {"sample_id": sample_id, "conversation": conversation, "qa": qa}


def _session(rng: random.Random, p: Pack, events: list[tuple[_Fact, str]], forms: _Forms) -> list[_Turn]:
    """Three to five exchanges on one topic; each fact event goes into its own user turn."""
    topic, fitting = rng.choice(p.topics), forms.topic(p, events)
    if fitting is not None:
        topic = fitting[0]
    exchanges = max(len(events), rng.randint(3, 5))
    by_slot = dict(zip(rng.sample(range(exchanges), len(events)), events, strict=True))
    unsaid: list[str] = []  # the topic's sentences not yet said in this session
    turns: list[_Turn] = []
    outro = ""
    for e in range(exchanges):
        request, intro = (rng.choice(topic.requests), rng.choice(p.intros)) if e == 0 else rng.choice(p.follow_ups)
        user, echo = _Turn(p.user, request), ""
        if (event := by_slot.get(e)) is not None:
            fact, what = event
            user.on_topic = fitting is not None and fitting[1] is event
            before = dict(fact.slots)  # a change's old value (`_statement` draws the new one)
            sentence = _statement(rng, p, fact, what, lead=not user.on_topic)
            if (question := forms.asked(fact, what)) is not None:
                sentence, user.asked = question, True
            elif (told := forms.referred(fact, what)) is not None:
                sentence, user.referred = told, True
            user.text = " ".join([sentence, request] if rng.random() < 0.5 else [request, sentence])
            if e > 0 and (pair := forms.answered(fact, what, before)) is not None:
                clarify, reply = pair  # the previous answer ends with the question instead of its outro
                turns[-1].text = f"{turns[-1].text[: -len(outro)]}{clarify}"
                user.text, user.asked, user.answered = f"{reply} {request}", False, True
            if what != "mention":
                user.fact = fact
                echo = fill(rng.choice(fact.kind.echo), fact.slots) if rng.random() < 0.5 else ""
        body = []
        for _ in range(rng.randint(14, 16) if e == 0 else rng.randint(10, 12)):
            if not unsaid:
                unsaid = rng.sample(list(topic.sentences), len(topic.sentences))
            body.append(unsaid.pop())
        others = [s for t in p.topics if t is not topic for s in t.sentences]
        at = rng.randint(1, len(body) - 1)
        body[at:at] = rng.sample(others, 2)  # assistants drift a little
        outro = rng.choice(p.outros)
        turns.append(user)
        turns.append(_Turn(p.assistant, " ".join([intro, *([echo] if echo else []), *body, outro])))
    return turns


def _statement(rng: random.Random, p: Pack, fact: _Fact, what: str, *, lead: bool = True) -> str:
    if what == "update":
        new = dict(rng.choice([v for v in fact.kind.values if any(v[c] != fact.slots[c] for c in fact.kind.changes)]))
        fact.slots.update({c: new[c] for c in fact.kind.changes})
    templates = {"say": fact.kind.say, "update": fact.kind.update, "mention": fact.kind.mention}[what]
    template = rng.choice(templates)
    if what != "mention" and rng.random() < 0.6:  # templates start as they would after "By the way,"
        said = f"{rng.choice(p.leads)} {template.format(**fact.slots)}"  # drawn either way: same stream
        if lead:
            return said
    return fill(template, fact.slots)


def _questions(rng: random.Random, p: Pack, facts: list[_Fact]) -> list[dict[str, Any]]:
    offset = 3 * LANGUAGES.index(p.language)
    qa = []
    for fact in facts:
        kind = KINDS.index("updated" if fact.updated else "single-hop")
        item: dict[str, Any] = {
            "question": fill(rng.choice(fact.kind.ask), fact.slots),
            "answer": fill(fact.kind.answer, fact.slots),
            "evidence": [fact.turns[-1]],
            "category": offset + kind + 1,
        }
        if fact.updated:
            item["stale_evidence"] = fact.turns[:-1]
        item["asked"] = fact.turns[-1] in fact.asked  # the evidence states it inside a question
        item["on_topic"] = fact.turns[-1] in fact.on_topic  # ... in a session on a topic it belongs to
        item["answered"] = fact.turns[-1] in fact.answered  # ... as a short answer to the assistant's question
        item["referred"] = fact.turns[-1] in fact.referred  # ... of a pronoun for whom the sentence before names
        qa.append(item)
    pairs = [(a, b) for i, a in enumerate(facts) for b in facts[i + 1 :]]
    for a, b in rng.sample(pairs, 3):
        question = rng.choice(p.multi_hop).format(a=a.kind.about.format(**a.slots), b=b.kind.about.format(**b.slots))
        qa.append(
            {
                "question": question[:1].upper() + question[1:],
                "answer": f"{fill(a.kind.answer, a.slots)}; {fill(b.kind.answer, b.slots)}",
                "evidence": [a.turns[-1], b.turns[-1]],
                "category": offset + KINDS.index("multi-hop") + 1,
            }
        )
    return qa


def _requests(rng: random.Random, p: Pack, facts: list[_Fact], said: dict[str, date]) -> list[dict[str, Any]]:
    """A request per fact that needs it without naming it; the evidence is its latest statement.
    A plan's request ("What do I have coming up?", "What should we pack for our next trip?") needs
    the plan only while it is ahead: `ahead_until` is its last day, after which the request asks
    for something else and the bench does not count it (`locomo.evaluate`)."""
    category = next(c for c, name in REQUEST_CATEGORIES.items() if name.endswith(f" {p.language}"))
    out = []
    for fact in facts:
        if not fact.kind.requests:
            continue
        qa = {
            "question": fill(rng.choice(fact.kind.requests), fact.slots),
            "answer": fill(fact.kind.answer, fact.slots),
            "evidence": [fact.turns[-1]],
            "category": category,
        }
        if (until := plan_until(fact.kind.key, fact.slots, said[fact.turns[-1].split(":")[0]])) is not None:
            qa["ahead_until"] = until.isoformat()
        out.append(qa)
    return out


_MONTHS = {
    name: n
    for names in (
        "January February March April May June July August September October November December",
        "Januar Februar März April Mai Juni Juli August September Oktober November Dezember",
    )
    for n, name in enumerate(names.split(), start=1)
}


def plan_until(kind: str, slots: dict[str, str], said: date) -> date | None:
    """The last day of the plan a fact of this kind tells, from its slots (the generator's own
    values: "12 February" / "12. Februar", a month), at its next occurrence from the day it was
    said unless that is most of a year ahead; None for a fact that is no plan. The bench's own
    reading of its own values, not Engram's parser."""
    if kind == "dentist":
        found = re.fullmatch(r"(\d{1,2})\.? (\w+)", slots["date"])
        assert found is not None, slots
        month, day = _MONTHS[found.group(2)], int(found.group(1))
    elif kind == "trip":
        month = _MONTHS[slots["month"]]
        day = calendar.monthrange(said.year, month)[1]
    else:
        return None
    this_year = date(said.year, month, min(day, calendar.monthrange(said.year, month)[1]))
    next_year = date(said.year + 1, month, min(day, calendar.monthrange(said.year + 1, month)[1]))
    ahead = this_year if this_year >= said else next_year
    # a day and month said without a year most of a year ahead is the one just past ("the dentist
    # on 12 February" said on 2 March was last month), as people say it
    return ahead if (ahead - said).days < 300 else (this_year if ahead == next_year else ahead)
