"""Redaction (R-12.3, R-16.5): no secret and no message body in a log line or telemetry."""

from __future__ import annotations

import json
import logging

import structlog

from engram.domain.redaction import redact, scrub
from engram.domain.telemetry import record
from engram.runtime.logs import RedactingFilter, redact_secrets

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
AGENT = "egk_" + "A1b2C3d4" * 5
SEED = "SU" + "A" * 56


def test_patterns_anywhere_in_a_string() -> None:
    text = (
        f"Authorization: Bearer {JWT} key={AGENT} anthropic=sk-ant-api03-{'x' * 30} "
        f"seed {SEED} db postgresql://engram:hunter2-secret@db:5432/engram"
    )
    out = scrub(text)
    for secret in (JWT, AGENT, "sk-ant-api03-" + "x" * 30, SEED, "hunter2-secret"):
        assert secret not in out
    assert "postgresql://engram:[redacted]@db:5432/engram" in out


def test_names_and_bodies() -> None:
    out = redact(
        {
            "authorization": "Basic Zm9vOmJhcg==",
            "x-agent-key": "anything",
            "headers": {"Cookie": "session=1"},
            "user_message": "Mein Gehalt ist 5000 Euro",
            "messages": [{"role": "user", "content": "geheim"}],
            "count": 3,
        }
    )
    assert out["authorization"] == out["x-agent-key"] == out["headers"]["Cookie"] == "[redacted]"
    assert out["user_message"] == "[redacted: 25 chars]" and out["count"] == 3
    assert out["messages"][0]["content"] == "[redacted: 6 chars]" and out["messages"][0]["role"] == "user"


def test_the_structlog_processor_and_the_logging_filter(capsys: object) -> None:
    event = redact_secrets(None, "info", {"event": f"login with {JWT}", "token": JWT, "text": "a body"})
    assert JWT not in json.dumps(event) and event["text"] == "[redacted: 6 chars]"
    rec = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, "%s %s", ("GET", f"/x?key={AGENT}"), None)
    assert RedactingFilter().filter(rec) and AGENT not in rec.getMessage()
    assert structlog.get_config()  # configured processors are a list (no crash on import)


def test_telemetry_metadata_is_scrubbed() -> None:
    row = record(
        "t",
        "chat.error",
        {"stage": "llm", "error_type": "auth", "message": f"401 for key {AGENT}", "model": "m"},
    )
    assert AGENT not in json.dumps(row.metadata, default=str)
