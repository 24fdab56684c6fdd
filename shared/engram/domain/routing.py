"""Auto model selection (R-8.1): trivial, complex or default, decided before the LLM call.

- trivial: a greeting, or fewer than `trivial_max_words` words, without a complex signal
- complex: architecture, refactor, tradeoff, risk, strategy (and German equivalents; the
  keyword list is configuration) -> the smart model
- default: everything else -> the cost-optimised model

Keywords match at word starts, case-insensitively, so German compounds count
("Architekturentscheidung" matches "architektur", "Risikobewertung" matches "risiko").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Tier = Literal["trivial", "default", "complex", "override"]

_WORD = re.compile(r"[\w'-]+", re.UNICODE)
_TRAILING = re.compile(r"[\s!.,?;:)\-–—]+$")


@dataclass(frozen=True)
class RoutingRules:
    trivial_max_words: int = 10
    greetings: tuple[str, ...] = ()
    complex_keywords: tuple[str, ...] = ()
    tiers: Mapping[str, str] = field(default_factory=dict)  # tier -> task/profile

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> RoutingRules:
        return cls(
            trivial_max_words=int(raw.get("trivial_max_words", 10)),
            greetings=tuple(str(g).casefold() for g in raw.get("greetings", ())),
            complex_keywords=tuple(str(k).casefold() for k in raw.get("complex_keywords", ())),
            tiers=dict(raw.get("tiers", {})),
        )

    def keyword_pattern(self) -> re.Pattern[str] | None:
        if not self.complex_keywords:
            return None
        alternatives = "|".join(re.escape(k) for k in sorted(self.complex_keywords, key=len, reverse=True))
        return re.compile(rf"(?<![\w])({alternatives})", re.IGNORECASE | re.UNICODE)


@dataclass(frozen=True)
class RoutingDecision:
    tier: Tier
    profile: str
    reason: str
    confidence: float
    matched: tuple[str, ...] = ()


def _is_greeting(text: str, greetings: Sequence[str]) -> bool:
    cleaned = _TRAILING.sub("", text.casefold().strip())
    if not cleaned:
        return False
    for greeting in greetings:
        if cleaned == greeting:
            return True
        # "hallo zusammen", "hi claude", "thanks a lot": a greeting plus at most two words
        if cleaned.startswith(greeting + " ") and len(_WORD.findall(cleaned[len(greeting) :])) <= 2:
            return True
    return False


def route(prompt: str, rules: RoutingRules) -> RoutingDecision:
    """Classify a prompt into a tier and the profile that serves it."""
    words = _WORD.findall(prompt)
    if _is_greeting(prompt, rules.greetings):
        return RoutingDecision("trivial", rules.tiers.get("trivial", "chat_default"), "greeting", 0.95)
    pattern = rules.keyword_pattern()
    matched: tuple[str, ...] = ()
    if pattern is not None:
        matched = tuple(dict.fromkeys(m.group(1).casefold() for m in pattern.finditer(prompt)))
    if matched:
        confidence = min(0.95, 0.6 + 0.1 * len(matched))
        return RoutingDecision(
            "complex",
            rules.tiers.get("complex", "chat_smart"),
            f"complex keywords: {', '.join(matched)}",
            confidence,
            matched,
        )
    if len(words) < rules.trivial_max_words:
        return RoutingDecision(
            "trivial", rules.tiers.get("trivial", "chat_default"), f"short prompt ({len(words)} words)", 0.7
        )
    return RoutingDecision("default", rules.tiers.get("default", "chat_default"), "no complex signal", 0.5)


def override(model_or_profile: str, profile: str) -> RoutingDecision:
    """The caller chose a model: no routing, but still traced."""
    return RoutingDecision("override", profile, f"requested {model_or_profile}", 1.0)
