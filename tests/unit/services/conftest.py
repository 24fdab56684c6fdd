"""Services on the in-memory fakes: no PostgreSQL, no NATS, no model (offline settings)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import FakeBus, InMemoryUnitOfWork


@pytest.fixture
def settings() -> Any:
    """The process settings without an Anthropic key: the gateway has no provider (offline)."""
    from engram.settings import get_settings

    return get_settings().model_copy(update={"anthropic_api_key": None})


@pytest.fixture
def bus() -> FakeBus:
    return FakeBus()


@pytest.fixture
def uow(bus: FakeBus) -> InMemoryUnitOfWork:
    return InMemoryUnitOfWork(bus)
