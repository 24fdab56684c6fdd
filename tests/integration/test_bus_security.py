"""The bus authenticates every client and each may only do its work (R-16.3), against the real
nats-server the session runs with the cluster's authorization (engram.adapters.nats_auth)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import nats
import pytest
from cloudevents.http import CloudEvent
from nats.errors import TimeoutError as NatsTimeout

from engram.adapters.nats_auth import Credentials, add_producer, new_seed, read_seed, reload_server
from engram.adapters.nats_binding import to_nats_binary
from engram.adapters.nats_bus import connect
from engram.domain.events import FEEDBACK_RECORDED, new_event
from engram.domain.subjects import subject, token
from tests.conftest import eventually

CRM_TYPE = "com.example.crm.customer.created.v1"


def customer(tenant: str, **extra: Any) -> CloudEvent:
    return new_event(
        CRM_TYPE,
        {"customer_id": "42", "name": "Lehmann KG", "city": "Bremen", **extra},
        tenant_id=tenant,
        source="/crm",
        event_id=f"crm-{uuid.uuid4()}",
    )


async def publish(nc: Any, subject_: str, event: CloudEvent, timeout: float = 2.0) -> Any:
    headers, body = to_nats_binary(event)
    return await nc.jetstream().publish(subject_, body, headers=headers, timeout=timeout)


async def as_function(stack: dict[str, str], name: str) -> Any:
    seed = read_seed(Path(stack["nats_dir"]) / "credentials" / f"{name}.nk")
    return await connect(stack["nats_url"], credentials=Credentials(name, seed))


@pytest.fixture
async def producer(stack: dict[str, str], tenant: str) -> Any:
    """The CRM of `tenant`, onboarded as `engram producer-credentials` does, then connected."""
    folder = Path(stack["nats_dir"])
    credentials, _ = add_producer(folder, tenant, "crm")
    assert reload_server(folder / "nats.pid")

    async def connected() -> Any:
        try:
            return await connect(stack["nats_url"], credentials=credentials)
        except Exception:
            return None

    nc = await eventually(connected, timeout=10, interval=0.2)
    yield nc
    await nc.close()


async def dead_letters(services: Any, consumer: str, event_id: str) -> list[Any]:
    sub = await services.bus.js.pull_subscribe(f"dlq.engram.{consumer}.>", stream="ENGRAM_DLQ")
    found: list[Any] = []
    try:
        while True:
            try:
                msgs = await sub.fetch(200, timeout=1)
            except TimeoutError:  # nats-py raises its own or asyncio's, by version
                return found
            found += [m for m in msgs if m.headers.get("ce-id") == event_id]
    finally:
        await sub.unsubscribe()


async def count(services: Any, tenant: str, sql: str = "SELECT count(*) FROM observations") -> int:
    async with services.db.tenant(tenant) as conn:
        return int(await conn.fetchval(sql))


async def test_unauthenticated_and_unknown_clients_are_refused(stack: dict[str, str]) -> None:
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(stack["nats_url"], allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2)
    stranger = Credentials("memory-api", new_seed())  # a seed the server does not know
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(
            stack["nats_url"],
            nkeys_seed_str=stranger.seed,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=2,
        )


async def test_a_producer_publishes_only_for_its_own_tenant(
    services: Any, workers: Any, producer: Any, tenant: str, other_tenant: str
) -> None:
    ok = customer(tenant)
    await publish(producer, subject("ingest", tenant, None, CRM_TYPE), ok)
    await eventually(lambda: count(services, tenant))
    # another tenant's subject, and Engram's own subjects, are refused by the server
    with pytest.raises(NatsTimeout):
        await publish(producer, subject("ingest", other_tenant, None, CRM_TYPE), customer(other_tenant), 1.0)
    mark = new_event("io.engram.observation.marked.v1", {"text": "x"}, tenant_id=tenant, source="/crm", user_id="a")
    with pytest.raises(NatsTimeout):
        await publish(producer, subject("mark", tenant, "a", "marked"), mark, 1.0)
    # its own subject with another tenant's id inside: dead-lettered as forged, nothing stored there
    forged = customer(other_tenant)
    await publish(producer, subject("ingest", tenant, None, CRM_TYPE), forged)
    (letter,) = await eventually(lambda: dead_letters(services, "extract-observation", forged["id"]))
    assert "forged" in letter.headers["Engram-Dlq-Reason"]
    assert letter.subject.startswith(f"dlq.engram.extract-observation.ingest.{token(tenant)}.")
    assert await count(services, other_tenant) == 0


async def test_forged_human_feedback_is_refused_or_dead_lettered(
    services: Any, workers: Any, stack: dict[str, str], api: Any, auth: Any, tenant: str
) -> None:
    r = await api.post("/api/ai/memory", headers=auth(tenant, "alice"), json={"title": "Lehmann pays late"})
    obs_id = r.json()["observation"]["id"]
    async with services.db.tenant(tenant) as conn:
        await conn.execute("UPDATE observations SET verified = false WHERE id = $1", uuid.UUID(obs_id))
    human = new_event(
        FEEDBACK_RECORDED,
        {"kind": "confirmed", "observation_id": obs_id, "actor": "human"},
        tenant_id=tenant,
        source="/engram/chat-turn",
        user_id="alice",
    )
    chat_turn = await as_function(stack, "chat-turn")
    try:
        with pytest.raises(NatsTimeout):  # only the memory API may publish human feedback
            await publish(chat_turn, subject("feedback", tenant, "alice", "human"), human, 1.0)
        await publish(chat_turn, subject("feedback", tenant, "alice", "system"), human)  # allowed subject, forged body
    finally:
        await chat_turn.close()
    (letter,) = await eventually(lambda: dead_letters(services, "record-feedback", human["id"]))
    assert "forged" in letter.headers["Engram-Dlq-Reason"]
    await asyncio.sleep(0.3)
    assert await count(services, tenant, "SELECT count(*) FROM observations WHERE verified") == 0


async def test_each_function_reaches_only_its_own_durable(stack: dict[str, str]) -> None:
    embed = await as_function(stack, "embed-index")
    try:
        js = embed.jetstream()
        assert (await js.consumer_info("ENGRAM", "embed-index")).name == "embed-index"
        with pytest.raises(Exception):  # noqa: B017 - a timeout or permission error, whichever nats-py raises
            await js.consumer_info("ENGRAM", "record-feedback", timeout=1)
        with pytest.raises(Exception):  # noqa: B017
            await js.purge_stream("ENGRAM")
    finally:
        await embed.close()


async def test_chat_turn_publishes_approval_decisions_and_the_observations_a_chat_stored(
    stack: dict[str, str], tenant: str
) -> None:
    """Approving a memory proposal or finishing an interview stores an observation in chat-turn:
    its bus user may announce that (created, updated) and the approval decision, not a deletion."""
    from engram.domain.events import (
        CHAT_APPROVAL_DECISION,
        OBSERVATION_CREATED,
        OBSERVATION_DELETED,
        ObservationChanged,
        subject_for,
    )

    observation_id = uuid.uuid4()
    decision = new_event(
        CHAT_APPROVAL_DECISION,
        {
            "chat_id": str(uuid.uuid4()),
            "proposal_id": str(uuid.uuid4()),
            "decision": "approved",
            "reason": "team",
            "observation_type": "decision",
            "observation_id": str(observation_id),
        },
        tenant_id=tenant,
        source="/engram/chat-turn",
        user_id="alice",
        subject="chat/approval-test",
    )
    assert subject_for(decision) == subject("chat", tenant, "alice", "approval_decision")

    def change(kind: Any) -> CloudEvent:
        data = ObservationChanged.model_validate(
            {"observation_id": str(observation_id), "revision": "2026-12-02T00:00:00Z"}
        )
        return new_event(
            kind,
            data,
            tenant_id=tenant,
            source="/engram/chat-turn",
            user_id="alice",
            subject=f"observation/{observation_id}",
        )

    chat_turn = await as_function(stack, "chat-turn")
    try:
        await publish(chat_turn, subject_for(decision), decision)
        await publish(chat_turn, subject_for(change(OBSERVATION_CREATED)), change(OBSERVATION_CREATED))
        deleted = change(OBSERVATION_DELETED)
        with pytest.raises(NatsTimeout):  # deletions are memory-api's (erasure) and consolidation's
            await publish(chat_turn, subject_for(deleted), deleted, 1.0)
    finally:
        await chat_turn.close()
