"""Pasted documents in a user's turns, for `bench.assistant_chats --pastes N`: what a long
message does to the recall of the user's own facts.

Each conversation gets N of its user turns that are no question's evidence extended by a
request and a pasted text of about `chars` characters ("Can you check this text for me? ..."):
XQuAD's paragraphs in the conversation's language (`../shared/bench/xquad`), joined in order,
no paragraph pasted twice in a run. The questions and their evidence stay as generated, so a
drop in recall is what the pasted sentences take from the user's facts (their statement units
and turn units among the candidates). Chosen with the generator's seed: the same run, the same
turns and texts.

`--paste-questions K` also asks K of XQuAD's own questions about each pasted text (about its
first, last and middle paragraphs; categories 9 and 10): how well a fact inside a pasted
document is found, which the bounds on a long message's units (`memory_units`) could cost."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.xquad import load

REQUEST = {"en": "Can you check this text for me?", "de": "Kannst du diesen Text für mich prüfen?"}
# the categories of the questions about a pasted text (`--paste-questions`)
PASTED = {"en": 9, "de": 10}
CATEGORIES = {PASTED["en"]: "pasted text en", PASTED["de"]: "pasted text de"}


def prose(folder: Path, language: str, chars: int) -> Iterator[tuple[str, list[str]]]:
    """Texts of about `chars` characters, each of paragraphs not used before, with the first
    XQuAD question of each of its paragraphs, in order."""
    paragraphs, questions = load(folder, language)
    first: dict[str, str] = {}
    for question in questions.values():
        first.setdefault(question.gold, question.text)
    out: list[str] = []
    asked: list[str] = []
    for paragraph in paragraphs:
        out.append(paragraph.text)
        if paragraph.ref in first:
            asked.append(first[paragraph.ref])
        if sum(len(p) + 1 for p in out) >= chars:
            yield " ".join(out), asked
            out, asked = [], []


def with_pastes(
    samples: list[dict[str, Any]], n: int, chars: int, folder: Path, seed: int, questions: int = 0
) -> list[dict[str, Any]]:
    """The samples with `n` pasted texts in each conversation (see the module), and with
    `questions` questions about each pasted text (`PASTED`): XQuAD's own, about its first, last
    and middle paragraphs in turn, the pasted turn their evidence."""
    if n <= 0:
        return samples
    out = copy.deepcopy(samples)
    texts = {lang: prose(folder, lang, chars) for lang in REQUEST}
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
            text, asked = pasted
            turn["text"] = f"{turn['text']} {REQUEST[language]} {text}"
            for question in _spread(asked, questions):
                sample["qa"].append(
                    {"question": question, "answer": "", "evidence": [turn["dia_id"]], "category": PASTED[language]}
                )
    return out


def _spread(items: list[str], k: int) -> list[str]:
    """Up to `k` of `items`: the first, the last, the middle, then the rest in order."""
    if not items:
        return []
    order = [0, len(items) - 1, len(items) // 2, *range(len(items))]
    return [items[i] for i in dict.fromkeys(order)][:k]
