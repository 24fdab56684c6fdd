"""memory-api's OpenAPI document says what its bodies must be: every body a client generator (here
schemathesis's own positive strategy) builds from the document is one the API accepts.

A CI run of the fuzz test warned "schema validation mismatch" for mark when its fuzzing phase
was cut short: the document allowed `scope: team` without `team_ids` and tags of blanks, which
the models refuse with 422.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from pydantic import BaseModel, ValidationError

from engram.domain.authorization import WriteRequest, authorize_write
from engram.domain.errors import Unprocessable
from engram.domain.observation import NOT_BLANK
from engram.domain.periods import parse_within
from engram.domain.scopes import Permission, Principal
from engram.services.memory import MarkRequest, RememberRequest
from functions.memory_api.main import app

CALLER = Principal(
    tenant_id="t",
    user_id="alice",
    permissions=frozenset(
        {Permission.create_observation.value, Permission.manage_observation.value, Permission.view_sensitive.value}
    ),
)


def _bodies(path: str) -> Any:
    schema = schemathesis.openapi.from_dict(app.openapi())
    return schema[path]["POST"].as_strategy()


@pytest.mark.parametrize(("path", "model"), [("/api/ai/memory/mark", MarkRequest), ("/api/ai/memory", RememberRequest)])
def test_every_documented_body_is_accepted(path: str, model: type[BaseModel]) -> None:
    refused: list[str] = []

    @settings(max_examples=500, suppress_health_check=list(HealthCheck), deadline=None, database=None)
    @given(_bodies(path))
    def check(case: Any) -> None:
        try:
            body = model.model_validate(case.body)
        except ValidationError as error:
            refused.append(f"{case.body!r}: {error.errors()[0]['msg']}")
            return
        if isinstance(body, MarkRequest):
            authorize_write(CALLER, WriteRequest.of(CALLER.user_id, body.scope, body.team_ids))

    check()
    assert refused == []


def test_a_tag_of_blanks_is_refused_and_the_document_says_so() -> None:
    for blank in ("   ", "\u0085", "\t\n"):
        with pytest.raises(ValidationError):
            MarkRequest(text="x", tags=[blank])
        with pytest.raises(ValidationError):
            MarkRequest(text="x", key=blank)
    assert MarkRequest(text="x", tags=[" a "], key="order:1\n").model_dump()["tags"] == ["a"]
    assert MarkRequest(text="x", key="order:1\n").key == "order:1"
    schemas = app.openapi()["components"]["schemas"]
    assert schemas["MarkRequest"]["properties"]["tags"]["items"]["pattern"] == NOT_BLANK
    assert schemas["MarkRequest"]["allOf"][0]["then"]["required"] == ["team_ids"]


def test_every_documented_expiry_window_is_read() -> None:
    """A CI run warned "schema validation mismatch" for GET /api/ai/memory/expiring: the document said
    `within` is any string of up to 16 characters, and parse_within refused most of them with 422."""
    refused: list[str] = []
    strategy = schemathesis.openapi.from_dict(app.openapi())["/api/ai/memory/expiring"]["GET"].as_strategy()

    @settings(max_examples=300, suppress_health_check=list(HealthCheck), deadline=None, database=None)
    @given(strategy)
    def check(case: Any) -> None:
        within = (case.query or {}).get("within")
        if within is None:
            return
        try:
            parse_within(str(within))
        except Unprocessable:
            refused.append(repr(within))

    check()
    assert refused == []
    assert parse_within(" 2w ") == timedelta(weeks=2)
    for bad in ("soon", "7", "7 d", "123456d", "7y", ""):
        with pytest.raises(Unprocessable):
            parse_within(bad)
