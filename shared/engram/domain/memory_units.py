"""Memory units beyond the single turn (R-6): indexed beside the turn units, mapped back to turns.

A turn unit (`conversation.turn_units`) embeds one turn. In a user-assistant chat the user's
fact is one sentence of a short request, and its neighbours are hundreds of words of assistant
prose; a question about the fact matches that sentence, not the prose around it. So a
conversation also gets derived units, each an observation of its own (same scope, owner and
write path), whose provenance names the turn(s) it comes from:

- `statement`: in a chat with an assistant, one sentence of the user's turn when the turn has
  more than one; it maps to its turn.
- `session`: one per session, the people's salient statements and first request (the shape of
  the offline session summary); it maps to the session, whose turns it supports.
- `entity`: everything the people said about one name (a person, a customer, a place) that
  comes up in at least two turns, joined in one unit; it maps to those turns.
- `passage`: in a chat with an assistant, a few sentences of the assistant's answer (up to
  `PASSAGE_CHARS`), so "what did you tell me about ...?" finds the sentence said, which the
  answer's turn unit, embedded by its opening (`embedded_by_title`), does not hold; low
  priority like the answer, and it maps to its turn. Its observation type is `PASSAGE_TYPE`:
  only a question that asks the assistant searches passages (`addressee.unasked_types`), so
  they take no place in the candidate lists of questions about the user's own facts. Nor in
  BM25's statistics (PostgreSQL, migration 0017): their words are the answer's turn unit's too,
  so a search that leaves them out ranks as if there were none.

`unit_ref` reads a unit back from an observation (its key and provenance), and `collapse`
turns a ranked list of units into a ranked list of turns: a turn's score is the best of its
own units (max, so a turn found twice does not count double), plus what the multi-turn units
naming it add (`SUPPORT_WEIGHT` of their score). An entity unit none of whose turns is a
candidate stays a hit of its own; a session unit supports its session's turns only.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from engram.domain.chat_extraction import salient, sentences
from engram.domain.observation import Observation, Priority

STATEMENT_MIN_CHARS = 20
SESSION_STATEMENTS = 6  # salient statements in a session unit
SESSION_CHARS = 600
ENTITY_MIN_TURNS = 2  # a name said in fewer turns joins nothing
ENTITY_MAX_TURNS = 12
ENTITY_CHARS = 600
PASSAGE_CHARS = 300  # `passage_units`: sentences of an assistant's answer joined up to this length
PASSAGE_TYPE = "passage"  # a passage unit's observation type (`addressee.unasked_types`)
# a person's turn unit embeds its narrative up to this length (`embedded_narrative`): about one
# of e5's 512-token windows
EMBEDDED_TURN_CHARS = 2_000
# at most this many statement units of one turn and passages of one answer (a pasted document,
# a long listing): the embedding work and the rows of one message stay bounded
STATEMENTS_PER_TURN = 12
PASSAGES_PER_ANSWER = 24
SUPPORT_WEIGHT = 0.5  # share of a multi-turn unit's score each of its turns among the candidates gets
REF_CHARS = 512  # `Provenance.source_event_id`


class UnitKind(StrEnum):
    turn = "turn"
    statement = "statement"
    session = "session"
    entity = "entity"
    passage = "passage"


@dataclass(frozen=True)
class UnitRef:
    """Where a unit comes from: its kind, conversation and the turn ids it maps to (a session
    unit maps to its session instead: `turns` is empty)."""

    kind: UnitKind
    conversation_id: str
    turns: tuple[str, ...]  # a turn or statement unit: its turn's message ids, the first one standing for it

    @property
    def single(self) -> bool:
        return self.kind in (UnitKind.turn, UnitKind.statement, UnitKind.passage)


@dataclass(frozen=True)
class Speech:
    """One turn as the unit builders see it: who said what, in which session, on which day."""

    turn_id: str  # a burst of messages (`conversation.bursts`): their ids, space-separated
    speaker: str
    text: str
    session_key: str  # the conversation's own session id
    day: str  # "8 May 2023"


def first_turn(turn_id: str) -> str:
    """The first message id of a (burst) turn's ids: the key a burst is stored and cited by."""
    return turn_id.split(maxsplit=1)[0] if turn_id.strip() else turn_id


def derived_key(kind: UnitKind, conversation_id: str, local: str) -> str:
    return f"unit:{kind.value}:{conversation_id}:{local}"[:200]


def source_ref(conversation_id: str, turns: Sequence[str]) -> str:
    """`source_event_id` of a unit: the conversation and its turn ids, space-separated (as many
    as fit), like a turn unit's `conversation#turn`."""
    ref = f"{conversation_id}#"
    for i, turn in enumerate(turns):
        part = turn if i == 0 else f" {turn}"
        if len(ref) + len(part) > REF_CHARS:
            break
        ref += part
    return ref


def unit_ref(obs: Observation) -> UnitRef | None:
    """The unit an observation is, from its key (`turn:` or `unit:<kind>:`) and provenance;
    None for every other observation (they are never grouped)."""
    key, ref = obs.key or "", obs.provenance.source_event_id or ""
    if "#" not in ref:
        return None
    conversation, turns = ref.rsplit("#", 1)
    if key.startswith("turn:"):  # a burst's unit names all its messages
        return UnitRef(UnitKind.turn, conversation, tuple(turns.split()) or (turns,))
    if not key.startswith("unit:"):
        return None
    kind = key.split(":", 2)[1]
    if kind not in UnitKind.__members__:
        return None
    unit_kind = UnitKind(kind)
    if unit_kind is UnitKind.session:
        return UnitRef(unit_kind, conversation, ())
    return UnitRef(unit_kind, conversation, tuple(turns.split()))


def embedded_by_title(obs: Observation) -> bool:
    """Whether indexing embeds only the observation's title (and tags): an assistant's turn unit
    (a turn unit of low priority, `conversation.turn_units`). Its title is the answer's opening
    (up to 500 characters); the whole answer stays its narrative, stored, shown and read by BM25.
    An assistant's answer runs to thousands of characters and was ~90 % of the embedding work of
    a user-assistant chat (0.44 s of CPU per answer against 0.04 s per user turn), while the
    memories asked for are what the user said; embedded by its opening, assistant_chats kept its
    recall (bench/RESULTS.md, part 7)."""
    if obs.priority is not Priority.low:
        return False
    ref = unit_ref(obs)
    return ref is not None and ref.kind is UnitKind.turn


def embedded_narrative(obs: Observation) -> str | None:
    """The part of the narrative indexing embeds: all of it, but of a turn unit its first
    `EMBEDDED_TURN_CHARS` characters. A pasted document in a person's turn (up to the
    narrative's 20,000 characters) took ~3.5 s of e5 CPU, in 512-token windows averaged into
    one vector near nothing in particular, that took places from the user's facts; its salient,
    first and last sentences are statement units of their own (`kept_statements`), and BM25
    reads all of it. With two pasted texts per generated chat, 2,000 against 4,000 characters
    gave hybrid recall@5 +0.006 to +0.014 (bench.assistant_chats --pastes, bench/RESULTS.md part
    19). The turns of the benches' conversations are far shorter."""
    narrative = obs.narrative
    ref = unit_ref(obs)
    if narrative and ref is not None and ref.kind is UnitKind.turn and len(narrative) > EMBEDDED_TURN_CHARS:
        return narrative[:EMBEDDED_TURN_CHARS].rsplit(" ", 1)[0]
    return narrative


_ASSISTANT_CHAT_ONLY = tuple(f"unit:{kind.value}:" for kind in (UnitKind.statement, UnitKind.passage))


def with_an_assistant(obs: Observation) -> bool:
    """Whether a unit shows its conversation had an assistant: an assistant's turn (a unit of low
    priority, `conversation.turn_units`) or a unit only such a chat gets (statement, passage)."""
    if obs.priority is not Priority.low and not (obs.key or "").startswith(_ASSISTANT_CHAT_ONLY):
        return False  # most candidates: no key to parse
    return unit_ref(obs) is not None  # a unit's kind is its key's: a statement or passage here


def turn_of(obs: Observation) -> Hashable:
    """What a hit stands for: its turn for a turn or statement unit, else the observation."""
    return _stands_for(obs, unit_ref(obs))


def turn_keys(observations: Sequence[Observation]) -> dict[uuid.UUID, Hashable]:
    """`turn_of` of each of a recall's candidates, read as `unit_refs` reads them together: an
    extracted observation whose message a turn unit among them holds stands for that turn too,
    as it does among the hits (`collapse`)."""
    return {obs.id: _stands_for(obs, ref) for obs, ref in zip(observations, unit_refs(observations), strict=True)}


def _stands_for(obs: Observation, ref: UnitRef | None) -> Hashable:
    return (ref.conversation_id, ref.turns[0]) if ref is not None and ref.single and ref.turns else obs.id


# ---- building -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DerivedUnit:
    """A unit's text and where it comes from; `conversation.derived_units` makes the draft."""

    kind: UnitKind
    local: str  # unique within the conversation and kind
    text: str  # the title: embedded and weighted fully by BM25
    turns: tuple[str, ...]  # the turns it maps to (none for a session unit)
    session_key: str  # the session it belongs to (an entity unit: its latest turn's session)
    tag: str | None = None  # a speaker, for the tag support of recall


def statement_units(
    speech: Sequence[Speech], assistants: frozenset[str], limit: int | None = STATEMENTS_PER_TURN
) -> list[DerivedUnit]:
    """In a chat with an assistant: one unit per sentence of a person's turn that has more than
    one sentence. The assistant's turns are the prose a user's sentence drowns in; they are not
    split. Between people (no assistant) nothing is split: their turns are short already, and
    LoCoMo dev lost recall@10 with sentence units (0.792 -> 0.779) at 3.3x the embedded texts.

    A question is a unit too: users tell their facts inside requests ("What should we pack for
    our trip to Crete in August?"). Leaving questions out (to keep a bare "Can you make it
    shorter?" from ranking near any later question) cost more than it gave once a third of the
    facts were said that way (`bench.assistant_chats`, RESULTS part 14); so did keeping only the
    questions that say "my", "our" or a number.

    A turn of more than `limit` such sentences (a pasted document, a long list) keeps `limit` of
    them (`kept_statements`): its turn unit still holds all of it, for BM25 and by its opening
    for the vector search."""
    if not assistants:
        return []
    units = []
    for turn in speech:
        if turn.speaker in assistants:
            continue
        said = [s for s in sentences(turn.text) if len(s) >= STATEMENT_MIN_CHARS]
        if len(said) < 2:
            continue
        kept = kept_statements(said, limit)
        units.extend(_pieces(UnitKind.statement, turn, [said[n] for n in kept], kept))
    return units


def kept_statements(said: Sequence[str], limit: int | None) -> list[int]:
    """The places of the sentences of one turn that become statement units: all of them up to
    `limit`; of more, the salient ones (`chat_extraction.salient`: what a person says of
    themselves, their plans, preferences and decisions) in order, then the first and the last
    ones by turns, where a person frames what they paste ("I'm applying for this job: ...",
    "... Can you shorten it?"), each place once."""
    if limit is None or len(said) <= limit:
        return list(range(len(said)))
    kept = [n for n, sentence in enumerate(said) if salient(sentence)][:limit]
    ends = (n for pair in zip(range(len(said)), reversed(range(len(said))), strict=True) for n in pair)
    for n in ends:
        if len(kept) >= limit:
            break
        if n not in kept:
            kept.append(n)
    return sorted(kept)


def _pieces(
    kind: UnitKind, turn: Speech, texts: Sequence[str], places: Sequence[int] | None = None
) -> list[DerivedUnit]:
    """Units of `kind` for pieces of one turn, numbered by their place in it (in order unless
    `places` says), each mapped to the turn."""
    return [
        DerivedUnit(
            kind,
            f"{first_turn(turn.turn_id)}:{n}",
            f"{turn.speaker}: {_clip(text, 480)}",
            tuple(turn.turn_id.split()),
            turn.session_key,
            turn.speaker,
        )
        for n, text in zip(places if places is not None else range(len(texts)), texts, strict=True)
    ]


def passage_units(
    speech: Sequence[Speech], assistants: frozenset[str], limit: int | None = PASSAGES_PER_ANSWER
) -> list[DerivedUnit]:
    """In a chat with an assistant: each answer of the assistant in passages of whole sentences
    of up to `PASSAGE_CHARS` characters (a longer sentence is a passage of its own, clipped);
    of a longer answer (a listing, a whole document), its first `limit` passages."""
    units = []
    for turn in speech:
        if turn.speaker not in assistants:
            continue
        passages: list[str] = []
        for sentence in sentences(turn.text):
            if passages and len(passages[-1]) + 1 + len(sentence) <= PASSAGE_CHARS:
                passages[-1] = f"{passages[-1]} {sentence}"
            else:
                passages.append(sentence)
        units.extend(_pieces(UnitKind.passage, turn, passages[:limit]))
    return units


def session_unit(speech: Sequence[Speech], assistants: frozenset[str]) -> DerivedUnit | None:
    """One session's unit: the first request, then the people's salient statements (the
    offline session summary's "request" and "learned")."""
    people = [t for t in speech if t.speaker not in assistants]
    if not people:
        return None
    parts = [f"{people[0].speaker}: {people[0].text}"]
    statements = [f"{t.speaker}: {s}" for t in people[1:] for s in sentences(t.text) if salient(s)]
    parts.extend(statements[:SESSION_STATEMENTS])
    text = _clip(" | ".join(" ".join(p.split()) for p in parts), SESSION_CHARS)
    session = people[0].session_key
    return DerivedUnit(UnitKind.session, session, f"Session on {people[0].day}: {text}", (), session)


_NAME = re.compile(r"(?<![\w'])([A-ZÄÖÜ][a-zäöüß]+(?:[ -][A-ZÄÖÜ][a-zäöüß]+)*)")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n)$")


def names_in(text: str) -> list[str]:
    """Capitalised words not at the start of a sentence (German nouns are capitalised too:
    `entity_units` keeps only names said in several turns and not by everyone)."""
    found = []
    for match in _NAME.finditer(text):
        if _SENTENCE_START.search(text[: match.start()]):
            continue
        found.append(match.group(1))
    return list(dict.fromkeys(found))


def entity_groups(speech: Sequence[Speech], assistants: frozenset[str]) -> dict[str, list[Speech]]:
    """Per name: the people's turns that say it, for names said in 2..ENTITY_MAX_TURNS turns
    (more is a word of the conversation, not an entity) other than the speakers themselves."""
    speakers = {t.speaker for t in speech}
    by_name: dict[str, list[Speech]] = {}
    for turn in speech:
        if turn.speaker in assistants:
            continue
        for name in names_in(turn.text):
            if name not in speakers:
                by_name.setdefault(name, []).append(turn)
    return {n: ts for n, ts in by_name.items() if ENTITY_MIN_TURNS <= len(ts) <= ENTITY_MAX_TURNS}


def entity_units(speech: Sequence[Speech], assistants: frozenset[str]) -> list[DerivedUnit]:
    """One unit per name: what the people said about it, joined across the turns that split it."""
    units = []
    for name, turns in sorted(entity_groups(speech, assistants).items()):
        said = [f"{t.speaker}: {s}" for t in turns for s in (sentences(t.text) or [t.text]) if name in s]
        text = _clip(" | ".join(" ".join(s.split()) for s in said), ENTITY_CHARS)
        ids = tuple(dict.fromkeys(i for t in turns for i in t.turn_id.split()))
        units.append(DerivedUnit(UnitKind.entity, name, f"About {name}: {text}", ids, turns[-1].session_key))
    return units


T = TypeVar("T")


def unit_refs(observations: Sequence[Observation]) -> list[UnitRef | None]:
    """`unit_ref` of each observation; and an observation extracted from a chat message (no unit
    itself: its `chat_message_id`) whose message a turn or statement unit among them holds maps to
    that turn like a statement, so a turn found both as said and as extracted takes one place in
    the list, its turn unit standing for it, else the better of the two (`collapse`). With the
    statement units too: an extracted plan with the words of its statement unit took two of the
    ten places (bench/RESULTS.md part 32)."""
    refs = [unit_ref(o) for o in observations]
    holder: dict[str, tuple[str, str]] = {}
    for ref in refs:
        if ref is not None and ref.kind in (UnitKind.turn, UnitKind.statement) and ref.turns:
            for turn in ref.turns:
                holder.setdefault(turn, (ref.conversation_id, ref.turns[0]))
    out: list[UnitRef | None] = []
    for obs, ref in zip(observations, refs, strict=True):
        message = obs.provenance.chat_message_id
        if ref is None and message is not None and str(message) in holder:
            conversation, first = holder[str(message)]
            ref = UnitRef(UnitKind.statement, conversation, (first,))
        out.append(ref)
    return out


def collapse(candidates: Sequence[tuple[T, float, UnitRef | None]]) -> list[tuple[T, float, dict[str, float]]]:
    """A ranked list of units as a ranked list of turns (see the module docstring).

    `candidates` are (item, score, unit). The result has one entry per turn (its turn unit's
    item, else its best statement's, with the best score of its units plus the support of the multi-turn units naming
    it), per multi-turn unit none of whose turns is there, and per item that is no unit, with
    the support as a multiplier (`{"support": f}`, a named boost), best first.
    Session units only support, through their session (`ranking.session_support`).
    """
    best: dict[tuple[str, str], tuple[T, float]] = {}
    out: list[tuple[T, float, dict[str, float]]] = []
    multi: list[tuple[T, float, UnitRef]] = []
    alias: dict[tuple[str, str], tuple[str, str]] = {}  # a burst's message -> its turn's key
    for item, score, ref in candidates:
        if ref is None:
            out.append((item, score, {}))
        elif ref.single:
            key = (ref.conversation_id, ref.turns[0])
            alias.update(((ref.conversation_id, t), key) for t in ref.turns)
            held = best.get(key)
            if held is None:
                best[key] = (item, score)
            else:  # the turn's own unit stands for it (it carries the context), at the best score
                turn_unit = ref.kind is UnitKind.turn
                best[key] = (item if turn_unit else held[0], max(score, held[1]))
        elif ref.turns:
            multi.append((item, score, ref))
    support: dict[tuple[str, str], float] = {}
    for item, score, ref in multi:
        named = list(
            dict.fromkeys(alias[(ref.conversation_id, t)] for t in ref.turns if (ref.conversation_id, t) in alias)
        )
        if not named:
            out.append((item, score, {}))
        for key in named:
            support[key] = support.get(key, 0.0) + SUPPORT_WEIGHT * score
    for key, (item, score) in best.items():
        added = support.get(key, 0.0)
        factor = {"support": round((score + added) / score, 6)} if added and score > 0 else {}
        out.append((item, score + added, factor))
    out.sort(key=lambda e: -e[1])
    return out


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + "…"
