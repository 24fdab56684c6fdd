from __future__ import annotations

import json

import pytest
from cloudevents.http import CloudEvent
from hypothesis import given, settings

from engram.adapters.nats_binding import (
    dedup_id,
    from_nats,
    percent_decode,
    percent_encode,
    to_nats_binary,
    to_nats_structured,
)
from engram.domain.errors import InvalidEvent
from tests.strategies import cloud_events


def same(a: CloudEvent, b: CloudEvent) -> bool:
    return dict(a.get_attributes()) == dict(b.get_attributes()) and a.get_data() == b.get_data()


@settings(max_examples=300)
@given(cloud_events())
def test_binary_round_trip(event: CloudEvent) -> None:
    headers, body = to_nats_binary(event)
    assert headers["Nats-Msg-Id"] == dedup_id(event.get_attributes())
    assert all(0x21 <= ord(c) <= 0x7E for v in headers.values() for c in v), "header values are printable ASCII"
    assert same(from_nats(headers, body), event)


@settings(max_examples=300)
@given(cloud_events())
def test_structured_round_trip(event: CloudEvent) -> None:
    headers, body = to_nats_structured(event)
    assert headers["Content-Type"] == "application/cloudevents+json"
    assert same(from_nats(headers, body), event)


def test_percent_encoding_per_spec() -> None:
    assert percent_encode('Euro € 100% "x"') == "Euro%20%E2%82%AC%20100%25%20%22x%22"
    assert percent_decode("Euro%20%e2%82%ac") == "Euro €"  # lowercase hex accepted
    assert percent_decode("plain%41") == "plainA"  # unnecessary encoding accepted
    with pytest.raises(InvalidEvent, match="UTF-8"):
        percent_decode("%FF%FE")
    with pytest.raises(InvalidEvent, match="percent-encoding"):
        percent_decode("bad%2")


def test_receiver_accepts_content_type_for_binary_and_rejects_junk() -> None:
    headers = {
        "ce-specversion": "1.0",
        "ce-id": "1",
        "ce-source": "/s",
        "ce-type": "t",
        "content-type": "application/json",
    }
    ev = from_nats(headers, b'{"a": 1}')
    assert ev.get_data() == {"a": 1} and ev["datacontenttype"] == "application/json"
    with pytest.raises(InvalidEvent, match="missing required"):
        from_nats({"ce-specversion": "1.0", "ce-id": "1"}, b"{}")
    with pytest.raises(InvalidEvent, match="neither"):
        from_nats({}, b"hello")
    with pytest.raises(InvalidEvent, match="not valid JSON"):
        from_nats(headers, b"{nope")
    with pytest.raises(InvalidEvent, match="extension attribute"):
        from_nats({**headers, "ce-Tenant_ID": "x"}, b"{}")
    structured = json.dumps({"specversion": "1.0", "id": "1", "source": "/s", "type": "t", "data": [1]}).encode()
    assert from_nats(None, structured).get_data() == [1]


def test_publish_rejects_bad_extension_names() -> None:
    ev = CloudEvent({"type": "t", "source": "/s", "Tenant_ID": "x"}, {})
    with pytest.raises(InvalidEvent):
        to_nats_binary(ev)


def test_the_dedup_id_is_per_tenant_source_and_event_id() -> None:
    """JetStream drops a repeated `Nats-Msg-Id`: two tenants' systems that number their events
    alike must not lose each other's events, and one event published twice must stay one."""

    def event(tenant: str, source: str = "/crm", ident: str = "order-1") -> CloudEvent:
        return CloudEvent({"id": ident, "source": source, "type": "com.acme.order.created", "tenantid": tenant}, {})

    ids = {
        to_nats_binary(event("acme"))[0]["Nats-Msg-Id"],
        to_nats_binary(event("globex"))[0]["Nats-Msg-Id"],
        to_nats_binary(event("acme", source="/erp"))[0]["Nats-Msg-Id"],
        to_nats_binary(event("acme", ident="order-2"))[0]["Nats-Msg-Id"],
    }
    assert len(ids) == 4
    assert to_nats_binary(event("acme"))[0]["Nats-Msg-Id"] == to_nats_structured(event("acme"))[0]["Nats-Msg-Id"]
    assert to_nats_binary(event("acme"))[0]["Nats-Msg-Id"] in ids  # the same event, the same id
    # no separator trick joins two tenants: ("a", "b/c") and ("a/b", "c") differ
    assert dedup_id({"tenantid": "a", "source": "b/c", "id": "1"}) != dedup_id(
        {"tenantid": "a/b", "source": "c", "id": "1"}
    )
