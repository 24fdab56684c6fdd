"""Secrets are not memory: what Engram derives from a chat or an event keeps no credential, card
number or token (`engram.domain.secrets`); a person's own write is kept as written."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from stdnum import luhn

from bench.secrets import LOCOMO, XQUAD, run
from bench.secrets_set import BENIGN, SECRETS
from engram.domain.conversation import chat_units
from engram.domain.observation import ObservationDraft, Source, TriggerSource
from engram.domain.secrets import CARD_WITHHELD, WITHHELD, may_hold_secrets, withhold, without_secrets


def test_the_labelled_set_both_languages() -> None:
    assert len(SECRETS) >= 30 and len(BENIGN) >= 30
    kept = [t for t, values in SECRETS if any(v in without_secrets(t) for v in values)]
    changed = [t for t in BENIGN if without_secrets(t) != t]
    assert kept == [] and changed == []  # bench.secrets reports the held-out set too (RESULTS.md)


@pytest.mark.parametrize(
    ("text", "expected", "kinds"),
    [
        ("my PIN is 4711", "my PIN is [withheld]", {"credential"}),
        ("Das WLAN-Passwort lautet Sonnenblume7.", "Das WLAN-Passwort lautet [withheld].", {"credential"}),
        ("the password is swordfish.", "the password is [withheld].", {"credential"}),
        ('password for my bank is "Blue Sea 9" ok', "password for my bank is [withheld] ok", {"credential"}),
        ("I changed my password to Tulpe#22 today", "I changed my password to [withheld] today", {"credential"}),
        ("paid with 4111-1111-1111-1111 on Monday", f"paid with {CARD_WITHHELD} on Monday", {"card"}),
        ("use sk-ant-api03-abcdefghijklmnopqrstuv", "use sk-[redacted]", {"token"}),
        ("btw the garage door code is 7314", "btw the garage door code is [withheld]", {"credential"}),
        ("Der Tresorcode lautet 8642.", "Der Tresorcode lautet [withheld].", {"credential"}),
        ("WLAN-Schlüssel lautet Kaffeetasse99", "WLAN-Schlüssel lautet [withheld]", {"credential"}),
        ("the wifi pw: Garten2019", "the wifi pw: [withheld]", {"credential"}),
        # round 4: a login as a pair, OTP, a security answer, a lock's combo, a code digit by digit,
        # and a fifth word between the name and the value when the value has a digit or a sign
        ("netflix login is jo@mail.com / Bright#81", "netflix login is jo@mail.com / [withheld]", {"credential"}),
        ("OTP from the bank: 662910, what now?", "OTP from the bank: [withheld], what now?", {"credential"}),
        ("my security answer is Rosebud, ok", "my security answer is [withheld], ok", {"credential"}),
        ("Padlock combo for the shed: 0374", "Padlock combo for the shed: [withheld]", {"credential"}),
        ("Der Alarmanlagen-Code ist 7 3 9 1.", "Der Alarmanlagen-Code ist [withheld].", {"credential"}),
        (
            "Das Passwort für die Fritzbox steht hier: Blauwal2020",
            "Das Passwort für die Fritzbox steht hier: [withheld]",
            {"credential"},
        ),
        # round 5: a key with a value of letters and digits, key names with underscores, a lock
        # that opens with a number, a seed phrase, a security question's answer, a Prüfnummer
        ("The key for the VPN is vpn-Kx92!mQ", "The key for the VPN is [withheld]", {"credential"}),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", "AWS_SECRET_ACCESS_KEY=[withheld]", {"credential"}),
        ("the hotel safe opens with 5902.", "the hotel safe opens with [withheld].", {"credential"}),
        (
            "seed phrase: orbit lemon tiger canvas river shadow. Thanks",
            "seed phrase: [withheld]. Thanks",
            {"credential"},
        ),
        (
            "Sicherheitsfrage: erstes Haustier — Flocke",
            "Sicherheitsfrage: erstes Haustier — [withheld]",
            {"credential"},
        ),
        ("Kartenprüfnummer 123", "Kartenprüfnummer [withheld]", {"credential"}),
        # "name=value" kept its "=" (it was "password[withheld]]": the second pass took "=[withheld]")
        ("DB_PASSWORD=hunter2 in .env", "DB_PASSWORD=[withheld] in .env", {"credential"}),
        ("PIN=4711", "PIN=[withheld]", {"credential"}),
    ],
)
def test_what_is_withheld_and_the_words_around_it(text: str, expected: str, kinds: set[str]) -> None:
    result = withhold(text)
    assert result.text == expected and result.kinds == kinds


@pytest.mark.parametrize(
    "text",
    [
        "My password is too long to type.",  # words that describe a password are not one
        "I sent the password to Tom.",  # "to" takes only a token with a digit or a sign
        "Tan is 34 years old.",  # a TAN is written in capitals; Tan is a name
        "I noticed a spiderman pin on your purse. Is Spider-Man your favourite?",  # not across sentences
        "My IBAN is DE89 3704 0044 0532 0130 00.",  # business facts stay
        "Order 1234567890123456 shipped.",  # 16 digits that fail the Luhn check
        "Call me on +49 1512 3456789.",
        "My passport is valid until 2030.",  # "pass" is a whole word, and then needs a digit or a sign
        "The bus pass is valid.",
        "What must the Parliament go through to pass legislation?",  # a "?" that ends a word is no sign
        "The code is on GitHub.",
        "Our zip code is 10115.",  # a zip, post, area or QR code is no secret
        "Der Dresscode ist elegant.",
        "The PIN pad at the front desk is broken.",  # a fifth word between takes only digits or signs
        "The combo meal was 9.99 today.",  # "combo" only for a lock's
        "login problems since 12/2024",  # a pair's second part needs a letter
        "The login page was down on 3/4.",
        "Ich habe meine Online-Banking-PIN vergessen, was nun?",  # "was" is German here
        "The key is under the mat.",  # a key's value needs letters and digits or signs
        "The key date is 12 May, the key figure 4.2%.",
        "A key role in 2024 was played by Model3 sales.",  # a fifth word between: digits or signs only
        "The door opens with a code, ask reception.",  # a lock opens with digits only
        "Write down your seed phrase on paper and keep it offline.",  # no "is" or ":" before six words
        "Die Sicherheitsfrage bei der Bank nervt mich - wirklich.",  # no answer: it does not end in one
    ],
)
def test_what_is_kept(text: str) -> None:
    assert withhold(text) == withhold(text) and without_secrets(text) == text


@given(
    first=st.sampled_from("23456"),
    body=st.text(alphabet="0123456789", min_size=11, max_size=17),
    cuts=st.lists(st.integers(min_value=1, max_value=18), max_size=5),
    separator=st.sampled_from([" ", "-", ""]),
)
def test_a_card_number_is_withheld_however_it_is_grouped(
    first: str, body: str, cuts: list[int], separator: str
) -> None:
    """Any 13-19 digit number starting 2-6 that passes the Luhn check, written whole or in groups
    of any size, is withheld, and withholding twice changes nothing."""
    number = first + body + luhn.calc_check_digit(first + body)
    grouped = "".join(d + (separator if i + 1 in cuts else "") for i, d in enumerate(number)).strip(" -")
    out = without_secrets(f"paid with {grouped} today")
    assert out == f"paid with {CARD_WITHHELD} today"
    assert without_secrets(out) == out


@given(
    first=st.sampled_from("23456"),
    body=st.text(alphabet="0123456789", min_size=11, max_size=17),
    named=st.sampled_from(
        ["Order", "Order #", "order no.", "Invoice number:", "the tracking number is", "Bestellnummer:", "Rechnungsnr."]
    ),
    card=st.sampled_from(["with card", "Kreditkarte", "visa:", "card for the booking:", "my credit card is"]),
)
def test_a_number_a_business_id_names_stays_unless_a_card_is_named(
    first: str, body: str, named: str, card: str
) -> None:
    """One in ten 16-digit order numbers passes the Luhn check: named as an order, invoice or
    tracking number right before it, such a number stays; a card named before it is withheld
    whatever else is said ("pay order 77 with card ...")."""
    number = first + body + luhn.calc_check_digit(first + body)
    assert (
        without_secrets(f"{named} {number} shipped, paid by credit card")
        == f"{named} {number} shipped, paid by credit card"
    )
    assert without_secrets(f"Pay {named} 77 {card} {number}") == f"Pay {named} 77 {card} {CARD_WITHHELD}"
    # a business word further back does not name it ("the order ... came with my card ...")
    assert CARD_WITHHELD in without_secrets(f"{named} 77: payment {number}")


@given(
    before=st.text(alphabet="0123456789", min_size=1, max_size=4),
    first=st.sampled_from("23456"),
    body=st.text(alphabet="0123456789", min_size=11, max_size=17),
)
def test_a_card_number_after_other_digits_is_not_left_whole(before: str, first: str, body: str) -> None:
    """ "Table 1 4111 ...": a number before the card does not hide it. The first span that passes
    the check is withheld; where that span starts in the number before, at most the card's last
    digits stay."""
    number = first + body + luhn.calc_check_digit(first + body)
    out = without_secrets(f"table {before} {number} today")
    assert number not in out and CARD_WITHHELD in out
    assert without_secrets(out) == out


def test_a_derived_draft_is_withheld_and_a_manual_one_kept() -> None:
    said = "Remember: my PIN is 4711 and my card is 4111 1111 1111 1111"
    fields = {"tenant_id": "t", "user_id": "u", "title": said, "narrative": said, "facts": [said]}
    fields |= {"concepts": ["PIN 4711"], "discovery_tokens": [said]}
    for trigger in (TriggerSource.chat, TriggerSource.hook):
        draft = ObservationDraft(**fields, trigger_source=trigger)
        stored = [draft.title, draft.narrative, *draft.facts, *draft.concepts, *draft.discovery_tokens]
        assert all("4711" not in s and "4111" not in s for s in stored)
        assert WITHHELD in draft.title and CARD_WITHHELD in draft.narrative
    for trigger in (TriggerSource.manual, TriggerSource.consolidation):
        assert ObservationDraft(**fields, trigger_source=trigger).title == said
    # an agent's own write (an agent key, MCP `remember`) is withheld; a person's is not
    agent = ObservationDraft(**fields, trigger_source=TriggerSource.manual, source=Source.agent)
    assert "4711" not in agent.title and WITHHELD in agent.title
    assert ObservationDraft(**fields, trigger_source=TriggerSource.manual, source=Source.user).title == said
    merged = ObservationDraft(**fields, trigger_source=TriggerSource.consolidation, source=Source.agent)
    assert merged.title == said  # a consolidation keeps what its sources hold


def test_a_chats_units_keep_that_a_secret_was_given_not_the_secret() -> None:
    import uuid
    from datetime import UTC, datetime

    user, answer = uuid.uuid4(), uuid.uuid4()
    units = chat_units(
        tenant_id="t",
        user_id="u",
        chat_id=uuid.uuid4(),
        session_id=uuid.uuid4(),
        started_at=datetime(2026, 12, 5, tzinfo=UTC),
        messages=[
            (user, "user", "Our wifi password is Sonnenblume7. Can you write a note for the guests?"),
            (answer, "assistant", "Sure: 'Welcome! The wifi password is Sonnenblume7.' Enjoy your stay."),
        ],
    )
    assert units and all("Sonnenblume7" not in " ".join([u.title, u.narrative, *u.discovery_tokens]) for u in units)
    assert any("wifi password is [withheld]" in u.narrative for u in units)


@pytest.mark.skipif(not (LOCOMO.exists() and (XQUAD / "xquad.de.json").exists()), reason="reads ../shared/bench")
def test_the_bench_reports_its_figures_and_the_corpora_stay_as_they_are() -> None:
    """`bench.secrets` end to end; LoCoMo, XQuAD and the generated chats hold no secret, so
    withholding leaves every one of their texts as it is (recall on them cannot move)."""
    figures = run(LOCOMO, XQUAD, repeats=1)
    assert figures["tuned_withhold_secrets_withheld"] == 1.0 and figures["tuned_withhold_benign_changed"] == 0.0
    assert (
        figures["held_out_2_withhold_secrets_withheld"] >= 0.9 and figures["held_out_2_withhold_benign_changed"] <= 0.05
    )
    for corpus in ("locomo", "xquad", "assistant_chats"):
        assert figures[f"{corpus}_texts"] > 1_000 and figures[f"{corpus}_changed"] == 0
    assert figures["us_per_text"] > 0


_PIECES = st.sampled_from(
    [
        "my ",
        "PIN ",
        "pin",
        " is ",
        "Passwort ",
        "lautet ",
        "code ",
        ": ",
        "4111 1111 1111 1111",
        "sk-",
        "eyJ",
        "7314",
        "x" * 16,
        " ",
        "TAN ",
        "pw ",
        "Schlüssel",
        "12345678901234",
        ".",
        "?",
        "SU",
        "A" * 56,
    ]
)


@given(st.lists(st.one_of(_PIECES, st.text(max_size=12)), max_size=12), st.integers(min_value=1, max_value=4))
def test_the_quick_test_never_lets_a_text_through_that_withholding_would_change(pieces: list[str], parts: int) -> None:
    """`may_hold_secrets` lets a draft skip `withhold`: it may say yes for nothing, never no for a
    text that `withhold` changes."""
    text = "".join(pieces)
    fields = [text[i::parts] for i in range(parts)] + [text]
    if not may_hold_secrets(*fields):
        assert all(without_secrets(f) == f for f in fields)
