"""The newer of two near-duplicate statements first (R-7.1). Pure, no I/O.

A user who says "Monday mornings are for yoga" in May and "I moved my yoga to Wednesday
mornings" in June has two statements that match a question about yoga about equally well;
nothing in fusion prefers the current one. Among the hits of a recall, a later statement
moves just above an earlier one when both are the same speaker's, their vectors are near
duplicates (cosine >= `NEAR_DUPLICATE`) and they share a content word of the question.

assistant_chats (bench/RESULTS.md, issue 21 part 2), statements of the hybrid top 10: 0.93
takes `stale_first` 0.367 -> 0.317 and recall@1 0.336 -> 0.364 with no single-fact question
lower; 0.92 costs German single-hop recall@1 0.02, and without the shared question word the
rule reorders unrelated statements (single-hop de recall@1 0.54 -> 0.32 at 0.93).

A later statement that says that something changed ("I traded in my car, I have a black
Audi A4 now", `facts.says_changed`) needs no question word: questions paraphrase ("Which vehicle is
parked in my driveway?" shares no word with either statement), and the marker is the evidence
the word stood for. Their cosine must still be at least `CHANGED_NEAR` (0.92). assistant_chats (part 23):
`stale_first` 0.367 / 0.350 / 0.417 -> 0.267 / 0.233 / 0.283 on seeds 21 / 7 / 99, the
single-hop questions' recall@1 unchanged but one German question on seed 7.

A later statement that gives a fact of the speaker's life with one value at a time (where they or
a relative live, their work, their car, a routine's day: `life_topics`) restates an earlier one
that gives the same fact, whatever the vectors and words: "I sold my old car and bought a white
Tesla" after "I drive a red Toyota Corolla". It must say that it changed or give a current value
(not the past, not "also"). assistant_chats (part 29): `stale_first` 0.250 / 0.233 / 0.283 ->
0.167 / 0.167 / 0.233 on seeds 21 / 7 / 99, no recall figure of any category lower.

The current statement may rank just below the cut while the stale one is inside it, so the rule
runs over `RESTATED_DEPTH` times the limit; from below the cut a hit moves only on firm evidence
(a question word in common, or a correction of a check), not on a change marker alone (part 26).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from engram.domain.facts import CHECKED_WORDS
from engram.domain.life_topics import replaces, shared_fact
from engram.domain.search import Vector

NEAR_DUPLICATE = 0.93  # cosine of two statements' (normalised) vectors
CHANGED_NEAR = 0.92  # ... when the later one says that something changed (no question word needed)
NEWER_MARGIN = 1.000001  # a moved hit scores this much above the one it overtakes
RESTATED_DEPTH = 2  # a later statement from as deep as this many times the limit may move up

T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True)
class Said:
    """One statement of a hit: who said it, when, its content words and its vector."""

    speaker: str
    at: datetime
    words: frozenset[str]
    vector: Vector | None  # None: a turn unit's (recall reads the statements' vectors only)
    changed: bool = False  # it says that something changed (`facts.says_changed`: "moved to", "ab jetzt")
    corrects: frozenset[str] = frozenset()  # the words of a check it answers "no" to (`facts.corrected_check`)
    life: frozenset[tuple[str, str]] = frozenset()  # the facts of the speaker's life it gives (`life_topics.facts_of`)
    current: bool = True  # it gives a current value: not the past, not one more of a kind (`life_topics.current`)


def _cosine(a: Vector, b: Vector) -> float:
    norm = float((a @ a) * (b @ b)) ** 0.5
    return float(a @ b) / norm if norm else 0.0


def supersedes(later: Said, earlier: Said, question: frozenset[str], threshold: float = NEAR_DUPLICATE) -> bool:
    """`later` restates `earlier`: same speaker, said after it, and either a question word in
    common and near-duplicate vectors, or `later` says that something changed and their vectors
    are nearly as close (`CHANGED_NEAR`), or `later` answers "no" to a check of what `earlier`
    said (`corrects`: `CHECKED_WORDS` of the check's words in `earlier`)."""
    if later.speaker != earlier.speaker or later.at <= earlier.at:
        return False
    if later.corrects:  # "Is your sister still living in Porto?" - "No, ..." corrects what named them
        return len(later.corrects & earlier.words) >= CHECKED_WORDS
    if (topic := shared_fact(later.life, earlier.life)) and replaces(
        topic, changed=later.changed, current=later.current
    ):
        return True  # a fact of their life with one value at a time: the later value holds
    if later.vector is None or earlier.vector is None:
        return False
    if later.changed:
        return _cosine(later.vector, earlier.vector) >= min(threshold, CHANGED_NEAR)
    return bool(later.words & earlier.words & question) and _cosine(later.vector, earlier.vector) >= threshold


def newer_first(
    ranked: Sequence[tuple[T, float]],
    said: Mapping[T, Sequence[Said]],
    question: frozenset[str],
    threshold: float = NEAR_DUPLICATE,
    cut: int | None = None,
) -> list[tuple[T, float]]:
    """`ranked` (best first) with every hit that restates a better one moved just above it:
    its score becomes that hit's times `NEWER_MARGIN`. Hits without statements stay put.

    A hit ranked below `cut` (the limit of the recall: `ranked` runs `RESTATED_DEPTH` times as
    deep) moves up only on firm evidence that it restates the better one: a question word in
    common or a correction of a check, not a change marker with a near vector alone (on the
    generated chats that let "jetzt wo ich das Klettern auf den Mittwoch verlegt habe" pass a
    rabbit's name)."""
    below = {hit for hit, _ in ranked[cut:]} if cut is not None else set()
    # what each hit may move by, once: below the cut its statements count without their change markers
    evidence = {
        hit: [dataclasses.replace(s, changed=False) for s in said.get(hit, ())] if hit in below else said.get(hit, ())
        for hit, _ in ranked
    }
    order = list(ranked)
    for _ in range(len(order) ** 2):  # a move puts a later statement first, so this ends early
        move = next(
            (
                (i, j)
                for i, (better, _) in enumerate(order)
                for j in range(i + 1, len(order))
                if any(
                    supersedes(s, e, question, threshold) for s in evidence[order[j][0]] for e in said.get(better, ())
                )
            ),
            None,
        )
        if move is None:
            break
        i, j = move
        hit = order.pop(j)[0]
        order.insert(i, (hit, order[i][1] * NEWER_MARGIN))
    return order
