"""The CloudEvents NATS protocol binding (R-3.3), by hand: no SDK version ships one.

Publish is binary mode: the payload is the data, every attribute a `ce-<name>` header with a
percent-encoded value (space, `"`, `%` and anything outside U+0021..U+007E as UTF-8 `%XY`),
`datacontenttype` as `ce-datacontenttype`, and `Nats-Msg-Id` = `dedup_id` (tenant, source and
id: CloudEvents makes only source + id unique, and two tenants' systems may use the same
source and ids) so JetStream drops re-published duplicates of one event and nothing else.
Receive accepts binary mode and structured mode (a `Content-Type` containing
`application/cloudevents`, as the Knative NATS JetStream broker writes).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from cloudevents.http import CloudEvent

from engram.domain.errors import InvalidEvent
from engram.domain.events import check_extension_names

JSON_TYPE = "application/json"
STRUCTURED_TYPE = "application/cloudevents+json"
_REQUIRED = ("id", "source", "specversion", "type")


def _needs_encoding(byte: int) -> bool:
    return byte <= 0x20 or byte >= 0x7F or byte in (0x22, 0x25)


_SAFE = re.compile(r"[\x21\x23\x24\x26-\x7e]*")


def percent_encode(value: str) -> str:
    if _SAFE.fullmatch(value):  # the common case: nothing to encode
        return value
    out = []
    for byte in value.encode("utf-8"):
        out.append(f"%{byte:02X}" if _needs_encoding(byte) else chr(byte))
    return "".join(out)


def percent_decode(value: str) -> str:
    raw = bytearray()
    i = 0
    data = value.encode("utf-8", errors="surrogateescape")
    while i < len(data):
        b = data[i]
        if b == 0x25:  # %
            hexpart = data[i + 1 : i + 3]
            if len(hexpart) != 2:
                raise InvalidEvent(f"bad percent-encoding in header value {value!r}")
            try:
                raw.append(int(hexpart, 16))
            except ValueError as exc:
                raise InvalidEvent(f"bad percent-encoding in header value {value!r}") from exc
            i += 3
        else:
            raw.append(b)
            i += 1
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidEvent(f"header value is not valid UTF-8 after decoding: {value!r}") from exc


def _attr_str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _encode_data(event: CloudEvent) -> tuple[bytes, str]:
    data = event.get_data()
    content_type = event.get("datacontenttype") or JSON_TYPE
    if data is None:
        return b"", content_type
    if isinstance(data, bytes | bytearray):
        return bytes(data), content_type if event.get("datacontenttype") else "application/octet-stream"
    if isinstance(data, str) and "json" not in content_type:
        return data.encode("utf-8"), content_type
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8"), content_type


def dedup_id(attributes: Mapping[str, Any]) -> str:
    """The `Nats-Msg-Id` of an event: one per tenant, source and id, printable ASCII.

    JetStream drops a message whose id it has seen within the stream's duplicate window. With
    the event id alone, tenant B's `order-1` from `/crm` would be dropped as a duplicate of
    tenant A's; the three parts are joined by a separator no attribute may hold and hashed
    (SHA-256, 128 bits kept), so the header stays short whatever the source URI is."""
    parts = (
        _attr_str(attributes.get("tenantid") or ""),
        _attr_str(attributes.get("source") or ""),
        _attr_str(attributes["id"]),
    )
    return "ce-" + hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def to_nats_binary(event: CloudEvent) -> tuple[dict[str, str], bytes]:
    """Headers and payload for a binary-mode NATS message."""
    attributes = event.get_attributes()
    check_extension_names(dict(attributes))
    body, content_type = _encode_data(event)
    headers: dict[str, str] = {}
    for name, value in attributes.items():
        if name == "datacontenttype" or value is None:
            continue
        headers[f"ce-{name}"] = percent_encode(_attr_str(value))
    headers["ce-datacontenttype"] = percent_encode(content_type)
    headers["Nats-Msg-Id"] = dedup_id(attributes)
    return headers, body


def to_nats_structured(event: CloudEvent) -> tuple[dict[str, str], bytes]:
    """Headers and payload for a structured-mode NATS message (JSON event format)."""
    attributes = dict(event.get_attributes())
    check_extension_names(attributes)
    doc: dict[str, Any] = {k: _attr_str(v) for k, v in attributes.items() if v is not None}
    data = event.get_data()
    if isinstance(data, bytes | bytearray):
        doc["data_base64"] = base64.b64encode(bytes(data)).decode("ascii")
    elif data is not None:
        doc["data"] = data
    body = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return {"Content-Type": STRUCTURED_TYPE, "Nats-Msg-Id": dedup_id(attributes)}, body


def _decode_data(body: bytes, content_type: str | None) -> Any:
    if not body:
        return None
    ct = (content_type or JSON_TYPE).lower()
    if "json" in ct:
        try:
            return json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidEvent(f"data is declared {content_type!r} but is not valid JSON: {exc}") from exc
    if ct.startswith("text/"):
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEvent("text data is not valid UTF-8") from exc
    return body


def _finish(attributes: dict[str, Any], data: Any) -> CloudEvent:
    missing = [a for a in _REQUIRED if not attributes.get(a)]
    if missing:
        raise InvalidEvent(f"missing required CloudEvents attribute(s): {', '.join(missing)}")
    if attributes["specversion"] != "1.0":
        raise InvalidEvent(f"unsupported specversion {attributes['specversion']!r}")
    check_extension_names(attributes)
    return CloudEvent(attributes, data)


def from_nats(headers: Mapping[str, str] | None, body: bytes) -> CloudEvent:
    """Decode a NATS message in binary or structured mode; raise InvalidEvent for anything else."""
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    content_type = lowered.get("content-type")
    if content_type and "application/cloudevents" in content_type.lower():
        return from_structured(body)
    if "ce-specversion" in lowered:
        attributes: dict[str, Any] = {}
        for name, value in lowered.items():
            if name.startswith("ce-"):
                attributes[name[3:]] = percent_decode(value)
        datacontenttype = attributes.pop("datacontenttype", None) or content_type
        if datacontenttype:
            attributes["datacontenttype"] = datacontenttype
        return _finish(attributes, _decode_data(body, datacontenttype))
    if body[:1] == b"{":  # structured without a content type (some producers omit it)
        return from_structured(body)
    raise InvalidEvent("message is neither a binary-mode (ce-specversion) nor a structured CloudEvent")


def from_structured(body: bytes) -> CloudEvent:
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidEvent(f"structured event is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise InvalidEvent("structured event must be a JSON object")
    data: Any = None
    if "data_base64" in doc:
        try:
            data = base64.b64decode(doc.pop("data_base64"), validate=True)
        except (ValueError, TypeError) as exc:
            raise InvalidEvent("data_base64 is not valid base64") from exc
    elif "data" in doc:
        data = doc.pop("data")
    attributes = dict(doc)
    for k, v in attributes.items():
        if not isinstance(v, str | int | bool):
            raise InvalidEvent(f"attribute {k!r} must be a string, number or boolean")
    return _finish(attributes, data)
