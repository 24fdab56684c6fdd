"""The LLM gateway's pure parts (R-8.3, R-8.4): profiles, prompts, requests, replies, costs.

No I/O here, and nothing provider-specific. The gateway service (`engram.services.gateway`)
walks a profile's fallback chain and talks to the provider through the `engram.ports.LLM` port;
the Anthropic adapter turns an `LlmRequest` into the Messages API payload. The modules:
`errors` (what a call can end in), `config` (profiles, `llm.yaml`), `prompts` (`prompts.yaml`),
`messages` (requests, replies, usage) and `billing` (prices and costs); the names are re-exported
here, so callers import from `engram.domain.llm`.
"""

from engram.domain.llm.billing import ModelPrice, billed_usage, cost_usd
from engram.domain.llm.config import CompactionConfig, LlmConfig, Profile, expand
from engram.domain.llm.errors import (
    ContentRefused,
    EmptyResponse,
    LlmError,
    LlmTimeout,
    LlmUnavailable,
    Overloaded,
    PromptTooLong,
    ProviderError,
    ProviderNotConfigured,
    RateLimited,
    StreamInterrupted,
)
from engram.domain.llm.messages import (
    Attempt,
    Compaction,
    LlmReply,
    LlmRequest,
    Message,
    Priority,
    SystemBlock,
    ToolSpec,
    Usage,
    approx_tokens,
    from_last_compaction,
)
from engram.domain.llm.prompts import PromptLibrary, ResolvedPrompt

__all__ = [
    "Attempt",
    "Compaction",
    "CompactionConfig",
    "ContentRefused",
    "EmptyResponse",
    "LlmConfig",
    "LlmError",
    "LlmReply",
    "LlmRequest",
    "LlmTimeout",
    "LlmUnavailable",
    "Message",
    "ModelPrice",
    "Overloaded",
    "Priority",
    "Profile",
    "PromptLibrary",
    "PromptTooLong",
    "ProviderError",
    "ProviderNotConfigured",
    "RateLimited",
    "ResolvedPrompt",
    "StreamInterrupted",
    "SystemBlock",
    "ToolSpec",
    "Usage",
    "approx_tokens",
    "billed_usage",
    "cost_usd",
    "expand",
    "from_last_compaction",
]
