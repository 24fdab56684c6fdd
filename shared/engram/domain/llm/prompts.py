"""`config/prompts.yaml`: prompt texts per key, resolved for the model actually called (model id,
then provider, then default) and filled with variables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import structlog
import yaml

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ResolvedPrompt:
    key: str
    text: str
    level: Literal["model", "provider", "default", "missing"]


class _SafeVars(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return ""


def _as_text(value: Any) -> str:
    """String guarantee: nested YAML (dicts, lists) is flattened, never returned as a dict."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "\n".join(_as_text(v) for v in value.values())
    if isinstance(value, list | tuple):
        return "\n".join(_as_text(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class PromptLibrary:
    """`config/prompts.yaml`: `key -> {<model id> | <provider> | default: text}`."""

    prompts: Mapping[str, Mapping[str, Any]]
    default_chain: tuple[str, ...] = ("default",)

    @classmethod
    def from_yaml(cls, text: str) -> PromptLibrary:
        raw = yaml.safe_load(text) or {}
        if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
            raise ValueError("prompts must map each key to a mapping of model/provider/default texts")
        return cls(raw)

    def resolve(self, key: str, *, model: str, provider: str) -> ResolvedPrompt:
        entry = self.prompts.get(key)
        if entry is None:
            log.warning("prompt.missing", key=key)
            return ResolvedPrompt(key, "", "missing")
        if model in entry:
            log.debug("prompt.trace", key=key, level=1, match="model", model=model)
            return ResolvedPrompt(key, _as_text(entry[model]), "model")
        if provider in entry:
            log.debug("prompt.trace", key=key, level=2, match="provider", provider=provider)
            return ResolvedPrompt(key, _as_text(entry[provider]), "provider")
        for name in self.default_chain:
            if name in entry:
                log.debug("prompt.trace", key=key, level=3, match="default")
                return ResolvedPrompt(key, _as_text(entry[name]), "default")
        return ResolvedPrompt(key, "", "missing")

    def render(self, key: str, *, model: str, provider: str, **variables: Any) -> str:
        """Resolve lazily for the model actually used, then fill `{variables}` (missing ones are empty)."""
        text = self.resolve(key, model=model, provider=provider).text
        try:
            return text.format_map(_SafeVars(variables))
        except (ValueError, IndexError):  # a stray brace in a prompt: use it as written
            return text
