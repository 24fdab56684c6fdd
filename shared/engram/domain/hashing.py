"""Content hashing: the same content is stored once per tenant and owner (R-4.1)."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable

_SPACE = re.compile(r"\s+")


def normalise_text(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed: cosmetic differences do not make new content."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def content_hash(obs_type: str, title: str, narrative: str, facts: Iterable[str] = ()) -> str:
    """SHA-256 over the normalised type, title, narrative and the set of facts."""
    parts = [
        normalise_text(obs_type),
        normalise_text(title),
        normalise_text(narrative),
        "\x1f".join(sorted({normalise_text(f) for f in facts if f.strip()})),
    ]
    return hashlib.sha256("\x1e".join(parts).encode("utf-8")).hexdigest()


def secret_hash(secret: str) -> str:
    """Agent keys are stored as SHA-256 of a 256-bit random secret (no slow hash needed)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()
