"""The fakes as the ports they stand in for, for mypy (`make typecheck` checks `tests/fakes`):
a port that gains or changes a method fails here until its fake follows. Never imported."""

from __future__ import annotations

from engram.ports import (
    AgentKeyStore,
    ChatStore,
    ConsolidationStore,
    Embedder,
    EmbeddingCache,
    ErasureStore,
    EventBus,
    FeedbackStore,
    Inbox,
    ObservationStore,
    PersonalDataStore,
    ProposalStore,
    Recall,
    SearchIndex,
    TelemetryStore,
    TenantTx,
    UnitOfWork,
)
from tests.fakes.bus import FakeBus
from tests.fakes.recall import FakeRecall
from tests.fakes.search import FakeEmbedder, FakeSearchIndex
from tests.fakes.uow import InMemoryTenantTx, InMemoryUnitOfWork


def ports(uow: InMemoryUnitOfWork, tx: InMemoryTenantTx) -> list[object]:
    checked: list[object] = []
    unit_of_work: UnitOfWork = uow
    tenant_tx: TenantTx = tx
    observations: ObservationStore = tx.observations
    chats: ChatStore = tx.chats
    feedback: FeedbackStore = tx.feedback
    telemetry: TelemetryStore = tx.telemetry
    embeddings: EmbeddingCache = tx.embeddings
    personal: PersonalDataStore = tx.personal
    agent_keys: AgentKeyStore = tx.agent_keys
    inbox: Inbox = tx.inbox
    consolidation: ConsolidationStore = tx.consolidation
    erasures: ErasureStore = tx.erasures
    proposals: ProposalStore = tx.proposals
    bus: EventBus = FakeBus()
    index: SearchIndex = FakeSearchIndex()
    embedder: Embedder = FakeEmbedder()
    recall: Recall = FakeRecall()
    checked += [unit_of_work, tenant_tx, observations, chats, feedback, telemetry, embeddings, personal]
    checked += [agent_keys, inbox, consolidation, erasures, proposals, bus, index, embedder, recall]
    return checked
