"""Hand-written fakes of the ports (Cosmic Python style): no PostgreSQL, no NATS, no model.

- `InMemoryUnitOfWork` (`uow.py`) and its stores: the tenant transactions, with the real
  write semantics and visibility rules; `FakeBus` (`bus.py`) records what was published.
- `FakeSearchIndex`, `FakeEmbedder` (`search.py`); `FakeRecall`, `observation()` (`recall.py`).
"""

from tests.fakes.bus import BusDown, FakeBus
from tests.fakes.data import ConstraintViolation, TenantData
from tests.fakes.recall import FakeRecall, observation
from tests.fakes.search import FakeEmbedder, FakeSearchIndex, PinnedEmbedder
from tests.fakes.uow import InMemoryUnitOfWork, OutboxEntry

__all__ = [
    "BusDown",
    "ConstraintViolation",
    "FakeBus",
    "FakeEmbedder",
    "FakeRecall",
    "FakeSearchIndex",
    "InMemoryUnitOfWork",
    "OutboxEntry",
    "PinnedEmbedder",
    "TenantData",
    "observation",
]
