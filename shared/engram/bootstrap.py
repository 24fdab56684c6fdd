"""The composition root: builds every adapter and service from settings, once per process.

Clients are created on first use, never at import (R-2.2), so a scaled-to-zero function pays
only for what it touches. `build(settings, overrides=Overrides(...))` takes what a test (or an
embedding application) brings instead: an in-memory unit of work and bus, a fake index,
embedder or model provider; whatever is not overridden is built from the settings.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import structlog

from engram.adapters.embedders import build_embedder
from engram.adapters.maintenance import PgAgentKeyDirectory, PgMaintenance
from engram.adapters.nats_auth import bus_credentials
from engram.adapters.nats_bus import NatsBus, connect
from engram.adapters.pgvector_index import PgVectorIndex
from engram.adapters.postgres import Database
from engram.adapters.unit_of_work import PgUnitOfWork
from engram.archive_wiring import build_retention, telemetry_archive
from engram.domain.errors import RecallUnavailable
from engram.domain.llm import LlmConfig, PromptLibrary
from engram.domain.routing import RoutingRules
from engram.domain.rules import RuleSet
from engram.domain.streams import DecisionEngine
from engram.ports import LLM, AgentKeyDirectory, Embedder, EventBus, Maintenance, Recall, SearchIndex, UnitOfWork
from engram.services.agent_keys import AgentKeys
from engram.services.auth import Authenticator
from engram.services.chat import ChatTurns
from engram.services.chat_extraction import ChatExtractor
from engram.services.consolidation import Consolidator
from engram.services.consolidation_llm import ConsolidationJudge
from engram.services.consolidation_sweep import ConsolidationSweep
from engram.services.conversations import ConversationIngest
from engram.services.curation import CurationService
from engram.services.extraction import Extraction
from engram.services.feedback import FeedbackRecorder, FeedbackService
from engram.services.gateway import LlmGateway
from engram.services.indexing import Indexer
from engram.services.ingest import EventIngest
from engram.services.memory import MemoryService
from engram.services.memory_history import MemoryHistory
from engram.services.personal_data import PersonalData
from engram.services.proposals import Proposals
from engram.services.pruning import Pruning
from engram.services.recall import RecallService
from engram.services.telemetry_query import TelemetryQuery
from engram.settings import Settings, get_settings

if TYPE_CHECKING:
    from engram.services.operations import DeadLetterOps, TenantOps

log = structlog.get_logger(__name__)


@dataclass
class Overrides:
    """What `build` takes instead of building it from the settings. Without a database (`uow`
    given, `db` not), what needs PostgreSQL itself is left out: maintenance, agent keys,
    retention and the pgvector index (pass an `index`)."""

    db: Database | None = None
    uow: UnitOfWork | None = None
    bus: EventBus | None = None
    embedder: Embedder | None = None
    index: SearchIndex | None = None
    llm: LLM | None = None  # the gateway's provider (else Anthropic when a key is set)
    gateway: LlmGateway | None = None  # a gateway built already (its provider and configuration)
    recall: Recall | None = None


@dataclass
class Services:
    settings: Settings
    db: Database | None
    bus: EventBus
    uow: UnitOfWork
    auth: Authenticator
    agent_keys: AgentKeys
    memory: MemoryService
    ingest: EventIngest
    extraction: Extraction
    feedback: FeedbackService
    feedback_recorder: FeedbackRecorder
    telemetry_query: TelemetryQuery
    personal_data: PersonalData
    embedder: Embedder
    index: SearchIndex
    indexing: Indexer
    curation: CurationService
    conversations: ConversationIngest
    gateway: LlmGateway
    chat: ChatTurns
    consolidation: Consolidator
    consolidation_sweep: ConsolidationSweep
    memory_history: MemoryHistory
    proposals: Proposals
    maintenance: Maintenance | None = None
    recall: Recall | None = None  # chat-turn, recall and search answer 503 without it
    background: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def database(self) -> Database:
        """The PostgreSQL pool (for what works on it directly: readiness, the outbox relay)."""
        if self.db is None:
            raise RuntimeError("these services were built without a database (Overrides(uow=...))")
        return self.db

    @property
    def nats(self) -> NatsBus:
        """The NATS bus (the workers consume on its connection)."""
        if not isinstance(self.bus, NatsBus):
            raise RuntimeError(f"these services were built with {type(self.bus).__name__}, not NATS")
        return self.bus

    async def ready(self) -> dict[str, bool]:
        checks: dict[str, bool] = {}
        for name, check in (
            ("postgres", self.database.ping),
            ("nats", self.nats.ping),
            ("schema", self.schema_current),
        ):
            try:
                checks[name] = await check()
            except Exception:
                checks[name] = False
        return checks

    async def schema_current(self) -> bool:
        """True once every migration this code knows is applied: a new revision takes traffic only then."""
        from engram.adapters.migrations import applied_version, latest_version

        async with self.database.pool.acquire() as conn:
            return await applied_version(conn) >= latest_version()

    async def wait_for_schema(self, interval: float = 1.0) -> None:
        """Workers start consuming only after the migration Job has run (k8s/base/migrate)."""
        warned = False
        while not await self.schema_current():
            if not warned:
                log.warning("services.waiting_for_migrations", hint="run `engram migrate`")
                warned = True
            await asyncio.sleep(interval)

    def pruning(self) -> Pruning | None:
        """Pruning of the inbox and the embedding cache (None without a database)."""
        if self.maintenance is None:
            return None
        return Pruning(
            self.maintenance,
            inbox_retention=timedelta(hours=self.settings.engram_inbox_retention_hours),
            cache_retention=timedelta(days=self.settings.engram_embedding_cache_days),
        )

    def start_pruning(self, consumer: str) -> None:
        """A worker prunes its consumer's inbox (embed-index also the embedding cache) in the background."""
        pruning = self.pruning()
        if pruning is not None:
            interval = self.settings.engram_prune_interval_seconds
            self.background.append(asyncio.create_task(pruning.forever(consumer, interval)))

    def start_outbox_relay(self) -> None:
        """Publish what interrupted writers left in the outbox: the subjects this process's bus
        user may publish (a relay never tries what the server would refuse); all without one."""
        from engram.adapters.outbox import relay_forever
        from engram.domain.bus_access import admin_user, relayable, user

        name = self.settings.engram_nats_user
        subjects = relayable(user(name, self.settings.engram_stream) if name else admin_user())
        if not subjects:
            return
        self.background.append(asyncio.create_task(relay_forever(self.database, self.bus, subjects=subjects)))

    async def close(self) -> None:
        drain = getattr(self.recall, "drain", None)
        if drain is not None:
            await drain()  # retrieved-feedback events still being published
        for closable in (self.index, self.embedder):
            close = getattr(closable, "close", None)
            if close is not None:
                await close()
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        await self.uow.drain()  # chat turns' events still being published
        await self.gateway.close()
        close_bus = getattr(self.bus, "close", None)
        if close_bus is not None:
            await close_bus()
        if self.db is not None:
            await self.db.close()


def recall_service(services: Services) -> Recall:
    """The services' recall; RecallUnavailable (503, an MCP tool error) on a build without one."""
    if services.recall is None:
        raise RecallUnavailable("recall is not configured on this server (Services.recall is None)")
    return services.recall


def load_rules(settings: Settings) -> RuleSet:
    return RuleSet.from_yaml(settings.engram_rules_path.read_text(encoding="utf-8"))


def load_llm_config(settings: Settings) -> LlmConfig:
    """`config/llm.yaml` with its `${NAME}` placeholders filled from the settings first, then the
    process environment (an empty setting does not hide the environment's value)."""
    env = {**os.environ, **settings.llm_placeholders}
    return LlmConfig.from_yaml(settings.engram_llm_config_path.read_text(encoding="utf-8"), env)


def build_providers(settings: Settings, config: LlmConfig) -> dict[str, LLM]:
    """One adapter per configured provider: Anthropic with ANTHROPIC_API_KEY, the OpenAI-compatible
    ones with their base URLs (`Settings.compatible_endpoints`); SDKs are imported on first call."""
    from engram.adapters.openai_llm import configured

    providers: dict[str, LLM] = dict(configured(settings.compatible_endpoints))
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key is not None else ""
    if key:
        from engram.adapters.anthropic_llm import AnthropicLLM

        providers["anthropic"] = AnthropicLLM(
            key,
            base_url=settings.anthropic_base_url,
            betas=settings.anthropic_beta_list,
            compaction_models=settings.compaction_supported_models,
            compaction=config.compaction,
        )
    return providers


def build_gateway(settings: Settings, llm: LLM | None = None) -> LlmGateway:
    """The LLM gateway on `llm` (for every profile), else on the configured providers (each
    profile on its own, the others skipped); with none it has no provider (chat-turn answers
    offline)."""
    config = load_llm_config(settings)
    prompts = PromptLibrary.from_yaml(settings.engram_prompts_path.read_text(encoding="utf-8"))
    providers: LLM | dict[str, LLM] | None = llm if llm is not None else build_providers(settings, config)
    return LlmGateway(
        config,
        prompts,
        providers or None,
        background_limit=settings.engram_llm_background_limit,
        realtime_wait_cap=settings.engram_chat_rate_limit_wait,
        background_wait_cap=settings.llm_rate_limit_wait,
        background_retries=settings.llm_rate_limit_retries,
    )


def build_extraction(settings: Settings, uow: UnitOfWork, gateway: LlmGateway) -> Extraction:
    """extract-observation's service: the event rules, the tenant's types, and the chat extractor
    with the chat's memory units as configured (the chat path bench builds it here too)."""
    types = settings.engram_observation_types
    chat = ChatExtractor(
        uow,
        gateway,
        types,
        chat_units=settings.engram_chat_units,
        answer_passages=settings.engram_chat_answer_passages,
    )
    return Extraction(uow, load_rules(settings), types, chat_extractor=chat)


def build_chat(
    settings: Settings, uow: UnitOfWork, gateway: LlmGateway, recall: Callable[[], Recall | None]
) -> ChatTurns:
    engine = DecisionEngine.from_yaml(
        settings.engram_decision_engine_path.read_text(encoding="utf-8"), settings.engram_observation_types
    )
    return ChatTurns(
        uow,
        gateway,
        engine,
        RoutingRules.from_config(gateway.config.routing),
        recall,
        observation_types=settings.engram_observation_types,
        history_messages=settings.engram_chat_history_messages,
        session_idle=timedelta(minutes=settings.engram_session_idle_minutes),
        zone=settings.zone,
    )


def build_index(settings: Settings, db: Database | None, dimensions: int) -> SearchIndex:
    """AI_MEMORY_PROVIDER: pgvector on the same PostgreSQL, or Elasticsearch 8 (dense_vector)."""
    if settings.ai_memory_provider == "dense_vector":
        from engram.adapters.elasticsearch_index import ElasticsearchIndex

        if not settings.elasticsearch_url:
            raise RuntimeError("AI_MEMORY_PROVIDER=dense_vector needs ELASTICSEARCH_URL")
        key = settings.elasticsearch_api_key
        return ElasticsearchIndex.connect(
            settings.elasticsearch_url,
            dimensions,
            api_key=key.get_secret_value() if key else None,
            use_retriever_rrf=settings.elasticsearch_use_retriever_rrf,
        )
    if db is None:
        raise RuntimeError("the pgvector index needs the database: pass Overrides(index=...) without one")
    return PgVectorIndex(
        db,
        dimensions,
        exact_below=settings.engram_pgvector_exact_below,
        postings_per_term=settings.engram_postings_per_term,
        warm_blocks=settings.engram_pgvector_warm_blocks,
    )


async def build(settings: Settings | None = None, overrides: Overrides | None = None) -> Services:
    settings = settings or get_settings()
    o = overrides or Overrides()
    db = o.db
    if db is None and o.uow is None:
        db = await Database.connect(
            settings.require_database_url(),
            max_size=settings.database_pool_size,
            timeout=settings.engram_db_timeout_seconds,
        )
    bus: EventBus = o.bus or NatsBus(
        await connect(settings.require_nats_url(), credentials=bus_credentials(settings)),
        publish_timeout=settings.engram_publish_timeout_seconds,
        stream=settings.engram_stream,
    )
    uow = o.uow or PgUnitOfWork(db, bus)  # type: ignore[arg-type]  # `db` is connected unless a uow is given
    gateway = o.gateway or build_gateway(settings, o.llm)
    embedder = o.embedder or build_embedder(
        settings.engram_embedder,
        tei_url=settings.tei_embedding_url,
        tei_model=settings.tei_embedding_model,
        tei_dimensions=settings.tei_embedding_dimensions,
        query_cache=settings.engram_query_cache_size,
        e5_runtime=settings.engram_e5_runtime,
    )
    index = o.index or build_index(settings, db, embedder.dimensions)
    keys: AgentKeyDirectory | None = PgAgentKeyDirectory(db) if db is not None else None
    types = settings.engram_observation_types
    recall = o.recall or RecallService(uow, index, embedder, bus)
    consolidation = Consolidator(uow, embedder, index, ConsolidationJudge(gateway))
    services = Services(
        settings=settings,
        db=db,
        bus=bus,
        uow=uow,
        auth=Authenticator(settings, keys),
        agent_keys=AgentKeys(uow),
        memory=MemoryService(uow, bus, types, settings.zone),
        ingest=EventIngest(bus),
        extraction=build_extraction(settings, uow, gateway),
        feedback=FeedbackService(uow, bus),
        feedback_recorder=FeedbackRecorder(uow),
        telemetry_query=TelemetryQuery(uow),
        personal_data=PersonalData(uow, telemetry_archive(settings, db), bus),
        embedder=embedder,
        index=index,
        indexing=Indexer(uow, index, embedder),
        curation=CurationService(uow),
        conversations=ConversationIngest(uow),
        gateway=gateway,
        # read at every turn, so it does not matter when or how `services.recall` is set
        chat=build_chat(settings, uow, gateway, lambda: services.recall),
        consolidation=consolidation,
        consolidation_sweep=build_sweep(settings, consolidation, db),
        memory_history=MemoryHistory(uow),
        proposals=Proposals(uow),
        maintenance=PgMaintenance(db) if db is not None else None,
        recall=recall,
    )
    return services


def build_sweep(settings: Settings, consolidation: Consolidator, db: Database | None) -> ConsolidationSweep:
    """The nightly consolidation sweep; it finds its tenants in the database (none without one)."""
    from engram.adapters.consolidation_store import PgConsolidationScan

    return ConsolidationSweep(
        consolidation,
        PgConsolidationScan(db) if db is not None else None,
        lookback=timedelta(hours=settings.engram_consolidation_lookback_hours),
        digest_days=settings.engram_digest_after_days,
        min_group=settings.engram_digest_min_group,
    )


def build_operations(services: Services) -> tuple[DeadLetterOps, TenantOps]:
    """The operations commands' services (`engram dlq|tenants|tenant`) on the built ones."""
    from engram.adapters.dead_letter_stream import JetStreamDeadLetters
    from engram.adapters.tenant_data import PgTenantData
    from engram.services.operations import DeadLetterOps, TenantOps

    s, db = services.settings, services.database
    archive = build_retention(s, db) if s.engram_archive_bucket else None
    queue = JetStreamDeadLetters(services.nats.js, f"{s.engram_stream}_DLQ")
    return DeadLetterOps(queue, services.bus), TenantOps(
        PgTenantData(db), services.index, services.indexing, services.nats, archive
    )


_services: Services | None = None
_lock: asyncio.Lock | None = None


async def get_services() -> Services:
    """The process-wide services, built on first use."""
    global _services, _lock
    if _services is not None:
        return _services
    if _lock is None:
        _lock = asyncio.Lock()
    async with _lock:
        if _services is None:
            _services = await build()
            log.info("services.ready")
    return _services


def use_services(services: Services | None) -> Services | None:
    """Make `services` the process-wide ones (tests: an HTTP app or worker on other services);
    returns the ones it replaces, which stay open."""
    global _services
    previous, _services = _services, services
    return previous


async def shutdown() -> None:
    global _services
    if _services is not None:
        await _services.close()
        _services = None
