"""Dead letters as an operator sees them (engram.domain.dead_letters): pure, no server."""

from __future__ import annotations

import re

import pytest

from engram.domain.bus_access import subject_regex
from engram.domain.dead_letters import DeadLetter, DeadLetterFilter, tenant_filters, unquote
from engram.domain.subjects import dead_letter_subject, subject


def letter(seq: int = 7, tenant: str = "acme", consumer: str = "extract-observation", **headers: str) -> DeadLetter:
    original = subject("ingest", tenant, "alice@example.com", "com.example.crm.customer.created.v1")
    base = {
        "ce-id": "evt-1",
        "ce-type": "com.example.crm.customer.created.v1",
        "ce-tenantid": tenant.replace(" ", "%20"),
        "ce-source": "/crm",
        "Engram-Dlq-Reason": "data.name contains U+0000",
        "Engram-Dlq-Consumer": consumer,
        "Engram-Dlq-Subject": original,
        "Engram-Dlq-Deliveries": "1",
        "Engram-Dlq-Stream-Seq": "42",
        "Nats-Msg-Id": f"dlq:{consumer}:42",
    }
    return DeadLetter(seq, dead_letter_subject(f"dlq.engram.{consumer}", original), {**base, **headers}, b"{}")


def test_what_a_dead_letter_says() -> None:
    d = letter(tenant="acme corp")
    assert (d.consumer, d.event_id, d.event_type, d.tenant, d.deliveries) == (
        "extract-observation",
        "evt-1",
        "com.example.crm.customer.created.v1",
        "acme corp",  # percent-decoded, as the NATS binding encodes it
        1,
    )
    assert d.original_subject == "engram.ingest.acme_20corp.alice_40example_2Ecom.com.example.crm.customer.created.v1"
    assert d.summary()["reason"] == "data.name contains U+0000"


def test_without_the_subject_header_it_is_rebuilt_from_the_dead_letters_own() -> None:
    d = letter()
    headers = {k: v for k, v in d.headers.items() if k not in ("Engram-Dlq-Subject", "Engram-Dlq-Consumer")}
    bare = DeadLetter(d.seq, d.subject, headers, d.body)
    assert bare.consumer == "extract-observation" and bare.original_subject == d.original_subject


def test_a_replay_carries_the_original_headers_and_a_message_id_of_its_own() -> None:
    replay = letter(seq=9).replay_headers()
    assert not any(k.startswith("Engram-Dlq-") for k in replay)
    assert replay["Nats-Msg-Id"] == "replay:extract-observation:9"
    assert {k: replay[k] for k in ("ce-id", "ce-type", "ce-source")} == {
        "ce-id": "evt-1",
        "ce-type": "com.example.crm.customer.created.v1",
        "ce-source": "/crm",
    }


@pytest.mark.parametrize(
    ("which", "hit"),
    [
        (DeadLetterFilter(), True),
        (DeadLetterFilter(consumer="extract-observation"), True),
        (DeadLetterFilter(consumer="embed-index"), False),
        (DeadLetterFilter(tenant="acme"), True),
        (DeadLetterFilter(tenant="other"), False),
        (DeadLetterFilter(event_type="com.example.crm.customer.created.v1"), True),
        (DeadLetterFilter(event_type="com.example.other.v1"), False),
        (DeadLetterFilter(reason="u+0000"), True),
        (DeadLetterFilter(reason="timeout"), False),
    ],
)
def test_a_filter_selects_by_consumer_tenant_type_and_reason(which: DeadLetterFilter, hit: bool) -> None:
    d = letter()
    assert which.matches(d) is hit
    # the subject filter never drops what the headers would keep
    if hit:
        assert re.match(subject_regex(which.subject), d.subject)


def test_the_subject_filter_narrows_by_consumer_and_tenant() -> None:
    assert DeadLetterFilter().subject == "dlq.engram.*.>"
    assert DeadLetterFilter(consumer="embed-index", tenant="a b").subject == "dlq.engram.embed-index.*.a_20b.>"
    assert not re.match(subject_regex(DeadLetterFilter(tenant="other").subject), letter().subject)


def test_a_tenants_filters_cover_its_subjects_and_no_other_tenants() -> None:
    main, dead = (re.compile(subject_regex(f)) for f in tenant_filters("acme"))
    for family in ("ingest", "mark", "chat", "observation", "feedback"):
        assert main.match(subject(family, "acme", "bob", "x.y"))
        assert not main.match(subject(family, "acme2", "bob", "x.y"))
    assert dead.match(letter(tenant="acme").subject) and not dead.match(letter(tenant="acmex").subject)


def test_unquote() -> None:
    assert unquote("M%C3%BCller%20GmbH") == "Müller GmbH" and unquote("plain") == "plain"
