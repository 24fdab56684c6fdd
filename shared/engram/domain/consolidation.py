"""Consolidation decisions (R-15.1, R-15.2): pure rules, measured by `bench.consolidation`.

Two observations are only ever compared inside one audience: the same tenant, owner, scope,
teams and type. A consolidated observation is therefore visible to exactly those who could see
each of its sources; nothing private merges into team memory, nothing crosses owners.

For a pair the rules decide one of

- **duplicate**: the same statement (identical text; the same entity by its `k=v` facts with no
  attribute in disagreement and one fact set inside the other; or free text at least
  `duplicate_text` close, naming the same numbers and dates, sharing its specific words and not
  swapping one specific word for another; or free text at least `paraphrase_text` close whose
  distinguishing words, names, name phrases, topic words and numbers, all agree) -> one
  consolidated observation supersedes both;
- **update**: the same entity and attribute with another value (`city=Stuttgart` then
  `city=Hamburg`), or a free-text statement that something changed ("sprint moved to 5 April",
  or in other words about the same subject: "Noah now prefers detailed answers", or a fact of
  the owner's life with one value at a time, told again by a later message that says it changed:
  "my sister moved to Leeds" after "my sister Lena lives in Porto", `life_topics`; or where a
  named organisation sits: "Koch Logistik ist nach Hannover umgezogen" after "Der Kunde Koch
  Logistik sitzt in Kiel", `entity_seat`) with a clear order -> the newer supersedes the older;
- **conflict**: the same, without a clear order (said within `order_gap` of each other, or
  the newer is less trusted than the older) -> both stay, linked;
- **unrelated**: anything else. `certain` says whether the rules are sure; the LLM path is asked
  about similar pairs the rules left open (one call per cluster).

Specific words are those few observations of the audience use (`Pool`): names of customers,
people, projects, services. Free text that swaps one for another ("Uwe/Eva bevorzugt kurze
Antworten", "RabbitMQ for the billing/archive service") is about something else, however close
the vectors (e5 puts such pairs at 0.97, paraphrases at 0.89-0.98: cosine alone cannot tell).

An order is clear when the valid-from times differ, when the newer statement says it changed,
or when it was said later (by at least `order_gap`; `when`) by a source at least as trusted.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from engram.domain import entity_seat, life_topics
from engram.domain.consolidation_words import Comparison, Distinguishing, casing_of
from engram.domain.dates import MONTHS
from engram.domain.facts import Facts, Reading, jaccard, minimal_pair
from engram.domain.hashing import normalise_text
from engram.domain.life_topics import PROFILE_TYPES
from engram.domain.observation import Observation, ObservationDraft, Priority, Source, TriggerSource


class Decision(StrEnum):
    duplicate = "duplicate"
    update = "update"
    conflict = "conflict"
    digest = "digest"
    unrelated = "unrelated"


class DecisionPath(StrEnum):
    rules = "rules"
    llm = "llm"


@dataclass(frozen=True)
class Thresholds:
    """Cosine thresholds on passage vectors of the configured embedder, chosen on
    `bench.consolidation`'s calibration seed (see bench/RESULTS.md), and the order gap."""

    duplicate_text: float = 0.95  # free text: at least this close to be one statement
    duplicate_entity: float = 0.86  # the same entity by its facts, no attribute in disagreement
    update_text: float = 0.88  # a free-text statement of change about the same thing
    paraphrase_text: float = 0.88  # free text with every distinguishing word in agreement
    reworded_update: float = 0.90  # a statement of change about the same subject in other words
    # (same person, another matter, "Lisa bevorzugt kurze Antworten" / "Lisa arbeitet jetzt in
    # Hamburg": e5 0.84-0.90 on hand-written pairs)
    common_share: float = 0.25  # a word more of the pool uses than this is no subject
    specific_share: float = 0.05  # a word is specific if at most this share of the pool uses it ...
    specific_min: int = 3  # ... or at most this many observations
    ask_model: float = 0.86  # pairs the rules leave open from here up go to the LLM path
    order_gap: timedelta = timedelta(minutes=10)  # closer in time than this: no clear order


DEFAULT_THRESHOLDS = Thresholds()

Audience = tuple[str | None, str, tuple[str, ...], str]


def audience(obs: Observation) -> Audience:
    """Who can see it, and what kind of memory it is: only observations with one audience are
    consolidated together (R-15.2)."""
    return (obs.user_id, obs.scope.value, tuple(sorted(obs.team_ids)), obs.type)


def trust(obs: Observation) -> tuple[int, int, float]:
    """Verified first, then what a person said over a business system over an agent's inference."""
    rank = {Source.user: 2, Source.system: 1, Source.agent: 0}[obs.source]
    return (int(obs.verified), rank, round(obs.confidence, 3))


def when(obs: Observation) -> tuple[datetime, datetime, datetime]:
    """What orders two statements: when they hold from, were said (not: arrived), were written."""
    return (obs.holds_from, obs.said, obs.created_at)


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reason: str
    certain: bool = True  # False: the rules could not tell (the LLM path may)
    current: uuid.UUID | None = None  # update: the one that holds now
    path: DecisionPath = DecisionPath.rules

    @property
    def acts(self) -> bool:
        return self.decision is not Decision.unrelated


UNRELATED = Verdict(Decision.unrelated, "nothing in common", certain=True)


@dataclass(frozen=True)
class Pool:
    """How many observations of the compared pool (one audience and type) use each word stem."""

    df: Mapping[str, int]
    size: int
    lower: frozenset[str] = frozenset()  # stems the pool writes in lower case somewhere
    inside: frozenset[str] = frozenset()  # stems it capitalises inside a sentence somewhere

    @classmethod
    def of(cls, readings: Sequence[Reading]) -> Pool:
        counts: dict[str, int] = {}
        lower: set[str] = set()
        inside: set[str] = set()
        for r in readings:
            for token in r.tokens:
                counts[token] = counts.get(token, 0) + 1
            lower |= casing_of(r.text).lower
            inside |= casing_of(r.text).inside
        return cls(counts, len(readings), frozenset(lower), frozenset(inside))

    def specific(self, reading: Reading, t: Thresholds) -> frozenset[str]:
        """The reading's words that few observations of the pool use (numbers are values, not words)."""
        limit = max(t.specific_min, int(t.specific_share * self.size))
        return frozenset(
            w for w in reading.tokens if not w.isdigit() and w not in MONTHS and self.df.get(w, 1) <= limit
        )


def swapped_words(a: Reading, b: Reading) -> tuple[list[str], list[str]]:
    """The words (as written) one text has and the other does not."""
    return [a.surface[t] for t in sorted(a.tokens - b.tokens)], [b.surface[t] for t in sorted(b.tokens - a.tokens)]


def decide(
    a: Reading,
    b: Reading,
    cosine: float | None,
    pool: Pool | None = None,
    t: Thresholds = DEFAULT_THRESHOLDS,
) -> Verdict:
    """What the rules say about two live observations (in no particular order); `pool` is the
    set they were drawn from (without one, every word counts as specific)."""
    oa, ob = a.observation, b.observation
    if oa.tenant_id != ob.tenant_id or audience(oa) != audience(ob):
        return Verdict(Decision.unrelated, "different audience or type")
    if a.normalised == b.normalised:
        return Verdict(Decision.duplicate, "the same text")
    entity, why = same_entity(a, b)
    if entity is False:
        return Verdict(Decision.unrelated, why)
    if entity is True:
        return _same_entity(a, b, cosine, why, t)
    return _free_text(a, b, cosine, pool or Pool({}, 0), t)


def same_entity(a: Reading, b: Reading) -> tuple[bool | None, str]:
    """True/False when their identity facts decide it (ids first, then names), None otherwise."""
    for strength, label in ((2, "id"), (1, "name")):
        ia, ib = a.facts.identity(strength), b.facts.identity(strength)
        common = sorted(ia.keys() & ib.keys())
        if not common:
            continue
        differ = [k for k in common if not ia[k] & ib[k]]
        if differ:
            return False, f"different entities ({differ[0]}: {_one(ia[differ[0]])} vs {_one(ib[differ[0]])})"
        return True, f"the same entity ({label} {common[0]}={_one(ia[common[0]])})"
    return None, ""


def _same_entity(a: Reading, b: Reading, cosine: float | None, why: str, t: Thresholds) -> Verdict:
    by_id = bool(a.facts.identity(2).keys() & b.facts.identity(2).keys())
    fa, fb = a.facts.attributes(names_too=by_id), b.facts.attributes(names_too=by_id)
    changed = sorted(k for k in fa.keys() & fb.keys() if fa[k] != fb[k])
    if changed:
        k = changed[0]
        return ordered(a, b, f"{why}: {k} is {_one(fa[k])} in one and {_one(fb[k])} in the other", t)
    keys_a, keys_b = set(fa), set(fb)
    if (keys_a <= keys_b or keys_b <= keys_a) and cosine is not None and cosine >= t.duplicate_entity:
        return Verdict(Decision.duplicate, f"{why}, no fact in disagreement (cosine {cosine:.3f})")
    return Verdict(Decision.unrelated, f"{why}, but they say different things about it")


def _free_text(a: Reading, b: Reading, cosine: float | None, pool: Pool, t: Thresholds) -> Verdict:
    """Free text: the same thing needs a specific word in common; a duplicate swaps no specific
    word and no single word, or keeps every distinguishing word; an update changes the numbers,
    or one specific word (the value), and says so, or says so in other words about the same
    subject."""
    if cosine is None:
        return Verdict(Decision.unrelated, "no vectors to compare", certain=False)
    if (two := entity_seat.apart(a.text, b.text)) is not None:
        return Verdict(Decision.unrelated, f"where two organisations sit ({two[0]} / {two[1]})")
    if (organisation := entity_seat.restated(a.text, b.text)) is not None:
        return Verdict(Decision.duplicate, f"where {organisation} sits, in other words (cosine {cosine:.3f})")
    open_question = cosine >= t.ask_model
    sa, sb = pool.specific(a, t), pool.specific(b, t)
    shared, only_a, only_b = sa & sb, sorted(sa - sb), sorted(sb - sa)
    numbers_differ = a.numbers != b.numbers
    if (
        (a.changed or b.changed)
        and shared
        and cosine >= t.update_text
        and jaccard(a.tokens - sa, b.tokens - sb) >= 0.25
    ):
        # the new value is in the numbers (nothing specific swapped), or it is the one specific word
        # swapped while the numbers stay empty (the same date in both says: two things moved)
        if numbers_differ:
            value = not only_a and not only_b
        else:
            value = not a.numbers and len(only_a) <= 1 and len(only_b) <= 1
        if value and (numbers_differ or only_a or only_b):
            what = f"a statement of change about {', '.join(sorted(shared)[:2])} (cosine {cosine:.3f})"
            return ordered(a, b, what, t)
    if (life := _life_change(a, b, t)) is not None:
        return life
    if (organisation := entity_seat.moved(a.text, b.text)) is not None:  # a customer moved
        return ordered(a, b, f"a change of where {organisation} sits", t)
    by_words = _distinguishing(a, b, cosine, pool, t, (only_a, only_b))
    if by_words is not None:
        return by_words
    if (sa or sb) and not shared:
        return Verdict(Decision.unrelated, "nothing specific in common", certain=not open_question)
    if numbers_differ:
        named = ", ".join(sorted(a.numbers ^ b.numbers)[:3])
        return Verdict(Decision.unrelated, f"they name different values ({named})", certain=not open_question)
    if minimal_pair(a.tokens, b.tokens) or (only_a and only_b):
        wa, wb = swapped_words(a, b)
        why = f"a word differs ({', '.join(wa[:2])} / {', '.join(wb[:2])})"
        return Verdict(Decision.unrelated, why, certain=not open_question)
    if cosine < t.duplicate_text:
        return Verdict(Decision.unrelated, f"not close enough (cosine {cosine:.3f})", certain=not open_question)
    about = f" about {', '.join(sorted(shared)[:2])}" if shared else ""
    return Verdict(Decision.duplicate, f"the same statement{about} in other words (cosine {cosine:.3f})")


def _life_change(a: Reading, b: Reading, t: Thresholds) -> Verdict | None:
    """A fact of the owner's life that has one value at a time (`life_topics`: where they or a
    relative live, their work, their car, a routine's day) given again by a later message: "she
    moved to Leeds", or "my brother is in Edinburgh these days", after "my sister Lena lives in
    Porto". The later one holds when it says it changed, or when it gives a current value (not the
    past, not one more of a kind: "I also have an old Fiat"). Only for the profile's types (a
    session's summary names many facts), and not for two statements of one message: their order
    is no order of events."""
    oa, ob = a.observation, b.observation
    if oa.user_id is None or oa.type not in PROFILE_TYPES or _one_message(oa, ob):
        return None
    newer, older = (a, b) if when(oa) >= when(ob) else (b, a)
    topic = life_topics.shared_topic(a.text, b.text)
    if topic is None or not life_topics.replaces(topic, changed=newer.changed, current=life_topics.current(newer.text)):
        return None
    what = f"a change of {topic}"
    n, o = newer.observation, older.observation
    if newer.changed or (n.valid_from and o.valid_from and n.valid_from != o.valid_from) or trust(n) < trust(o):
        return ordered(a, b, what, t)
    return Verdict(Decision.update, f"{what}; the later message gives its current value", current=n.id)


def _one_message(a: Observation, b: Observation) -> bool:
    pa, pb = a.provenance, b.provenance
    return (pa.chat_message_id is not None and pa.chat_message_id == pb.chat_message_id) or (
        pa.source_event_id is not None and pa.source_event_id == pb.source_event_id
    )


def _distinguishing(
    a: Reading, b: Reading, cosine: float, pool: Pool, t: Thresholds, rare: tuple[list[str], list[str]]
) -> Verdict | None:
    """The rules on distinguishing words (`engram.domain.consolidation_words`), or None:

    - a reworded statement of change: one says it changed and names the pair's subject before it
      says so, at most one name phrase is replaced on each side, none clashes;
    - a paraphrase: neither or both say it changed, the same numbers, not a minimal pair, the same
      names and topic words (a subject in common, nothing swapped, no clashing phrase), and rare
      words swapped only when numbers anchor the statement or the vectors are `duplicate_text`
      close ("tea" for "coffee" in other words is a value swapped, not a paraphrase)."""
    words = compare(a, b, pool, t)
    about = ", ".join(sorted({a.surface.get(w) or b.surface.get(w) or w for w in words.subject})[:2])
    if a.changed != b.changed and cosine >= t.reworded_update and words.one_value_changed:
        return ordered(a, b, f"a statement of change about {about} in other words (cosine {cosine:.3f})", t)
    if (
        a.changed == b.changed
        and a.numbers == b.numbers
        and cosine >= t.paraphrase_text
        and not minimal_pair(a.tokens, b.tokens)
        and words.same_wording_of_names
        and (bool(a.numbers) or cosine >= t.duplicate_text or not words.rare_words_swapped(*rare))
    ):
        return Verdict(Decision.duplicate, f"the same names and values about {about} (cosine {cosine:.3f})")
    return None


def compare(a: Reading, b: Reading, pool: Pool, t: Thresholds = DEFAULT_THRESHOLDS) -> Comparison:
    """The pair's distinguishing words (names, topic words), against the pool's lower-case words."""
    lower = pool.lower | casing_of(a.text).lower | casing_of(b.text).lower
    inside = pool.inside | casing_of(a.text).inside | casing_of(b.text).inside
    da = Distinguishing.of(casing_of(a.text), lower, pool.specific(a, t), inside)
    db = Distinguishing.of(casing_of(b.text), lower, pool.specific(b, t), inside)
    return Comparison.of(da, db, pool.df, max(t.specific_min, int(t.common_share * pool.size)))


def ordered(a: Reading, b: Reading, what: str, t: Thresholds = DEFAULT_THRESHOLDS) -> Verdict:
    """An update when the two have a clear order, else a conflict (R-15.1)."""
    oa, ob = a.observation, b.observation
    newer, older = (a, b) if when(oa) >= when(ob) else (b, a)
    n, o = newer.observation, older.observation
    if n.valid_from and o.valid_from and n.valid_from != o.valid_from:
        return Verdict(Decision.update, f"{what}; valid from {n.valid_from:%Y-%m-%d} on", current=n.id)
    if older.changed and not newer.changed:
        return Verdict(Decision.conflict, f"{what}; the older one says it changed")
    if newer.changed:
        return Verdict(Decision.update, f"{what}; the newer one says it changed", current=n.id)
    if trust(n) < trust(o):
        return Verdict(Decision.conflict, f"{what}; the newer one is less trusted ({n.source.value})")
    if abs(n.holds_from - o.holds_from) < t.order_gap:
        return Verdict(Decision.conflict, f"{what}; said at the same time")
    return Verdict(Decision.update, f"{what}; the newer one was said later", current=n.id)


def _one(values: frozenset[str]) -> str:
    return ", ".join(sorted(values))


# ---- what a decision writes ---------------------------------------------------------------------

_CAPS = {"facts": 100, "concepts": 100, "tags": 50, "discovery_tokens": 100}


def _union(lists: Sequence[Sequence[str]], cap: int) -> list[str]:
    seen: dict[str, str] = {}
    for values in lists:
        for value in values:
            if value.strip():
                seen.setdefault(normalise_text(value), value)
    return list(seen.values())[:cap]


def base_of(sources: Sequence[Observation]) -> Observation:
    """The source whose words a merge keeps: the most trusted, then the most recent."""
    return max(sources, key=lambda o: (trust(o), *when(o), o.id.int))


def merged_draft(
    sources: Sequence[Observation], *, title: str | None = None, narrative: str | None = None
) -> ObservationDraft:
    """One consolidated observation for duplicates: facts, concepts, tags and keywords united,
    the highest priority and confidence, verified if any source was, provenance listing every
    source. The sources keep their rows (and their words); `title`/`narrative` come from the
    LLM path when it wrote a merged text."""
    base = base_of(sources)
    ordered_sources = [base, *sorted((s for s in sources if s.id != base.id), key=lambda o: o.id.int)]
    starts = [s.valid_from for s in sources]
    ends = [s.expires_at for s in sources]
    return ObservationDraft(
        tenant_id=base.tenant_id,
        user_id=base.user_id,
        team_ids=list(base.team_ids),
        type=base.type,
        title=(title or base.title)[:500],
        narrative=(narrative if narrative is not None else base.narrative)[:20_000],
        **{field: _union([getattr(s, field) for s in ordered_sources], cap) for field, cap in _CAPS.items()},
        key=None,  # the sources keep their keys: a keyed write finds its row and makes it current again
        priority=max((s.priority for s in sources), key=lambda p: Priority(p).rank),
        source=base.source,
        verified=any(s.verified for s in sources),
        confidence=max(s.confidence for s in sources),
        scope=base.scope,
        trigger_source=TriggerSource.consolidation,
        provenance=base.provenance,
        valid_from=min(s for s in starts if s is not None) if all(starts) else None,
        expires_at=max(e for e in ends if e is not None) if all(ends) else None,
        said_at=max(s.said for s in sources),  # said again: as late as its latest source
        merged_from=sorted({s.id for s in sources}, key=lambda i: i.int),
    )


def carried_over(newer: Reading, older: Reading) -> list[str]:
    """The older one's facts about attributes the newer one does not mention (an update must not
    drop them from recall): empty when the newer one covers everything."""
    keys = set(newer.facts.values)
    mentioned = {normalise_text(f) for f in newer.observation.facts}
    carried = []
    for fact in older.observation.facts:
        parsed = Facts.of([fact]).values
        if parsed and not (parsed.keys() & keys) and normalise_text(fact) not in mentioned:
            carried.append(fact)
    return carried


def updated_draft(newer: Observation, older: Observation, carried: Sequence[str]) -> ObservationDraft:
    """The newer observation with the older one's facts about what it does not mention."""
    draft = merged_draft([newer, older])
    return draft.model_copy(
        update={
            "title": newer.title,
            "narrative": newer.narrative,
            "facts": _union([newer.facts, carried], 100),
            "priority": newer.priority,
            "valid_from": newer.valid_from,
            "expires_at": newer.expires_at,
            "said_at": newer.said,
            "source": newer.source,
            "provenance": newer.provenance,
        }
    )
