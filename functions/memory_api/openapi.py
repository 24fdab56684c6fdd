"""What memory-api accepts that its pydantic models cannot say, added to its OpenAPI document.

So a client generator or a fuzzer (schemathesis runs in the tests) sees the real constraints:
the configured observation types, the two shapes of a feedback body, the CloudEvent a domain
system sends, and links from a created observation to reading, verifying, rating and deleting it.
"""

from __future__ import annotations

from typing import Any

from engram.settings import get_settings

# text with at least one visible character and no control characters (what recall and search take)
QUERY_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"

_CLOUD_EVENT: dict[str, Any] = {
    "type": "object",
    "description": (
        "A domain CloudEvent 1.0 in structured mode. Binary mode works too: the data as the body"
        " (application/json) and the attributes as `ce-*` headers (`ce-specversion`, `ce-id`,"
        " `ce-source`, `ce-type`). `tenantid` defaults to the caller's tenant and must be it;"
        " `userid` defaults to the caller. Text must not hold U+0000 or lone surrogates."
    ),
    "required": ["specversion", "id", "source", "type", "data"],
    "properties": {
        "specversion": {"type": "string", "enum": ["1.0"]},
        "id": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"^[\x21-\x7e]+$"},
        "source": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"^/[\x21-\x7e]*$"},
        "type": {
            "type": "string",
            "pattern": r"^com\.[a-z][a-z0-9]{0,20}(\.[a-z][a-z0-9_]{0,20}){1,4}\.v[0-9]$",
            "description": "the producer's reverse-DNS type; `io.engram.*` types are internal",
        },
        "time": {"type": "string", "format": "date-time"},
        "subject": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"^[\x21-\x7e]+$"},
        "data": {"type": "object", "description": "the producer's data, mapped by the rules to observations"},
    },
    "additionalProperties": False,
}

_UUID = {"type": "string", "format": "uuid"}
_FEEDBACK_SHAPES = [
    {
        "properties": {"kind": {"enum": ["retrieved", "cited", "confirmed", "rejected"]}, "observation_id": _UUID},
        "required": ["kind", "observation_id"],
        "not": {"required": ["rating"]},
    },
    {
        "properties": {
            "kind": {"enum": ["rated"]},
            "rating": {"type": "integer", "minimum": 1, "maximum": 5},
            "query_id": _UUID,
        },
        "required": ["kind", "rating", "query_id"],
        "not": {"required": ["observation_id"]},
    },
]

# a team observation names its teams (remember and mark alike)
_TEAM_RULE = {
    "if": {"properties": {"scope": {"const": "team"}}, "required": ["scope"]},
    "then": {"properties": {"team_ids": {"minItems": 1}}, "required": ["team_ids"]},
}
# what ObservationDraft checks across fields (expires_at after valid_from is said in words)
_REMEMBER_RULES = [
    _TEAM_RULE,
    {
        "if": {"properties": {"owner": {"const": "tenant"}}, "required": ["owner"]},
        "then": {"properties": {"scope": {"enum": ["team", "public"]}}, "required": ["scope"]},
    },
]

_OBSERVATION_ID = "$response.body#/observation/id"


def _created_links() -> dict[str, Any]:
    return {
        "GetObservation": {
            "operationId": "get_memory_api_ai_memory__observation_id__get",
            "parameters": {"observation_id": _OBSERVATION_ID},
        },
        "VerifyObservation": {
            "operationId": "verify_api_ai_memory__observation_id__verify_post",
            "parameters": {"observation_id": _OBSERVATION_ID},
        },
        "FeedbackOnObservation": {
            "operationId": "feedback_api_ai_memory_feedback_post",
            "requestBody": {"kind": "cited", "observation_id": _OBSERVATION_ID},
        },
        "ObservationHistory": {
            "operationId": "history_api_ai_memory__observation_id__history_get",
            "parameters": {"observation_id": _OBSERVATION_ID},
        },
        "UnmergeObservation": {
            "operationId": "unmerge_api_ai_memory__observation_id__unmerge_post",
            "parameters": {"observation_id": _OBSERVATION_ID},
        },
        "DeleteObservation": {
            "operationId": "delete_api_ai_memory__observation_id__delete",
            "parameters": {"observation_id": _OBSERVATION_ID},
        },
    }


def describe(schema: dict[str, Any]) -> None:
    schemas = schema["components"]["schemas"]
    types = sorted(get_settings().engram_observation_types)
    for model in ("RememberRequest", "MarkRequest"):
        schemas[model]["properties"]["type"]["enum"] = types
    schemas["FeedbackRequest"]["oneOf"] = _FEEDBACK_SHAPES
    schemas["RememberRequest"]["allOf"] = _REMEMBER_RULES
    schemas["MarkRequest"]["allOf"] = [_TEAM_RULE]
    schemas["RememberRequest"]["properties"]["expires_at"]["description"] = "after valid_from when both are given"
    for model in ("RememberRequest", "MarkRequest"):
        schemas[model]["properties"]["scope"]["description"] = (
            "'sensitive' needs view:SensitiveAiMemory; 'team' needs team_ids the caller belongs to (or manage)"
        )
    schemas["SearchRequest"]["properties"]["query"]["pattern"] = QUERY_PATTERN
    events = schema["paths"]["/api/ai/events"]["post"]
    events["requestBody"] = {
        "required": True,
        "content": {"application/cloudevents+json": {"schema": _CLOUD_EVENT}},
    }
    remember = schema["paths"]["/api/ai/memory"]["post"]["responses"]
    for status in ("200", "201"):
        remember.setdefault(status, {"description": "stored" if status == "201" else "updated or deduplicated"})
        remember[status]["links"] = _created_links()
        if "content" not in remember[status]:
            remember[status]["content"] = remember["200"].get("content", {})
