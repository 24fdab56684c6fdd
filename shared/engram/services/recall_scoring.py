"""Scoring one recall's candidates (pure): the language gate, session, date and tag support,
what a turn says that the other candidates do not (`specificity`), the observation's boosts,
hits on derived units counted for their turns, the head of each list kept at the head of the
fusion (`ranking.with_leg_floors`), and the newer of two near-duplicate statements first
(`recency`)."""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import datetime

from engram.domain import life_topics
from engram.domain.addressee import addressee_support, asks_assistant, assistant_unit, in_first_person
from engram.domain.answer_kind import answer_support, asked_kind
from engram.domain.chat_extraction import sentences
from engram.domain.conversation import answered_question
from engram.domain.dates import mentioned_dates
from engram.domain.facts import content_tokens, corrected_check, says_changed
from engram.domain.language import language_of
from engram.domain.memory_units import UnitKind, turn_keys, turn_of, unit_ref, with_an_assistant
from engram.domain.observation import Observation
from engram.domain.ranking import (
    RRF_K,
    Fused,
    boosted,
    boosts,
    cross_language_factor,
    date_support,
    memory_language,
    padded_words,
    session_support,
    support_session,
    tag_support,
    with_leg_floors,
)
from engram.domain.recall import SearchHit
from engram.domain.recency import RESTATED_DEPTH, Said, newer_first
from engram.domain.specificity import specificity_support
from engram.ports import TenantSearch
from engram.services.recall_plan import Plan, as_turns


def scored_hits(plan: Plan, found: dict[str, Observation], now: datetime) -> list[SearchHit]:
    """The plan's fused candidates that the caller may see, boosted, as turns, cut to the limit."""
    query = plan.query
    hits = []
    visible: list[tuple[Fused, Observation]] = []
    for f in plan.fused:
        obs = found.get(f.id)
        if obs is None or (query.types and obs.type not in query.types) or not plan.visibility.allows(obs):
            continue
        visible.append((f, obs))
    # the language gate, session, date and tag support are part of fusion (hybrid only), from
    # what this caller may see
    hybrid = query.mode == "hybrid"
    language = language_of(plan.text) if hybrid else None
    gate = {
        f.id: cross_language_factor(f, language, memory_language(obs))
        for f, obs in visible
        if language and f.lexical_rank
    }
    fused = [(f.id, f.rrf * gate.get(f.id, 1.0), support_session(obs)) for f, obs in visible]
    # session support is topic locality in a conversation between people (LoCoMo recall@10 0.775
    # -> 0.795); over chats with an assistant it lifts whole sessions on the question's topic,
    # whether the fact was said there or as an aside elsewhere, so a search among whose
    # candidates such a chat shows gets none (bench/RESULTS.md, part 17)
    between_people = hybrid and not any(with_an_assistant(obs) for _, obs in visible)
    support = session_support(fused) if between_people else {}
    dates = mentioned_dates(plan.text) if hybrid else ()
    query_words = padded_words(plan.text) if hybrid else ""
    asked = hybrid and asks_assistant(plan.text)
    about_user = hybrid and not asked and in_first_person(plan.text)  # `addressee.asks_about_user`
    answers = answer_support([obs for _, obs in visible], asked_kind(plan.text)) if hybrid else {}
    key = turn_keys([obs for _, obs in visible]) if hybrid else {}  # the support and the floors are hybrid's
    specific = specificity_support(turn_texts(visible, key)) if hybrid else {}
    own: dict[str, dict[str, float]] = {}  # each candidate's boosts but the language gate
    for f, obs in visible:
        applied = boosts(obs, now, query.type_boosts)
        if gate.get(f.id, 1.0) != 1.0:
            applied["cross_language"] = round(gate[f.id], 6)
        if support.get(f.id, 1.0) != 1.0:
            applied["session"] = round(support[f.id], 6)
        if dates and (on_day := date_support(obs.holds_from, dates)) != 1.0:
            applied["date"] = on_day
        if hybrid and obs.tags and (named := tag_support(obs.tags, query_words)) != 1.0:
            applied["tag"] = named
        if hybrid and (addressee := addressee_support(obs, asked, about_user)) != 1.0:
            applied["addressee"] = addressee
        if obs.id in answers:
            applied["answer"] = answers[obs.id]
        if specific and (own_words := specific.get(key[obs.id], 1.0)) != 1.0:
            applied["specific"] = round(own_words, 6)
        own[f.id] = {name: value for name, value in applied.items() if name != "cross_language"}
        hits.append(
            SearchHit(
                observation=obs,
                score=boosted(f.rrf, applied),
                lexical_rank=f.lexical_rank,
                vector_rank=f.vector_rank,
                boosts=applied,
                stream_origin=query.stream_origin,
            )
        )
    turns = as_turns(hits)
    if hybrid and plan.lexical and plan.vector:
        # across languages a BM25 rank does not count (the gate), so it holds no floor either
        lexical = [(f, obs) for f, obs in visible if f.lexical_rank and gate.get(f.id, 1.0) == 1.0]
        vector = [(f, obs) for f, obs in visible if f.vector_rank]
        legs = [
            leg_order(lexical, lambda f: f.lexical_rank, own, key),
            leg_order(vector, lambda f: f.vector_rank, own, key),
        ]
        turns = floored(turns, legs, key)  # newer_first below may still put a later statement above one
    turns = said_once(turns)
    # between people without statement units (LoCoMo) it moved nothing and cost ~1.5 ms a question
    if not hybrid or (between_people and not plan.vectors):
        return turns[: query.limit]
    # a later statement from below the cut may take its place above the one it restates
    return later_statements_first(turns[: query.limit * RESTATED_DEPTH], hits, plan, query.limit)[: query.limit]


_SAID = (UnitKind.turn, UnitKind.statement, UnitKind.passage)  # what a conversation's turns said


def turn_texts(visible: Sequence[tuple[Fused, Observation]], key: dict[uuid.UUID, Hashable]) -> dict[Hashable, str]:
    """What each candidate turn said: the titles of its units among the candidates (a turn unit,
    its statements, an answer's passages), joined, without the speaker a title starts with. What
    `specificity` compares. Other memories are not compared: their title is a headline of what
    they say, the rest is in the narrative (XQuAD's paragraphs: the first sentence; German ->
    German hybrid recall@5 fell 0.992 -> 0.983 with them compared). A speaker's name is no word
    of what was said, and the rarer speaker among the candidates, often the assistant, would
    have it as a word of its own."""
    texts: dict[Hashable, list[str]] = defaultdict(list)
    for _, obs in visible:
        ref = unit_ref(obs)
        if ref is None or ref.kind not in _SAID:
            continue
        texts[key[obs.id]].append(_without_speaker(obs))
    return {k: "\n".join(titles) for k, titles in texts.items()}


def _without_speaker(obs: Observation) -> str:
    """A unit's title without the speaker it starts with ("User: ...")."""
    title = obs.title
    if obs.tags and title[: len(obs.tags[0]) + 2].casefold() == f"{obs.tags[0]}: ".casefold():
        return title[len(obs.tags[0]) + 2 :]
    return title


def leg_order(
    candidates: Sequence[tuple[Fused, Observation]],
    rank: Callable[[Fused], int | None],
    own: dict[str, dict[str, float]],
    key: dict[uuid.UUID, Hashable],
) -> list[Hashable]:
    """One list's candidates as turns, best first, as the fusion would rank them had only this list
    found them: the rank's RRF share times the candidate's boosts (its own, and the session,
    date and tag support of hybrid recall; not the language gate), a turn at its best unit.

    The boosts count: with each list's raw order (or a one-mode search's, without the support),
    the floors overrode what the date, name and session a question gives say about its list's
    head; LoCoMo dev hybrid recall@5 fell 0.678 -> 0.654, while with them it rose to 0.697."""

    def score(candidate: tuple[Fused, Observation]) -> float:
        f = candidate[0]
        return boosted(1.0 / (RRF_K + (rank(f) or 0)), own[f.id])

    # a stable sort: equal scores keep the fused order
    return list(dict.fromkeys(key[obs.id] for _, obs in sorted(candidates, key=score, reverse=True)))


def floored(
    turns: list[SearchHit], legs: Sequence[Sequence[Hashable]], key: dict[uuid.UUID, Hashable]
) -> list[SearchHit]:
    """`turns` reordered by `ranking.with_leg_floors`. A hit moved up scores between its new
    neighbours, so the order still follows the scores; its `floor` boost is the new score over
    the old one, so the named boosts still multiply up to the score."""
    by_key = {key.get(t.observation.id, t.observation.id): t for t in turns}
    if len(by_key) < len(turns):  # two hits of one turn (cannot happen after `as_turns`): leave as is
        return turns
    order = [by_key[k] for k in with_leg_floors(list(by_key), legs)]
    out: list[SearchHit] = []
    for i, hit in enumerate(order):
        after = max((h.score for h in order[i + 1 :]), default=None)
        if after is not None and hit.score < after and hit.score > 0:
            above = out[-1].score if out else after * 2
            score = (above + after) / 2 if above > after else after
            hit = dataclasses.replace(hit, score=score, boosts={**hit.boosts, "floor": round(score / hit.score, 6)})
        out.append(hit)
    return out


def said_once(turns: Sequence[SearchHit]) -> list[SearchHit]:
    """The hits without those whose unit says word for word what a better hit's unit says: a
    formula a user repeats in many turns ("Could you explain the second point in more detail?")
    took up to eight of ten places of a 32-session chat, each place one the memory asked for
    could have had. Only units compare (their title is the words said, `Speaker: ...`), and a
    clipped title ("...") never: two memories of the same title are not the same memory."""
    seen: set[str] = set()
    out = []
    for hit in turns:
        obs = hit.observation
        if unit_ref(obs) is not None and not obs.title.rstrip().endswith("…"):
            said = " ".join(obs.title.casefold().split())
            if said in seen:
                continue
            seen.add(said)
        out.append(hit)
    return out


def is_statement(obs: Observation) -> bool:
    ref = unit_ref(obs)
    return ref is not None and ref.kind is UnitKind.statement


def life_of_turn(obs: Observation) -> list[Said]:
    """A person's turn unit's sentences that give a fact of their life (`life_topics`), each as
    its statement unit would: among a recall's candidates a turn is often there without the
    statement unit of its sentence ("the dentist moved my appointment to 3 March" fourth, "My
    dentist appointment is on 5 August" second, bench.assistant_chats seed 99). Without a vector:
    they move a turn by a fact of life only, never as a near duplicate."""
    ref = unit_ref(obs)
    if ref is None or ref.kind is not UnitKind.turn or not obs.tags or assistant_unit(obs) is not None:
        return []
    return [
        Said(obs.tags[0], obs.holds_from, frozenset(), None, changed, life=life, current=current)
        for changed, life, current in _life_sentences(_without_speaker(obs))
    ]


@functools.lru_cache(maxsize=4096)  # the same turns come back question after question
def _life_sentences(text: str) -> tuple[tuple[bool, frozenset[tuple[str, str]], bool], ...]:
    """Of each sentence of `text` that gives a fact of life: whether it says it changed, the
    facts, whether it gives a current value."""
    return tuple(
        (says_changed(s), life, life_topics.current(s)) for s in sentences(text) if (life := life_topics.facts_of(s))
    )


def corrects(obs: Observation) -> frozenset[str]:
    """Of a person's turn unit that answers "no" to a check ("Is your sister still living in
    Porto?"), the check's words (`facts.corrected_check`); else none."""
    ref = unit_ref(obs)
    if ref is None or ref.kind is not UnitKind.turn or not obs.narrative:
        return frozenset()
    return _corrected(obs.narrative, obs.tags[0])


@functools.lru_cache(maxsize=4096)  # the same turns come back question after question
def _corrected(narrative: str, speaker: str) -> frozenset[str]:
    answered = answered_question(narrative, speaker)
    return corrected_check(*answered) if answered else frozenset()


def later_statements_first(
    turns: list[SearchHit], hits: Sequence[SearchHit], plan: Plan, cut: int | None = None
) -> list[SearchHit]:
    """`recency.newer_first` on the turns, from the statement units among the candidates whose
    vectors the plan read and the facts of life the ranked turns' own sentences give
    (`life_of_turn`); a moved turn's `newer` boost is its new score over its old one."""
    said: dict[Hashable, list[Said]] = defaultdict(list)
    by_turn = {turn_of(t.observation): t for t in turns}
    for h in hits:
        obs = h.observation
        turn = turn_of(obs)
        vector = plan.vectors.get(str(obs.id))
        if vector is not None and obs.tags and is_statement(obs):
            said[turn].append(
                Said(
                    obs.tags[0],
                    obs.holds_from,
                    content_tokens(obs.title),
                    vector,
                    says_changed(obs.title),
                    life=life_topics.facts_of(obs.title),
                    current=life_topics.current(obs.title),
                )
            )
        elif obs.tags and (checked := corrects(obs)):
            said[turn].append(Said(obs.tags[0], obs.holds_from, frozenset(), None, corrects=checked))
        if turn in by_turn:  # a turn's own facts of life count where the turn is ranked
            said[turn].extend(life_of_turn(obs))
    if not said:
        return turns
    ranked = newer_first([(turn_of(t.observation), t.score) for t in turns], said, content_tokens(plan.text), cut=cut)
    out = []
    for key, score in ranked:
        hit = by_turn[key]
        if score != hit.score and hit.score > 0:
            hit = dataclasses.replace(hit, score=score, boosts={**hit.boosts, "newer": round(score / hit.score, 6)})
        out.append(hit)
    return out


async def statement_vectors(search: TenantSearch, plans: Sequence[Plan], found: Mapping[str, Observation]) -> None:
    """The stored vectors of the statement units among the hybrid plans' candidates, in one read
    (`later_statements_first` compares them); only where a plan has two."""
    wanted = {
        plan_index: ids
        for plan_index, plan in enumerate(plans)
        if plan.query.mode == "hybrid"
        and len(ids := [f.id for f in plan.fused if (o := found.get(f.id)) is not None and is_statement(o)]) >= 2
    }
    if not wanted:
        return
    vectors = await search.embeddings(list(dict.fromkeys(i for ids in wanted.values() for i in ids)))
    for plan_index, ids in wanted.items():
        plans[plan_index].vectors = {i: vectors[i] for i in ids if i in vectors}
