"""What the LLM path of consolidation answers (R-15.1): the `record_consolidation` and
`record_digest` tools' input, validated by pydantic, and how it becomes verdicts. Pure.

The model sees the new observation and the candidates the rules left open (numbered 1..n) and
decides for each: duplicate, update (saying which one is current), conflict or unrelated, with a
reason; for duplicates it may write the merged title and narrative.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from engram.domain.consolidation import Decision, DecisionPath, Verdict
from engram.domain.observation import Observation

CONSOLIDATION_TOOL = "record_consolidation"
DIGEST_TOOL = "record_digest"


class PairJudgement(BaseModel):
    model_config = ConfigDict(extra="forbid")

    candidate: int = Field(ge=1, le=50, description="the candidate's number")
    decision: Literal["duplicate", "update", "conflict", "unrelated"]
    current: Literal["new", "candidate"] | None = Field(
        default=None, description="for 'update': which statement holds now"
    )
    reason: str = Field(min_length=1, max_length=500)


class ConsolidationOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decisions: list[PairJudgement] = Field(max_length=50)
    merged_title: str | None = Field(default=None, min_length=1, max_length=500)
    merged_narrative: str | None = Field(default=None, max_length=20_000)


class DigestOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=500)
    narrative: str = Field(min_length=1, max_length=20_000)


class InvalidJudgement(ValueError):
    """The model's answer does not fit the candidates it was shown."""


def verdicts_of(
    output: ConsolidationOutput, new: Observation, candidates: Sequence[Observation]
) -> dict[uuid.UUID, Verdict]:
    """The model's decisions by candidate id; raises InvalidJudgement for numbers it was not
    shown, a candidate decided twice, or an update that does not say which one holds."""
    found: dict[uuid.UUID, Verdict] = {}
    for judged in output.decisions:
        if judged.candidate > len(candidates):
            raise InvalidJudgement(f"candidate {judged.candidate} does not exist (there are {len(candidates)})")
        candidate = candidates[judged.candidate - 1]
        if candidate.id in found:
            raise InvalidJudgement(f"candidate {judged.candidate} is decided twice")
        current: uuid.UUID | None = None
        if judged.decision == "update":
            if judged.current is None:
                raise InvalidJudgement(f"candidate {judged.candidate}: an update must say which one is current")
            current = new.id if judged.current == "new" else candidate.id
        found[candidate.id] = Verdict(
            Decision(judged.decision), judged.reason, certain=True, current=current, path=DecisionPath.llm
        )
    return found


def describe(obs: Observation) -> str:
    """An observation as the model reads it: when, from whom, what."""
    lines = [f"said {obs.said:%Y-%m-%d %H:%M}, source {obs.source.value}, verified {obs.verified}"]
    if obs.valid_from:
        lines.append(f"valid from {obs.valid_from:%Y-%m-%d}")
    lines.append(f"title: {' '.join(obs.title.split())}")
    if obs.narrative.strip():
        lines.append(f"text: {' '.join(obs.narrative.split())[:1_500]}")
    if obs.facts:
        lines.append("facts: " + "; ".join(obs.facts[:20]))
    return "\n".join(lines)
