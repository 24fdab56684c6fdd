"""The memory list's page marks and capped totals (`domain.paging`)."""

from __future__ import annotations

import base64
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.domain.errors import Unprocessable
from engram.domain.paging import MARK_CHARS, MARK_PATTERN, TOTAL_CAP, PageMark, counted_total


@given(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999)),
    st.uuids(),
)
def test_a_mark_is_the_place_it_was_made_from(when: datetime, observation_id: uuid.UUID) -> None:
    mark = PageMark(when.replace(tzinfo=UTC), observation_id)
    text = mark.encode()
    assert len(text) == MARK_CHARS and re.fullmatch(MARK_PATTERN, text)
    assert PageMark.decode(text) == mark


@given(st.from_regex(MARK_PATTERN, fullmatch=True))
def test_every_string_of_the_pattern_is_a_place(text: str) -> None:
    """What the OpenAPI document admits is never refused (the fuzzer's valid cases are answered)."""
    mark = PageMark.decode(text)
    assert mark.created_at.tzinfo is not None
    assert PageMark.decode(mark.encode()) == mark or mark.created_at in (
        datetime.min.replace(tzinfo=UTC),
        datetime.max.replace(tzinfo=UTC),
    )


def test_a_time_beyond_a_datetime_is_the_first_or_last_place() -> None:
    beyond = (2**63 - 1).to_bytes(8, "big", signed=True) + uuid.UUID(int=7).bytes
    before = (-(2**63)).to_bytes(8, "big", signed=True) + uuid.UUID(int=7).bytes
    assert PageMark.decode(base64.urlsafe_b64encode(beyond).decode()).created_at == datetime.max.replace(tzinfo=UTC)
    assert PageMark.decode(base64.urlsafe_b64encode(before).decode()).created_at == datetime.min.replace(tzinfo=UTC)


@pytest.mark.parametrize(
    "text", ["", "abc", "A" * 31, "A" * 33, "+" * 32, "/" * 32, "A" * 31 + "=", "Ä" * 32, "A" * 32 + "\n"]
)
def test_a_mark_of_another_form_is_refused_with_its_field(text: str) -> None:
    with pytest.raises(Unprocessable) as refused:
        PageMark.decode(text)
    assert refused.value.field == "after"


def test_a_total_is_exact_up_to_the_cap() -> None:
    assert counted_total(0) == (0, True)
    assert counted_total(TOTAL_CAP) == (TOTAL_CAP, True)
    assert counted_total(TOTAL_CAP + 1) == (TOTAL_CAP, False)
    assert counted_total(4, cap=3) == (3, False)


def test_marks_order_like_the_list() -> None:
    """Later places in the list encode older times; the encoding keeps microseconds."""
    t = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    mark = PageMark(t + timedelta(microseconds=1), uuid.uuid4())
    assert PageMark.decode(mark.encode()).created_at - t == timedelta(microseconds=1)
