"""Memory units on PostgreSQL: a user's fact, one sentence among long assistant answers, is
recalled by its statement unit and mapped back to its turn; a question naming two facts finds both."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from engram.domain.conversation import ConversationSession, Turn, turn_id_of
from engram.domain.memory_units import PASSAGE_TYPE, UnitKind
from engram.domain.recall import RecallQuery
from engram.domain.scopes import Permission, Principal
from engram.services.conversations import ConversationIngest

READ = frozenset({Permission.read_observation.value})
DAY = datetime(2025, 3, 3, 10, 0, tzinfo=UTC)
TOPICS = ("garden", "budget", "travel", "kitchen", "running", "reading")


def prose(topic: str, n: int) -> str:
    """An assistant's answer of ~250 words on one topic, each sentence different."""
    return " ".join(
        f"For your {topic} plan, step {i} is to review the {topic} notes, compare options and write down "
        f"what changed since week {i + n}, because small {topic} habits add up over time."
        for i in range(12)
    )


def sessions() -> list[ConversationSession]:
    out = []
    for s, topic in enumerate(TOPICS):
        turns = []
        for e in range(3):
            text = f"Can you give me more ideas about my {topic} plan for this month?"
            if (s, e) == (2, 1):
                text = f"By the way, my brother Jonas works as a pilot for an airline. {text}"
            if (s, e) == (4, 2):
                text = f"{text} Also, I'm allergic to shellfish, so please keep that in mind."
            turns.append(Turn(f"D{s + 1}:{2 * e + 1}", "User", text))
            turns.append(Turn(f"D{s + 1}:{2 * e + 2}", "Assistant", prose(topic, s + e)))
        out.append(ConversationSession(f"session_{s + 1}", DAY + timedelta(days=7 * s), turns))
    return out


async def recall_turns(services: Any, tenant: str, question: str) -> tuple[list[str], list[Any]]:
    principal = Principal(tenant_id=tenant, user_id="alice", permissions=READ)
    result = await services.recall.search(principal, RecallQuery(question, limit=10))
    return [turn_id_of(h.observation.provenance.source_event_id) or "" for h in result.hits], result.hits


async def test_a_fact_buried_in_a_user_turn_is_recalled_by_its_unit(tenant: str, services: Any) -> None:
    ingest = ConversationIngest(services.uow)
    written = await ingest.ingest(
        tenant_id=tenant,
        user_id="alice",
        conversation_id="chat-1",
        sessions=sessions(),
        assistants=frozenset({"Assistant"}),
    )
    statements = [w.observation for w in written if (w.observation.key or "").startswith("unit:statement:")]
    assert any("allergic to shellfish" in o.title for o in statements)
    await services.indexing.reindex(tenant)

    turns, hits = await recall_turns(services, tenant, "Which seafood am I allergic to?")
    assert "D5:5" in turns[:3]
    assert len(turns) == len(set(turns))  # one hit per turn: its units are mapped back and merged
    found = hits[turns.index("D5:5")]
    assert found.observation.key == "turn:chat-1:D5:5"  # the turn stands for its units ...
    assert found.boosts["unit"] > 1.0  # ... at the score of its statement unit, which beat the turn's own

    turns, hits = await recall_turns(services, tenant, "What does my brother do, and am I allergic to anything?")
    assert {"D3:3", "D5:5"} <= set(turns[:3])
    assert any("parts" in h.boosts for h in hits)

    # the same conversation without derived units: only turn units are indexed
    plain = f"{tenant}-plain"
    await ingest.ingest(
        tenant_id=plain,
        user_id="alice",
        conversation_id="chat-1",
        sessions=sessions(),
        kinds=frozenset(),
    )
    await services.indexing.reindex(plain)
    async with services.uow.tenant(plain) as tx:
        keys = [
            o.key or ""
            for o in await tx.observations.get_many([uuid.UUID(i) for i in await tx.observations.live_ids()])
        ]
    assert keys and all(k.startswith("turn:") for k in keys)
    assert UnitKind.statement.value not in " ".join(keys)
    await services.recall.drain()


async def test_the_stored_vectors_of_statement_units_are_read_in_the_recall_transaction(
    tenant: str, services: Any
) -> None:
    written = await ConversationIngest(services.uow).ingest(
        tenant_id=tenant,
        user_id="alice",
        conversation_id="chat-1",
        sessions=sessions(),
        assistants=frozenset({"Assistant"}),
    )
    statements = [str(w.observation.id) for w in written if (w.observation.key or "").startswith("unit:statement:")]
    await services.indexing.reindex(tenant)
    missing = str(uuid.uuid4())
    async with services.uow.tenant(tenant) as tx:
        vectors = await services.index.within(tx).embeddings([*statements, missing])
    assert set(vectors) == set(statements) and missing not in vectors
    dims = services.index.dimensions
    assert all(v.shape == (dims,) and float(v @ v) > 0 for v in vectors.values())
    async with services.uow.tenant(f"{tenant}-other") as tx:  # another tenant reads none of them
        assert await services.index.within(tx).embeddings(statements) == {}
    await services.recall.drain()


async def test_an_answers_passages_are_searched_only_when_the_question_asks_the_assistant(
    tenant: str, services: Any
) -> None:
    """A sentence deep in a long answer (past the opening its turn unit is embedded by) is found
    through its passage when the user asks what the assistant said; a question about the user's
    own facts or in neither person leaves every passage out of its candidate lists."""
    chat = sessions()
    tip = "One trick for basil: keep the stems in a glass of water on the counter, never in the fridge."
    answer = chat[5].turns[3]
    chat[5].turns[3] = Turn(answer.turn_id, answer.speaker, f"{prose('reading', 9)} {tip} {prose('reading', 3)}")
    written = await ConversationIngest(services.uow).ingest(
        tenant_id=tenant, user_id="alice", conversation_id="chat-1", sessions=chat, assistants=frozenset({"Assistant"})
    )
    passages = [w.observation for w in written if w.observation.type == PASSAGE_TYPE]
    assert any(tip in o.title for o in passages)  # passages are written by default, typed as such
    assert all((o.key or "").startswith("unit:passage:") for o in passages)
    await services.indexing.reindex(tenant)
    principal = Principal(tenant_id=tenant, user_id="alice", permissions=READ)

    turns, hits = await recall_turns(services, tenant, "What was your trick for keeping basil fresh?")
    assert turns[0] == answer.turn_id
    assert hits[0].boosts["unit"] > 1.0  # its passage outscored the answer's own turn unit

    for question in ("Which seafood am I allergic to?", "How do you keep basil in a glass of water?"):
        for mode in ("hybrid", "lexical", "vector"):
            result = await services.recall.search(principal, RecallQuery(question, limit=20, mode=mode))
            assert result.hits and all(h.observation.type != PASSAGE_TYPE for h in result.hits), question
            # no answer stands in for a better passage of it (a user's turn may, for its statement)
            answers = [h for h in result.hits if h.observation.title.startswith("Assistant:")]
            assert answers and all("unit" not in h.boosts for h in answers), question
    # a query that names the passages' type gets them, asked or not
    named = await services.recall.search(
        principal, RecallQuery("basil stems glass of water", limit=5, mode="lexical", types=[PASSAGE_TYPE])
    )
    assert named.hits and all(h.observation.type == PASSAGE_TYPE for h in named.hits)
    await services.recall.drain()
