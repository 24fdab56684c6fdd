"""Conversations as people type them in a hurry: `python -m bench.locomo --typos RATE`.

Real chat logs have typing errors that LoCoMo's written dialogues do not. `with_typos` rewrites
the turns of samples in LoCoMo's layout (never the questions: they are asked as written) so that
a share `rate` of the words of four or more letters carries one error of the kinds people make
on a keyboard: two neighbouring letters swapped, a letter left out, a letter doubled, or a
letter replaced by its neighbour on a QWERTZ/QWERTY keyboard. The first letter stays (people
rarely miss it) and so do names' capitals. Deterministic for a seed; the evidence ids do not
change.
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Sequence
from typing import Any

_WORD = re.compile(r"[A-Za-zÄÖÜäöüß]{4,}")
_ROWS = ("qwertzuiop", "asdfghjkl", "yxcvbnm")
_NEIGHBOURS = {
    c: "".join(row[j] for j in (i - 1, i + 1) if 0 <= j < len(row)) for row in _ROWS for i, c in enumerate(row)
}
_NEIGHBOURS["y"] += "tu"  # QWERTY's y sits where QWERTZ's z does
_NEIGHBOURS["z"] = _NEIGHBOURS.get("z", "") + "asx"


def typo(word: str, rng: random.Random) -> str:
    """One typing error inside `word` (its first letter kept)."""
    i = rng.randrange(1, len(word) - 1)
    kind = rng.randrange(4)
    if kind == 0:  # two neighbouring letters swapped
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if kind == 1:  # a letter left out
        return word[:i] + word[i + 1 :]
    if kind == 2:  # a letter doubled
        return word[: i + 1] + word[i] + word[i + 1 :]
    near = _NEIGHBOURS.get(word[i].lower(), "")
    if not near:
        return word[:i] + word[i + 1 :]
    replaced = rng.choice(near)
    return word[:i] + (replaced.upper() if word[i].isupper() else replaced) + word[i + 1 :]


def misspelt(text: str, rate: float, rng: random.Random) -> str:
    return _WORD.sub(lambda m: typo(m.group(), rng) if rng.random() < rate else m.group(), text)


def with_typos(samples: Sequence[dict[str, Any]], rate: float, seed: int = 7) -> list[dict[str, Any]]:
    """`samples` with a share `rate` of the turns' longer words misspelt once (questions as written)."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be within 0..1, not {rate}")
    out = []
    for sample in samples:
        sample = copy.deepcopy(sample)
        rng = random.Random(f"{seed}:{sample.get('sample_id', '')}")
        conv = sample["conversation"]
        for key in [k for k in conv if re.fullmatch(r"session_\d+", k)]:
            for turn in conv[key]:
                turn["text"] = misspelt(str(turn.get("text", "")), rate, rng)
        out.append(sample)
    return out
