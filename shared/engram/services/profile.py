"""The user's profile: what an assistant should know of the user without being asked (R-1.3, R-8.4).

The user's own preferences and identity (who they are, what they like, their family, pets, work,
home and routines) and their plans still ahead (the next trip, an appointment, a birthday:
`domain/plans.py`); never sensitive, never what the user rejected, never a colleague's (a
colleague's public preference is not this user's profile; recall can still bring it). In the
order of recall text, priority first: the high and critical facts, then the plans (normal, but
bound to a day), the soonest first, then the other facts, the newest first; as many as fit
`STABLE_CHARS`, so twenty facts of the user's do not push out the appointment next week.

A chat turn sends it with every message as the stable memory block (`chat.prepare`, cached);
other assistants read the same block through the memory API (`GET /api/ai/memory/profile`)
and the MCP tool `profile`, so a request that needs a fact without naming it ("What should we
organise before our week away?" for a dog) gets it there too.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo

from engram.domain.life_topics import PROFILE_TYPES
from engram.domain.observation import Observation, Priority, Scope
from engram.domain.plan_topics import PLAN_TYPES
from engram.domain.plans import plan_of, upcoming
from engram.domain.recall_text import fitted
from engram.domain.scopes import Principal, Visibility
from engram.domain.streams import render_observations
from engram.domain.zones import local_day
from engram.ports import TenantTx

STABLE_TYPES = PROFILE_TYPES
STABLE_LIMIT = 20
STABLE_CHARS = 3_000  # the block's budget in the prompt
# the user's newest plans read (`ObservationRepository.plans`: only statements that tell one, by a
# partial index), passed or not: ~15 us each (chat-turn's prepare, bench/RESULTS.md part 32)
PLANS_READ = 30


def stable_block(stable: Sequence[Observation], zone: tzinfo = UTC) -> str:
    """The stable memory block as the prompt holds it, in the profile's order (`read_profile`),
    its days the user's (`zone`)."""
    return render_observations(stable, STABLE_CHARS, in_order=True, zone=zone)


def stable_sent(stable: Sequence[Observation], zone: tzinfo = UTC) -> list[Observation]:
    """The observations of the stable memory that fit the block's budget (what the model reads)."""
    return [obs for obs, _entry in fitted(stable, token_budget=STABLE_CHARS // 4, in_order=True, zone=zone)]


async def read_profile(
    tx: TenantTx,
    principal: Principal,
    observation_types: frozenset[str],
    now: datetime | None = None,
    zone: tzinfo = UTC,
) -> list[Observation]:
    """The principal's profile, in the block's order: their high and critical facts, their plans
    still ahead (`plans.upcoming` among the statements that tell one, `ObservationRepository.plans`,
    and their facts: the next trip, an appointment, a birthday), soonest first, then their other
    facts (`profile_facts`, those that tell no plan); empty for a principal without a user (a
    tenant-wide agent key has no profile) or a deployment without the types. Fitted to the block
    once (rendering every entry is most of the Python time of a read). Days, today's and those
    the plans were told on, are the user's, in their time zone `zone` (`domain/zones.py`)."""
    now = now or datetime.now(UTC)
    facts = await _facts(tx, principal, observation_types, now)
    types = sorted(PLAN_TYPES & observation_types)
    if not types or principal.user_id is None:
        return stable_sent(facts, zone)
    visibility = Visibility.for_principal(principal)
    plans = await tx.observations.plans(visibility, types=types, now=now, limit=PLANS_READ)
    plans = [o for o in plans if o.scope is not Scope.sensitive and visibility.allows(o)]
    # a plan told as a change of the user's life ("Since we changed our plans and are going to Crete
    # in August instead") is an identity: it is a plan too, shown while ahead, and replaces the last
    told = {o.id: o for o in [*facts, *plans]}.values()
    rest = [o for o in facts if plan_of(o, zone) is None]
    first = [o for o in rest if o.priority.rank > Priority.normal.rank]
    later = [o for o in rest if o.priority.rank <= Priority.normal.rank]
    ahead = upcoming(list(told), local_day(now, zone), zone=zone)
    return stable_sent([*first, *ahead, *later], zone)


async def profile_facts(
    tx: TenantTx, principal: Principal, observation_types: frozenset[str], now: datetime | None = None
) -> list[Observation]:
    """The principal's preferences and identity (what the offline extraction compares a new
    statement with), newest first, as many as fit the block."""
    return stable_sent(await _facts(tx, principal, observation_types, now or datetime.now(UTC)))


async def _facts(
    tx: TenantTx, principal: Principal, observation_types: frozenset[str], now: datetime
) -> list[Observation]:
    """The principal's preferences and identity, newest first, at most `STABLE_LIMIT`, never sensitive."""
    types = [t for t in STABLE_TYPES if t in observation_types]
    if not types or principal.user_id is None:
        return []
    visibility = Visibility.for_principal(principal)
    observations = await tx.observations.profile(visibility, types=types, now=now, limit=STABLE_LIMIT)
    return [o for o in observations if o.scope is not Scope.sensitive and visibility.allows(o)]
