from __future__ import annotations

import pytest

from engram.domain.errors import InvalidEvent
from engram.domain.rules import RuleSet, apply_rule, event_context
from engram.settings import CONFIG_DIR

RULES = RuleSet.from_yaml((CONFIG_DIR / "rules.yaml").read_text())


def test_shipped_rules_render_a_customer() -> None:
    (rule,) = RULES.for_type("com.example.crm.customer.created.v1")
    ctx = event_context(
        {
            "type": "com.example.crm.customer.created.v1",
            "time": "2026-05-04T10:00:00Z",
            "id": "1",
            "source": "/crm",
        },
        {"customer_id": "42", "name": "Müller GmbH"},
    )
    out = apply_rule(rule, ctx)
    assert out.title == "Customer Müller GmbH was created"
    assert "on 2026-05-04 in an unknown city" in out.narrative
    assert out.key == "customer:42"
    assert "customer_id=42" in out.facts
    assert out.user_id is None and out.scope.value == "public"


def test_missing_value_without_default_is_invalid() -> None:
    (rule,) = RULES.for_type("com.example.crm.customer.created.v1")
    with pytest.raises(InvalidEvent, match=r"data\.name"):
        apply_rule(rule, event_context({"time": "2026-05-04T10:00:00Z"}, {"customer_id": "42"}))


def test_glob_rules_and_bad_templates() -> None:
    rs = RuleSet.from_yaml(
        "rules:\n  - event_type: com.acme.*\n    observation_type: event\n    title: '{type} {data.x.0}'\n"
    )
    out = apply_rule(rs.for_type("com.acme.thing.v1")[0], event_context({"type": "com.acme.thing.v1"}, {"x": ["a"]}))
    assert out.title == "com.acme.thing.v1 a"
    assert rs.for_type("org.other.v1") == []
    with pytest.raises(ValueError):
        RuleSet.from_yaml("rules:\n  - event_type: x\n    observation_type: event\n    title: '{unclosed'\n")
