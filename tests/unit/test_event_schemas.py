"""The exported JSON Schemas in schemas/events are in step with the pydantic models."""

from __future__ import annotations

import json
from pathlib import Path

from engram.domain.events import EXTENSION_NAME, REGISTRY, new_event, subject_for

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas" / "events"


def test_every_event_type_has_its_current_schema_file() -> None:
    files = {p.name for p in SCHEMAS.glob("*.json")}
    assert files == {f"{t}.json" for t in REGISTRY}
    for name, event_type in REGISTRY.items():
        on_disk = json.loads((SCHEMAS / f"{name}.json").read_text())
        assert on_disk == json.loads(json.dumps(event_type.json_schema())), f"run `engram schemas` ({name})"


def test_types_are_versioned_reverse_dns_and_subjects_are_stable() -> None:
    for name, event_type in REGISTRY.items():
        assert name.startswith("io.engram.") and name.rsplit(".", 1)[1].startswith("v")
        assert event_type.subject.startswith("engram.") and ".*.*." in event_type.subject
    crm = new_event("com.acme.crm.customer.created.v1", {}, tenant_id="acme", source="/crm")
    assert subject_for(crm) == "engram.ingest.acme._.com.acme.crm.customer.created.v1"
    assert EXTENSION_NAME.match("tenantid") and not EXTENSION_NAME.match("tenant_id")
