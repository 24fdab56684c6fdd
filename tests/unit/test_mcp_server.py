"""The MCP server in process (the SDK's in-memory client) on fakes: what each tool does with whom.

The transports, the real services and the bus are tested in tests/integration/test_mcp.py.
"""

from __future__ import annotations

import argparse
import os
import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from mcp import Client

from engram.domain.errors import Unauthorized
from engram.domain.events import FEEDBACK_RECORDED, OBSERVATION_MARKED
from engram.domain.scopes import Principal, PrincipalKind
from engram.operations import mcp_command
from engram.runtime.mcp_server import build_server
from engram.services.curation import CurationService
from engram.services.feedback import FeedbackService
from engram.services.memory import MemoryService
from engram.settings import Settings
from tests.fakes import FakeBus, FakeRecall, InMemoryUnitOfWork, observation

TENANT = "t-mcp"
TYPES = frozenset({"note", "fact", "preference", "event"})
EVERYTHING = frozenset(
    {"read:AiObservation", "create:AiObservation", "delete:AiObservation", "create:AiObservationFeedback"}
)
HUMAN = Principal(TENANT, "alice", PrincipalKind.human, frozenset({"sales"}), EVERYTHING)
AGENT = Principal(TENANT, "alice", PrincipalKind.agent, frozenset(), EVERYTHING)


def world(principal: Principal | None, uow: InMemoryUnitOfWork | None = None) -> tuple[Any, FakeBus, FakeRecall]:
    bus = FakeBus()
    uow = uow or InMemoryUnitOfWork(bus)
    recall = FakeRecall([observation(TENANT, "Lehmann pays late", verified=False)])
    services = SimpleNamespace(
        memory=MemoryService(uow, bus, TYPES), feedback=FeedbackService(uow, bus), curation=CurationService(uow)
    )
    services.recall = recall

    async def credentials(_: Any) -> Principal:
        if principal is None:
            raise Unauthorized("missing credentials")
        return principal

    async def current() -> Any:
        return services

    return build_server(credentials, current), bus, recall


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def test_eight_tools_described_for_models() -> None:
    server, _, _ = world(HUMAN)
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"remember", "recall", "profile", "search", "mark", "feedback", "forget", "expiring"}
    for name in ("remember", "mark"):
        assert "'private'" in (tools[name].description or "") and "'team'" in (tools[name].description or "")
    assert "agent key" in (tools["feedback"].description or "") and "(unverified)" in (
        tools["recall"].description or ""
    )
    reads = ("recall", "profile", "search", "expiring")
    assert all(tools[n].annotations and tools[n].annotations.read_only_hint for n in reads)
    assert tools["remember"].input_schema["required"] == ["title"]


async def test_an_agent_stores_unverified_gives_agent_feedback_and_cannot_mark() -> None:
    server, bus, _ = world(AGENT)
    async with Client(server) as client:
        stored = (await client.call_tool("remember", {"title": "Alice likes tea"})).structured_content
        assert stored is not None and stored["observation"]["unverified"] and stored["observation"]["source"] == "agent"
        oid = stored["observation"]["id"]
        assert not (await client.call_tool("feedback", {"kind": "confirmed", "observation_id": oid})).is_error
        marked = await client.call_tool("mark", {"text": "keep this"})
    assert marked.is_error and "forbidden" in text(marked)
    (event,) = bus.of_type(FEEDBACK_RECORDED.type)
    assert event.get_data()["actor"] == "agent"
    assert bus.of_type(OBSERVATION_MARKED.type) == []


async def test_the_profile_shows_the_users_days_in_the_zone_named() -> None:
    """Kiritimati (UTC+14) and Pago Pago (UTC-11) are 25 hours apart: "tomorrow" is another day
    to each; a zone that is no IANA name is an error naming the argument."""
    server, _, _ = world(HUMAN)
    async with Client(server) as client:
        await client.call_tool("remember", {"title": "My dentist appointment is tomorrow.", "type": "event"})
        now = datetime.now(UTC)
        for zone in ("Pacific/Kiritimati", "Pacific/Pago_Pago"):
            day = now.astimezone(ZoneInfo(zone)).date() + timedelta(days=1)
            shown = text(await client.call_tool("profile", {"time_zone": zone}))
            assert f"(day: {day.isoformat()}, {day:%A})" in shown, zone
        wrong = await client.call_tool("profile", {"time_zone": "Berlin"})
    assert wrong.is_error and "invalid argument 'time_zone'" in text(wrong) and "IANA name" in text(wrong)


async def test_the_tools_take_the_zone_the_user_named_last_in_a_chat() -> None:
    assert HUMAN.user_id is not None
    uow = InMemoryUnitOfWork(FakeBus())
    async with uow.tenant(TENANT) as tx:
        chat_id = uuid.uuid4()
        await tx.chats.create_chat(chat_id, HUMAN.user_id, "on the atoll")
        await tx.chats.set_time_zone(chat_id, "Pacific/Kiritimati")
    server, _, _ = world(HUMAN, uow)
    day = datetime.now(ZoneInfo("Pacific/Kiritimati")).date() + timedelta(days=1)
    async with Client(server) as client:
        await client.call_tool("remember", {"title": "My dentist appointment is tomorrow.", "type": "event"})
        shown = text(await client.call_tool("profile", {}))
        named = text(await client.call_tool("profile", {"time_zone": "Pacific/Pago_Pago"}))
    assert f"(day: {day.isoformat()}, {day:%A})" in shown and f"(day: {day.isoformat()}," not in named


async def test_the_profile_is_what_the_user_said_of_themselves_with_ids() -> None:
    server, _, _ = world(HUMAN)
    async with Client(server) as client:
        empty = text(await client.call_tool("profile", {}))
        stored = await client.call_tool("remember", {"title": "Alice cycles to work", "type": "preference"})
        await client.call_tool("remember", {"title": "Lehmann pays late", "type": "fact"})
        profile = text(await client.call_tool("profile", {}))
    assert empty.startswith("Nothing is known yet")
    assert stored.structured_content is not None
    assert "Alice cycles to work" in profile and stored.structured_content["observation"]["id"] in profile
    assert "Lehmann" not in profile  # a fact about a customer is no part of the user's profile


async def test_a_person_gives_human_feedback_and_only_into_their_teams() -> None:
    server, bus, recall = world(HUMAN)
    oid = str(recall.observations[0].id)
    async with Client(server) as client:
        recalled = text(await client.call_tool("recall", {"query": "Lehmann"}))
        assert "Lehmann pays late (unverified)" in recalled and oid in recalled
        other = await client.call_tool("remember", {"title": "Budget", "scope": "team", "team_ids": ["finance"]})
        mine = await client.call_tool("remember", {"title": "Pipeline", "scope": "team", "team_ids": ["sales"]})
        assert other.is_error and "forbidden" in text(other) and not mine.is_error
        stored = mine.structured_content
        assert stored is not None and stored["observation"]["verified"]
        confirm = {"kind": "confirmed", "observation_id": stored["observation"]["id"]}
        assert not (await client.call_tool("feedback", confirm)).is_error
    assert [e.get_data()["actor"] for e in bus.of_type(FEEDBACK_RECORDED.type)] == ["human"]


async def test_failures_read_as_reasons() -> None:
    server, bus, _ = world(HUMAN)
    async with Client(server) as client:
        bus.fail()  # NATS is down: an outage, retry later
        down = await client.call_tool("mark", {"text": "keep this"})
        bus.heal()
        bad = await client.call_tool("search", {"query": "\x07bell"})
        assert down.is_error and "a dependency is unavailable; retry in" in text(down)
        assert bad.is_error and "invalid argument 'query'" in text(bad) and "U+0007" in text(bad)
    nobody, _, _ = world(None)
    async with Client(nobody) as client:
        refused = await client.call_tool("recall", {"query": "anything"})
    assert refused.is_error and "not authenticated: missing credentials" in text(refused)


def _args(**given: Any) -> argparse.Namespace:
    defaults = {"agent_key": None, "token": None, "tenant": None, "user": None, "team": None, "permission": None}
    return argparse.Namespace(**{**defaults, **given})


def test_engram_mcp_needs_credentials() -> None:
    settings = Settings(engram_jwt_secret=None)
    with pytest.raises(SystemExit, match="--agent-key"):
        mcp_command.credentials(_args(), settings)
    with pytest.raises(SystemExit, match="ENGRAM_JWT_SECRET"):
        mcp_command.credentials(_args(tenant="t", user="u"), settings)
    assert callable(mcp_command.credentials(_args(agent_key="egk_x"), settings))
    assert callable(mcp_command.credentials(_args(token="a.b.c"), settings))


def test_engram_mcp_uses_the_local_stacks_bus_user(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from engram.settings import get_settings

    seed = tmp_path / "nats" / "credentials" / "memory-mcp.nk"
    seed.parent.mkdir(parents=True)
    seed.write_text("SU...")
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ENGRAM_NATS_USER", "")  # recorded, so the teardown restores what the command sets
    monkeypatch.setenv("ENGRAM_NATS_SEED_FILE", "")
    get_settings.cache_clear()
    try:
        mcp_command._use_local_bus_user()
        assert (get_settings().engram_nats_user, os.environ["ENGRAM_NATS_SEED_FILE"]) == ("memory-mcp", str(seed))
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
