from __future__ import annotations

import pytest

from engram.domain.errors import TelemetryError
from engram.domain.telemetry import TELEMETRY_EVENTS, ChatModelAutoRouted, event_name, validate_metadata


def test_every_taxonomy_event_has_a_model() -> None:
    assert set(TELEMETRY_EVENTS) == {
        "chat.turn_completed",
        "chat.tool_used",
        "chat.error",
        "chat.ptl_recovery",
        "chat.approval_decision",
        "memory.extraction",
        "memory.consolidation",
        "memory.cache_break",
        "chat.compaction_fired",
        "chat.model_auto_routed",
        "chat.advisor_auto_triggered",
        "event.dead_lettered",
    }


def test_stored_with_spec_field_names() -> None:
    meta = ChatModelAutoRouted(selected_model="m", tier="complex", reason="keyword: refactor", confidence=0.9)
    assert event_name(meta) == "chat.model_auto_routed"
    assert validate_metadata("chat.model_auto_routed", meta) == {
        "selectedModel": "m",
        "tier": "complex",
        "reason": "keyword: refactor",
        "confidence": 0.9,
    }


def test_unknown_and_malformed_are_rejected() -> None:
    with pytest.raises(TelemetryError, match="unknown telemetry event"):
        validate_metadata("chat.made_up", {})
    with pytest.raises(TelemetryError, match="malformed"):
        validate_metadata("chat.tool_used", {"toolName": "x", "durationMs": -1, "success": True})
    with pytest.raises(TelemetryError, match="malformed"):
        validate_metadata("chat.tool_used", {"toolName": "x", "durationMs": 1, "success": True, "secret": "x"})
