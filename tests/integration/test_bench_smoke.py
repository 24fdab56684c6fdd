"""The retrieval benches on the test database, a few questions each: they still run end to end
(write path, outbox, embed-index's indexer, recall) and report what they promise."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from bench import consolidation, locomo, xquad
from bench.assistant_chats import by_form, stale_first
from bench.chatgen import CATEGORIES, generate

XQUAD = Path(xquad.DEFAULT_DATA)


def chat_args(ranked_out: Path, units: str, via: str = "units", **more: Any) -> argparse.Namespace:
    """`bench.assistant_chats`' arguments for `locomo.evaluate`, on the static embedder."""
    return argparse.Namespace(
        embedder="static",
        window=2,
        limit=10,
        candidates=10,
        ranked_out=ranked_out,
        categories=CATEGORIES,
        units=locomo.parse_units(units),
        assistant="auto",  # found by itself: the assistant's turns are named so and run long
        via=via,
        **more,
    )


@pytest.mark.skipif(not (XQUAD / "xquad.de.json").exists(), reason="XQuAD is read from ../shared/bench/xquad")
async def test_xquad_reports_three_modes_in_four_directions(services: Any, tmp_path: Path) -> None:
    args = argparse.Namespace(embedder="static", limit=3, data_dir=XQUAD, ranked_out=tmp_path / "ranked.jsonl")
    figures = await xquad.evaluate(services.db, args)
    assert figures["questions"] == 3 and figures["paragraphs"] == 240
    for q, p in xquad.DIRECTIONS:
        for mode in xquad.MODES:
            assert 0.0 <= figures[f"{q}-{p}.{mode}.recall@1"] <= figures[f"{q}-{p}.{mode}.recall@10"] <= 1.0
    rows = [json.loads(line) for line in args.ranked_out.read_text().splitlines()]
    assert len(rows) == 3 * 4 and set(rows[0]["ranked"]) == set(xquad.MODES)


async def test_assistant_chats_report_every_category_and_rankings(services: Any, tmp_path: Path) -> None:
    samples = generate(seed=3, conversations=1)
    ranked = tmp_path / "ranked.jsonl"
    args = chat_args(ranked, "statement,session,entity")
    figures = await locomo.evaluate(services.db, samples, args)
    assert figures["questions"] == sum(len(s["qa"]) for s in samples)
    assert figures["conversations_with_assistant"] == len(samples)
    # the derived units' embedding work, against the turn units' in the same run
    assert figures["embedded.statement.texts"] > 0 and figures["embedded.session.texts"] == 16  # 8 sessions each
    assert 1.0 < figures["embedded.ratio_to_turn_units"] < 1.5
    assert all(f"hybrid.cat{c}.recall@10" in figures for c in CATEGORIES)
    rows = [json.loads(line) for line in ranked.read_text().splitlines()]
    assert {r["category"] for r in rows} == set(CATEGORIES)
    assert set(rows[0]["ranked"]) == {"lexical", "vector", "hybrid", "ts_rank"} and rows[0]["gold"]
    assert set(stale_first(samples, rows)) == {"lexical", "vector", "hybrid", "ts_rank"}
    assert {"hybrid.asked.count", "hybrid.stated.count", "vector.asked.recall@5"} <= set(by_form(samples, rows))


async def test_assistant_chats_with_the_answers_passages(services: Any, tmp_path: Path) -> None:
    """`--units statement,passage` (the default): the answers' passages are written, embedded and
    found as their turns (the advice questions ask for them); `--embedding-cpu` times each kind."""
    samples = generate(seed=3, conversations=1, languages=("en",))
    args = chat_args(tmp_path / "ranked.jsonl", "statement,passage", embedding_cpu=4)
    figures = await locomo.evaluate(services.db, samples, args)
    assert figures["embedded.passage.texts"] > 20 and figures["embedded.ratio_to_turn_units"] > 2.0
    # against each turn's whole text embedded once: the openings and passages hold it about once more
    assert 1.0 < figures["embedded.ratio_to_turn_text"] < figures["embedded.ratio_to_turn_units"]
    cpu = {k: v for k, v in figures.items() if k.startswith("embedding_cpu.")}
    assert {"embedding_cpu.passage_s", "embedding_cpu.turn_s", "embedding_cpu.turn_text_s"} <= set(cpu)
    assert cpu["embedding_cpu.ratio_to_turn_units"] > 1.0 and cpu["embedding_cpu.sample"] == 4
    rows = [json.loads(line) for line in args.ranked_out.read_text().splitlines()]
    advice = [r for r in rows if r["category"] == 7]
    assert advice and all(r["ranked"]["hybrid"] for r in advice)
    for r in advice:  # an answer's passages come back as its turn, once
        hybrid = r["ranked"]["hybrid"]
        assert len(set(hybrid)) == len(hybrid) and all(t.startswith("D") for t in hybrid)


async def test_a_chat_replayed_through_extraction_is_scored_by_the_turns_extracted_from(
    services: Any, tmp_path: Path
) -> None:
    """`--via chat`: the chat store, chat.turn.completed and session.ended through extract-observation
    (offline extractor); what recall finds maps back to the user turn it was extracted from."""
    samples = generate(seed=3, conversations=1)
    ranked = tmp_path / "ranked.jsonl"
    args = chat_args(ranked, "statement", via="chat")
    figures = await locomo.evaluate(services.db, samples, args)
    assert (figures["via"], figures["chat.extractor"], figures["chat.refused_events"]) == ("chat", "offline", 0)
    assert figures["questions"] == sum(len(s["qa"]) for s in samples)
    said = [
        t
        for s in samples
        for k, v in s["conversation"].items()
        if k.startswith("session_") and isinstance(v, list)
        for t in v
    ]
    # a summary per session, a unit per turn (ENGRAM_CHAT_UNITS), and what the extractor kept
    assert figures["stored.chat.context"] >= 8 + len(said)
    user_turns = {t["dia_id"] for t in said if t["speaker"] != samples[0]["conversation"]["speaker_b"]}
    rows = [json.loads(line) for line in ranked.read_text().splitlines()]
    hits = {turn for r in rows for hit in r["ranked"]["hybrid"] for turn in hit.split()}
    assert hits <= {t["dia_id"] for t in said} | {""} and hits & user_turns
    assert all(r["ranked"]["ts_rank"] == [] for r in rows)
    # what a chat turn sends: the stable memory block's turns besides the hits, never less than the hits
    assert figures["context.stable_chars"] >= 0 and figures["context.stable_turns"] >= 0
    assert figures["context.recall"] >= figures["hybrid.recall@10"] - 1e-9
    assert all(f"context.cat{c}.recall" in figures for c in {r["category"] for r in rows})
    # ... and with what the turn's streams send instead of the hits: some of the evidence, never
    # more than every gold turn
    assert 0.0 < figures["context.turn"] <= 1.0
    assert all(f"context.cat{c}.turn" in figures for c in {r["category"] for r in rows})


async def test_consolidation_bench_reports_its_figures(services: Any) -> None:
    figures = await consolidation.evaluate(services.db, seed=5, scale=1, embedder="static", calibrate=True)
    for name in ("merge_precision", "merge_recall", "update_accuracy", "conflict_detection"):
        assert 0.0 <= figures[name] <= 1.0
    assert figures["stale_above_current_after"] <= figures["stale_above_current_before"]
    # what the k=v facts decide does not depend on the embedder: every planted conflict is linked
    assert figures["conflict_detection"] == 1.0 and figures["false_conflict_links"] == 0
    by_facts = [v.split("/") for k, v in figures["update_accuracy_by_kind"].items() if "facts" in k]
    assert by_facts and all(done == planted for done, planted in by_facts)
    assert figures["calibration"] and {"precision", "recall"} <= set(figures["calibration"][0])


async def test_a_tenant_holding_a_second_conversation_counts_only_the_asked_ones_turns(
    services: Any, tmp_path: Path
) -> None:
    """`--mix`: each conversation shares its tenant with one of a second data set, not asked
    about; that conversation's turns (whose ids repeat, "D1:3") never count as the asked one's."""
    samples = generate(seed=3, conversations=1, languages=("en",))
    other = generate(seed=4, conversations=1, languages=("en",))
    args = chat_args(tmp_path / "ranked.jsonl", "statement", mix_samples=other)
    figures = await locomo.evaluate(services.db, samples, args)
    assert figures["mixed_with"] == 1 and figures["questions"] == len(samples[0]["qa"])
    rows = [json.loads(line) for line in args.ranked_out.read_text().splitlines()]
    ranked = [t for r in rows for t in r["ranked"]["hybrid"]]
    theirs = [t for t in ranked if t.startswith(f"mix-{other[0]['sample_id']}#")]
    assert theirs and len(theirs) < len(ranked)  # both conversations answer, told apart
    assert all(r["ranked"]["ts_rank"] == [] for r in rows)  # the reference reads no conversation ids
