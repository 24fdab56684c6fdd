"""The Anthropic Messages API behind the `LLM` port (R-8.3, R-8.4).

`build_params` is the one place that shapes a request: prompt caching (`cache_control` on the
last tool, the cached system blocks and the last history message), server-side compaction
(`context_management.edits` and the `compact-2026-01-12` beta only for models in
`COMPACTION_SUPPORTED_MODELS`), and the assistant-content whitelist. The whitelist also applies
to every reply's blocks, so what the gateway keeps and sends back is provider-clean. The client
is created on first use with `max_retries=0`: the gateway owns retries and fallbacks, so a
failing provider never holds a chat turn in the SDK's own backoff. The SDK itself is imported
on first use too (it takes about a second to import), so functions that never call a model do
not pay for it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from engram.domain.llm import (
    Compaction,
    CompactionConfig,
    LlmError,
    LlmReply,
    LlmRequest,
    LlmTimeout,
    Message,
    Overloaded,
    PromptTooLong,
    ProviderError,
    RateLimited,
    billed_usage,
)
from engram.domain.llm.errors import retry_after_seconds

if TYPE_CHECKING:
    import anthropic

log = structlog.get_logger(__name__)

EPHEMERAL = {"type": "ephemeral"}
COMPACTION_REFUSAL_SECONDS = 600.0
PROVIDER = "anthropic"
COMPACTION_BETA = "compact-2026-01-12"
COMPACTION_EDIT_TYPE = "compact_20260112"

# Block types an assistant turn may echo back, and the fields each may carry on a request.
ASSISTANT_BLOCK_FIELDS: dict[str, tuple[str, ...]] = {
    "text": ("type", "text", "citations"),
    "tool_use": ("type", "id", "name", "input"),
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
    "compaction": ("type", "content", "encrypted_content", "signature", "tool_changes"),
    "server_tool_use": ("type", "id", "name", "input"),
    "web_search_tool_result": ("type", "tool_use_id", "content"),
}


def _whitelisted(blocks: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Whitelisted block types with their request fields only: response-only fields
    (`parsed_output`, null `citations`, ...) and unknown block types are dropped."""
    clean: list[dict[str, Any]] = []
    for block in blocks:
        allowed = ASSISTANT_BLOCK_FIELDS.get(str(block.get("type")))
        if allowed is not None:
            clean.append({k: block[k] for k in allowed if k in block and block[k] is not None})
    return clean


def sanitize_assistant_content(blocks: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Keep whitelisted block types with their request fields only (R-8.3).

    Response-only fields (`parsed_output`, null `citations`, ...) and unknown block types are
    dropped, as are empty text blocks, which the API rejects on the way back.
    """
    return [b for b in _whitelisted(blocks) if b["type"] != "text" or str(b.get("text", "")).strip()]


def find_compactions(content: Iterable[Mapping[str, Any]], usage: Mapping[str, Any] | None) -> list[Compaction]:
    """Compaction blocks in a response, with the input tokens of the iteration that compacted."""
    blocks = [b for b in content if b.get("type") == "compaction"]
    if not blocks:
        return []
    iteration_tokens = 0
    if usage:
        for item in usage.get("iterations") or []:
            if isinstance(item, Mapping) and item.get("type") == "compaction":
                iteration_tokens = int(item.get("input_tokens") or 0)
        if not iteration_tokens:
            iteration_tokens = int(usage.get("input_tokens") or 0)
    return [Compaction(len(b.get("content") or ""), iteration_tokens) for b in blocks]


def _with_cache(block: dict[str, Any]) -> dict[str, Any]:
    return {**block, "cache_control": dict(EPHEMERAL)}


def _compaction_as_text(block: dict[str, Any]) -> dict[str, Any] | None:
    summary = block.get("content")
    return {"type": "text", "text": f"[Summary of the earlier conversation]\n{summary}"} if summary else None


def _prepare_messages(messages: list[Message], *, compaction_ok: bool) -> list[Message]:
    prepared: list[Message] = []
    for message in messages:
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, list):
            blocks = sanitize_assistant_content(content)
            if not compaction_ok:  # a model without the beta cannot read compaction blocks
                converted: list[dict[str, Any]] = []
                for b in blocks:
                    if b.get("type") != "compaction":
                        converted.append(b)
                    elif (text := _compaction_as_text(b)) is not None:
                        converted.append(text)
                blocks = converted
            if not blocks:
                blocks = [{"type": "text", "text": "(no answer)"}]
            prepared.append({"role": "assistant", "content": blocks})
        else:
            prepared.append(dict(message))
    return prepared


def compaction_enabled(model: str, betas: Iterable[str], supported: Iterable[str]) -> bool:
    return COMPACTION_BETA in set(betas) and model in set(supported)


def build_params(
    request: LlmRequest,
    *,
    model: str,
    temperature: float | None,
    max_tokens: int,
    betas: Iterable[str],
    compaction_models: Iterable[str],
    compaction: CompactionConfig,
) -> dict[str, Any]:
    """The Messages API payload for one model (pure: tested without a server)."""
    beta_list = list(dict.fromkeys(betas))
    compact = compaction_enabled(model, beta_list, compaction_models)
    if not compact:
        beta_list = [b for b in beta_list if b != COMPACTION_BETA]
    params: dict[str, Any] = {"model": model, "max_tokens": request.max_tokens or max_tokens}
    chosen = request.temperature if request.temperature is not None else temperature
    if chosen is not None:
        params["extra_body"] = {"temperature": chosen}
    if request.system:
        params["system"] = [
            _with_cache({"type": "text", "text": b.text}) if b.cache else {"type": "text", "text": b.text}
            for b in request.system
            if b.text
        ]
    if request.tools:
        tools = [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in request.tools]
        tools[-1] = _with_cache(tools[-1])
        params["tools"] = tools
    if request.tool_choice:
        params["tool_choice"] = request.tool_choice
    messages = _prepare_messages(request.messages(), compaction_ok=compact)
    history_len = len(request.history)
    if request.cache_history and history_len and history_len <= len(messages):
        last = messages[history_len - 1]
        content = last["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else [dict(b) for b in content]
        if blocks:
            blocks[-1] = _with_cache(blocks[-1])
            messages[history_len - 1] = {**last, "content": blocks}
    params["messages"] = messages
    if compact:
        edit: dict[str, Any] = {
            "type": COMPACTION_EDIT_TYPE,
            "trigger": {"type": "input_tokens", "value": compaction.trigger_input_tokens},
            "pause_after_compaction": compaction.pause_after_compaction,
        }
        if compaction.instructions:
            edit["instructions"] = compaction.instructions
        params["context_management"] = {"edits": [edit]}
    if beta_list:
        params["betas"] = beta_list
    return params


def map_error(exc: Exception, model: str) -> LlmError:
    """SDK exceptions -> the gateway's error kinds."""
    import anthropic  # loaded already: the exception came from it

    if isinstance(exc, anthropic.APITimeoutError):
        return LlmTimeout(f"{model}: timed out", model=model)
    if isinstance(exc, anthropic.APIStatusError):
        kind = getattr(exc, "type", None)
        message = getattr(exc, "api_message", None) or str(exc)
        retry_after = retry_after_seconds(exc.response.headers)
        if exc.status_code == 429:
            return RateLimited(f"{model}: rate limited ({message})", model=model, retry_after=retry_after)
        if exc.status_code == 529 or kind == "overloaded_error":
            return Overloaded(f"{model}: overloaded ({message})", model=model, retry_after=retry_after)
        if exc.status_code in (400, 413) and "too long" in message.lower():
            return PromptTooLong(f"{model}: {message}", model=model)
        return ProviderError(f"{model}: HTTP {exc.status_code} {message}", model=model, status=exc.status_code)
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderError(f"{model}: connection failed ({exc})", model=model)
    return ProviderError(f"{model}: {type(exc).__name__}: {exc}", model=model)


def _reply_from_json(data: dict[str, Any], model: str, started: float) -> LlmReply:
    """A non-streamed response, read as plain JSON (the blocks are sent back as dicts anyway)."""
    content = [{k: v for k, v in b.items() if v is not None} for b in data.get("content") or [] if isinstance(b, dict)]
    usage_raw = data.get("usage") or {}
    return _assemble(content, usage_raw, data.get("stop_reason"), str(data.get("model") or model), started)


def _reply(message: Any, model: str, started: float) -> LlmReply:
    content = [b.to_dict(mode="json", exclude_none=True) for b in (message.content or [])]
    usage_raw = message.usage.to_dict(mode="json") if message.usage is not None else {}
    return _assemble(content, usage_raw, message.stop_reason, str(message.model or model), started)


def _assemble(
    content: list[dict[str, Any]], usage_raw: dict[str, Any], stop_reason: str | None, model: str, started: float
) -> LlmReply:
    """The reply with whitelisted blocks (compactions are read from the raw ones first). Blank text
    blocks stay, so `text` reads exactly as answered; `_prepare_messages` drops them on the way back."""
    return LlmReply(
        model=model,
        content=_whitelisted(content),
        stop_reason=stop_reason,
        usage=billed_usage(usage_raw),
        compactions=find_compactions(content, usage_raw),
        duration_ms=(time.perf_counter() - started) * 1000,
    )


class AnthropicLLM:
    def __init__(
        self,
        api_key: str,
        *,
        base_url: str | None = None,
        betas: Iterable[str] = (),
        compaction_models: Iterable[str] = (),
        compaction: CompactionConfig | None = None,
        max_tokens: int = 2048,
    ) -> None:
        self._api_key = api_key
        self._base_url = base_url
        self.betas = tuple(betas)
        self.compaction_models = frozenset(compaction_models)
        self.compaction = compaction or CompactionConfig()
        self.max_tokens = max_tokens
        self._client: anthropic.AsyncAnthropic | None = None
        # models that refused the compaction request although configured for it (a model list
        # older or newer than the API's), and until when they are asked without it (in this
        # process): long enough not to pay a refused call per turn, short enough that one odd
        # refusal does not switch compaction off until the next restart
        self.compaction_refused: dict[str, float] = {}

    @property
    def provider(self) -> str:
        return PROVIDER

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        if self._client is None:  # created on first use, never at import
            import anthropic

            self._client = anthropic.AsyncAnthropic(api_key=self._api_key, base_url=self._base_url, max_retries=0)
        return self._client

    async def warm(self) -> None:
        """Import the SDK in a thread and create the client, so the first turn does not wait for it."""
        import asyncio
        import importlib

        await asyncio.to_thread(importlib.import_module, "anthropic")
        _ = self.client

    def params(self, request: LlmRequest, *, model: str, temperature: float | None) -> dict[str, Any]:
        return build_params(
            request,
            model=model,
            temperature=temperature,
            max_tokens=self.max_tokens,
            betas=self.betas,
            compaction_models=self.compaction_models - self._refusing(),
            compaction=self.compaction,
        )

    def _refused_compaction(self, error: LlmError, params: dict[str, Any], model: str) -> bool:
        """A 400 about the compaction request itself, on a call that made one: remember the model
        and say so (the call is then repeated without it, instead of failing over)."""
        if "context_management" not in params or not isinstance(error, ProviderError) or error.status != 400:
            return False
        if not any(word in str(error).lower() for word in ("context_management", "compact")):
            return False
        self.compaction_refused[model] = time.monotonic() + COMPACTION_REFUSAL_SECONDS
        log.warning(
            "llm.compaction_refused", model=model, error=str(error)[:300], retry_in_s=COMPACTION_REFUSAL_SECONDS
        )
        return True

    def _refusing(self) -> set[str]:
        now = time.monotonic()
        return {model for model, until in self.compaction_refused.items() if until > now}

    async def complete(self, request: LlmRequest, *, model: str, timeout: float, temperature: float | None) -> LlmReply:
        params = self.params(request, model=model, temperature=temperature)
        started = time.perf_counter()
        try:
            # the raw response: the SDK still builds the request and raises its typed errors, but the
            # answer is read as JSON instead of typed models that would be turned back into dicts
            raw = await self.client.beta.messages.with_raw_response.create(**params, timeout=timeout)
            data = json.loads(raw.http_response.content)
        except Exception as exc:
            error = map_error(exc, model)
            if self._refused_compaction(error, params, model):
                return await self.complete(request, model=model, timeout=timeout, temperature=temperature)
            raise error from exc
        if not isinstance(data, dict):
            raise ProviderError(f"{model}: the response is not a JSON object", model=model)
        return _reply_from_json(data, model, started)

    async def stream(
        self,
        request: LlmRequest,
        *,
        model: str,
        timeout: float,
        temperature: float | None,
        on_text: Callable[[str], Awaitable[None]],
    ) -> LlmReply:
        params = self.params(request, model=model, temperature=temperature)
        started = time.perf_counter()
        emitted = False
        try:
            async with self.client.beta.messages.stream(**params, timeout=timeout) as stream:
                async for event in stream:
                    if event.type == "text" and event.text:
                        emitted = True
                        await on_text(event.text)
                message = await stream.get_final_message()
            if message.stop_reason is None:  # the connection ended before message_stop: a cut-off answer
                raise ProviderError(f"{model}: the stream ended before the message was complete", model=model)
        except LlmError as cut:
            cut.emitted = emitted
            raise
        except Exception as exc:
            mapped = map_error(exc, model)
            if not emitted and self._refused_compaction(mapped, params, model):
                return await self.stream(
                    request, model=model, timeout=timeout, temperature=temperature, on_text=on_text
                )
            mapped.emitted = emitted
            raise mapped from exc
        return _reply(message, model, started)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
