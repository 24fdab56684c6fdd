"""`config/llm.yaml`: expert profiles with their fallback chains, compaction settings, the price
table, and the `${NAME}` placeholders the values may use (filled from a mapping the caller passes)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

import structlog
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engram.domain.llm.billing import ModelPrice

log = structlog.get_logger(__name__)

_PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)(?::-([^}]*))?\}")


def expand(value: str, env: Mapping[str, str]) -> str:
    """`${NAME}` / `${NAME:-default}` from `env`, the whole mapping: the domain reads no process
    environment (the composition root passes the settings merged over it)."""

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = env.get(name)
        if found:
            return found
        if default is not None:
            return default
        raise ValueError(f"configuration placeholder ${{{name}}} has no value")

    return _PLACEHOLDER.sub(sub, value)


class Profile(BaseModel):
    """One expert profile (MoE): which model does a task, how long it may take, what comes next."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    # which provider serves the model: the Anthropic Messages API, an OpenAI-compatible gateway
    # (`openai`: vLLM, LiteLLM, any Chat Completions endpoint) or a local server (`local`: Ollama,
    # llama.cpp's server); a profile whose provider is not configured is skipped in a chain
    provider: Literal["anthropic", "openai", "local"] = "anthropic"
    model: str = Field(min_length=1, max_length=200)
    timeout: float = Field(default=45.0, gt=0, le=600)
    # Sent only when set: anthropic 2.x dropped the parameter from its signatures (newer models
    # choose their own sampling), so it travels in the request body for models that accept it.
    temperature: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int = Field(default=2048, ge=1, le=64_000)
    fallback: str | None = None


class CompactionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    trigger_input_tokens: int = Field(default=150_000, ge=1_000)
    pause_after_compaction: bool = False
    instructions: str | None = None


class LlmConfig(BaseModel):
    """`config/llm.yaml`: profiles, the model price table, compaction and routing settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profiles: dict[str, Profile]
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    routing: dict[str, Any] = Field(default_factory=dict)
    tasks: dict[str, str] = Field(default_factory=dict)  # task -> profile (chat tiers, advisor, fast, ...)

    @classmethod
    def from_yaml(cls, text: str, env: Mapping[str, str] | None = None) -> LlmConfig:
        raw = yaml.safe_load(text) or {}
        if not isinstance(raw, dict):
            raise ValueError("llm config must be a mapping")
        env = env or {}
        profiles: dict[str, Any] = {}
        for name, spec in (raw.get("profiles") or {}).items():
            if not isinstance(spec, dict):
                raise ValueError(f"profile {name!r} must be a mapping")
            spec = {k: expand(v, env) if isinstance(v, str) else v for k, v in spec.items()}
            profiles[name] = {"name": name, **spec}
        raw["profiles"] = profiles
        try:
            config = cls.model_validate(raw)
        except ValidationError as exc:
            raise ValueError(f"invalid llm config: {exc.errors(include_url=False)}") from exc
        for name, profile in config.profiles.items():
            if profile.fallback is not None and profile.fallback not in config.profiles:
                raise ValueError(f"profile {name!r} falls back to unknown profile {profile.fallback!r}")
        for task, profile_name in config.tasks.items():
            if profile_name not in config.profiles:
                raise ValueError(f"task {task!r} uses unknown profile {profile_name!r}")
        return config

    def profile_for(self, task: str) -> str:
        """The profile a task uses (tasks map to profiles; a profile name maps to itself)."""
        if task in self.tasks:
            return self.tasks[task]
        if task in self.profiles:
            return task
        raise KeyError(f"no profile for task {task!r}")

    def chain(self, start: str) -> list[Profile]:
        """The profile and its fallbacks, in order; a cycle ends the chain (visited tracking)."""
        chain: list[Profile] = []
        visited: set[str] = set()
        name: str | None = start
        while name is not None:
            if name in visited:
                log.warning("llm.fallback_cycle", start=start, repeated=name)
                break
            visited.add(name)
            profile = self.profiles.get(name)
            if profile is None:
                raise KeyError(f"unknown LLM profile {name!r}")
            chain.append(profile)
            name = profile.fallback
        return chain

    def price(self, model: str) -> ModelPrice | None:
        """Exact model id first, then the longest configured prefix (dated ids: `claude-x-20260101`)."""
        if model in self.prices:
            return self.prices[model]
        best = max((m for m in self.prices if model.startswith(m)), key=len, default=None)
        return self.prices[best] if best else None

    def known_models(self) -> frozenset[str]:
        return frozenset({p.model for p in self.profiles.values()} | set(self.prices))
