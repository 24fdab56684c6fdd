"""LoCoMo retrieval benchmark: `python -m bench.locomo --data PATH [--json]`.

Each conversation is stored through the real services (ConversationIngest writes turn units
with their change events to the outbox; the events are decoded from their NATS encoding and
handed to the same `Indexer.handle` that embed-index runs; questions go through
`RecallService.search`). One tenant and one user per conversation; each turn unit carries the
session date (`valid_from`) and its `dia_id` as provenance, so a hit names exactly one turn.

For every question of categories 1-4: recall@1, recall@5, recall@10 and nDCG@10 over turns,
for BM25 only, vector only and hybrid, plus PostgreSQL's `ts_rank_cd` over the same units as
the "plain ts_rank" reference, and hybrid query latency (including the query embedding).
`--assistant` says whose turns are an assistant's (low priority, not split into statements):
`auto` (the default) takes a speaker named like one or one whose turns run far longer than the
other's (`conversation.likely_assistants`), so a user-assistant chat export in this format is
stored as the assistant benches store theirs; LoCoMo's people have none.
`--as-messages [sentences|interjected]` first sends every turn as one message per sentence
(`bench.chat_messages`), the shape of a messenger's log, with the evidence remapped to the
message holding the fact; `interjected` also has the other person react inside long turns.
`--typos RATE` misspells that share of the turns' longer words once (`bench.typos`: swapped,
dropped, doubled or neighbouring letters), as people type in a hurry; the questions as written.
`--ranked-out FILE` writes one JSON line per question (`id` "<sample>:<qa index>", `category`,
`gold` turn ids, `ranked`: the turn ids per mode; through the chat path also `stable`, the turns
the stable memory block cites, and `turn`, those and the turns a chat turn's streams send), so
rankings can be compared offline.
`--mix FILE` stores each conversation in a tenant with one conversation of a second data set in
this layout (e.g. `bench.assistant_chats --dump`), not asked about: a tenant holding both kinds.
`--units` names the derived units (statements and an assistant's passages by default; both only
in a chat with an assistant); `embedded.*` counts what indexing embeds per unit kind against the
turn units and against each turn's whole text, and `--embedding-cpu N` times the embedding of up
to N texts of each kind (`embedding_cpu.*`).

Embeddings are cached by text hash in a persistent embedded PostgreSQL
(`.engram/bench/postgres`), so a re-run does not re-embed. The data is read from the path
given and never copied into the repository (CC BY-NC 4.0, see its README).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from cloudevents.http import CloudEvent
from rich.console import Console
from rich.table import Table

from bench._common import ids_for, repeatable_ids
from bench.chat_messages import MODES as MESSAGE_MODES
from bench.chat_messages import as_messages, evidence_refs
from bench.chat_path import (
    ChatReplay,
    chat_extraction,
    chat_streams,
    consolidate_extracted,
    replay_chat,
    reset_tenant,
    stable_memory_block,
    stored_observations,
    streamed,
    tenant_observations,
)
from bench.typos import with_typos
from engram.adapters.embedders import build_embedder
from engram.adapters.nats_binding import from_nats
from engram.adapters.pgvector_index import PgVectorIndex
from engram.adapters.postgres import Database
from engram.adapters.unit_of_work import PgUnitOfWork
from engram.domain.conversation import ConversationSession, Turn, likely_assistants, turn_id_of
from engram.domain.memory_units import UnitKind, unit_ref
from engram.domain.observation import Observation
from engram.domain.recall import RecallQuery
from engram.domain.scopes import Permission, Principal
from engram.domain.search import passage_text, text_hash
from engram.ports import Published, RawMessage
from engram.services.conversations import ConversationIngest
from engram.services.extraction import Extraction
from engram.services.indexing import Indexer
from engram.services.recall import RecallService
from engram.services.recall_plan import CANDIDATES
from functions.embed_index.main import WORKER as EMBED_INDEX

DEFAULT_DATA = "/work/shared/bench/locomo/dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
MODES: tuple[Literal["lexical", "vector", "hybrid", "ts_rank"], ...] = (
    "lexical",
    "vector",
    "hybrid",
    "ts_rank",
)
REPORTED = {"lexical": "bm25"}  # the figures' name of a mode
METRICS = ("recall@1", "recall@5", "recall@10", "ndcg@10")

console = Console(stderr=True)


class CollectingBus:
    """The EventBus port, keeping what is published so the bench hands it to the indexer itself."""

    def __init__(self) -> None:
        self.events: list[CloudEvent] = []

    async def publish(self, event: CloudEvent) -> Published:
        self.events.append(event)
        return Published(event_id=str(event["id"]), subject="bench", duplicate=False, seq=len(self.events))

    async def publish_many(self, events: Sequence[CloudEvent]) -> list[Published]:
        return [await self.publish(e) for e in events]

    async def erase_user(self, tenant_id: str, user_id: str) -> dict[str, int]:
        """Nothing is stored on a bus: the events are handed to the indexer in the same run."""
        return {}

    async def publish_raw(self, subject: str, headers: dict[str, str], body: bytes, *, event_id: str) -> Published:
        self.events.append(from_nats(headers, body))  # the worker's own decoding path
        return Published(event_id=event_id, subject=subject, duplicate=False, seq=len(self.events))

    async def publish_raw_many(
        self, items: Sequence[RawMessage], *, timeout: float = 10.0
    ) -> list[Published | BaseException]:
        return [await self.publish_raw(m.subject, m.headers, m.body, event_id=m.event_id) for m in items]

    def take(self) -> list[CloudEvent]:
        taken, self.events = self.events, []
        return taken


async def index_events(indexer: Indexer, events: Sequence[CloudEvent]) -> None:
    """Hand the collected change events to embed-index's code, in the runner's batch size."""
    for start in range(0, len(events), 200):
        outcomes = await EMBED_INDEX.run(indexer.handle, events[start : start + 200])
        failed = [o for o in outcomes if o is not None]
        if failed:
            raise RuntimeError(f"indexing failed: {failed[0]}")


def session_date(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def sessions_of(sample: dict[str, Any]) -> list[ConversationSession]:
    conv = sample["conversation"]
    numbers = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
    sessions = []
    for n in numbers:
        turns = [
            Turn(turn_id=t["dia_id"], speaker=t["speaker"], text=t.get("text", ""), image_caption=t.get("blip_caption"))
            for t in conv[f"session_{n}"]
        ]
        sessions.append(ConversationSession(f"session_{n}", session_date(conv[f"session_{n}_date_time"]), turns))
    return sessions


def gold_ids(evidence: Sequence[Any], known: set[str]) -> set[str]:
    return {ref for ref in evidence_refs(evidence) if ref in known}


def metrics(ranked: Sequence[str], gold: set[str]) -> dict[str, float]:
    """recall@1/5/10 over the turns covered by the first k units; binary nDCG@10 on new gold turns.

    An entry of `ranked` is one hit's turn id, or a burst's message ids space-separated
    (`conversation.bursts`): a hit covers all of them, so each gold message it covers is found at
    its rank (nDCG capped at 1 when one hit holds several gold messages)."""
    seen: list[str] = list(dict.fromkeys(ranked))
    covered_by = [set(entry.split()) for entry in seen]
    out = {f"recall@{k}": len(gold & set[str]().union(*covered_by[:k])) / len(gold) for k in (1, 5, 10)}
    dcg, covered = 0.0, set[str]()
    for i, turns in enumerate(covered_by[:10], 1):
        new = (turns & gold) - covered
        dcg += len(new) / math.log2(i + 1)
        covered |= new
    idcg = sum(1 / math.log2(i + 1) for i in range(1, min(len(gold), 10) + 1))
    out["ndcg@10"] = min(1.0, dcg / idcg)
    return out


@dataclass
class Scores:
    per: dict[tuple[str, int], list[dict[str, float]]] = field(default_factory=lambda: defaultdict(list))
    latencies_ms: list[float] = field(default_factory=list)

    def add(self, mode: str, category: int, values: dict[str, float]) -> None:
        self.per[(mode, category)].append(values)

    def mean(self, mode: str, categories: Sequence[int], metric: str) -> float:
        values = [v[metric] for c in categories for v in self.per[(mode, c)]]
        return statistics.fmean(values) if values else 0.0


@dataclass
class EmbeddingWork:
    """What indexing embeds, per unit kind: distinct texts and their characters (the embedder's
    work; a text embedded before is a cache hit). Two baselines: the turn units alone (an
    assistant's answer embedded by its opening), and each turn's whole text embedded once
    (`turn_text`: a turn unit's narrative, what a memory of whole turns would embed)."""

    texts: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    turns: int = 0
    turn_text: set[str] = field(default_factory=set)

    def add(self, model: str, observations: Sequence[Observation]) -> None:
        for o in observations:
            ref = unit_ref(o)
            kind = ref.kind.value if ref else "other"
            self.turns += kind == "turn"
            self.texts[kind].add(text_hash(model, passage_text(o)) + "\x1f" + passage_text(o))
            if kind == "turn":
                self.turn_text.add(o.narrative or o.title)

    async def cpu(self, embedder: Any, sample: int, seed: int = 1) -> dict[str, Any]:
        """CPU seconds (this process, all threads) to embed each kind's texts and the turns' whole
        texts, estimated from up to `sample` texts of each, drawn with `seed`, embedded in batches
        of 16 in alternating order; and the ratio of all kinds to the whole turns."""
        import random

        pools = {k: sorted(t.split("\x1f", 1)[1] for t in v) for k, v in self.texts.items()}
        pools["turn_text"] = sorted(self.turn_text)
        drawn = {k: random.Random(f"{seed}:{k}").sample(v, min(sample, len(v))) for k, v in pools.items() if v}
        spent: dict[str, float] = defaultdict(float)
        for start in range(0, max(len(v) for v in drawn.values()), 16):
            for kind, texts in drawn.items():
                batch = texts[start : start + 16]
                if batch:
                    t0 = time.process_time()
                    await embedder.embed_passages(batch)
                    spent[kind] += time.process_time() - t0
        total = {k: spent[k] * len(pools[k]) / len(drawn[k]) for k in drawn}
        out: dict[str, Any] = {f"embedding_cpu.{k}_s": round(v, 2) for k, v in sorted(total.items())}
        units = sum(v for k, v in total.items() if k != "turn_text")
        if total.get("turn_text"):
            out["embedding_cpu.ratio_to_turn_text"] = round(units / total["turn_text"], 3)
        if total.get("turn"):
            out["embedding_cpu.ratio_to_turn_units"] = round(units / total["turn"], 3)
        out["embedding_cpu.sample"] = sample
        return out

    def figures(self) -> dict[str, Any]:
        def chars(kinds: Sequence[str]) -> int:
            return sum(len(t.split("\x1f", 1)[1]) for k in kinds for t in self.texts[k])

        kinds = sorted(self.texts)
        out: dict[str, Any] = {f"embedded.{k}.texts": len(self.texts[k]) for k in kinds}
        out.update({f"embedded.{k}.chars": chars([k]) for k in kinds})
        base, total = chars(["turn"]), chars(kinds)
        out["embedded.chars_per_turn"] = round(total / max(1, self.turns), 1)
        out["embedded.ratio_to_turn_units"] = round(total / base, 3) if base else 0.0
        whole = sum(len(t) for t in self.turn_text)
        out["embedded.turn_text.chars"] = whole
        out["embedded.ratio_to_turn_text"] = round(total / whole, 3) if whole else 0.0
        out["embedded.texts_ratio_to_turn_units"] = round(
            sum(len(v) for v in self.texts.values()) / max(1, len(self.texts["turn"])), 3
        )
        return out


async def ts_rank_ranking(db: Database, tenant: str, question: str, limit: int) -> list[str]:
    """The reference lexical ranking PostgreSQL offers out of the box: ts_rank_cd on an OR query."""
    async with db.tenant(tenant) as conn:
        rows = await conn.fetch(
            """
            WITH q AS (
              SELECT to_tsquery('english', coalesce(nullif(string_agg(DISTINCT quote_literal(lexeme), ' | '), ''), 'x'))
                     AS query
              FROM unnest(to_tsvector('english', $1))
            )
            SELECT source_event_id,
                   ts_rank_cd(to_tsvector('english', title || ' ' || narrative), q.query) AS rank
            FROM observations, q
            WHERE to_tsvector('english', title || ' ' || narrative) @@ q.query
            ORDER BY rank DESC, id LIMIT $2
            """,
            question,
            limit,
        )
    return [r["source_event_id"] for r in rows]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from engram.adapters.migrations import migrate
    from engram.development.embedded import EmbeddedPostgres

    samples = args.samples
    pg = EmbeddedPostgres(args.state_dir / "postgres").start()
    try:
        await migrate(pg.url)
        db = await Database.connect(pg.url, max_size=8)
        try:
            return await evaluate(db, samples, args)
        finally:
            await db.close()
    finally:
        pg.stop()


async def evaluate(db: Database, samples: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    embedder = build_embedder(args.embedder)
    index = PgVectorIndex(db, embedder.dimensions)
    bus = CollectingBus()
    uow = PgUnitOfWork(db, bus)
    ingest = ConversationIngest(uow)
    indexer = Indexer(uow, index, embedder)
    clock = AskedAt()
    recall = RecallService(uow, index, embedder, None, candidates=args.candidates, clock=clock.now)
    scores = Scores()
    work = EmbeddingWork()
    started = time.perf_counter()
    ingest_seconds = 0.0
    questions = 0
    with_assistant = 0
    stored: Counter[str] = Counter()
    refused: list[str] = []
    extraction: Extraction | None = None
    extractor = ""
    # via chat: is the evidence in what a chat turn would send, the stable memory block or the hits?
    in_context: dict[int, list[float]] = defaultdict(list)
    in_turn: dict[int, list[float]] = defaultdict(list)  # ... what a chat turn's streams send instead of the hits
    stable_sizes: list[tuple[int, int]] = []  # per conversation: the block's turns and characters
    block_updates: list[tuple[bool, bool]] = []  # updated facts: the block cites the current / a stale statement
    superseded = 0
    late_events = 0
    passed_plans = 0  # requests for a plan that is over when they are asked (`chatgen.plan_until`)
    if args.via == "chat":
        extraction, extractor = chat_extraction(uow)
        streams = chat_streams()
    for sample in samples:  # every tenant of the run before any is written (`repeatable_ids`)
        for prefix in ("locomo-", "locomo-chat-"):
            await reset_tenant(db, prefix + sample["sample_id"])
    ranked_out = args.ranked_out.open("w", encoding="utf-8") if args.ranked_out else None
    try:
        mixed = getattr(args, "mix_samples", None)  # `--mix`: another conversation per tenant
        for position, sample in enumerate(samples):
            sid = sample["sample_id"]
            ids_for(sid)  # its ids whatever the conversations and questions before it drew
            tenant = f"locomo-{sid}"
            principal = Principal(
                tenant_id=tenant, user_id="reader", permissions=frozenset({Permission.read_observation})
            )
            sessions = sessions_of(sample)
            known = {t.turn_id for s in sessions for t in s.turns}
            t0 = time.perf_counter()
            assistants = assistants_of(sample, sessions, args.assistant)
            with_assistant += bool(assistants)
            turn_of = _provenance_turn
            if args.via == "chat":
                if not assistants:
                    console.print(f"{sid}: no assistant in this conversation, not a chat: skipped")
                    continue
                tenant = f"locomo-chat-{sid}"
                principal = Principal(
                    tenant_id=tenant, user_id="reader", permissions=frozenset({Permission.read_observation})
                )
                replay = ChatReplay()
                assert extraction is not None
                await replay_chat(
                    db,
                    uow,
                    extraction,
                    tenant_id=tenant,
                    user_id="reader",
                    conversation_id=sid,
                    sessions=sessions,
                    assistants=assistants,
                    replay=replay,
                    late=getattr(args, "late", 0.0),
                    seed=getattr(args, "seed", 0),
                )
                refused += replay.refused
                late_events += replay.late_events
                turn_of = replay.turn_of
                work.add(embedder.model, await tenant_observations(db, tenant))
            else:
                written = await ingest.ingest(
                    tenant_id=tenant,
                    user_id="reader",
                    conversation_id=sid,
                    sessions=sessions,
                    window=args.window,
                    kinds=args.units,
                    assistants=assistants,
                )
                work.add(embedder.model, [w.observation for w in written])
                if mixed:  # another conversation in the same tenant, not asked about
                    other = mixed[position % len(mixed)]
                    other_sessions = sessions_of(other)
                    await ingest.ingest(
                        tenant_id=tenant,
                        user_id="reader",
                        conversation_id=f"mix-{other['sample_id']}",
                        sessions=other_sessions,
                        window=args.window,
                        kinds=args.units,
                        assistants=assistants_of(other, other_sessions, "auto"),
                    )
                    turn_of = _turn_of_conversation(sid)
            await index_events(indexer, bus.take())
            if args.via == "chat" and getattr(args, "consolidate", False):
                superseded += await consolidate_extracted(db, uow, embedder, index, tenant)
                await index_events(indexer, bus.take())
            stable: frozenset[str] | None = None
            clock.at = asked_at(sessions, getattr(args, "asked_days_after", None))
            if args.via == "chat":
                block = await stable_memory_block(uow, tenant, "reader", replay, clock.at)
                stable = block.turns
                stable_sizes.append((len(block.turns), block.chars))
            stored += await stored_observations(db, tenant)
            ingest_seconds += time.perf_counter() - t0
            console.print(
                f"{sid}: {len(known)} turns stored and indexed in {time.perf_counter() - t0:.1f} s"
                + (f" (assistant: {', '.join(sorted(assistants))})" if assistants else "")
            )
            # the planner's statistics with the tenant just stored, as autovacuum keeps them in production:
            # the latency below is read from its questions (a new tenant is otherwise estimated at one row)
            await db.system_statement("ANALYZE observations, search_documents, search_terms, search_term_stats")
            for number, qa in enumerate(sample["qa"]):
                category = int(qa.get("category", 0))
                gold = gold_ids(qa.get("evidence", []), known)
                if category not in args.categories or not gold:
                    continue
                if "ahead_until" in qa and clock.now().date() > date.fromisoformat(qa["ahead_until"]):
                    passed_plans += 1  # "what do I have coming up?" about a plan already over: not its gold
                    continue
                questions += 1
                ranked = await ask(db, recall, principal, str(qa["question"]), args.limit, scores, turn_of)
                for mode, turns in ranked.items():
                    scores.add(mode, category, metrics(turns, gold))
                if stable is not None:
                    sent = stable | {t for hit in ranked["hybrid"][: args.limit] for t in hit.split()}
                    in_context[category].append(len(gold & sent) / len(gold))
                    question = str(qa["question"])
                    turn_sent = stable | {
                        t for o in await streamed(streams, principal, recall, question) for t in turn_of(o).split()
                    }
                    in_turn[category].append(len(gold & turn_sent) / len(gold))
                    stale = gold_ids(qa.get("stale_evidence", []), known)
                    if stale:
                        block_updates.append((bool(gold & stable), bool(stale & stable)))
                if ranked_out is not None:
                    row = {"id": f"{sid}:{number}", "category": category, "gold": sorted(gold), "ranked": ranked}
                    if stable is not None:
                        row["stable"] = sorted(stable)  # the turns the stable memory block cites
                        row["turn"] = sorted(turn_sent)  # ... and with them, what the turn's streams send
                    ranked_out.write(json.dumps(row) + "\n")
    finally:
        if ranked_out is not None:
            ranked_out.close()
    figures = report(scores, embedder.model, questions, ingest_seconds, time.perf_counter() - started, args)
    figures.update(work.figures())
    if getattr(args, "embedding_cpu", 0):
        figures.update(await work.cpu(embedder, args.embedding_cpu))
    figures["conversations_with_assistant"] = with_assistant
    figures["via"] = args.via
    figures["mixed_with"] = len(mixed or [])
    figures["passed_plans"] = passed_plans  # questions left out: a plan's request asked after it
    figures.update({f"stored.{k}": n for k, n in sorted(stored.items())})
    if args.via == "chat":
        figures["chat.refused_events"] = len(refused)
        figures["chat.late_events"] = late_events
        figures["chat.extractor"] = extractor
        figures.update(context_figures(in_context, stable_sizes))
        figures.update(context_figures(in_turn, [], "turn"))
        if block_updates:
            figures["context.block_current"] = round(statistics.fmean(c for c, _s in block_updates), 4)
            figures["context.block_stale"] = round(statistics.fmean(s for _c, s in block_updates), 4)
            # the harmful case: the block names only a superseded value
            figures["context.block_stale_only"] = round(statistics.fmean(s and not c for c, s in block_updates), 4)
        if getattr(args, "consolidate", False):
            figures["consolidation.superseded"] = superseded
    return figures


def context_figures(
    in_context: Mapping[int, Sequence[float]], stable_sizes: Sequence[tuple[int, int]], metric: str = "recall"
) -> dict[str, float]:
    """`context.recall`: the share of the evidence in what a chat turn sends with the question (the
    stable memory block's turns and the hybrid hits), per category and pooled; `context.turn`
    the same with what the turn's streams send (`chat_path.streamed`: the intent's streams, each
    filtered to its types, cut to its share of the memory budget) instead of the hits;
    `context.stable_turns` and `context.stable_chars`: the turns the block cites and its length,
    per conversation on average."""
    out = {f"context.cat{c}.{metric}": round(statistics.fmean(v), 4) for c, v in sorted(in_context.items()) if v}
    pooled = [x for v in in_context.values() for x in v]
    if pooled:
        out[f"context.{metric}"] = round(statistics.fmean(pooled), 4)
    if stable_sizes:
        out["context.stable_turns"] = round(statistics.fmean(n for n, _chars in stable_sizes), 2)
        out["context.stable_chars"] = round(statistics.fmean(chars for _n, chars in stable_sizes), 1)
    return out


def assistants_of(sample: dict[str, Any], sessions: Sequence[ConversationSession], choice: str) -> frozenset[str]:
    """The assistant speakers of a sample: `choice` "auto" asks `likely_assistants`, "none" takes
    none, "speaker_a" / "speaker_b" that side of the conversation, anything else a speaker's name."""
    if choice == "none":
        return frozenset()
    if choice == "auto":
        return likely_assistants(sessions)
    return frozenset({str(sample["conversation"].get(choice, choice))})


def _provenance_turn(observation: Observation) -> str:
    """The turn a unit stands for: its provenance's `<conversation>#<turn ids>`."""
    return turn_id_of(observation.provenance.source_event_id) or ""


def _turn_of_conversation(conversation_id: str) -> Callable[[Observation], str]:
    """`_provenance_turn` for a tenant that holds other conversations too (`--mix`): a turn of
    another conversation never counts as one of `conversation_id`'s (their turn ids repeat)."""

    def turn(observation: Observation) -> str:
        ref = observation.provenance.source_event_id or ""
        conversation, _, turns = ref.rpartition("#")
        return turns if conversation == conversation_id else f"{conversation}#{turns}"

    return turn


async def ask(
    db: Database,
    recall: RecallService,
    principal: Principal,
    question: str,
    limit: int,
    scores: Scores,
    turn_of: Callable[[Observation], str] = _provenance_turn,
) -> dict[str, list[str]]:
    """The ranked turn ids of one question in every mode (hybrid latency goes to `scores`)."""
    ranked: dict[str, list[str]] = {}
    for mode in MODES:
        if mode == "ts_rank":
            if turn_of is not _provenance_turn:
                ranked[mode] = []  # the reference reads unit provenance only
                continue
            refs = await ts_rank_ranking(db, principal.tenant_id, question, 10)
            ranked[mode] = [turn_id_of(r) or "" for r in refs]
            continue
        q0 = time.perf_counter()
        result = await recall.search(principal, RecallQuery(text=question, limit=limit, mode=mode))
        if mode == "hybrid":
            scores.latencies_ms.append((time.perf_counter() - q0) * 1000)
        ranked[mode] = [turn_of(h.observation) for h in result.hits]
    return ranked


def report(
    scores: Scores, model: str, questions: int, ingest_s: float, total_s: float, args: argparse.Namespace
) -> dict[str, Any]:
    pooled = list(args.categories)
    figures: dict[str, Any] = {
        "embedder": model,
        "window": args.window,
        "limit": args.limit,
        "candidates": args.candidates,
        "asked_days_after": getattr(args, "asked_days_after", None),
        "questions": questions,
        "ingest_seconds": round(ingest_s, 1),
        "total_seconds": round(total_s, 1),
    }
    for mode in MODES:
        name = REPORTED.get(mode, mode)
        for metric in METRICS:
            figures[f"{name}.{metric}"] = round(scores.mean(mode, pooled, metric), 4)
            for c in args.categories:
                figures[f"{name}.cat{c}.{metric}"] = round(scores.mean(mode, [c], metric), 4)
    lat = sorted(scores.latencies_ms)
    if lat:
        figures["latency_ms.p50"] = round(statistics.median(lat), 2)
        figures["latency_ms.p95"] = round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 2)
    return figures


def print_table(
    figures: dict[str, Any], categories: Mapping[int, str] = CATEGORIES, title: str = "LoCoMo turn retrieval"
) -> None:
    table = Table(title=f"{title} ({figures['embedder']}, {figures['questions']} questions)")
    table.add_column("method")
    table.add_column("category")
    for metric in METRICS:
        table.add_column(metric, justify="right")
    for mode in ("bm25", "vector", "hybrid", "ts_rank"):
        for c in [*categories, 0]:
            label = f"{min(categories)}-{max(categories)} pooled" if c == 0 else f"{c} {categories[c]}"
            key = f"{mode}." if c == 0 else f"{mode}.cat{c}."
            table.add_row(mode, label, *(f"{figures[key + m]:.3f}" for m in METRICS))
        table.add_section()
    Console().print(table)
    Console().print(
        f"hybrid latency p50 {figures.get('latency_ms.p50')} ms, p95 {figures.get('latency_ms.p95')} ms;"
        f" ingest+index {figures['ingest_seconds']} s, total {figures['total_seconds']} s"
    )


@dataclass
class AskedAt:
    """Recall's clock in the bench: `at` (the conversation's questions' time), or the real one."""

    at: datetime | None = None

    def now(self) -> datetime:
        return self.at or datetime.now(UTC)


def asked_at(sessions: Sequence[ConversationSession], days_after: float | None) -> datetime | None:
    """When a conversation's questions are asked: `days_after` its last session began, or None
    (now: years after the data's dates, where no memory is recent)."""
    if days_after is None or not sessions:
        return None
    return max(s.started_at for s in sessions) + timedelta(days=days_after)


def add_asked_after_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--asked-days-after",
        type=float,
        default=None,
        help="ask each conversation's questions this many days after its last session (recall's clock),"
        " as a user of the memory would, so recency counts; default: now, years after the data's dates",
    )


def add_unit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--units",
        default="statement,passage",
        help="derived units besides the turn units, comma-separated (statement, passage, session, entity) or"
        " 'none' (statements and passages are made only in chats with an assistant)",
    )


def add_embedding_cpu_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--embedding-cpu",
        type=int,
        default=0,
        metavar="N",
        help="after the questions, embed up to N texts of each unit kind and of the turns' whole texts"
        " again and report the CPU seconds per kind (embedding_cpu.*); 0: off",
    )


def add_via_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--via",
        default="units",
        choices=["units", "chat"],
        help="units: ConversationIngest writes turn and derived units; chat: each user message with its"
        " answer goes through the chat path (chat store, chat.turn.completed and session.ended through"
        " extract-observation, bench.chat_path), so only what extraction keeps is recalled",
    )


def add_assistant_argument(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--assistant",
        default=default,
        help="whose turns are an assistant's: auto (named like one, or far longer turns than the other"
        " speaker's; LoCoMo's people have none), none, speaker_a, speaker_b or a speaker's name",
    )


def parse_units(text: str) -> frozenset[UnitKind]:
    names = [n.strip() for n in text.split(",") if n.strip() and n.strip() != "none"]
    return frozenset(UnitKind(n) for n in names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.locomo", description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--json", action="store_true", help="print one JSON object with the figures last")
    parser.add_argument("--embedder", default="e5", choices=["e5", "use", "static"])
    parser.add_argument("--window", type=int, default=2, help="neighbouring turns on each side in a unit")
    parser.add_argument("--state", default=".engram/bench", help="embedded PostgreSQL (embedding cache) folder")
    parser.add_argument("--limit", type=int, default=10, help="hits asked for per question (recall@10 needs 10)")
    parser.add_argument(
        "--candidates",
        type=int,
        default=CANDIDATES,
        help="BM25 and kNN candidates per list before fusion (at least twice the limit are taken)",
    )
    parser.add_argument(
        "--ranked-out",
        type=Path,
        default=None,
        help="write each question's ranked turn ids per mode as JSON Lines (id, category, gold, ranked)",
    )
    parser.add_argument(
        "--as-messages",
        nargs="?",
        const="sentences",
        default=None,
        choices=MESSAGE_MODES,
        help="send every turn as one chat message per sentence first (bench.chat_messages: chat-log-shaped"
        " data); 'interjected' also has the other person react inside long turns",
    )
    parser.add_argument(
        "--typos",
        type=float,
        default=0.0,
        help="misspell this share of the turns' words of four or more letters once (bench.typos; questions as written)",
    )
    add_via_argument(parser)
    add_embedding_cpu_argument(parser)
    parser.add_argument(
        "--mix",
        default=None,
        help="a second data set in this layout (e.g. `bench.assistant_chats --dump`): each conversation"
        " shares its tenant with one of it, whose questions are not asked (a tenant holding both kinds)",
    )
    add_unit_arguments(parser)
    add_asked_after_argument(parser)
    add_assistant_argument(parser, "auto")
    args = parser.parse_args(argv)
    repeatable_ids("locomo", 0)  # equal scores are ordered by id: the same run, the same ranking
    args.categories = CATEGORIES
    args.units = parse_units(args.units)
    from engram.runtime.logs import configure_logging

    configure_logging("WARNING")
    args.samples = json.loads(Path(args.data).read_text(encoding="utf-8"))
    args.mix_samples = json.loads(Path(args.mix).read_text(encoding="utf-8")) if args.mix else None
    if args.as_messages:
        args.samples = as_messages(args.samples, args.as_messages)
    if args.typos:
        args.samples = with_typos(args.samples, args.typos)
    args.state_dir = Path(args.state).resolve()
    figures = asyncio.run(run(args))
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    else:
        print_table(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
