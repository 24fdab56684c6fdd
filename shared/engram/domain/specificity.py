"""How much a memory says that its fellow candidates do not (R-7.1). Pure, no I/O.

A chat holds many sentences that carry nothing to remember: "Could you make it a bit shorter?",
"Is there anything I should avoid?", "Thanks, that's helpful." They share the words of many
requests, so the vector search ranks them near every request and every question in the first
person, where they take the places of the one sentence that told a fact ("I'm allergic to
celery"). What such a sentence says, no other candidate says: its rarest word is rare among them.

`specificity(texts)`: for each of a recall's candidate turns, the inverse document frequency of
its rarest word among the candidates' words, scaled to 0..1 (1: a word no other candidate has;
0: every word is in every candidate). The candidates are the recall's own, so no statistics are
read and every index adapter gets the same figure.

`specificity_support(texts)`: the multiplier of each candidate, `SPECIFIC_FLOOR` for one that
says nothing of its own, rising to 1 for one with a word of its own; none below `MIN_TURNS`
candidates, where a word's frequency says little.

Measured (bench/RESULTS.md, part 20), hybrid recall@1 / @5 of `bench.assistant_chats --requests`,
without -> with: seed 21 0.353 / 0.682 -> 0.373 / 0.695, seed 7 0.385 / 0.720 -> 0.391 / 0.736,
seed 99 0.338 / 0.668 -> 0.348 / 0.690; via the chat path 0.418 / 0.773 -> 0.422 / 0.781.
Floors 0.4 and 0.7 gave the same within a question or two; 0.7 is the milder. LoCoMo dev, whose
friends' turns all say something, moves by less than its ties (recall@10 0.795 -> 0.793).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Hashable, Mapping
from itertools import chain
from typing import TypeVar

SPECIFIC_FLOOR = 0.7  # the multiplier of a candidate none of whose words is rarer than in all of them
MIN_TURNS = 8  # fewer candidate turns: no support
MIN_WORD = 3  # shorter words ("I", "to", "am") say nothing of their own
_WORD = re.compile(rf"\w{{{MIN_WORD},}}")  # `ranking.words` of MIN_WORD or more characters

K = TypeVar("K", bound=Hashable)


def specificity(texts: Mapping[K, str]) -> dict[K, float]:
    """For each key, its rarest word's inverse document frequency among the texts, over that of a
    word only one text has (see the module)."""
    said = {key: _words(text) for key, text in texts.items()}
    n = len(said)
    if n < 2:
        return dict.fromkeys(said, 1.0)
    frequency = Counter(chain.from_iterable(said.values()))
    top = math.log(n)
    # the rarest word's inverse document frequency: that of its smallest frequency
    return {key: math.log(n / min(map(frequency.__getitem__, found), default=n)) / top for key, found in said.items()}


@functools.lru_cache(maxsize=1024)  # the same memories come back question after question (a turn: <= ~13 kB)
def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.casefold()))


def specificity_support(
    texts: Mapping[K, str], floor: float = SPECIFIC_FLOOR, min_turns: int = MIN_TURNS
) -> dict[K, float]:
    """Each key's multiplier: `floor` + (1 - `floor`) x its specificity; empty below `min_turns`
    texts."""
    if len(texts) < min_turns:
        return {}
    return {key: floor + (1.0 - floor) * value for key, value in specificity(texts).items()}
