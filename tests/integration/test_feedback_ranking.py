"""Feedback effects on recall (R-9.1, R-7.5), end to end through the memory API and the workers.

Feedback goes in through `POST /api/ai/memory/feedback`, record-feedback applies it on
JetStream, and the next recall through the API shows the effect.
"""

from __future__ import annotations

from typing import Any

from engram.services.auth import create_agent_key
from tests.conftest import eventually
from tests.integration.test_recall import indexed, recall_text, remember, search_ids


async def feedback(api: Any, headers: dict[str, str], kind: str, observation_id: str) -> None:
    r = await api.post(
        "/api/ai/memory/feedback", headers=headers, json={"kind": kind, "observation_id": observation_id}
    )
    assert r.status_code == 202, r.text


async def counters(api: Any, headers: dict[str, str], observation_id: str) -> dict[str, Any]:
    r = await api.get(f"/api/ai/memory/{observation_id}", headers=headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def twins(api: Any, auth: Any, tenant: str, services: Any, word: str) -> list[str]:
    """Two public observations that match a query equally well; returns their ids in today's order."""
    a = await remember(api, auth(tenant), title=f"{word} rollout checklist alpha", scope="public")
    b = await remember(api, auth(tenant), title=f"{word} rollout checklist gamma", scope="public")
    for o in (a, b):
        await eventually(lambda o=o: indexed(services, tenant, o["id"]))
    order = await search_ids(api, auth(tenant, "carol"), f"{word} rollout checklist", mode="lexical")
    assert set(order) == {a["id"], b["id"]}
    return order


async def test_rejection_hides_for_the_user_and_lowers_the_rank_for_others(
    api: Any, auth: Any, tenant: str, services: Any, workers: Any
) -> None:
    first, second = await twins(api, auth, tenant, services, "Kestrel")
    await feedback(api, auth(tenant, "alice"), "rejected", first)

    async def applied() -> bool:
        return (await counters(api, auth(tenant), first))["rejected_count"] == 1

    await eventually(applied)
    assert first not in await search_ids(api, auth(tenant, "alice"), "Kestrel rollout checklist", mode="lexical")
    assert await search_ids(api, auth(tenant, "bob"), "Kestrel rollout checklist", mode="lexical") == [second, first]


async def test_cited_and_confirmed_lift_an_observation_above_its_twin(
    api: Any, auth: Any, tenant: str, services: Any, workers: Any
) -> None:
    first, second = await twins(api, auth, tenant, services, "Osprey")
    await feedback(api, auth(tenant, "bob"), "cited", second)
    await feedback(api, auth(tenant, "dave"), "confirmed", second)

    async def applied() -> bool:
        c = await counters(api, auth(tenant), second)
        return bool(c["cited_count"] == 1 and c["confirmed_count"] == 1)

    await eventually(applied)
    assert await search_ids(api, auth(tenant, "carol"), "Osprey rollout checklist", mode="lexical") == [second, first]
    r = await api.post(
        "/api/ai/memory/search",
        headers=auth(tenant, "carol"),
        json={"query": "Osprey rollout checklist", "mode": "lexical"},
    )
    assert r.json()["hits"][0]["explanation"]["boosts"]["feedback"] > 1.0


async def test_recall_counts_as_retrieved(api: Any, auth: Any, tenant: str, services: Any, workers: Any) -> None:
    o = await remember(api, auth(tenant), title="Gannet supplier contract renewal in March", scope="public")
    await eventually(lambda: indexed(services, tenant, o["id"]))
    assert (await counters(api, auth(tenant), o["id"]))["relevance_count"] == 0
    assert o["id"] in await search_ids(api, auth(tenant), "Gannet supplier contract")
    await recall_text(api, auth(tenant), "Gannet contract renewal")

    async def retrieved_twice() -> bool:
        return (await counters(api, auth(tenant), o["id"]))["relevance_count"] == 2

    await eventually(retrieved_twice)


async def test_a_human_confirmation_removes_the_unverified_mark(
    api: Any, auth: Any, tenant: str, services: Any, workers: Any
) -> None:
    key = await create_agent_key(
        services.uow,
        tenant_id=tenant,
        name="bot",
        user_id="alice",
        teams=[],
        permissions=["create:AiObservation", "read:AiObservation", "create:AiObservationFeedback"],
    )
    o = await remember(api, {"X-Agent-Key": key.secret}, title="Alice probably prefers Puffin-class laptops")
    assert o["verified"] is False
    await eventually(lambda: indexed(services, tenant, o["id"]))
    assert "(unverified)" in await recall_text(api, auth(tenant), "Puffin laptops")
    # an agent's confirmation does not verify; a human's does
    await feedback(api, {"X-Agent-Key": key.secret}, "confirmed", o["id"])

    async def agent_applied() -> bool:
        return (await counters(api, auth(tenant), o["id"]))["confirmed_count"] == 1

    await eventually(agent_applied)
    assert (await counters(api, auth(tenant), o["id"]))["verified"] is False
    await feedback(api, auth(tenant), "confirmed", o["id"])

    async def verified() -> bool:
        return bool((await counters(api, auth(tenant), o["id"]))["verified"])

    await eventually(verified)
    assert "(unverified)" not in await recall_text(api, auth(tenant), "Puffin laptops")
