"""Pasted documents in a user's turns, for `bench.assistant_chats --pastes N`: what a long
message does to the recall of the user's own facts.

Each conversation gets N of its user turns that are no question's evidence extended by a
request and a pasted text of about `chars` characters ("Can you check this text for me? ..."):
XQuAD's paragraphs in the conversation's language (`../shared/bench/xquad`), joined in order,
no paragraph pasted twice in a run. The questions and their evidence stay as generated, so a
drop in recall is what the pasted sentences take from the user's facts (their statement units
and turn units among the candidates). Chosen with the generator's seed: the same run, the same
turns and texts."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.xquad import load

REQUEST = {"en": "Can you check this text for me?", "de": "Kannst du diesen Text für mich prüfen?"}


def _texts(folder: Path, language: str, chars: int) -> Iterator[str]:
    """Texts of about `chars` characters, each of paragraphs not used before."""
    paragraphs, _ = load(folder, language)
    out: list[str] = []
    for paragraph in paragraphs:
        out.append(paragraph.text)
        if sum(len(p) + 1 for p in out) >= chars:
            yield " ".join(out)
            out = []


def with_pastes(samples: list[dict[str, Any]], n: int, chars: int, folder: Path, seed: int) -> list[dict[str, Any]]:
    """The samples with `n` pasted texts in each conversation (see the module)."""
    if n <= 0:
        return samples
    out = copy.deepcopy(samples)
    texts = {lang: _texts(folder, lang, chars) for lang in REQUEST}
    rng = random.Random(f"pastes:{seed}")
    for sample in out:
        language = "de" if "-de-" in sample["sample_id"] else "en"
        conversation = sample["conversation"]
        user = conversation["speaker_a"]
        evidence = {e for qa in sample["qa"] for e in qa.get("evidence", [])}
        turns = [
            turn
            for key, session in conversation.items()
            if key.startswith("session_") and isinstance(session, list)
            for turn in session
            if turn["speaker"] == user and turn["dia_id"] not in evidence
        ]
        for turn in rng.sample(turns, min(n, len(turns))):
            pasted = next(texts[language], None)
            if pasted is None:
                raise ValueError("--pastes: XQuAD has too few paragraphs for this many texts")
            turn["text"] = f"{turn['text']} {REQUEST[language]} {pasted}"
    return out
