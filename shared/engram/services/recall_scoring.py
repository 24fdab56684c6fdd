"""Scoring one recall's candidates (pure): the language gate, session, date and tag support,
the observation's boosts, and hits on derived units counted for their turns."""

from __future__ import annotations

from datetime import datetime

from engram.domain.dates import mentioned_dates
from engram.domain.language import language_of
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
    tag_support,
)
from engram.domain.recall import SearchHit
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
    fused = [(f.id, f.rrf * gate.get(f.id, 1.0), obs.provenance.session_id) for f, obs in visible]
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
    return as_turns(hits)[: query.limit]
