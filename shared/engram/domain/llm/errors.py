"""What a provider call can end in: one exception per way the gateway reacts (fallback, backoff,
shrinking the request, or giving up)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engram.domain.llm.messages import Attempt


class LlmError(Exception):
    """A provider call failed; subclasses say how the gateway reacts."""

    def __init__(self, message: str, *, model: str | None = None) -> None:
        super().__init__(message)
        self.model = model
        self.emitted = False  # streamed tokens had reached the caller before it failed


class RateLimited(LlmError):
    """HTTP 429: back off (honouring retry-after), then fall back."""

    def __init__(self, message: str, *, model: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, model=model)
        self.retry_after = retry_after


class Overloaded(RateLimited):
    """HTTP 529 (or 503 overloaded): treated like a rate limit."""


class PromptTooLong(LlmError):
    """HTTP 400 'prompt is too long': shrink the context and try again."""


class LlmTimeout(LlmError):
    """The per-call timeout passed: fail fast to the fallback."""


class EmptyResponse(LlmError):
    """The provider answered 200 with no usable content (a silent refusal or a glitch)."""


class ContentRefused(LlmError):
    """The provider answered, but refused the content (a policy filter, `stop_reason: refusal`,
    OpenAI's `refusal` / `content_filter`): the content fallback asks the next profile."""

    def __init__(self, message: str, *, model: str | None = None, refusal: str = "") -> None:
        super().__init__(message, model=model)
        self.refusal = refusal


class ProviderNotConfigured(LlmError):
    """The profile's provider has no endpoint or key in this deployment: the chain skips it."""


class ProviderError(LlmError):
    """Any other provider failure (5xx, connection, unexpected 4xx)."""

    def __init__(self, message: str, *, model: str | None = None, status: int | None = None) -> None:
        super().__init__(message, model=model)
        self.status = status


class LlmUnavailable(LlmError):
    """Every profile of the chain failed (or no provider is configured)."""

    def __init__(self, message: str, attempts: Sequence[Attempt] = ()) -> None:
        super().__init__(message)
        self.attempts = list(attempts)


class StreamInterrupted(LlmError):
    """A streamed answer failed after tokens reached the caller: no silent fallback mid-answer."""


def retry_after_seconds(headers: Any) -> float | None:
    """A 429's or 529's wait from its headers (`retry-after-ms` first, then `retry-after` in
    seconds), as both providers' APIs send them; None when absent or not a number."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name) if headers is not None else None
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None
