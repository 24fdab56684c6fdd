"""XQuAD passage retrieval, same-language and cross-lingual: `python -m bench.xquad [--json]`.

Why: a German user asks about memories written in English (and the other way round), and the
hybrid fusion must not do worse there than its best single list. XQuAD has the same 240
paragraphs and 1,190 questions, with the same ids, in German and English, so four directions
are measured on one data set: de->de, en->en, de->en and en->de.

Each language's paragraphs are one tenant (`xquad-de`, `xquad-en`), stored through the real
write path (a tenant unit of work: idempotent writes plus change events in the outbox), the
events decoded from their NATS encoding and handed to the `Indexer.handle` that
embed-index runs, exactly as `bench.locomo` does. A paragraph is one observation: its first
sentence the title, the rest the narrative, `xquad#<article>:<paragraph>` its provenance.
Every question goes through `RecallService.search` (limit 10) against the tenant of the
direction's paragraph language, in hybrid, vector-only and lexical-only mode; the score is
recall@1/@5/@10 of its own paragraph. `--limit N` takes N questions (evenly spread), for a
quick run. The data is read from `../shared/bench/xquad/` and never copied (CC BY-SA 4.0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from bench._common import ids_for, repeatable_ids
from bench.chat_path import reset_tenant
from bench.locomo import CollectingBus, index_events
from engram.adapters.embedders import build_embedder
from engram.adapters.pgvector_index import PgVectorIndex
from engram.adapters.postgres import Database
from engram.adapters.unit_of_work import PgUnitOfWork
from engram.domain.events import change_events
from engram.domain.observation import ObservationDraft, Provenance, Scope
from engram.domain.recall import RecallQuery
from engram.domain.scopes import Permission, Principal
from engram.services.indexing import Indexer
from engram.services.recall import RecallService

Mode = Literal["hybrid", "vector", "lexical"]
DEFAULT_DATA = "/work/shared/bench/xquad"
LANGUAGES = ("de", "en")
DIRECTIONS = (("de", "de"), ("en", "en"), ("de", "en"), ("en", "de"))  # (question, paragraphs)
MODES: tuple[Mode, ...] = ("hybrid", "vector", "lexical")
KS = (1, 5, 10)
SOURCE = "/engram/bench/xquad"
USER = "reader"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-ZÄÖÜ0-9\"„(])")

console = Console(stderr=True)


@dataclass(frozen=True)
class Paragraph:
    ref: str  # "<article>:<paragraph>", the same in both languages
    text: str


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    gold: str  # the ref of its paragraph


def load(folder: Path, language: str) -> tuple[list[Paragraph], dict[str, Question]]:
    """The paragraphs of one language file and its questions by id (SQuAD v1.1 layout)."""
    data = json.loads((folder / f"xquad.{language}.json").read_text(encoding="utf-8"))["data"]
    paragraphs, questions = [], {}
    for a, article in enumerate(data):
        for p, paragraph in enumerate(article["paragraphs"]):
            ref = f"{a}:{p}"
            paragraphs.append(Paragraph(ref, " ".join(paragraph["context"].split())))
            for qa in paragraph["qas"]:
                questions[qa["id"]] = Question(qa["id"], " ".join(qa["question"].split()), ref)
    return paragraphs, questions


def draft(tenant: str, paragraph: Paragraph) -> ObservationDraft:
    """One paragraph as one observation: the first sentence is its headline, the rest its text."""
    first, *rest = _SENTENCE_END.split(paragraph.text, maxsplit=1)
    if len(first) > 500:
        first, rest = first[:499].rsplit(" ", 1)[0] + "…", [paragraph.text]
    return ObservationDraft(
        tenant_id=tenant,
        user_id=USER,
        type="fact",
        title=first,
        narrative=" ".join(rest)[:20_000],
        key=f"xquad:{paragraph.ref}",
        scope=Scope.private,
        provenance=Provenance(source_event_id=f"xquad#{paragraph.ref}"),
    )


def subsample(ids: list[str], limit: int | None) -> list[str]:
    """`limit` ids spread evenly over the file (every article represented), or all of them."""
    if not limit or limit >= len(ids):
        return ids
    step = len(ids) / limit
    return [ids[int(i * step)] for i in range(limit)]


async def store(db: Database, indexer: Indexer, tenant: str, paragraphs: list[Paragraph]) -> None:
    bus = CollectingBus()
    async with PgUnitOfWork(db, bus).tenant(tenant) as tx:
        written = await tx.observations.write_many([draft(tenant, p) for p in paragraphs])
        tx.emit(change_events([w.change for w in written], SOURCE))
    await index_events(indexer, bus.take())


async def evaluate(db: Database, args: argparse.Namespace) -> dict[str, Any]:
    embedder = build_embedder(args.embedder, query_cache=8192)  # each question is asked in 3 modes
    index = PgVectorIndex(db, embedder.dimensions)
    uow = PgUnitOfWork(db, None)
    indexer = Indexer(uow, index, embedder)
    recall = RecallService(uow, index, embedder, None)
    data = {lang: load(args.data_dir, lang) for lang in LANGUAGES}
    ids = subsample([q for q in data["en"][1] if q in data["de"][1]], args.limit)
    t0 = time.perf_counter()
    for lang in LANGUAGES:  # all of them before any is written (`repeatable_ids`)
        await reset_tenant(db, f"xquad-{lang}")  # a fresh store per run; the embedding cache stays
    for lang in LANGUAGES:
        ids_for(lang)
        await store(db, indexer, f"xquad-{lang}", data[lang][0])
    ingest_s = time.perf_counter() - t0
    console.print(f"{sum(len(d[0]) for d in data.values())} paragraphs stored and indexed in {ingest_s:.1f} s")
    hits: dict[tuple[str, str], list[float]] = defaultdict(list)  # (direction.mode, metric) -> 0/1
    ranked_out = args.ranked_out.open("w", encoding="utf-8") if args.ranked_out else None
    try:
        for q_lang, p_lang in DIRECTIONS:
            tenant = f"xquad-{p_lang}"
            principal = Principal(tenant_id=tenant, user_id=USER, permissions=frozenset({Permission.read_observation}))
            for qid in ids:
                question = data[q_lang][1][qid]
                ranked: dict[str, list[str]] = {}
                for mode in MODES:
                    result = await recall.search(principal, RecallQuery(text=question.text, limit=10, mode=mode))
                    ranked[mode] = [
                        (h.observation.provenance.source_event_id or "#").split("#", 1)[1] for h in result.hits
                    ]
                    for k in KS:
                        hits[(f"{q_lang}-{p_lang}.{mode}", f"recall@{k}")].append(
                            float(question.gold in ranked[mode][:k])
                        )
                if ranked_out is not None:
                    row = {"id": qid, "direction": f"{q_lang}-{p_lang}", "gold": [question.gold], "ranked": ranked}
                    ranked_out.write(json.dumps(row) + "\n")
            console.print(f"{q_lang}->{p_lang}: {len(ids)} questions")
    finally:
        if ranked_out is not None:
            ranked_out.close()
    figures: dict[str, Any] = {
        "embedder": embedder.model,
        "questions": len(ids),
        "paragraphs": len(data["en"][0]),
        "ingest_seconds": round(ingest_s, 1),
        "total_seconds": round(time.perf_counter() - t0, 1),
    }
    for (name, metric), values in sorted(hits.items()):
        figures[f"{name}.{metric}"] = round(statistics.fmean(values), 4)
    return figures


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from engram.adapters.migrations import migrate
    from engram.development.embedded import EmbeddedPostgres

    pg = EmbeddedPostgres(args.state_dir / "postgres").start()
    try:
        await migrate(pg.url)
        db = await Database.connect(pg.url, max_size=8)
        try:
            return await evaluate(db, args)
        finally:
            await db.close()
    finally:
        pg.stop()


def print_table(figures: dict[str, Any]) -> None:
    table = Table(title=f"XQuAD paragraph retrieval ({figures['embedder']}, {figures['questions']} questions)")
    for column in ("questions -> paragraphs", "mode", *(f"recall@{k}" for k in KS)):
        table.add_column(column, justify="left" if "recall" not in column else "right")
    for q_lang, p_lang in DIRECTIONS:
        for mode in MODES:
            key = f"{q_lang}-{p_lang}.{mode}"
            table.add_row(f"{q_lang} -> {p_lang}", mode, *(f"{figures[f'{key}.recall@{k}']:.3f}" for k in KS))
        table.add_section()
    Console().print(table)
    Console().print(f"ingest+index {figures['ingest_seconds']} s, total {figures['total_seconds']} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.xquad", description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEFAULT_DATA, help="folder with xquad.de.json and xquad.en.json")
    parser.add_argument("--json", action="store_true", help="print one JSON object with the figures last")
    parser.add_argument("--limit", type=int, default=None, help="ask only N questions (evenly spread)")
    parser.add_argument("--embedder", default="e5", choices=["e5", "use", "static"])
    parser.add_argument("--state", default=".engram/bench", help="embedded PostgreSQL (embedding cache) folder")
    parser.add_argument(
        "--ranked-out",
        type=Path,
        default=None,
        help="one JSON line per question and direction: id, gold, ranked per mode",
    )
    args = parser.parse_args(argv)
    repeatable_ids("xquad", 0)  # equal scores are ordered by id: the same run, the same ranking
    from engram.runtime.logs import configure_logging

    configure_logging("WARNING")
    args.data_dir = Path(args.data)
    args.state_dir = Path(args.state).resolve()
    figures = asyncio.run(run(args))
    print_table(figures)
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
