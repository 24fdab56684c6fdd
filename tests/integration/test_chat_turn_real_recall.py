"""chat-turn with the real recall service (R-7.2, R-7.4), once `Services.recall` exists.

The recall service is built on another branch; until both are merged these tests skip (the
fixture says why). With it they repeat the fake-recall tests that matter most against the
real index: memories written through memory-api, indexed by embed-index, recalled per stream.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from engram.domain.recall import RecallQuery
from engram.domain.scopes import Principal
from tests.anthropic_server import AnthropicServer, text
from tests.conftest import ALL_PERMISSIONS, eventually, zone_where

SONNET = "claude-sonnet-4-6"
SENSITIVE = "view:SensitiveAiMemory"


@pytest.fixture
def real_recall(services: Any) -> Any:
    if services.recall is None:
        pytest.skip("needs the recall service (Services.recall), which the retrieval branch provides")
    return services.recall


async def remember(api: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> None:
    r = await api.post("/api/ai/memory", json=body, headers=headers)
    assert r.status_code in (200, 201), r.text


def spy_on_embedding(recall: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[list[list[str]], list[str]]:
    """What the recall service starts embedding ahead (per call) and what its embedder embeds."""
    inner = recall.embedder
    started_ahead: list[list[str]] = []
    asked: list[str] = []

    async def embed_query(text_: str) -> Any:
        asked.append(text_)
        return await inner.embed_query(text_)

    monkeypatch.setattr(recall, "embedder", SimpleNamespace(embed_query=embed_query, dimensions=inner.dimensions))
    embed_ahead = recall.embed_ahead
    monkeypatch.setattr(recall, "embed_ahead", lambda texts: started_ahead.append(texts) or embed_ahead(texts))
    return started_ahead, asked


async def indexed(recall: Any, principal: Principal, text_: str, titles: set[str]) -> bool:
    result = await recall.search(principal, RecallQuery(text=text_, limit=20, want_sensitive=True))
    return titles <= {h.observation.title for h in result.hits}


async def remember_indexed(
    api: httpx.AsyncClient,
    headers: dict[str, str],
    recall: Any,
    principal: Principal,
    query: str,
    *memories: dict[str, Any],
) -> None:
    """Remember each memory through memory-api, then wait until `query` recalls all of them."""
    for memory in memories:
        await remember(api, headers, **memory)
    titles = {m["title"] for m in memories}
    await eventually(lambda: indexed(recall, principal, query, titles), 30)


BILLING_DECISION = "Müller Maschinenbau is billed quarterly from January"


async def billing_decision_indexed(api: httpx.AsyncClient, headers: dict[str, str], recall: Any, tenant: str) -> str:
    """A public decision about Müller's billing, remembered and indexed; returns its title."""
    principal = Principal(tenant, "alice", permissions=frozenset(ALL_PERMISSIONS))
    memory = {"type": "decision", "title": BILLING_DECISION, "scope": "public"}
    await remember_indexed(api, headers, recall, principal, "Müller Maschinenbau billing", memory)
    return BILLING_DECISION


@pytest.mark.parametrize("permissions", [[], [SENSITIVE]], ids=["without-permission", "with-permission"])
async def test_real_recall_never_puts_a_sensitive_memory_into_a_standard_prompt(
    services: Any,
    workers: Any,
    real_recall: Any,
    llm: Any,
    api: httpx.AsyncClient,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    token: Any,
    tenant: str,
    permissions: list[str],
) -> None:
    hr = {"Authorization": f"Bearer {token(tenant, 'hr', permissions=[*ALL_PERMISSIONS, SENSITIVE])}"}
    sensitive = "Bob Schneider's salary is 95000 EUR"
    public = "Bob Schneider leads the sales team in Stuttgart"
    hr_principal = Principal(tenant, "hr", permissions=frozenset([*ALL_PERMISSIONS, SENSITIVE]))
    await remember_indexed(
        api,
        hr,
        real_recall,
        hr_principal,
        "Bob Schneider salary sales",
        {"type": "fact", "title": sensitive, "scope": "sensitive"},
        {"type": "fact", "title": public, "scope": "public"},
    )

    anthropic.script(text("Bob leads sales."), model=SONNET)
    alice = {"Authorization": f"Bearer {token(tenant, 'alice', permissions=[*ALL_PERMISSIONS, *permissions])}"}
    r = await chat_api.post(
        f"/api/ai/chats/{uuid.uuid4()}/turns",
        json={"message": "What do you know about Bob Schneider, his team and his salary?"},
        headers=alice,
    )
    assert r.status_code == 200, r.text
    prompt = next(q for q in anthropic.requests if q.model == SONNET).prompt_text()
    assert "leads the sales team" in prompt
    assert "95000" not in prompt
    trace = r.json()["memory_trace"]
    assert all(o["stream"] for o in trace["observations"])
    assert sensitive not in {o["title"] for o in trace["observations"]}


async def test_real_recall_fills_the_streams_and_a_turn_answers_offline_from_it(
    workers: Any,
    real_recall: Any,
    api: httpx.AsyncClient,
    chat_api: httpx.AsyncClient,
    auth: Any,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    headers = auth(tenant)
    title = await billing_decision_indexed(api, headers, real_recall, tenant)
    message = "What is the billing model of Müller Maschinenbau?"
    # the message is embedded once, ahead (while the turn is prepared), and every stream uses it
    started_ahead, asked = spy_on_embedding(real_recall, monkeypatch)
    r = await chat_api.post(f"/api/ai/chats/{uuid.uuid4()}/turns", json={"message": message}, headers=headers)
    assert r.status_code == 200, r.text
    assert started_ahead == [[message]] and asked.count(message) == 1, (started_ahead, asked)
    body = r.json()
    assert body["offline"] is True and title in body["answer"]
    hits = body["memory_trace"]["observations"]
    assert any(h["title"] == title and h["stream"] == "facts" for h in hits)


async def test_the_risk_template_expands_bm25_and_the_turn_embeds_the_message_once(
    services: Any,
    workers: Any,
    real_recall: Any,
    api: httpx.AsyncClient,
    chat_api: httpx.AsyncClient,
    auth: Any,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    headers = auth(tenant)
    # found by the risk stream's expansion words only: the message shares no word with it
    title = "Fehler im Mahnlauf: Risiko doppelter Zahlungen"
    principal = Principal(tenant, "alice", permissions=frozenset(ALL_PERMISSIONS))
    memory = {"type": "mistake", "title": title, "scope": "public"}
    await remember_indexed(api, headers, real_recall, principal, "Mahnlauf Fehler", memory)
    message = "Should we move Müller Maschinenbau to quarterly billing?"  # DECISION: values, facts, risk
    risk = services.chat.engine.streams["risk"]
    assert risk.query(message) != message and risk.vector_query(message) == message
    started_ahead, asked = spy_on_embedding(real_recall, monkeypatch)
    searched: list[tuple[Any, Any]] = []
    search_many = real_recall.search_many

    async def recording(principal_: Any, queries: Any, **kwargs: Any) -> Any:
        results = await search_many(principal_, queries, **kwargs)
        searched.extend(zip(queries, results, strict=True))
        return results

    monkeypatch.setattr(real_recall, "search_many", recording)
    r = await chat_api.post(f"/api/ai/chats/{uuid.uuid4()}/turns", json={"message": message}, headers=headers)
    assert r.status_code == 200, r.text
    # one vector for all three streams, made ahead
    assert started_ahead == [[message]] and asked == [message], (started_ahead, asked)
    (query, result), *_ = [(q, res) for q, res in searched if q.stream_origin == "risk"]
    assert query.text == risk.query(message) and query.vector_text == message
    (hit,) = [h for h in result.hits if h.observation.title == title]
    assert hit.lexical_rank == 1  # BM25 found it through the template's words
    hits = r.json()["memory_trace"]["observations"]
    assert any(h["title"] == title and h["stream"] == "risk" for h in hits), hits


async def test_what_a_user_rejected_reaches_neither_the_stable_block_nor_recall_in_their_prompt(
    services: Any,
    workers: Any,
    real_recall: Any,
    llm: Any,
    api: httpx.AsyncClient,
    chat_api: httpx.AsyncClient,
    anthropic: AnthropicServer,
    token: Any,
    tenant: str,
) -> None:
    alice = {"Authorization": f"Bearer {token(tenant, 'alice', permissions=ALL_PERMISSIONS)}"}
    bob = {"Authorization": f"Bearer {token(tenant, 'bob', permissions=ALL_PERMISSIONS)}"}
    kept_pref, rejected_pref = "Alice wants invoices as PDF by email", "Alice wants invoices by fax"
    kept_fact, rejected_fact = "Kestrel Logistik pays within 30 days", "Kestrel Logistik pays in advance"
    await remember(api, alice, type="preference", title=kept_pref, scope="private")
    await remember(api, alice, type="preference", title=rejected_pref, scope="private")
    principal = Principal(tenant, "alice", permissions=frozenset(ALL_PERMISSIONS))
    await remember_indexed(
        api,
        alice,
        real_recall,
        principal,
        "Kestrel Logistik pays",
        {"type": "fact", "title": kept_fact, "scope": "public"},
        {"type": "fact", "title": rejected_fact, "scope": "public"},
    )
    async with services.db.tenant(tenant) as conn:
        await conn.execute(
            "INSERT INTO observation_feedback (tenant_id, observation_id, user_id, kind)"
            " SELECT $1, id, 'alice', 'rejected' FROM observations WHERE title = ANY($2::text[])",
            tenant,
            [rejected_pref, rejected_fact],
        )

    async def prompt_of(headers: dict[str, str]) -> str:
        anthropic.requests.clear()
        anthropic.script(text("Noted."), model=SONNET)
        r = await chat_api.post(
            f"/api/ai/chats/{uuid.uuid4()}/turns",
            json={"message": "What do you know about how Kestrel Logistik pays its invoices?"},
            headers=headers,
        )
        assert r.status_code == 200, r.text
        return str(next(q for q in anthropic.requests if q.model == SONNET).prompt_text())

    mine = await prompt_of(alice)
    assert kept_pref in mine and kept_fact in mine  # the stable block and recall are there
    assert rejected_pref not in mine and rejected_fact not in mine
    assert rejected_fact in await prompt_of(bob)  # bob did not reject it


async def test_with_real_recall_a_failing_stream_still_leaves_the_others_and_an_answer(
    services: Any,
    workers: Any,
    real_recall: Any,
    api: httpx.AsyncClient,
    chat_api: httpx.AsyncClient,
    auth: Any,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.integration.test_chat_turn import events

    headers = auth(tenant)
    title = await billing_decision_indexed(api, headers, real_recall, tenant)
    message = "Should we move Müller Maschinenbau to quarterly billing?"  # DECISION: values, facts, risk
    risk_text = services.chat.engine.streams["risk"].query(message)
    index = real_recall.index
    lexical_in = index.lexical_in

    async def failing_for_risk(conn: Any, visibility: Any, text_: str, *args: Any, **kwargs: Any) -> Any:
        if text_ == risk_text:
            raise RuntimeError("canceling statement due to statement timeout")
        return await lexical_in(conn, visibility, text_, *args, **kwargs)

    monkeypatch.setattr(index, "lexical_in", failing_for_risk)
    r = await chat_api.post(f"/api/ai/chats/{uuid.uuid4()}/turns", json={"message": message}, headers=headers)
    assert r.status_code == 200, r.text
    hits = r.json()["memory_trace"]["observations"]
    assert any(h["title"] == title and h["stream"] in ("facts", "values") for h in hits), hits
    assert not any(h["stream"] == "risk" for h in hits)
    failed = [e for e in await events(services, tenant, "chat.error") if e["stage"] == "recall:risk"]
    assert failed and "statement timeout" in failed[0]["message"]
    assert not [
        e for e in await events(services, tenant, "chat.error") if e["stage"] in ("recall:facts", "recall:values")
    ]


async def test_a_chat_turn_asking_about_yesterday_gets_what_was_told_yesterday_in_the_users_zone(
    workers: Any,
    real_recall: Any,
    api: httpx.AsyncClient,
    chat_api: httpx.AsyncClient,
    auth: Any,
    tenant: str,
) -> None:
    """A chat stream's query is the message, so a turn that names a day gets the day's own
    search (`recall_plan.with_parts`) in the zone the turn names: a fact said twelve hours ago
    is yesterday where it is morning now, and reaches the streams over six of today's that share
    the message's words; where it is evening it is today's, and does not."""
    headers = auth(tenant)
    principal = Principal(tenant, "alice", permissions=frozenset(ALL_PERMISSIONS))
    now = datetime.now(UTC)

    told = "Our neighbour's cat is called Pixel"
    memories = [{"type": "fact", "title": told, "said_at": (now - timedelta(hours=12)).isoformat()}]
    memories += [{"type": "fact", "title": f"Tell me again about idea {n}, did I tell you?"} for n in range(6)]
    await remember_indexed(api, headers, real_recall, principal, "neighbour cat Pixel idea tell", *memories)
    message = "What did I tell you yesterday?"

    async def streamed(zone: str) -> list[str]:
        body = {"message": message, "time_zone": zone}
        r = await chat_api.post(f"/api/ai/chats/{uuid.uuid4()}/turns", json=body, headers=headers)
        assert r.status_code == 200, r.text
        return [o["title"] for o in r.json()["memory_trace"]["observations"] if o["stream"] == "facts"]

    morning, evening = zone_where(now, range(1, 11)), zone_where(now, range(13, 23))
    assert told in (await streamed(morning))[:2], morning
    assert told not in (await streamed(evening))[:2], evening
