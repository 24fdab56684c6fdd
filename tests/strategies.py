"""Hypothesis strategies shared by unit and integration tests."""

from __future__ import annotations

from typing import Any

from cloudevents.http import CloudEvent
from hypothesis import strategies as st

from engram.domain.events import CORE_ATTRIBUTES

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(max_size=40)
    | st.floats(allow_nan=False, allow_infinity=False, width=32),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)

ext_names = st.from_regex(r"\A[a-z][a-z0-9]{0,19}\Z").filter(lambda n: n not in CORE_ATTRIBUTES and n != "data")
attr_text = st.text(min_size=1, max_size=60)


@st.composite
def cloud_events(draw: st.DrawFn, *, binary_data: bool = True) -> CloudEvent:
    attributes: dict[str, Any] = {
        "id": draw(attr_text),
        "source": draw(attr_text),
        "type": draw(attr_text),
        "specversion": "1.0",
        "time": draw(st.datetimes(timezones=st.just(__import__("datetime").UTC))).isoformat(),
    }
    if draw(st.booleans()):
        attributes["subject"] = draw(attr_text)
    for name in draw(st.lists(ext_names, max_size=4, unique=True)):
        attributes[name] = draw(attr_text)
    if binary_data and draw(st.integers(0, 4)) == 0:
        attributes["datacontenttype"] = "application/octet-stream"
        data: Any = draw(st.binary(min_size=1, max_size=64))
    else:
        attributes["datacontenttype"] = "application/json"
        data = draw(json_values)
    return CloudEvent(attributes, data)
