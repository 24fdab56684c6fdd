"""LoCoMo as a chat app would log it: every sentence of a turn a message of its own.

LoCoMo's turns are written dialogue: one speaker says two to four sentences, then the other
answers. People on a messenger send the same thing as a burst of short messages ("guess what",
"I got the job!!", "starting in May"), so a fact sits in one message among many short ones and
the turns either side of a message carry little context. `as_messages` rewrites samples in
LoCoMo's layout that way, so `python -m bench.locomo --as-messages` measures recall on
chat-log-shaped data with LoCoMo's questions:

- every turn becomes one message per sentence (split after `.`, `!` or `?` and at line breaks),
  in order, same speaker; a shared photo goes with the turn's last message;
- message ids are renumbered per session (`D3:1`, `D3:2`, ...), as a log numbers its messages;
- `interjected`: the other person answers a turn of three or more messages after its first one
  with a short reaction ("haha", "wow", "really?"), as people do while someone types; such a
  reaction is never evidence, and it splits the speaker's messages into two runs;
- a question's evidence turn becomes the message(s) of that turn sharing the most content words
  with the question and its answer (all of the turn's messages when none shares a word), the
  message an annotator of the log would point at.

Pure and deterministic; the data is read from `--data` and written nowhere.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

from engram.domain.ranking import words

_SPLIT = re.compile(r"(?<=[.!?])\s+|\s*\n+\s*")
_ID = re.compile(r"^D:?(\d+):0*(\d+)$")
# words too common in questions and answers to say which message holds the fact
_COMMON = frozenset(
    "a an and are as at be by did do does for from had has have he her his how i in is it its me my "
    "of on or she so that the their them they this to was were what when where which who whom why "
    "with would you your".split()
)


def messages_of(text: str) -> list[str]:
    """The messages a turn's text is sent as: its sentences, or the whole text when it has one."""
    parts = [p.strip() for p in _SPLIT.split(text.strip()) if p.strip()]
    return parts or [text]


def _words(text: str) -> set[str]:
    return {w for w in words(text) if w not in _COMMON}


def evidence_refs(evidence: Sequence[Any]) -> list[str]:
    """The turn ids a LoCoMo evidence list names ("D1:3", "D1:3; D2:4", "D:1:03"), as "D1:3", in
    order; tokens that are no turn id are left out (`bench.locomo.gold_ids` reads them so too)."""
    refs = [_canonical(token.strip()) for item in evidence for token in re.split(r"[;,\s]+", str(item))]
    return [r for r in refs if r is not None]


def _pointed(pieces: Sequence[tuple[str, str]], clue: set[str]) -> list[str]:
    """The ids of the messages sharing the most words with `clue` (all of them on no overlap)."""
    overlaps = [len(_words(text) & clue) for _, text in pieces]
    best = max(overlaps, default=0)
    if best == 0:
        return [mid for mid, _ in pieces]
    return [mid for (mid, _), n in zip(pieces, overlaps, strict=True) if n == best]


REACTIONS = ("haha", "wow", "really?", "oh no", "go on", "ok", "omg", "nice")
MODES = ("sentences", "interjected")


def as_messages(samples: Sequence[dict[str, Any]], mode: str = "sentences") -> list[dict[str, Any]]:
    """`samples` (LoCoMo's layout) with every turn sent as its sentences, evidence remapped;
    `mode` "interjected" adds the other person's reactions inside long turns."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    out: list[dict[str, Any]] = []
    reactions = 0
    for sample in samples:
        sample = copy.deepcopy(sample)
        conv = sample["conversation"]
        people = [str(conv.get("speaker_a", "")), str(conv.get("speaker_b", ""))]
        pieces: dict[str, list[tuple[str, str]]] = {}  # old dia_id -> [(new id, text)]
        for key in [k for k in conv if re.fullmatch(r"session_\d+", k)]:
            number = int(key.split("_")[1])
            messages: list[dict[str, Any]] = []
            for turn in conv[key]:
                texts = messages_of(str(turn.get("text", "")))
                mine = pieces.setdefault(_canonical(str(turn["dia_id"])) or str(turn["dia_id"]), [])
                for i, text in enumerate(texts):
                    message: dict[str, Any] = {
                        "speaker": turn["speaker"],
                        "dia_id": f"D{number}:{len(messages) + 1}",
                        "text": text,
                    }
                    if i == len(texts) - 1 and turn.get("blip_caption"):
                        message["blip_caption"] = turn["blip_caption"]
                    messages.append(message)
                    mine.append((message["dia_id"], text + " " + str(message.get("blip_caption", ""))))
                    other = people[1] if turn["speaker"] == people[0] else people[0]
                    if mode == "interjected" and i == 0 and len(texts) >= 3 and other:
                        reaction = REACTIONS[reactions % len(REACTIONS)]
                        reactions += 1
                        messages.append(
                            {"speaker": other, "dia_id": f"D{number}:{len(messages) + 1}", "text": reaction}
                        )
            conv[key] = messages
        for qa in sample.get("qa", []):
            clue = _words(f"{qa.get('question', '')} {qa.get('answer', '')}")
            evidence: list[str] = []
            for old in evidence_refs(qa.get("evidence", [])):
                if old in pieces:
                    evidence.extend(m for m in _pointed(pieces[old], clue) if m not in evidence)
            qa["evidence"] = evidence
        out.append(sample)
    return out


def _canonical(dia_id: str) -> str | None:
    m = _ID.match(dia_id)
    return f"D{int(m.group(1))}:{int(m.group(2))}" if m else None
