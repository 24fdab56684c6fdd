"""Scoring one recall's candidates (pure): the language gate, session, date and tag support,
the observation's boosts, hits on derived units counted for their turns, and the newer of two
near-duplicate statements first (`recency`)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Hashable, Sequence
from datetime import datetime

from engram.domain.dates import mentioned_dates
from engram.domain.facts import content_tokens
from engram.domain.language import language_of
from engram.domain.memory_units import UnitKind, turn_of, unit_ref
from engram.domain.observation import Observation
from engram.domain.ranking import (
    Fused,
    boosted,
    boosts,
    cross_language_factor,
    date_support,
    memory_language,
    observation_time,
    padded_words,
    session_support,
    support_session,
    tag_support,
)
from engram.domain.recall import SearchHit
from engram.domain.recency import Said, newer_first
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
    support = session_support(fused) if hybrid else {}
    dates = mentioned_dates(plan.text) if hybrid else ()
    query_words = padded_words(plan.text) if hybrid else ""
    for f, obs in visible:
        applied = boosts(obs, now, query.type_boosts)
        if gate.get(f.id, 1.0) != 1.0:
            applied["cross_language"] = round(gate[f.id], 6)
        if support.get(f.id, 1.0) != 1.0:
            applied["session"] = round(support[f.id], 6)
        if dates and (on_day := date_support(observation_time(obs), dates)) != 1.0:
            applied["date"] = on_day
        if hybrid and obs.tags and (named := tag_support(obs.tags, query_words)) != 1.0:
            applied["tag"] = named
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
    turns = as_turns(hits)[: query.limit]
    return later_statements_first(turns, hits, plan) if hybrid and plan.vectors else turns


def is_statement(obs: Observation) -> bool:
    ref = unit_ref(obs)
    return ref is not None and ref.kind is UnitKind.statement


def later_statements_first(turns: list[SearchHit], hits: Sequence[SearchHit], plan: Plan) -> list[SearchHit]:
    """`recency.newer_first` on the turns, from the statement units among the candidates whose
    vectors the plan read; a moved turn's `newer` boost is its new score over its old one."""
    said: dict[Hashable, list[Said]] = defaultdict(list)
    for h in hits:
        obs = h.observation
        vector = plan.vectors.get(str(obs.id))
        if vector is not None and obs.tags and is_statement(obs):
            said[turn_of(obs)].append(Said(obs.tags[0], observation_time(obs), content_tokens(obs.title), vector))
    if not said:
        return turns
    by_turn = {turn_of(t.observation): t for t in turns}
    ranked = newer_first([(turn_of(t.observation), t.score) for t in turns], said, content_tokens(plan.text))
    out = []
    for key, score in ranked:
        hit = by_turn[key]
        if score != hit.score and hit.score > 0:
            hit = dataclasses.replace(hit, score=score, boosts={**hit.boosts, "newer": round(score / hit.score, 6)})
        out.append(hit)
    return out
