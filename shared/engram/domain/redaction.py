"""No secret and no message body in logs or telemetry (R-12.3, R-16.5). Pure functions.

- Values under a secret's name (`authorization`, `x-agent-key`, `token`, `password`, `secret`,
  `api_key`, `seed`, `cookie`, ...) become `[redacted]`.
- Values under a message body's name (`message`, `user_message`, `assistant_message`, `text`,
  `narrative`, `content`, `body`, `prompt`, ...) become `[redacted: N chars]`.
- Anywhere in any string: JWTs, `Bearer ...`, agent keys (`egk_...`), Anthropic and other API
  keys (`sk-...`), NKey seeds (`SU...`) and passwords in URLs (`scheme://user:password@host`)
  are replaced.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"
SECRET_NAMES = frozenset(
    {
        "authorization",
        "x_agent_key",
        "agent_key",
        "token",
        "access_token",
        "refresh_token",
        "jwt",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "api_key",
        "apikey",
        "x_api_key",
        "seed",
        "nkey_seed",
        "cookie",
        "set_cookie",
        "credentials",
        "private_key",
    }
)
BODY_NAMES = frozenset(
    {
        "message",
        "user_message",
        "assistant_message",
        "text",
        "narrative",
        "content",
        "body",
        "prompt",
        "answer",
        "transcript",
        "messages",
        "user_prompt",
    }
)
_PATTERNS = (
    (re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), "[jwt]"),
    (re.compile(r"(?i)\b(bearer|agentkey)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 [redacted]"),
    (re.compile(r"egk_[A-Za-z0-9_-]{16,}"), "egk_[redacted]"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "sk-[redacted]"),
    (re.compile(r"\bS[UAO][A-Z2-7]{56}\b"), "[nkey seed]"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^:/@\s]+):[^@\s/]+@"), r"\1:[redacted]@"),
)


def _name(key: Any) -> str:
    return str(key).lower().replace("-", "_")


def scrub(text: str) -> str:
    """`text` with every secret pattern replaced."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact(value: Any, key: Any = None, *, bodies: bool = True) -> Any:
    """A copy of `value` (dicts, lists, tuples, strings) without secrets (and without message
    bodies when `bodies`); other values are returned as they are."""
    name = _name(key) if key is not None else ""
    if name in SECRET_NAMES and value not in (None, ""):
        return REDACTED
    if bodies and name in BODY_NAMES and isinstance(value, str):
        return f"[redacted: {len(value)} chars]"
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: redact(v, k, bodies=bodies) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [redact(v, key, bodies=bodies) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value
