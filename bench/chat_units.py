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

    python -m bench.chat_units [--sizes 50,200,1000] [--json]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from bench._common import emit_json, machine, table
from bench.chatgen import generate
from engram.domain.conversation import chat_units

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50,200,1000", help="session lengths in messages")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object last")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = [measure(n) for n in sizes]
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
    if args.json:
        figures: dict[str, Any] = dict(machine())
        for r in results:
            for key, value in r.items():
                if key != "messages":
                    figures[f"n{r['messages']}.{key}"] = value
        emit_json(figures)


if __name__ == "__main__":
    main()
