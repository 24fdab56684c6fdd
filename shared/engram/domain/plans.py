"""The user's upcoming plans and dates, for the stable memory block (R-1.3): pure rules, no I/O.

An assistant should know what the user has coming up without being asked: "What do I have coming
up that I shouldn't forget?", "Which vaccinations do we need for our holiday?", "Can you help me
plan a surprise party for my wife?" share no word with "my dentist appointment is on 12 February",
"we booked a holiday in Lisbon for April" or "Anna turns forty on 14 March". A plan is a statement
of the user's about one of the plans `life_topics` knows (the next trip, an appointment with a
dentist, a doctor, the vet, an interview, an exam, any other) with a day (`dates.plan_date`), not
in the past tense; or a birthday with its day and month, which comes back every year
(`plan_topics`).

`upcoming` picks the plans still ahead, soonest first: a later statement of the same plan that
says it changed replaces the earlier ones ("the dentist moved my appointment to 18 April",
`life_topics.replaces`), one that does not say so is another plan of its kind ("a check-up in May"
beside "the dentist on 3 March"), and the same plan on the same day told twice is one. A plan
called off ("I cancelled my dentist appointment on 12 May", "the trip to Lisbon in April is off",
"der Zahnarzttermin am 12. Mai fällt aus") takes the plan of its kind on that day away and is no
plan itself. A birthday is always ahead (its next anniversary) and replaces nothing: two people's
birthdays are two dates.

Which plan a text tells is `plan_topics` (text only, so `ObservationDraft` can flag a plan when
it is written without importing this module): the profile reads the user's flagged statements by
a small partial index however much they said since (`ObservationRepository.plans`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, tzinfo
from functools import lru_cache

from engram.domain.dates import DAY, MONTH, next_anniversary, plan_when, weekday_name
from engram.domain.facts import says_changed
from engram.domain.life_topics import APPOINTMENT, OTHER_APPOINTMENT, replaces
from engram.domain.observation import Observation
from engram.domain.plan_topics import BIRTHDAY, CACHED_CHARS, PLAN_FLAG, calls_off, plan_topic
from engram.domain.zones import local_day

PLANS_LIMIT = 5  # plans in the stable memory block


@dataclass(frozen=True)
class Plan:
    observation: Observation
    topic: str  # "trip:next", "appointment:dentist", "birthday"
    day: date  # a birthday: the day it was told for
    changed: bool  # it says the plan changed (it replaces the earlier statements of its topic)
    called_off: bool = False  # it says the plan on that day is off (it takes that plan away)
    exact: str = DAY  # `dates.plan_when`: a day, a month (its last day) or a span (its last day)


def plan_of(obs: Observation, zone: tzinfo = UTC) -> Plan | None:
    """The plan an observation tells (its title, else its narrative) and its day, from the day it
    was said in the user's `zone` ("tomorrow" said at 8 pm in New York is 1 am UTC of the next day)."""
    said = local_day(obs.said, zone)
    for text in (obs.title, obs.narrative):
        if not text:
            continue
        found = _plan_in(text, said) if len(text) <= CACHED_CHARS else _plan_in.__wrapped__(text, said)
        if found is not None:
            return Plan(obs, *found)
    return None


# a chat turn reads it for the block's plans (`upcoming`) and again for each entry's day (`plan_day`)
@lru_cache(maxsize=4_096)
def _plan_in(text: str, said: date) -> tuple[str, date, bool, bool, str] | None:
    """`Plan`'s fields but the observation, for a text said on `said`."""
    if (topic := plan_topic(text)) is None or (when := plan_when(text, said)) is None:
        return None
    day, exact = when
    return topic, day, says_changed(text), topic != BIRTHDAY and calls_off(text), exact


def plan_day(obs: Observation, zone: tzinfo = UTC) -> str | None:
    """The day of the plan a flagged observation tells, as recall text shows it beside the words
    ("My dentist appointment is tomorrow" said on 5 February 2025: "2025-02-06, Thursday"; a
    birthday: "every 14 March"), so a model reads the day instead of working it out from when it was
    said; None for anything else and for a plan called off."""
    if PLAN_FLAG not in obs.tags or (plan := plan_of(obs, zone)) is None or plan.called_off:
        return None
    if plan.topic == BIRTHDAY:
        return f"every {plan.day.day} {_MONTH_NAMES[plan.day.month - 1]}"
    if plan.exact == MONTH:  # "in August": the month, not its last day
        return f"{_MONTH_NAMES[plan.day.month - 1]} {plan.day.year}"
    day = f"{plan.day.isoformat()}, {weekday_name(plan.day)}"
    return day if plan.exact == DAY else f"by {day}"  # "next week": over by its last day


_MONTH_NAMES = tuple("January February March April May June July August September October November December".split())


def upcoming(
    observations: Sequence[Observation], today: date, limit: int = PLANS_LIMIT, *, zone: tzinfo = UTC
) -> list[Observation]:
    """The plans among `observations` on `today` or later (the user's day, their `zone`'s, as the
    days the plans were told), soonest first, each once: a later
    statement of a plan that says it changed replaces what was said of it before, one that calls
    it off takes it away (an appointment moved without saying whose, "die Praxis hat meinen Termin
    verschoben", is the appointment told last); a birthday is at its next anniversary."""
    kept: dict[tuple[str, date], Plan] = {}
    for obs in sorted(observations, key=lambda o: (o.said, str(o.id))):
        plan = plan_of(obs, zone)
        if plan is None:
            continue
        if plan.called_off:  # that plan on that day; "my appointment on Monday": of any kind
            kind = APPOINTMENT if plan.topic == OTHER_APPOINTMENT else plan.topic
            kept = {key: p for key, p in kept.items() if not (p.day == plan.day and p.topic.startswith(kind))}
            continue
        if plan.topic == BIRTHDAY:
            day = next_anniversary(plan.day.month, plan.day.day, today)
            if day is None:
                continue
            plan = Plan(obs, BIRTHDAY, day, False)
        elif replaces(plan.topic, changed=plan.changed, current=True):
            if plan.topic == OTHER_APPOINTMENT:  # "the practice moved my appointment": the one told last
                told = [p for p in kept.values() if p.topic.startswith(APPOINTMENT)]
                if told:
                    plan = replace(
                        plan, topic=max(told, key=lambda p: (p.observation.said, str(p.observation.id))).topic
                    )
            kept = {key: p for key, p in kept.items() if p.topic != plan.topic}
        kept[(plan.topic, plan.day)] = plan  # the same plan told again: the later words
    ahead = sorted((p for p in kept.values() if p.day >= today), key=lambda p: (p.day, p.topic))
    return [p.observation for p in ahead[:limit]]
