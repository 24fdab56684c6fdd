"""What building a chat's memory units costs per turn (`conversation.chat_units`), by session length.

A completed chat turn writes the units it reaches (`chat_units(reaching=message)`: its own turn,
the turns after it and the context window before it); a session's end writes all of them again
(`chat_units` of the whole session). Both are pure CPU in extract-observation (the injection
checks of `memory_units` on every message included), so this bench times them without
servers: one session of N messages made of the generated user–assistant chats
(`bench.chatgen`, long assistant answers), the per-turn call for every user message as the
turns arrive (the session up to that turn), and the whole session once, as at its end.

"Whole session per turn" is the baseline: what a turn would cost if it built every unit of the
session so far (the obvious way to write units per turn), the session's end cost at each turn.

`--long 2000,10000,50000` adds one message of each length (the XQuAD English paragraphs of
`--xquad` joined: real prose, no sentence said twice), framed by a user ("Can you check this
text for me? ... Please keep it short.") and as an assistant's answer: the statement and passage
units it makes with the bounds (`memory_units.STATEMENTS_PER_TURN`, `PASSAGES_PER_ANSWER`) and
without them, the characters they embed, and with `--embed` the e5 CPU seconds to embed them
against the two turn units' (the user's turn by its title and up to `EMBEDDED_TURN_CHARS` of its
narrative, in 512-token windows; the answer by its opening).

    python -m bench.chat_units [--sizes 50,200,1000] [--long 2000,10000,50000 [--embed]] [--json]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench._common import emit_json, machine, table
from bench.chatgen import generate
from bench.pasted import prose
from bench.xquad import DEFAULT_DATA
from engram.domain.conversation import ConversationSession, Turn, chat_units, turn_units
from engram.domain.memory_units import (
    PASSAGES_PER_ANSWER,
    STATEMENTS_PER_TURN,
    DerivedUnit,
    Speech,
    passage_units,
    statement_units,
)
from engram.domain.observation import Observation
from engram.domain.search import passage_text

NAMESPACE = uuid.UUID("0b9b6f59-4d0e-4c55-8f5a-2e7c0e0f6a21")


def messages(n: int, seed: int = 21) -> list[tuple[uuid.UUID, str, str]]:
    """n messages (id, role, content) alternating user and assistant, from the generated chats."""
    out: list[tuple[uuid.UUID, str, str]] = []
    for sample in generate(seed=seed, conversations=10, languages=("en", "de"), sessions=32):
        conversation = sample["conversation"]
        user = conversation["speaker_a"]
        s = 1
        while f"session_{s}" in conversation:
            for turn in conversation[f"session_{s}"]:
                role = "user" if turn["speaker"] == user else "assistant"
                if out and out[-1][1] == role:
                    continue  # keep the roles alternating, as a chat records them
                out.append((uuid.uuid5(NAMESPACE, f"{len(out)}"), role, turn["text"]))
                if len(out) == n:
                    return out
            s += 1
    raise ValueError(f"the generated chats have fewer than {n} messages")


def _units(msgs: list[tuple[uuid.UUID, str, str]], reaching: uuid.UUID | None) -> tuple[float, int]:
    started = time.process_time()
    units = chat_units(
        tenant_id="bench",
        user_id="alice",
        chat_id=uuid.UUID(int=1),
        session_id=uuid.UUID(int=2),
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        messages=msgs,
        reaching=reaching,
    )
    return (time.process_time() - started) * 1000, len(units)


def measure(n: int) -> dict[str, Any]:
    msgs = messages(n)
    per_turn: list[float] = []
    written: list[int] = []
    baseline: list[float] = []
    for i, (message, role, _) in enumerate(msgs):
        if role != "user":
            continue
        so_far = msgs[: i + 2]  # the user's message and the assistant's answer: a completed turn
        ms, count = _units(so_far, message)
        per_turn.append(ms)
        written.append(count)
        if len(baseline) < 25 or i >= len(msgs) - 50:  # the whole session so far: early and late turns
            baseline.append(_units(so_far, None)[0])
    end_ms, end_units = _units(msgs, None)
    return {
        "messages": n,
        "turns": len(per_turn),
        "per_turn_ms_p50": round(statistics.median(per_turn), 2),
        "per_turn_ms_max": round(max(per_turn), 2),
        "per_turn_ms_last": round(per_turn[-1], 2),
        "units_per_turn_p50": statistics.median(written),
        "whole_session_ms_last_turn": round(baseline[-1], 2),
        "session_end_ms": round(end_ms, 2),
        "session_end_units": end_units,
        "last_turn_ratio": round(per_turn[-1] / baseline[-1], 3),
    }


def long_text(chars: int, folder: str) -> str:
    """About `chars` characters of real prose: XQuAD's English paragraphs joined, in order."""
    text, _ = next(prose(Path(folder), "en", chars))
    return text[:chars]


def _cpu(embedder: Any, texts: list[str]) -> float:
    """Process CPU seconds to embed `texts` as passages, in batches of 16."""
    import asyncio

    started = time.process_time()
    for i in range(0, len(texts), 16):
        asyncio.run(embedder.embed_passages(texts[i : i + 16]))
    return time.process_time() - started


def measure_long(chars: int, folder: str, embedder: Any | None) -> dict[str, Any]:
    """One message of `chars` characters, as a user's pasted text and as an assistant's answer:
    its derived units with the bounds and without, and their embedding work against the two
    turn units' (what indexing embeds of them, `search.passage_text`; and the user's turn whole,
    as before `memory_units.embedded_narrative`)."""
    text = long_text(chars, folder)
    started = datetime(2026, 1, 1, tzinfo=UTC)
    asked = f"Can you check this text for me? {text} Please keep it short."
    session = ConversationSession("s1", started, [Turn("D1:1", "User", asked), Turn("D1:2", "Assistant", text)])
    assistants = frozenset({"Assistant"})
    turns = turn_units(
        tenant_id="bench", user_id="alice", conversation_id="c", sessions=[session], assistants=assistants
    )
    turn_texts = [passage_text(stored(d)) for d in turns]
    # before `memory_units.embedded_narrative`: the user's turn with its whole narrative (a draft
    # without its unit key is embedded whole), the answer by its opening as now
    whole_texts = [passage_text(stored(turns[0].model_copy(update={"key": None}))), turn_texts[1]]
    day = "1 January 2026"
    user, answer = Speech("D1:1", "User", asked, "s1", day), Speech("D1:2", "Assistant", text, "s1", day)
    out: dict[str, Any] = {
        "chars": chars,
        "turn_units.embedded_chars": sum(len(t) for t in turn_texts),
        "turn_units_whole.embedded_chars": sum(len(t) for t in whole_texts),
    }
    variants: dict[str, list[DerivedUnit]] = {
        "unbounded": statement_units([user], assistants, None) + passage_units([answer], assistants, None),
        "bounded": statement_units([user], assistants, STATEMENTS_PER_TURN)
        + passage_units([answer], assistants, PASSAGES_PER_ANSWER),
    }
    for name, units in variants.items():
        out[f"{name}.statements"] = sum(u.kind.value == "statement" for u in units)
        out[f"{name}.passages"] = sum(u.kind.value == "passage" for u in units)
        out[f"{name}.embedded_chars"] = sum(len(u.text) for u in units)
    if embedder is not None:
        out["cpu.turn_units_whole_s"] = round(_cpu(embedder, whole_texts), 3)
        base = _cpu(embedder, turn_texts)
        out["cpu.turn_units_s"] = round(base, 3)
        for name, units in variants.items():
            spent = _cpu(embedder, [u.text for u in units])
            out[f"cpu.{name}_s"] = round(spent, 3)
            out[f"cpu.{name}_ratio_to_turn_units"] = round(spent / base, 2)
    return out


WRITTEN = datetime(2026, 1, 1, tzinfo=UTC)  # `stored`: when a draft was written, unless told


def stored(draft: Any, at: datetime = WRITTEN) -> Observation:
    """A draft as the store returns it, written at `at`: for `passage_text` (what indexing
    embeds), and for the tests, what recall hydrates (`tests.unit.recall_fixtures`)."""
    data: dict[str, Any] = draft.model_dump()
    data.pop("merged_from", None)
    return Observation(
        **data, id=uuid.uuid4(), content_hash="h", relevance_count=0, superseded_by=None, created_at=at, updated_at=at
    )


def long_table(longs: list[dict[str, Any]]) -> None:
    """The `--long` table: without / with the bounds, same run."""
    table(
        "one long message: derived units without / with the bounds (statements of the user's"
        " message, passages of the answer; characters embedded; e5 CPU, and against the two turn units')",
        [
            "characters",
            "statements",
            "passages",
            "embedded chars",
            "turn units' chars (whole / now)",
            "turn units' CPU s (whole / now)",
            "CPU s",
            "CPU / turn units",
        ],
        [
            [
                r["chars"],
                f"{r['unbounded.statements']} / {r['bounded.statements']}",
                f"{r['unbounded.passages']} / {r['bounded.passages']}",
                f"{r['unbounded.embedded_chars']} / {r['bounded.embedded_chars']}",
                f"{r['turn_units_whole.embedded_chars']} / {r['turn_units.embedded_chars']}",
                f"{r.get('cpu.turn_units_whole_s', '-')} / {r.get('cpu.turn_units_s', '-')}",
                f"{r.get('cpu.unbounded_s', '-')} / {r.get('cpu.bounded_s', '-')}",
                "{} / {}".format(
                    r.get("cpu.unbounded_ratio_to_turn_units", "-"), r.get("cpu.bounded_ratio_to_turn_units", "-")
                ),
            ]
            for r in longs
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50,200,1000", help="session lengths in messages")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object last")
    parser.add_argument("--long", default="", help="lengths of one long message in characters, comma-separated")
    parser.add_argument("--embed", action="store_true", help="with --long: time e5 embedding the units")
    parser.add_argument("--xquad", default=DEFAULT_DATA, help="folder with xquad.en.json (--long's prose)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results = [measure(n) for n in sizes]
    embedder = None
    if args.embed:
        from engram.adapters.embedders import build_embedder

        embedder = build_embedder("e5")
        _cpu(embedder, ["A first call loads the model's sessions."] * 16)  # not counted
    longs = [measure_long(int(c), args.xquad, embedder) for c in args.long.split(",") if c]
    table(
        "chat_units CPU per completed turn (ms of process CPU)",
        [
            "messages",
            "turns",
            "per turn p50",
            "per turn max",
            "last turn",
            "units/turn",
            "whole session at last turn",
            "ratio",
            "session end",
        ],
        [
            [
                r["messages"],
                r["turns"],
                r["per_turn_ms_p50"],
                r["per_turn_ms_max"],
                r["per_turn_ms_last"],
                r["units_per_turn_p50"],
                r["whole_session_ms_last_turn"],
                r["last_turn_ratio"],
                r["session_end_ms"],
            ]
            for r in results
        ],
    )
    if longs:
        long_table(longs)
    if args.json:
        figures: dict[str, Any] = dict(machine())
        for r in results:
            for key, value in r.items():
                if key != "messages":
                    figures[f"n{r['messages']}.{key}"] = value
        for r in longs:
            for key, value in r.items():
                if key != "chars":
                    figures[f"long{r['chars']}.{key}"] = value
        emit_json(figures)


if __name__ == "__main__":
    main()
