"""From verdicts to changes (R-15.1): what one observation's consolidation writes, and which old
low-priority observations a digest unites. Pure: the service applies the steps.

For a new (or changed) observation and its verdicts against candidates:

1. if a candidate is the newer version of the same thing, the new one is outdated: it alone
   is superseded by that candidate, nothing else happens (the next event or the sweep looks
   at the rest);
2. its duplicates and it become one consolidated observation (facts of outdated ones that the
   newer ones do not mention carried over);
3. what it updates is superseded by it (or by the consolidated observation), with `valid_to`
   when the new value started to hold;
4. what it conflicts with is linked to it.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from engram.domain.consolidation import (
    Decision,
    DecisionPath,
    Verdict,
    audience,
    carried_over,
    merged_draft,
    updated_draft,
)
from engram.domain.facts import Reading
from engram.domain.language import detect_language
from engram.domain.models import FeedbackCounts
from engram.domain.observation import Observation, ObservationDraft, Priority


@dataclass
class Step:
    """One change: `sources` are superseded by `result` (an observation that exists, or a draft
    to write first); a conflict links its two sources and has no result."""

    decision: Decision
    sources: list[Observation]
    result: Observation | ObservationDraft | None
    reason: str
    path: DecisionPath = DecisionPath.rules
    model: str | None = None
    valid_to: dict[uuid.UUID, datetime] = field(default_factory=dict)  # per source; default: now

    @property
    def members(self) -> list[uuid.UUID]:
        ids = [s.id for s in self.sources]
        if isinstance(self.result, Observation):
            ids.insert(0, self.result.id)
        return ids


def became_true(newer: Observation, older: Observation, now: datetime) -> datetime:
    """When the older statement stopped holding: when the newer one started, but never before
    the older one was recorded nor after now."""
    return min(max(newer.holds_from, older.created_at), now)


def plan(
    new: Observation,
    verdicts: Sequence[tuple[Observation, Verdict]],
    now: datetime,
    *,
    merged_text: tuple[str, str] | None = None,
    model: str | None = None,
) -> list[Step]:
    """The steps for `new` given each candidate's verdict (see the module's order)."""
    acting = [(c, v) for c, v in verdicts if v.acts]
    for candidate, verdict in acting:
        if verdict.decision is Decision.update and verdict.current == candidate.id:
            return [
                Step(
                    Decision.update,
                    [new],
                    candidate,
                    verdict.reason,
                    verdict.path,
                    model if verdict.path is DecisionPath.llm else None,
                    {new.id: became_true(candidate, new, now)},
                )
            ]
    steps: list[Step] = []
    duplicates = [(c, v) for c, v in acting if v.decision is Decision.duplicate]
    outdated = [(c, v) for c, v in acting if v.decision is Decision.update]
    carried: list[str] = []
    for older, _ in outdated:
        carried.extend(carried_over(Reading(new), Reading(older)))
    survivor: Observation | ObservationDraft = new
    if duplicates:
        sources = [new, *(c for c, _ in duplicates)]
        title, narrative = (
            merged_text if merged_text and any(v.path is DecisionPath.llm for _, v in duplicates) else (None, None)
        )
        draft = merged_draft(sources, title=title, narrative=narrative)
        if carried:
            draft = draft.model_copy(update={"facts": [*draft.facts, *carried][:100]})
        path = DecisionPath.llm if any(v.path is DecisionPath.llm for _, v in duplicates) else DecisionPath.rules
        reason = "; ".join(dict.fromkeys(v.reason for _, v in duplicates))
        steps.append(
            Step(Decision.duplicate, sources, draft, reason, path, model if path is DecisionPath.llm else None)
        )
        survivor = draft
    if outdated:
        olders = [c for c, _ in outdated]
        path = DecisionPath.llm if any(v.path is DecisionPath.llm for _, v in outdated) else DecisionPath.rules
        reason = "; ".join(dict.fromkeys(v.reason for _, v in outdated))
        valid_to = {o.id: became_true(new, o, now) for o in olders}
        if carried and not duplicates:
            draft = updated_draft(new, olders[0], carried)
            draft = draft.model_copy(
                update={"merged_from": sorted({new.id, *(o.id for o in olders)}, key=lambda i: i.int)}
            )
            valid_to[new.id] = now
            steps.append(Step(Decision.update, [new, *olders], draft, reason, path, _model(path, model), valid_to))
        else:
            steps.append(Step(Decision.update, olders, survivor, reason, path, _model(path, model), valid_to))
    for candidate, verdict in acting:
        if verdict.decision is Decision.conflict:
            steps.append(
                Step(
                    Decision.conflict, [new, candidate], None, verdict.reason, verdict.path, _model(verdict.path, model)
                )
            )
    return steps


def _model(path: DecisionPath, model: str | None) -> str | None:
    return model if path is DecisionPath.llm else None


# ---- digests of old low-priority memories (source 003) -----------------------------------------

DIGEST_TAG = "digest"


def topic_of(obs: Observation) -> str:
    """What a low-priority observation is about: its first tag, else its first concept, else its type."""
    for value in (*obs.tags, *obs.concepts):
        if value.strip() and value.casefold() != DIGEST_TAG:
            return value.casefold().strip()
    return obs.type


def digest_groups(
    observations: Sequence[Observation], *, older_than: datetime, min_size: int = 3, max_size: int = 50
) -> list[list[Observation]]:
    """Low-priority observations recorded before `older_than`, grouped by audience and topic;
    groups of at least `min_size`, the first said `max_size` of each (the next sweep takes the rest)."""
    groups: dict[tuple[object, ...], list[Observation]] = {}
    for obs in observations:
        if obs.priority is not Priority.low or not obs.is_current or obs.created_at >= older_than:
            continue
        if DIGEST_TAG in (t.casefold() for t in obs.tags):
            continue
        groups.setdefault((*audience(obs), topic_of(obs)), []).append(obs)
    found = []
    for members in groups.values():
        members.sort(key=lambda o: (o.said, o.created_at, o.id.int))
        if len(members) >= min_size:
            found.append(members[:max_size])
    return found


def offline_digest(
    members: Sequence[Observation], *, title: str | None = None, narrative: str | None = None
) -> ObservationDraft:
    """One digest observation for a group: a title naming the topic, count and period, and one
    line per source (the sources keep their full text); facts, concepts and tags united."""
    topic = topic_of(members[0])
    first, last = members[0].said, members[-1].said  # the period they were said in
    german = Counter(detect_language(f"{m.title} {m.narrative}") for m in members).most_common(1)[0][0] == "de"
    if title is None:
        label = "Zusammenfassung" if german else "Digest"
        memories = "Erinnerungen" if german else "memories"
        title = f"{label}: {topic} ({len(members)} {memories}, {first:%Y-%m-%d} – {last:%Y-%m-%d})"
    if narrative is None:
        narrative = "\n".join(f"- {m.said:%Y-%m-%d}: {' '.join(m.title.split())}" for m in members)
    draft = merged_draft(members, title=title, narrative=narrative[:20_000])
    return draft.model_copy(
        update={
            "priority": Priority.low,
            "tags": [DIGEST_TAG, *(t for t in draft.tags if t.casefold() != DIGEST_TAG)][:50],
            "discovery_tokens": [*draft.discovery_tokens, *(m.title[:200] for m in members)][:100],
        }
    )


def digest_cutoff(now: datetime, days: int) -> datetime:
    return now - timedelta(days=days)


def feedback_sums(sources: Sequence[Observation]) -> FeedbackCounts:
    """The sources' counters, summed for the consolidated observation."""
    return FeedbackCounts(
        retrieved=sum(s.relevance_count for s in sources),
        cited=sum(s.cited_count for s in sources),
        confirmed=sum(s.confirmed_count for s in sources),
        rejected=sum(s.rejected_count for s in sources),
    )
