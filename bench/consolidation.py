"""Consolidation, offline path: `python -m bench.consolidation [--seed N] [--sweep] [--json]`.

The generated memory of `bench.consolidation_data` (German and English: customers, projects,
preferences, decisions, with planted duplicates, ordered updates, conflicts and look-alikes)
is written through the real write path (a tenant unit of work on embedded PostgreSQL), indexed
by embed-index's code (pgvector, the e5 embedder), and asked its questions through the recall
service: the baseline. Then every observation is consolidated in the order it was recorded, as
consolidate-memory does on each `observation.created` (rules and vectors, no model), the
changes are indexed, and the questions are asked again.

Figures:

- merge precision and recall: pairs of observations the duplicate decisions united, against the
  planted duplicate pairs;
- update accuracy: planted outdated observations superseded by their newer version; wrong
  supersessions of anything else;
- conflict detection rate: planted conflict pairs linked; false links;
- stale above current (update questions): the outdated version ranked above the current one,
  or both in the top 10, before and after;
- recall@10 on questions about facts that did not change, before and after (ratio);
- the time consolidation took per observation.

`--sweep` (calibration) also prints, for every pair of one audience and type, what the rules
decide at other thresholds (pairwise duplicate precision and recall), so the defaults in
`engram.domain.consolidation.Thresholds` can be chosen on one seed and checked on another.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.consolidation_data import DataSet, Item, Question, generate
from bench.locomo import CollectingBus, index_events
from engram.adapters.embedders import build_embedder
from engram.adapters.observations import replayed
from engram.adapters.pgvector_index import PgVectorIndex
from engram.adapters.postgres import Database
from engram.adapters.unit_of_work import PgUnitOfWork
from engram.domain.consolidation import DEFAULT_THRESHOLDS, Decision, Pool, Thresholds, audience, decide
from engram.domain.events import change_events
from engram.domain.facts import Reading
from engram.domain.observation import Change, Observation, ObservationDraft, Scope, Source
from engram.domain.recall import RecallQuery
from engram.domain.scopes import Permission, Principal
from engram.services.consolidation import Consolidator, cosine_of
from engram.services.indexing import Indexer
from engram.services.recall import RecallService

USER = "seller"
SOURCE = "/engram/bench/consolidation"


def draft_of(item: Item, tenant: str) -> ObservationDraft:
    source = Source(item.source)
    return ObservationDraft(
        tenant_id=tenant,
        user_id=None if item.tenant_wide else USER,
        scope=Scope.public if item.tenant_wide else Scope.private,
        type=item.type,
        title=item.title,
        narrative=item.narrative,
        facts=item.facts,
        source=source,
        verified=item.verified,
        confidence=0.7 if source is Source.agent else 1.0,
        discovery_tokens=[],
    )


class Run:
    def __init__(self, db: Database, embedder: Any, data: DataSet, thresholds: Thresholds) -> None:
        self.db = db
        self.bus = CollectingBus()
        self.uow = PgUnitOfWork(db, self.bus)
        self.embedder = embedder
        self.index = PgVectorIndex(db, embedder.dimensions)
        self.indexer = Indexer(self.uow, self.index, embedder)
        self.recall = RecallService(self.uow, self.index, embedder, None)
        self.consolidator = Consolidator(self.uow, embedder, self.index, thresholds=thresholds)
        self.data = data
        suffix = uuid.uuid4().hex[:8]
        self.tenants = {lang: f"bench-consolidation-{lang}-{suffix}" for lang in ("en", "de")}
        self.ids: dict[str, uuid.UUID] = {}  # label -> observation id
        self.labels: dict[uuid.UUID, str] = {}

    async def write(self) -> None:
        now = datetime.now(UTC)
        for lang, tenant in self.tenants.items():
            items = [i for i in self.data.items if i.lang == lang]
            async with self.uow.tenant(tenant) as tx:
                written = await tx.observations.write_many([draft_of(i, tenant) for i in items])
            for item, w in zip(items, written, strict=True):
                self.ids[item.label] = w.observation.id
                self.labels[w.observation.id] = item.label
            async with self.db.tenant(tenant) as conn:  # recorded when the data set says
                await conn.execute(
                    "UPDATE observations o SET created_at = x.at, updated_at = x.at"
                    " FROM unnest($1::uuid[], $2::timestamptz[]) AS x(id, at) WHERE o.id = x.id",
                    [self.ids[i.label] for i in items],
                    [now - timedelta(minutes=i.age_minutes) for i in items],
                )
                rows = await conn.fetch("SELECT id, tenant_id, user_id, updated_at, created_at FROM observations")
            changes = [
                Change(
                    r["id"], r["tenant_id"], r["user_id"], replayed(r["created_at"], r["updated_at"]), r["updated_at"]
                )
                for r in rows
            ]
            await index_events(self.indexer, change_events(changes, SOURCE))

    async def observations(self, lang: str) -> dict[uuid.UUID, Observation]:
        """Every row of the language's tenant, current or not."""
        async with self.db.tenant(self.tenants[lang]) as conn:
            every = [r["id"] for r in await conn.fetch("SELECT id FROM observations")]
        async with self.uow.tenant(self.tenants[lang]) as tx:
            return {o.id: o for o in await tx.observations.get_many(every)}

    # ---- questions -------------------------------------------------------------------------------

    async def ask(self) -> list[list[set[str]]]:
        """Per question, the planted labels each of its top 10 hits stands for (a consolidated
        observation stands for every source it unites)."""
        answers = []
        everything = {lang: await self.observations(lang) for lang in self.tenants}
        for q in self.data.questions:
            principal = Principal(
                self.tenants[q.lang], USER, permissions=frozenset({Permission.read_observation.value})
            )
            result = await self.recall.search(principal, RecallQuery(text=q.text, limit=10))
            answers.append([self.stands_for(h.observation.id, everything[q.lang]) for h in result.hits])
        return answers

    def stands_for(self, obs_id: uuid.UUID, rows: dict[uuid.UUID, Observation]) -> set[str]:
        labels: set[str] = set()
        todo = [obs_id]
        while todo:
            i = todo.pop()
            if i in self.labels:
                labels.add(self.labels[i])
            row = rows.get(i)
            if row is not None:
                todo.extend(row.merged_from)
        return labels

    # ---- consolidation -------------------------------------------------------------------------------

    async def consolidate(self) -> list[float]:
        took = []
        for lang, tenant in self.tenants.items():
            rows = await self.observations(lang)
            for obs in sorted(rows.values(), key=lambda o: (o.created_at, o.id.int)):
                started = time.perf_counter()
                await self.consolidator.consolidate(tenant, obs.id, trigger="event")
                took.append((time.perf_counter() - started) * 1000)
            # what consolidation itself created (merged observations) is consolidated too
            for _ in range(3):
                fresh = [o for o in (await self.observations(lang)).values() if o.id not in rows and o.is_current]
                if not fresh:
                    break
                rows = await self.observations(lang)
                for obs in fresh:
                    await self.consolidator.consolidate(tenant, obs.id, trigger="event")
        await index_events(self.indexer, self.bus.take())
        return took


# ---- scoring ------------------------------------------------------------------------------------------


def pairs(labels: list[str]) -> set[frozenset[str]]:
    return {frozenset(p) for p in itertools.combinations(sorted(labels), 2)}


async def score(
    run: Run, before: list[list[set[str]]], after: list[list[set[str]]], took: list[float]
) -> dict[str, Any]:
    items = {i.label: i for i in run.data.items}
    rows: dict[uuid.UUID, Observation] = {}
    records: list[Any] = []
    for lang, tenant in run.tenants.items():
        rows.update(await run.observations(lang))
        async with run.db.tenant(tenant) as conn:
            records += list(await conn.fetch("SELECT * FROM consolidations WHERE undone_at IS NULL"))
    by_label = {run.labels[i]: o for i, o in rows.items() if i in run.labels}

    # merges: union of each duplicate decision's members, as planted labels
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for r in records:
        if r["decision"] != "duplicate":
            continue
        members = set().union(*(run.stands_for(m, rows) for m in r["source_ids"]))
        first, *rest = sorted(members) or [""]
        for m in rest:
            parent[find(m)] = find(first)
    clusters: dict[str, list[str]] = defaultdict(list)
    for label in list(parent):
        clusters[find(label)].append(label)
    predicted = set().union(*(pairs(c) for c in clusters.values())) if clusters else set()
    groups: dict[str, list[str]] = defaultdict(list)
    for it in items.values():
        if it.kind == "duplicate":
            groups[it.group].append(it.label)
    gold = set().union(*(pairs(g) for g in groups.values()))
    hit = predicted & gold

    def successor(label: str) -> Observation:
        o = by_label[label]
        seen = 0
        while o.superseded_by is not None and seen < 10:
            o = rows[o.superseded_by]
            seen += 1
        return o

    updates = [
        (a, b)
        for a in items.values()
        for b in items.values()
        if a.group == b.group and a.role == "old" and b.role == "new"
    ]
    updated = [
        a
        for a, b in updates
        if not by_label[a.label].is_current
        and b.label in run.stands_for(successor(a.label).id, rows) | {run.labels.get(successor(a.label).id, "")}
    ]
    wrong_updates = [
        it for it in items.values()
        if it.role != "old" and any(r["decision"] == "update" and run.ids[it.label] in r["source_ids"] for r in records)
    ]  # fmt: skip
    conflicts = defaultdict(list)
    for it in items.values():
        if it.kind == "conflict":
            conflicts[it.group].append(it.label)
    linked = [g for g in conflicts.values() if run.ids[g[1]] in by_label[g[0]].conflicts_with]
    false_links = sum(1 for label, o in by_label.items() if o.conflicts_with and items[label].kind != "conflict")

    def stale(answers: list[set[str]], q: Question) -> bool:
        ranks = {lab: i for i, labs in enumerate(answers) for lab in labs}
        old = min((ranks[s] for s in q.stale if s in ranks), default=None)
        new = min((ranks[g] for g in q.gold if g in ranks), default=None)
        if old is None:
            return False
        return new is None or old <= new or (old is not None and new is not None)

    def recall_at_10(answers: list[list[set[str]]], lang: str | None) -> float:
        found = [
            any(set(q.gold) & labs for labs in a)
            for q, a in zip(run.data.questions, answers, strict=True)
            if q.kind == "unchanged" and (lang is None or q.lang == lang)
        ]
        return sum(found) / len(found) if found else 0.0

    update_qs = [(q, b, a) for q, b, a in zip(run.data.questions, before, after, strict=True) if q.kind == "update"]
    figures: dict[str, Any] = {
        "observations": len(items),
        "gold_duplicate_pairs": len(gold),
        "merged_pairs": len(predicted),
        "merge_precision": round(len(hit) / len(predicted), 4) if predicted else 1.0,
        "merge_recall": round(len(hit) / len(gold), 4) if gold else 1.0,
        "false_merges": sorted(" / ".join(items[x].title for x in p) for p in predicted - gold)[:10],
        "updates": len(updates),
        "update_accuracy": round(len(updated) / len(updates), 4) if updates else 1.0,
        "wrong_supersessions": len(wrong_updates),
        "conflicts": len(conflicts),
        "conflict_detection": round(len(linked) / len(conflicts), 4) if conflicts else 1.0,
        "false_conflict_links": false_links,
        "stale_above_current_before": round(sum(stale(b, q) for q, b, _ in update_qs) / len(update_qs), 4),
        "stale_above_current_after": round(sum(stale(a, q) for q, _, a in update_qs) / len(update_qs), 4),
        "recall_at_10_unchanged_before": round(recall_at_10(before, None), 4),
        "recall_at_10_unchanged_after": round(recall_at_10(after, None), 4),
        "consolidation_ms_p50": round(statistics.median(took), 1),
        "consolidation_ms_p95": round(sorted(took)[int(0.95 * (len(took) - 1))], 1),
    }
    for lang in ("en", "de"):
        figures[f"recall_at_10_unchanged_before_{lang}"] = round(recall_at_10(before, lang), 4)
        figures[f"recall_at_10_unchanged_after_{lang}"] = round(recall_at_10(after, lang), 4)
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for g in groups.values():
        it = items[g[0]]
        kind = f"{it.lang} {'facts' if it.facts else 'free text'} {it.type}"
        for p in pairs(g):
            by_kind[kind][1] += 1
            by_kind[kind][0] += p in predicted
    figures["merge_recall_by_kind"] = {k: f"{v[0]}/{v[1]}" for k, v in sorted(by_kind.items())}
    before_r = figures["recall_at_10_unchanged_before"]
    figures["recall_ratio_after_before"] = (
        round(figures["recall_at_10_unchanged_after"] / before_r, 4) if before_r else None
    )
    titles = {i: o.title for i, o in rows.items()}
    figures["decisions"] = [
        f"{r['decision']}: {' + '.join(titles.get(x, '?') for x in r['source_ids'])}"
        f" -> {titles.get(r['result_id'], '')} ({r['reason']})"
        for r in records
    ]
    update_kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for a, _b in updates:
        kind = f"{a.lang} {'facts' if a.facts else 'free text'} {a.type}"
        update_kinds[kind][1] += 1
        update_kinds[kind][0] += a in updated
    figures["update_accuracy_by_kind"] = {k: f"{v[0]}/{v[1]}" for k, v in sorted(update_kinds.items())}
    figures["missed_updates"] = sorted(f"{a.title} -> {b.title}" for a, b in updates if a not in updated)[:8]
    return figures


# ---- calibration: what the rules decide for every pair at other thresholds ----------------------


async def sweep(run: Run) -> list[dict[str, Any]]:
    items = {i.label: i for i in run.data.items}
    rows: list[Observation] = []
    for lang in run.tenants:
        rows += [o for o in (await run.observations(lang)).values() if o.id in run.labels]
    vectors: dict[uuid.UUID, Any] = {}
    for tenant in run.tenants.values():
        vectors.update(await run.consolidator._vectors(tenant, [o for o in rows if o.tenant_id == tenant]))
    groups: dict[Any, list[Observation]] = defaultdict(list)
    for o in rows:
        groups[(o.tenant_id, *audience(o))].append(o)
    candidates = []
    for members in groups.values():
        readings = {o.id: Reading(o) for o in members}
        pool = Pool.of(list(readings.values()))
        for a, b in itertools.combinations(members, 2):
            ia, ib = items[run.labels[a.id]], items[run.labels[b.id]]
            gold = ia.kind == "duplicate" and ia.group == ib.group
            newer = (a if ia.role == "new" else b).id if ia.kind == "update" and ia.group == ib.group else None
            cos = cosine_of(vectors[a.id], vectors[b.id])
            candidates.append((readings[a.id], readings[b.id], cos, pool, gold, newer))
    return _grid(candidates) + _word_grid(candidates)


def _grid(candidates: list[Any]) -> list[dict[str, Any]]:
    out = []
    for dup_text in (0.90, 0.92, 0.93, 0.94, 0.95, 0.96):
        for share in (0.05, 0.1, 0.15, 0.2):
            for entity in (0.80, 0.86, 0.90):
                t = replace(DEFAULT_THRESHOLDS, duplicate_text=dup_text, specific_share=share, duplicate_entity=entity)
                tp = fp = fn = 0
                for ra, rb, cos, pool, gold, _newer in candidates:
                    merged = decide(ra, rb, cos, pool, t).decision is Decision.duplicate
                    tp += merged and gold
                    fp += merged and not gold
                    fn += gold and not merged
                out.append(
                    {
                        "duplicate_text": dup_text,
                        "specific_share": share,
                        "duplicate_entity": entity,
                        "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
                        "recall": round(tp / (tp + fn), 4) if tp + fn else 1.0,
                        "false": fp,
                    }
                )
    return out


def _word_grid(candidates: list[Any]) -> list[dict[str, Any]]:
    """The distinguishing-word rules at other cosine thresholds: pairwise duplicates and updates."""
    out = []
    for paraphrase in (0.80, 0.84, 0.86, 0.88, 0.90, 0.92):
        for reworded in (0.84, 0.86, 0.88, 0.90, 0.92):
            t = replace(DEFAULT_THRESHOLDS, paraphrase_text=paraphrase, reworded_update=reworded)
            tp = fp = fn = right = wrong = planted = 0
            for ra, rb, cos, pool, gold, newer in candidates:
                v = decide(ra, rb, cos, pool, t)
                merged = v.decision is Decision.duplicate
                tp, fp, fn = tp + (merged and gold), fp + (merged and not gold), fn + (gold and not merged)
                if newer is not None:
                    planted += 1
                    right += v.decision is Decision.update and v.current == newer
                else:
                    wrong += v.decision is Decision.update
            out.append(
                {
                    "paraphrase_text": paraphrase,
                    "reworded_update": reworded,
                    "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
                    "recall": round(tp / (tp + fn), 4) if tp + fn else 1.0,
                    "false": fp,
                    "updates_found": f"{right}/{planted}",
                    "wrong_updates": wrong,
                }
            )
    return out


# the rules as issue 18 merged them: no paraphrase rule on distinguishing words, no reworded update
ISSUE_18_RULES = replace(DEFAULT_THRESHOLDS, paraphrase_text=2.0, reworded_update=2.0)
COMPARED = (
    "merge_precision",
    "merge_recall",
    "update_accuracy",
    "wrong_supersessions",
    "conflict_detection",
    "false_conflict_links",
    "stale_above_current_after",
    "recall_at_10_unchanged_after",
)


async def evaluate(
    db: Database,
    *,
    seed: int,
    scale: int,
    embedder: str,
    calibrate: bool,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    model: Any = None,
) -> dict[str, Any]:
    """The run on a database (migrated): baseline, consolidation, the same questions again."""
    model = model or build_embedder(embedder)
    run = Run(db, model, generate(seed, scale), thresholds)
    started = time.perf_counter()
    await run.write()
    before = await run.ask()
    calibration = await sweep(run) if calibrate else None
    took = await run.consolidate()
    after = await run.ask()
    figures = await score(run, before, after, took)
    figures.update(seed=seed, embedder=model.model, total_s=round(time.perf_counter() - started, 1))
    if calibration is not None:
        figures["calibration"] = calibration
    return figures


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from engram.adapters.migrations import migrate
    from engram.development.embedded import EmbeddedPostgres

    pg = EmbeddedPostgres(args.state_dir / "postgres").start() if not args.database_url else None
    url = args.database_url or (pg.url if pg else "")
    try:
        await migrate(url)
        db = await Database.connect(url, max_size=4)
        try:
            model = build_embedder(args.embedder)
            kw = {"seed": args.seed, "scale": args.scale, "embedder": args.embedder, "model": model}
            figures = await evaluate(db, calibrate=args.sweep, **kw)
            if args.compare_rules:  # the same data set, consolidated by the rules issue 18 merged
                before = await evaluate(db, calibrate=False, thresholds=ISSUE_18_RULES, **kw)
                kept = (*COMPARED, "merge_recall_by_kind", "consolidation_ms_p50", "consolidation_ms_p95")
                figures["issue_18_rules"] = {k: before[k] for k in kept}
            return figures
        finally:
            await db.close()
    finally:
        if pg is not None:
            pg.stop()


def _ratio(now: float, before: float) -> str:
    return f"{now / before:.2f}" if before else "-"


def _shown(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def print_figures(figures: dict[str, Any]) -> None:
    from bench._common import machine, table

    f = figures
    rows = [
        [
            "merge precision / recall",
            f"{f['merge_precision']:.3f} / {f['merge_recall']:.3f}",
            f"{f['merged_pairs']} merged, {f['gold_duplicate_pairs']} planted pairs",
        ],
        [
            "update accuracy",
            f"{f['update_accuracy']:.3f}",
            f"{f['updates']} updates, {f['wrong_supersessions']} wrong supersessions",
        ],
        [
            "conflict detection",
            f"{f['conflict_detection']:.3f}",
            f"{f['conflicts']} conflicts, {f['false_conflict_links']} false links",
        ],
        [
            "stale above current",
            f"{f['stale_above_current_before']:.3f} -> {f['stale_above_current_after']:.3f}",
            "before -> after",
        ],
        [
            "recall@10 unchanged",
            f"{f['recall_at_10_unchanged_before']:.3f} -> {f['recall_at_10_unchanged_after']:.3f}",
            f"ratio {f['recall_ratio_after_before']}",
        ],
        ["consolidation per observation", f"{f['consolidation_ms_p50']} ms p50", f"{f['consolidation_ms_p95']} ms p95"],
    ]
    table(f"bench.consolidation seed {figures['seed']} ({machine()['machine']})", ["figure", "value", "note"], rows)
    for name in ("merge_recall_by_kind", "update_accuracy_by_kind", "false_merges", "missed_updates"):
        print(f"{name}: {json.dumps(figures[name], ensure_ascii=False, indent=1)}")
    if "issue_18_rules" in figures:
        before = figures["issue_18_rules"]
        table(
            "the same data set consolidated by issue 18's rules and by the distinguishing-word rules",
            ["figure", "issue 18 rules", "now", "ratio"],
            [[k, _shown(before[k]), _shown(f[k]), _ratio(f[k], before[k])] for k in COMPARED],
        )
    if "calibration" in figures:
        grid = [c for c in figures["calibration"] if "duplicate_text" in c]
        words = [c for c in figures["calibration"] if "paraphrase_text" in c]
        table(
            "distinguishing-word rules at other thresholds (pairwise)",
            ["paraphrase_text", "reworded_update", "precision", "recall", "false", "updates found", "wrong updates"],
            [[_shown(c[k]) for k in ("paraphrase_text", "reworded_update", "precision", "recall", "false")]
             + [c["updates_found"], c["wrong_updates"]] for c in words],
        )  # fmt: skip
        best = sorted(grid, key=lambda c: (c["precision"] < 0.99, -c["recall"], -c["precision"]))[:12]
        table(
            "pairwise duplicate decisions at other thresholds (best precision first)",
            ["duplicate_text", "specific_share", "duplicate_entity", "precision", "recall", "false"],
            [
                [f"{c[k]:g}" for k in ("duplicate_text", "specific_share", "duplicate_entity", "precision", "recall")]
                + [c["false"]]
                for c in best
            ],
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.consolidation", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=2, help="the data set (seed 1 chose the thresholds)")
    parser.add_argument("--scale", type=int, default=6)
    parser.add_argument("--embedder", default="e5", choices=["e5", "use", "static"])
    parser.add_argument("--sweep", action="store_true", help="also decide every pair at other thresholds")
    parser.add_argument(
        "--compare-rules",
        action="store_true",
        help="also consolidate the same data set with issue 18's rules (no distinguishing-word rules)",
    )
    parser.add_argument("--state", default=".engram/bench-consolidation", help="embedded PostgreSQL folder")
    parser.add_argument("--database-url", default=None, help="a PostgreSQL of your own instead")
    parser.add_argument("--json", action="store_true", help="print one JSON object with the figures last")
    args = parser.parse_args(argv)
    args.state_dir = Path(args.state).resolve()
    from engram.runtime.logs import configure_logging

    configure_logging("WARNING")
    figures = asyncio.run(main_async(args))
    print_figures(figures)
    if args.json:  # one JSON object, last
        print(json.dumps(figures, sort_keys=True, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
