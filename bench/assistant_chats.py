"""User-assistant chat retrieval: `python -m bench.assistant_chats [--seed N] [--sessions N] [--json]`.

Why: LoCoMo measures two friends chatting; an assistant's memory has to find the one sentence
in which the user said something about themselves, between assistant answers of hundreds of
words, the current value of a fact the user changed, and two facts at once, in German as well
as English. `bench.chatgen` generates such conversations deterministically from a seed; they
are stored, indexed and asked exactly as `bench.locomo` does it (turn units through
`ConversationIngest`, embed-index's `Indexer.handle`, `RecallService.search`), and
scored in its format: recall@1/5/10 and nDCG@10 per category, per mode.

For the "updated" categories it also reports `<mode>.stale_first`: the share of questions
where a superseded statement of the fact ranks above its current one (among the 10 hits).
For the single-fact questions (single-hop and updated) it reports recall by how the evidence
states the fact: `<mode>.asked.recall@k` where the user said it inside a question ("What
should we pack for our trip to Crete in August?"), `<mode>.stated.recall@k` where in a
statement. With `--on-topic SHARE`, about that share of the facts is stated in a session on a
topic the fact belongs to (the allergy while planning meals) instead of as an aside:
`<mode>.on_topic.recall@k` and `<mode>.aside.recall@k`. `--units` and `--embedding-cpu` as in
`bench.locomo`: the answers' passages are stored by default, as the product stores them.
`--answered SHARE`: about that share of the first statements of a fact are the user's short answer to a
question the assistant ended its answer with ("Which car do you drive?" - "A grey Ford Focus."):
`<mode>.answered.recall@k` and `<mode>.volunteered.recall@k`. `--corrected SHARE`: about that share of the
changes told as a short answer to the assistant checking the old value ("Is your sister still
living in Porto?" - "No, she moved to Leeds a while ago."), counted as answered too.
`--pastes N` (`bench.pasted`): N of each conversation's user turns that are no evidence also
carry a pasted text of `--paste-chars` characters of XQuAD prose, as a user pastes a document.
`--requests`: per fact also a request that needs it without naming it ("Can you suggest a dinner
I could cook tonight?" for an allergy), categories 11 and 12, reported beside the others.
`--via chat` also reports `context.recall`: the share of the evidence in what a chat turn sends
with the question, the stable memory block (the user's preferences and identity, and their
plans still ahead) and the hits, `context.turn`: the same with what the turn's streams send
instead of the hits (`chat_path.streamed`), and for the updated facts `context.block_current` /
`context.block_stale`: how often the block cites the current statement / a superseded one. The
block is read at the questions' time: by default now, years after the data's dates, when every
plan has passed; `--asked-days-after 1` asks a day after each conversation's last session.
`--consolidate` (with `--via chat`) first runs consolidation over what extraction wrote, as
consolidate-memory does (rules, no model).
`--late SHARE` (with `--via chat`): that share of the turn events is handled after the whole
conversation (a redelivery after an outage, a dead letter replayed), so what they give is
written after what was said later (`bench.chat_path`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from bench import locomo
from bench._common import repeatable_ids
from bench.chatgen import (
    ANSWERED,
    ASKED,
    CATEGORIES,
    CORRECTED,
    ON_TOPIC,
    REFERRED,
    REQUEST_CATEGORIES,
    SESSIONS,
    generate,
)
from bench.pasted import CATEGORIES as PASTED_CATEGORIES
from bench.pasted import with_pastes
from bench.xquad import DEFAULT_DATA
from engram.services.recall_plan import CANDIDATES


def stale_first(samples: list[dict[str, Any]], ranked_rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per mode: how often a stale statement outranks the current one ("updated" questions)."""
    stale = {
        f"{s['sample_id']}:{i}": set(qa["stale_evidence"])
        for s in samples
        for i, qa in enumerate(s["qa"])
        if qa.get("stale_evidence")
    }
    out: dict[str, list[float]] = {}
    for row in ranked_rows:
        if row["id"] not in stale:
            continue
        current = set(row["gold"])
        for mode, ranked in row["ranked"].items():
            first = next((t for t in ranked[:10] if t in current or t in stale[row["id"]]), None)
            out.setdefault(mode, []).append(float(first is not None and first not in current))
    return {mode: round(statistics.fmean(v), 4) for mode, v in out.items()}


# qa flag: (true, false)
FORMS = {
    "asked": ("asked", "stated"),
    "on_topic": ("on_topic", "aside"),
    "answered": ("answered", "volunteered"),
    "referred": ("referred", "named"),
}


def by_form(samples: list[dict[str, Any]], ranked_rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per mode and form ("asked" or "stated"; "on_topic" or "aside"; "answered" or
    "volunteered"; "referred" or "named", where a question carries it): mean recall@1/5/10 of
    the single-fact questions."""
    forms = {
        f"{s['sample_id']}:{i}": [names[not qa[flag]] for flag, names in FORMS.items() if flag in qa]
        for s in samples
        for i, qa in enumerate(s["qa"])
        if "asked" in qa
    }
    out: dict[str, list[dict[str, float]]] = {}
    for row in ranked_rows:
        for mode, ranked in row["ranked"].items():
            for form in forms.get(row["id"], ()):
                out.setdefault(f"{mode}.{form}", []).append(locomo.metrics(ranked, set(row["gold"])))
    figures = {f"{key}.count": float(len(values)) for key, values in out.items()}
    for key, values in out.items():
        for k in (1, 5, 10):
            figures[f"{key}.recall@{k}"] = round(statistics.fmean(v[f"recall@{k}"] for v in values), 4)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.assistant_chats", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=21, help="the generator's seed (same seed, same data)")
    parser.add_argument("--conversations", type=int, default=10, help="conversations per language")
    parser.add_argument(
        "--sessions", type=int, default=SESSIONS, help="sessions per conversation (about eight turns each)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object with the figures last")
    parser.add_argument("--embedder", default="e5", choices=["e5", "use", "static"])
    parser.add_argument("--window", type=int, default=2, help="neighbouring turns on each side in a unit")
    parser.add_argument("--state", default=".engram/bench", help="embedded PostgreSQL (embedding cache) folder")
    parser.add_argument("--limit", type=int, default=10, help="hits asked for per question")
    parser.add_argument("--candidates", type=int, default=CANDIDATES, help="candidates per list")
    parser.add_argument("--ranked-out", type=Path, default=None, help="each question's ranked turn ids, JSON Lines")
    parser.add_argument(
        "--asked", type=float, default=ASKED, help="share of the fact statements made inside a question"
    )
    parser.add_argument(
        "--on-topic",
        type=float,
        default=ON_TOPIC,
        help="about the share of the fact statements made in a session on a topic the fact belongs to",
    )
    parser.add_argument(
        "--answered",
        type=float,
        default=ANSWERED,
        help="about the share of first fact statements made as a short answer to the assistant's question",
    )
    parser.add_argument(
        "--corrected",
        type=float,
        default=CORRECTED,
        help="about the share of changes told as a short answer to the assistant's check of the old value",
    )
    parser.add_argument(
        "--referred",
        type=float,
        default=REFERRED,
        help="about the share of first fact statements (a relative's city, a pet, a car) said of a pronoun "
        "for whom the sentence before names",
    )
    parser.add_argument(
        "--requests",
        action="store_true",
        help="also ask, per fact, a request that needs it without naming it (categories 11 and 12)",
    )
    parser.add_argument(
        "--consolidate",
        action="store_true",
        help="with --via chat: consolidate what extraction wrote (rules, no model) before the questions",
    )
    parser.add_argument(
        "--late",
        type=float,
        default=0.0,
        help="with --via chat: this share of the turn events is handled after the whole conversation",
    )
    parser.add_argument("--dump", type=Path, default=None, help="write the generated data (LoCoMo layout) here")
    parser.add_argument(
        "--pastes", type=int, default=0, help="pasted texts in each conversation's user turns (`bench.pasted`)"
    )
    parser.add_argument("--paste-chars", type=int, default=6000, help="characters of each pasted text")
    parser.add_argument("--paste-questions", type=int, default=0, help="XQuAD's questions asked about each pasted text")
    parser.add_argument("--xquad", type=Path, default=Path(DEFAULT_DATA), help="XQuAD folder (the pasted texts)")
    locomo.add_unit_arguments(parser)
    locomo.add_asked_after_argument(parser)
    locomo.add_assistant_argument(parser, "speaker_b")
    locomo.add_via_argument(parser)
    locomo.add_embedding_cpu_argument(parser)
    args = parser.parse_args(argv)
    args.units = locomo.parse_units(args.units)
    repeatable_ids("assistant_chats", args.seed)  # equal scores are ordered by id: the same run, the same ranking
    from engram.runtime.logs import configure_logging

    configure_logging("WARNING")
    try:
        args.samples = generate(
            args.seed,
            args.conversations,
            sessions=args.sessions,
            asked=args.asked,
            on_topic=args.on_topic,
            requests=args.requests,
            answered=args.answered,
            corrected=args.corrected,
            referred=args.referred,
        )
    except ValueError as exc:  # too few sessions
        parser.error(f"--sessions: {exc}")
    try:
        args.samples = with_pastes(
            args.samples, args.pastes, args.paste_chars, args.xquad, args.seed, args.paste_questions
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.dump:
        args.dump.write_text(json.dumps(args.samples, indent=1, ensure_ascii=False), encoding="utf-8")
    args.categories = {
        **CATEGORIES,
        **(PASTED_CATEGORIES if args.pastes and args.paste_questions else {}),
        **(REQUEST_CATEGORIES if args.requests else {}),
    }
    args.state_dir = Path(args.state).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        args.ranked_out = args.ranked_out or Path(tmp) / "ranked.jsonl"
        figures = asyncio.run(locomo.run(args))
        rows = [json.loads(line) for line in args.ranked_out.read_text(encoding="utf-8").splitlines()]
    figures["seed"] = args.seed
    figures["sessions"] = args.sessions
    figures["asked"] = args.asked
    figures["on_topic"] = args.on_topic
    figures["answered"] = args.answered
    figures["corrected"] = args.corrected
    figures["referred"] = args.referred
    figures["pastes"] = args.pastes
    figures["requests"] = args.requests
    for mode, share in stale_first(args.samples, rows).items():
        figures[f"{locomo.REPORTED.get(mode, mode)}.stale_first"] = share
    for key, value in by_form(args.samples, rows).items():
        mode, rest = key.split(".", 1)
        figures[f"{locomo.REPORTED.get(mode, mode)}.{rest}"] = value
    locomo.print_table(figures, args.categories, title="Assistant chats, turn retrieval")
    Console().print(
        "stale statement ranked above the current one (updated facts): "
        + ", ".join(f"{m} {figures[f'{m}.stale_first']:.3f}" for m in ("bm25", "vector", "hybrid", "ts_rank"))
    )
    said = {
        "asked": "inside a question",
        "stated": "in a statement",
        "on_topic": "on its topic",
        "aside": "as an aside",
        "answered": "answering the assistant's question",
        "volunteered": "unasked",
        "referred": "of a pronoun for whom the sentence before names",
        "named": "naming whom it is about",
    }
    for form, how in said.items():
        Console().print(
            f"single-fact, the fact said {how}"
            f" ({figures.get(f'hybrid.{form}.count', 0):.0f}), recall@1/5/10: "
            + ", ".join(
                f"{m} " + "/".join(f"{figures.get(f'{m}.{form}.recall@{k}', 0):.3f}" for k in (1, 5, 10))
                for m in ("bm25", "vector", "hybrid")
            )
        )
    if "context.recall" in figures:  # via chat
        Console().print(
            "in what a chat turn sends (the stable memory block's"
            f" {figures.get('context.stable_turns', 0):.1f} turns in {figures.get('context.stable_chars', 0):.0f}"
            " characters, and the hybrid hits): "
            + ", ".join(
                f"{args.categories[c]} {figures[f'context.cat{c}.recall']:.3f}"
                for c in args.categories
                if f"context.cat{c}.recall" in figures
            )
        )
        Console().print(
            "... with the chat turn's streams instead of the hits: "
            + ", ".join(
                f"{args.categories[c]} {figures[f'context.cat{c}.turn']:.3f}"
                for c in args.categories
                if f"context.cat{c}.turn" in figures
            )
            + f"; pooled {figures.get('context.turn', 0):.3f} (hits: {figures['context.recall']:.3f})"
        )
    if "context.block_current" in figures:
        Console().print(
            f"updated facts: the block cites the current statement {figures['context.block_current']:.3f},"
            f" a superseded one {figures['context.block_stale']:.3f},"
            f" only a superseded one {figures['context.block_stale_only']:.3f}"
            + (
                f" (consolidation superseded {figures['consolidation.superseded']} observations)"
                if "consolidation.superseded" in figures
                else ""
            )
        )
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
