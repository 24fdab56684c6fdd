"""Whom a question asks about: what the user said, or what the assistant said. Pure.

In a chat with an assistant the memories asked for are mostly the user's own ("Which instrument
am I learning?"), so an assistant's answers are low priority (`conversation.turn_units`) and lend
no session support (`ranking.support_session`). A user also asks what the assistant said ("What
was your trick for keeping herbs fresh?", "Was hast du mir gegen die Rückenschmerzen
empfohlen?"): then the assistant's answers are what is asked for, and ranking them below the
user's own requests on the topic lost them (assistant_chats "advice" questions, hybrid recall@10
0.27 en / 0.19 de, below BM25 alone; bench/RESULTS.md).

`asks_assistant(question)`: the question asks the assistant about what it said, suggested,
gave or made before, in English or German: "did you say/tell/suggest/recommend...", "you
said...", "the list you provided / put together", "what was your tip/idea/advice/recipe...",
"the hotel from your list", "in our previous conversation", "hast du ...
empfohlen/gesagt/geraten/aufgelistet...", "..., das du mir empfohlen hast", "laut dir", "was war
dein Tipp/Rat/Vorschlag...", "in unserem letzten Gespräch". None of LoCoMo dev's, XQuAD's or
the generated chats' other 3,618 questions matches. A request to it now ("Could you suggest a
recipe?", "Can you put together an itinerary?", "What's your advice?", "Kannst du mir etwas
empfehlen?") is not: in a chat, the user's message is the query, and a request is answered with
the user's own facts first. Questions about people in the third
person ("What did Caroline say?") and the user's own facts ("Where do I live?") are not either.

`asks_about_user(question)`: the question is in the first person ("Which instrument am I
learning?", "Wo wohnt meine Schwester?") and does not ask the assistant: the user's own words are
the evidence, and the assistant's answers on the topic, which share the question's words, rank
down by half (`UNASKED_WEIGHT`): assistant_chats hybrid recall@10 on the user's facts 0.900 ->
0.932, its kNN list alone 0.939 (bench/RESULTS.md, part 11). A question in neither person ("How
long do roasted vegetables keep?") leaves the answers as they are.

`unasked_types(question)`: what a search leaves out of its candidate lists. An assistant's
passages (`memory_units.passage_units`, type `PASSAGE_TYPE`) are searched only when the question
asks the assistant: among the lists of a question about the user's own facts they took the places
of the user's turns (assistant_chats recall@10 on the user's facts 0.932 -> 0.868,
bench/RESULTS.md part 11), and ranking them down after the lists could not give those back.
"""

from __future__ import annotations

import functools
import re

from engram.domain.memory_units import PASSAGE_TYPE, UnitKind, unit_ref
from engram.domain.observation import Observation, Priority

# an assistant's unit when the question asks what the assistant said (undoes its low priority,
# and a little more: the user's own requests on the topic are not the answer)
ADDRESSED_WEIGHT = 1.5
# an assistant's unit when a question about the user's own facts does not ask the assistant, and an
# assistant's passage when a question does not ask the assistant
UNASKED_WEIGHT = 0.5

_EN_VERBS = (
    r"say|tell|mention|suggest|recommend|advise|propose|write|explain|give|call|think|show|send|promise|note"
    r"|provide|list|share|describe|offer|create|generate|draft|compile|include|outline|summari[sz]e|translate"
    r"|calculate|estimate|quote|cite|point out|come up with|put together"
)
# what the assistant made or handed over too ("the list you provided", "the itinerary you put
# together"), not only what it said
_EN_MADE = (
    r"provided|listed|shared|described|offered|created|generated|drafted|compiled|included|outlined|summari[sz]ed"
    r"|translated|calculated|estimated|quoted|cited|pointed out|came up with|put together|walked me through"
)
_EN_PAST = (
    r"said|told|mentioned|suggested|recommended|advised|proposed|wrote|explained|gave|called|meant|showed|sent"
    rf"|promised|noted|{_EN_MADE}"
)
_EN_PERFECT = (
    r"said|told|mentioned|suggested|recommended|advised|proposed|written|explained|given|called|meant|shown|sent"
    rf"|promised|noted|{_EN_MADE}"
)
_EN_THINGS = (
    r"trick|tricks|idea|ideas|tip|tips|advice|suggestion|suggestions|recommendation|recommendations|answer|plan"
    r"|proposal|recipe|recipes|list|draft|example|explanation|opinion|rule|itinerary|schedule|summary|translation"
    r"|estimate|calculation|outline|checklist|instructions|steps|template"
)
# what the assistant gave, as in "the hotel from your list" ("in your opinion" is a request now)
_EN_GIVEN = r"list|lists|answer|recipe|recipes|explanation|example|examples|draft|tips|suggestions|recommendations"
_DE_PARTICIPLES = (
    r"gesagt|erzählt|erwähnt|empfohlen|geraten|vorgeschlagen|geschrieben|erklärt|gemeint|genannt|gegeben"
    r"|gezeigt|geschickt|versprochen|notiert|aufgelistet|aufgezählt|beschrieben|angeboten|erstellt"
    r"|zusammengestellt|entworfen|berechnet|ausgerechnet|geschätzt|zusammengefasst|übersetzt|skizziert"
    r"|aufgeschrieben|formuliert|herausgesucht"
)
_DE_THINGS = (
    r"trick|tricks|idee|ideen|tipp|tipps|rat|ratschlag|ratschläge|vorschlag|vorschläge|empfehlung|empfehlungen"
    r"|antwort|plan|rezept|rezepte|liste|entwurf|beispiel|erklärung|meinung|regel|reiseplan|zeitplan"
    r"|zusammenfassung|übersetzung|schätzung|berechnung|gliederung|checkliste|anleitung|schritte|vorlage"
)
# what the assistant said before, in the past: a request to it now ("Could you suggest a recipe?",
# "What's your advice?", "Kannst du mir etwas empfehlen?") is not a question about its answers
_ASKS = re.compile(
    rf"(?i)\b(?:did you\s+(?:\w+\s+){{0,2}}?(?:{_EN_VERBS})\b"
    rf"|(?:have|had) you\s+(?:\w+\s+){{0,2}}?(?:{_EN_PERFECT})\b"
    # "you put together" is a past, "can you put together" a request
    rf"|(?<!can )(?<!could )(?<!would )(?<!will )(?<!to )you\s+(?:{_EN_PAST})\b"
    rf"|(?:was|were)\s+(?:\w+\s+)?your\s+(?:\w+\s+)?(?:{_EN_THINGS})\b"
    rf"|your\s+(?:earlier|last|previous|old|first)\s+(?:\w+\s+)?(?:{_EN_THINGS})\b"
    rf"|(?:from|in)\s+your\s+(?:{_EN_GIVEN})\b"
    rf"|\bour\s+(?:previous|last|earlier|old)\s+(?:conversation|chat|discussion|session)\b"
    rf"|\bunser(?:e|em|en|er)?\s+(?:letzte[nmrs]?|vorige[nmrs]?|frühere[nmrs]?)\s+(?:gespräch|unterhaltung|chat)\b"
    rf"|(?:hast|hattest) du\b[^?.!]*\b(?:{_DE_PARTICIPLES})\b"
    rf"|\bdu\b[^?.!]*\b(?:{_DE_PARTICIPLES})\s+(?:hast|hattest)\b"
    rf"|laut dir\b|du (?:sagtest|meintest|riet(?:e)?st|empfahlst)\b"
    rf"|(?:war|waren)\s+(?:\w+\s+)?dein(?:e|en|em|er|es)?\s+(?:\w+\s+)?(?:{_DE_THINGS})\b"
    rf"|dein(?:e|en|em|er|es)?\s+(?:frühere[nrs]?|letzte[nrs]?|damalige[nrs]?)\s+(?:\w+\s+)?(?:{_DE_THINGS})\b)"
)


_FIRST_PERSON = re.compile(
    r"(?i)\b(?:i|i'm|i've|i'd|i'll|my|me|mine|myself|we|our|ours|us|ich|mein|meine|meinen|meinem|meiner|meines"
    r"|mir|mich|wir|unser|unsere|unseren|unserem|unserer|unseres|uns)\b"
)


@functools.lru_cache(maxsize=4096)  # a recall asks it of one question up to three times
def asks_assistant(question: str) -> bool:
    """Whether `question` asks what the assistant said, suggested or gave (see the module)."""
    return _ASKS.search(question) is not None


def unasked_types(question: str) -> tuple[str, ...]:
    """The observation types a search for `question` leaves out: an assistant's passages unless the
    question asks the assistant (see the module)."""
    return () if asks_assistant(question) else (PASSAGE_TYPE,)


def in_first_person(question: str) -> bool:
    """Whether `question` says "I", "my", "we", "ich", "mein", "unser" ..."""
    return _FIRST_PERSON.search(question) is not None


def asks_about_user(question: str) -> bool:
    """Whether `question` is in the first person and does not ask the assistant (see the module)."""
    return not asks_assistant(question) and in_first_person(question)


def assistant_unit(obs: Observation) -> UnitKind | None:
    """The kind of an assistant's memory unit (its answer's turn unit, or a passage of it), else
    None: a low-priority turn unit (`conversation.turn_units`) or a passage unit."""
    ref = unit_ref(obs)
    if ref is None or obs.priority is not Priority.low:
        return None
    return ref.kind if ref.kind in (UnitKind.turn, UnitKind.passage) else None


def addressee_support(obs: Observation, asked: bool, about_user: bool = False) -> float:
    """The multiplier of a candidate for whom the question asks about: for an assistant's unit,
    `ADDRESSED_WEIGHT` when the question asks the assistant (`asked`), `UNASKED_WEIGHT` when it
    asks about the user's own facts (`about_user`), and for a passage when it does neither; 1
    for everything else."""
    kind = assistant_unit(obs)
    if kind is None:
        return 1.0
    if asked:
        return ADDRESSED_WEIGHT
    return UNASKED_WEIGHT if about_user or kind is UnitKind.passage else 1.0
