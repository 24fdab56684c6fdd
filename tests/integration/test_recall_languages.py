"""Hybrid recall across languages: BM25 matches between a German query and English memories
(names, numbers) do not count in the fusion; within one language nothing changes."""

from __future__ import annotations

from typing import Any

from engram.adapters.observations import PgObservationStore
from engram.domain.observation import ObservationDraft
from engram.domain.recall import RecallQuery
from engram.domain.scopes import Permission, Principal

READ = frozenset({Permission.read_observation.value})


async def test_bm25_evidence_counts_only_within_the_query_language(tenant: str, services: Any, workers: Any) -> None:
    english = "The Zephyr GmbH orders new office chairs for its staff every March"
    german = "Die Zephyr GmbH bestellt jedes Jahr im März neue Bürostühle"
    async with services.db.tenant(tenant) as conn:
        await PgObservationStore(conn).write_many(
            [ObservationDraft(tenant_id=tenant, user_id="alice", title=t) for t in (english, german)]
        )
    await services.indexing.reindex(tenant)
    principal = Principal(tenant_id=tenant, user_id="alice", permissions=READ)
    asked = await services.recall.search(principal, RecallQuery("Wann bestellt die Zephyr GmbH Stühle?", limit=5))
    by_title = {h.observation.title: h for h in asked.hits}
    assert by_title[english].lexical_rank is not None  # BM25 found it by the name
    assert by_title[english].boosts["cross_language"] < 1.0  # ... and the fusion did not count that
    assert "cross_language" not in by_title[german].boosts
    assert asked.hits[0].observation.title == german
    same = await services.recall.search(principal, RecallQuery("When does Zephyr GmbH order chairs?", limit=5))
    assert all("cross_language" not in h.boosts for h in same.hits if h.observation.title == english)
    names = await services.recall.search(principal, RecallQuery("Zephyr GmbH", limit=5))  # no language: plain RRF
    assert all("cross_language" not in h.boosts for h in names.hits)
    lexical = await services.recall.search(principal, RecallQuery("Wann bestellt die Zephyr GmbH?", mode="lexical"))
    assert all("cross_language" not in h.boosts for h in lexical.hits)  # single lists stay as they are
    await services.recall.drain()
