"""Recall and consolidation (R-15.1, R-15.3): what `RecallService` adds for versions and conflicts.

- **As of a time.** The index holds only what is current. A recall "as of" T searches it with
  T as the instant (valid-from and expiry at T), then walks back from every candidate through
  what it superseded (`ConsolidationStore.predecessors`) and keeps the versions valid at T:
  "Alice lives in Hamburg" found today answers "as of March" with "Alice lives in Stuttgart";
  a consolidated observation answers with the sources it united. Each version keeps its
  candidate's fused score.
- **Conflicts.** A hit linked to a contradicting observation brings that one along, right
  after it (visible to the caller, in force, at most `MAX_PARTNERS` per recall), so the
  recall text can mark both "(conflicting: ...)" and the assistant asks instead of guessing.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence

from engram.domain.observation import Observation
from engram.domain.recall import SearchHit
from engram.ports import TenantTx
from engram.services.recall_plan import Plan

VERSION_DEPTH = 8
MAX_PARTNERS = 5


async def hydrate_as_of(tx: TenantTx, plan: Plan) -> dict[str, Observation]:
    """The versions valid at the plan's instant of its fused candidates; `plan.fused` becomes
    theirs (in the candidates' order)."""
    at = plan.where.now
    chains = await tx.consolidation.predecessors([uuid.UUID(f.id) for f in plan.fused], VERSION_DEPTH)
    found: dict[str, Observation] = {}
    fused = []
    for f in plan.fused:
        for version in chains.get(uuid.UUID(f.id), []):
            key = str(version.id)
            if key in found or not version.valid_at(at) or not plan.visibility.allows(version):
                continue
            found[key] = version
            fused.append(dataclasses.replace(f, id=key))
    plan.fused = fused
    return found


async def conflict_partners(tx: TenantTx, plans: Sequence[Plan], found: Mapping[str, Observation]) -> None:
    """Read the contradicting observations of the candidates into `found` (visible, in force)."""
    wanted = {str(p) for o in found.values() for p in o.conflicts_with} - set(found)
    live = [p for p in plans if p.query.as_of is None]
    if not wanted or not live:
        return
    widest = max(live, key=lambda p: p.visibility.include_sensitive).visibility
    partners = await tx.observations.visible(sorted(wanted), widest, live[0].where.now)
    assert isinstance(found, dict)
    found.update(partners)


def with_partners(plan: Plan, hits: list[SearchHit], found: Mapping[str, Observation]) -> list[SearchHit]:
    """`hits` with each one's conflicting observations right after it (once each)."""
    if plan.query.as_of is not None:
        return hits
    shown = {h.observation.id for h in hits}
    out: list[SearchHit] = []
    added = 0
    for hit in hits:
        out.append(hit)
        for partner_id in hit.observation.conflicts_with:
            partner = found.get(str(partner_id))
            if partner is None or partner.id in shown or added >= MAX_PARTNERS:
                continue
            if not plan.visibility.allows(partner) or (plan.query.types and partner.type not in plan.query.types):
                continue
            shown.add(partner.id)
            added += 1
            out.append(
                SearchHit(
                    observation=partner,
                    score=hit.score,
                    lexical_rank=None,
                    vector_rank=None,
                    boosts={"conflict": 1.0},
                    stream_origin=plan.query.stream_origin,
                )
            )
    return out
