"""Text that PostgreSQL (and Elasticsearch) cannot store, found before it reaches them (R-16.1).

PostgreSQL refuses U+0000 in `text` and `jsonb` ("\\u0000 cannot be converted to text"), and a
lone surrogate (U+D800..U+DFFF without its pair, which JSON's `\\ud83d` escapes can produce)
has no UTF-8 form, so no driver can send it. Every entry point applies the same rule
(README, "Bad input"): such a value is rejected, naming the field, as a 422 over HTTP and as
a dead letter over NATS; only chat-turn's `message` (free text a person typed or pasted) is
cleaned instead: NUL removed, a lone surrogate replaced by U+FFFD.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def unstorable(value: str) -> str | None:
    """Why `value` cannot be stored, or None."""
    match = _UNSTORABLE.search(value)
    if match is None:
        return None
    char = match.group()
    if char == "\x00":
        return f"contains U+0000 (NUL) at position {match.start()}, which cannot be stored"
    return f"contains a lone surrogate U+{ord(char):04X} at position {match.start()}, which is not valid Unicode text"


def find_unstorable(value: Any, path: str) -> tuple[str, str] | None:
    """The first (field path, reason) in a JSON-like value whose text cannot be stored; keys too."""
    if isinstance(value, str):
        why = unstorable(value)
        return (path, why) if why else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and (why := unstorable(key)):
                return (where, f"field name {why}")
            if (found := find_unstorable(item, where)) is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if (found := find_unstorable(item, f"{path}.{i}" if path else str(i))) is not None:
                return found
    return None


def clean(value: str) -> str:
    """`value` without NUL, each lone surrogate replaced by U+FFFD (the fields documented to strip)."""
    return _UNSTORABLE.sub(lambda m: "" if m.group() == "\x00" else REPLACEMENT, value)


def event_fault(attributes: Mapping[str, Any], data: Any) -> str | None:
    """Why a CloudEvent cannot be stored (an attribute or its data holds unstorable text), or None."""
    found = find_unstorable(dict(attributes), "") or find_unstorable(data, "data")
    return f"{found[0]}: {found[1]}" if found else None
