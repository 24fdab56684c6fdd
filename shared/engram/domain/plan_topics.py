"""Which plan of the user's a text tells (`plans`): pure text rules, no I/O, no observation.

A plan is a statement about one of the plans `life_topics` knows (the next trip, an appointment
with a dentist, a doctor, the vet, an interview, an exam, any other appointment) with a day
`dates.plan_date` reads (a full date, a day and month, a month, a weekday, a day relative to when
it was said), not in the past tense; or a birthday with its day and month. `ObservationDraft`
flags such a statement when it is written (`PLAN_FLAG`, like the instruction flag, never by a
writer), so this module imports no model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date
from functools import lru_cache

from engram.domain.dates import day_and_month, plan_date
from engram.domain.injection import MAX_TAGS
from engram.domain.life_topics import BYGONE, ONLY_WHEN_CHANGED, PROFILE_TYPES, topics

PLAN_FLAG = "flag:plan"  # Engram's own tag (`injection.FLAG_PREFIX`): the statement tells a plan
# the types a plan is stored as: an event (`chat_extraction.offline_observations`), or a change of
# the user's life that is one ("we changed our plans and are going to Crete in August instead")
PLAN_TYPES = frozenset({"event", *PROFILE_TYPES})
BIRTHDAY = "birthday"
_AGES = "twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|zwanzig|dreißig|vierzig|fünfzig|sechzig|siebzig|achtzig"
# "Anna's birthday", "Geburtstag", "turns forty", "wird am 14. März vierzig" (an age in words or with "Jahre")
_BIRTHDAY = re.compile(
    rf"\b(birthdays?|geburtstag\w*|turns? (\d{{1,3}}|{_AGES})|wird\b[^?!;]{{0,30}}?\b({_AGES}|\d{{1,3}} jahre))\b",
    re.IGNORECASE,
)
# what was, not what will be: "we went to Crete in May", "last August", "vor zwei Wochen", "letzten Montag"
_PAST = re.compile(
    rf"\b({BYGONE}|went|ago|yesterday|last|gestern|vorige[nmrs]?|letzte[nmrs]?|waren"
    r"|hatte|hatten)\b|\bvor (\w+ )?(tagen|wochen|monaten|jahren)\b",
    re.IGNORECASE,
)
# a plan called off, said as done ("Should I cancel ...?" calls nothing off)
_CALLED_OFF = re.compile(
    r"\b(cancell?ed|called off|(is|are|'s|'re) off|won't happen|abgesagt|storniert|fällt aus|fallen aus"
    r"|findet nicht statt|finden nicht statt)\b",
    re.IGNORECASE,
)
# ... unless the day it names is the new plan: "the old trip is cancelled; Iceland in June is the new plan"
_INSTEAD = re.compile(
    r"\b(new plan|instead|rebooked|moved (it )?to|now|neue[nr]? plan|stattdessen|verschoben|jetzt|nun)\b", re.IGNORECASE
)
_ANY_DAY = date(2000, 1, 1)  # `plan_topic` asks only whether a day is named


def plan_topic(text: str) -> str | None:
    """The plan `text` tells ("appointment:dentist", "trip:next", "birthday"), if it names one and a
    day for it and does not speak of the past. A second plan of a kind is a plan ("we're also going
    to Crete in August"): `life_topics.current` is not asked."""
    return _plan_topic(text) if len(text) <= CACHED_CHARS else _plan_topic.__wrapped__(text)


CACHED_CHARS = 600  # a statement's length; a long narrative is not kept in a cache (`plans` too)


@lru_cache(maxsize=4_096)  # the block reads the same user's texts at every chat turn
def _plan_topic(text: str) -> str | None:
    if _PAST.search(text):
        return None
    planned = sorted(topics(text) & ONLY_WHEN_CHANGED)
    if planned and plan_date(text, _ANY_DAY) is not None:
        return planned[0]
    if _BIRTHDAY.search(text) and day_and_month(text) is not None:
        return BIRTHDAY
    return None


def tells_plan(obs_type: str, title: str, narrative: str) -> bool:
    """Whether a statement of this type and text tells a plan (`PLAN_FLAG`)."""
    return obs_type in PLAN_TYPES and any(text and plan_topic(text) is not None for text in (title, narrative))


def flags_plan(user_id: str | None, obs_type: str, title: str, narrative: str, tags: Sequence[str]) -> bool:
    """Whether a write flags this observation as a plan now (`ObservationDraft`), and it is not yet:
    someone's statement that tells one, with room for one more tag."""
    return (
        user_id is not None
        and PLAN_FLAG not in tags
        and len(tags) < MAX_TAGS
        and tells_plan(obs_type, title, narrative)
    )


def calls_off(text: str) -> bool:
    """Whether a plan's statement calls it off, said as done and naming no new plan ("I cancelled
    my dentist appointment on 12 May", "Der Zahnarzttermin am 12. Mai fällt aus"; not "Should I
    cancel ...?" nor "the old trip is cancelled; Iceland in June is the new plan")."""
    return not text.rstrip().endswith("?") and _CALLED_OFF.search(text) is not None and _INSTEAD.search(text) is None
