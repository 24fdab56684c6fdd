"""An OpenAI-compatible Chat Completions API behind the `LLM` port (R-8.4): Ollama, vLLM,
llama.cpp's server, LiteLLM or any gateway that speaks `POST /v1/chat/completions`.

The gateway's requests and replies are provider-neutral but shaped like the Messages API
(text, `tool_use` and `tool_result` blocks); `build_params` is the one place that turns a
request into Chat Completions messages (one system message, tool results as `tool` messages
right after the assistant's `tool_calls`, a compaction summary as text), and `reply_of` /
`StreamedReply` turn the answer back: text, tool calls as `tool_use` blocks, `finish_reason`
as a stop reason (`tool_calls` -> `tool_use`, `length` -> `max_tokens`, `content_filter` or a
`refusal` -> `refusal`, which the gateway's content fallback takes up), usage with cached
prompt tokens as cache reads. The `openai` SDK builds the requests, parses the server-sent
chunks and maps HTTP errors to typed exceptions; it is imported and its client created on first
use, with `max_retries=0` (the gateway owns retries and fallbacks). Each call also has a
deadline of its own (`asyncio.timeout`): the SDK's timeout bounds each read, not a slow stream.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engram.domain.llm import (
    LlmError,
    LlmReply,
    LlmRequest,
    LlmTimeout,
    Message,
    Overloaded,
    PromptTooLong,
    ProviderError,
    RateLimited,
    Usage,
)
from engram.domain.llm.errors import retry_after_seconds

if TYPE_CHECKING:
    import openai

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
_TOO_LONG = ("context length", "context_length", "maximum context", "too long", "too many tokens")


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or []:
        if isinstance(block, Mapping) and block.get("type") == "text" and block.get("text"):
            parts.append(str(block["text"]))
        elif isinstance(block, Mapping) and block.get("type") == "compaction" and block.get("content"):
            parts.append(f"[Summary of the earlier conversation]\n{block['content']}")
    return "\n\n".join(parts)


def _tool_result_text(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    text = content if isinstance(content, str) else _text_of(content)
    return f"ERROR: {text}" if block.get("is_error") else text


def _assistant(message: Message) -> dict[str, Any]:
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    calls = [
        {
            "id": str(b.get("id")),
            "type": "function",
            "function": {"name": str(b.get("name")), "arguments": json.dumps(b.get("input") or {}, ensure_ascii=False)},
        }
        for b in blocks
        if isinstance(b, Mapping) and b.get("type") == "tool_use"
    ]
    out: dict[str, Any] = {"role": "assistant", "content": _text_of(content) or None}
    if calls:
        out["tool_calls"] = calls
    elif out["content"] is None:
        out["content"] = "(no answer)"
    return out


def _user(message: Message) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    blocks = [b for b in content or [] if isinstance(b, Mapping)]
    # tool results answer the assistant's tool calls: they come first, as `tool` messages
    out: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": str(b.get("tool_use_id")), "content": _tool_result_text(b)}
        for b in blocks
        if b.get("type") == "tool_result"
    ]
    text = _text_of([b for b in blocks if b.get("type") != "tool_result"])
    if text:
        out.append({"role": "user", "content": text})
    return out


def _tool_choice(choice: Mapping[str, Any]) -> str | dict[str, Any]:
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": str(choice.get("name"))}}
    return {"none": "none", "any": "required"}.get(str(kind), "auto")


def build_params(request: LlmRequest, *, model: str, temperature: float | None, max_tokens: int) -> dict[str, Any]:
    """The Chat Completions payload for one model (pure: tested without a server)."""
    messages: list[dict[str, Any]] = []
    system = "\n\n".join(b.text for b in request.system if b.text)
    if system:
        messages.append({"role": "system", "content": system})
    for message in request.messages():
        if message.get("role") == "assistant":
            messages.append(_assistant(message))
        else:
            messages.extend(_user(message))
    params: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": request.max_tokens or max_tokens}
    chosen = request.temperature if request.temperature is not None else temperature
    if chosen is not None:
        params["temperature"] = chosen
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in request.tools
        ]
        if request.tool_choice:
            params["tool_choice"] = _tool_choice(request.tool_choice)
    return params


def usage_of(raw: Mapping[str, Any] | None) -> Usage:
    """Chat Completions usage as billed: cached prompt tokens are cache reads, the rest input."""
    if not raw:
        return Usage()
    prompt = int(raw.get("prompt_tokens") or 0)
    details = raw.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, Mapping) else 0
    return Usage(
        input_tokens=max(0, prompt - cached),
        output_tokens=int(raw.get("completion_tokens") or 0),
        cache_read_input_tokens=cached,
    )


def _tool_use(call_id: str | None, name: str, arguments: str, model: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        raise ProviderError(f"{model}: tool call {name!r} has arguments that are not JSON", model=model) from exc
    if not isinstance(parsed, dict):
        raise ProviderError(f"{model}: tool call {name!r} has arguments that are not an object", model=model)
    return {"type": "tool_use", "id": call_id or f"call_{name}", "name": name, "input": parsed}


def _stop_reason(finish: str | None, refusal: str | None) -> str | None:
    if refusal:
        return "refusal"
    return STOP_REASONS.get(finish, finish) if finish else None


def reply_of(data: Mapping[str, Any], model: str, started: float) -> LlmReply:
    """A non-streamed completion; an answer without choices is a provider error (no content)."""
    choices = data.get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        raise ProviderError(f"{model}: the completion has no choices", model=model)
    message = choices[0].get("message") or {}
    refusal = message.get("refusal")
    content: list[dict[str, Any]] = []
    text = message.get("content") or refusal
    if text:
        content.append({"type": "text", "text": str(text)})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(
            _tool_use(call.get("id"), str(function.get("name")), str(function.get("arguments") or ""), model)
        )
    return LlmReply(
        model=str(data.get("model") or model),
        content=content,
        stop_reason=_stop_reason(choices[0].get("finish_reason"), refusal),
        usage=usage_of(data.get("usage")),
        duration_ms=(time.perf_counter() - started) * 1000,
    )


@dataclass
class _Call:
    id: str | None = None
    name: str = ""
    arguments: str = ""


@dataclass
class StreamedReply:
    """The chunks of a streamed completion, put together (tool calls by their `index`)."""

    model: str
    text: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish: str | None = None
    usage: Mapping[str, Any] | None = None

    def add(self, chunk: Mapping[str, Any]) -> str:
        """Take one chunk in; the text it adds (for the caller's stream)."""
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if chunk.get("model"):
            self.model = str(chunk["model"])
        added = ""
        for choice in chunk.get("choices") or []:  # the usage chunk has an empty list
            delta = choice.get("delta") or {}
            if delta.get("content"):
                added += str(delta["content"])
            if delta.get("refusal"):
                self.refusal.append(str(delta["refusal"]))
            for piece in delta.get("tool_calls") or []:
                call = self.calls.setdefault(int(piece.get("index") or 0), _Call())
                call.id = piece.get("id") or call.id
                function = piece.get("function") or {}
                call.name += str(function.get("name") or "")
                call.arguments += str(function.get("arguments") or "")
            if choice.get("finish_reason"):
                self.finish = str(choice["finish_reason"])
        if added:
            self.text.append(added)
        return added

    def reply(self, started: float) -> LlmReply:
        if self.finish is None:  # the connection ended before the last chunk: a cut-off answer
            raise ProviderError(f"{self.model}: the stream ended before the answer was complete", model=self.model)
        content: list[dict[str, Any]] = []
        text = "".join(self.text) or "".join(self.refusal)
        if text:
            content.append({"type": "text", "text": text})
        for _, call in sorted(self.calls.items()):
            content.append(_tool_use(call.id, call.name, call.arguments, self.model))
        return LlmReply(
            model=self.model,
            content=content,
            stop_reason=_stop_reason(self.finish, "".join(self.refusal)),
            usage=usage_of(self.usage),
            duration_ms=(time.perf_counter() - started) * 1000,
        )


def map_error(exc: Exception, model: str) -> LlmError:
    """SDK exceptions -> the gateway's error kinds (the same kinds as the Anthropic adapter's)."""
    import openai  # loaded already: the exception came from it

    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        return LlmTimeout(f"{model}: timed out", model=model)
    if isinstance(exc, openai.APIStatusError):
        message = str(getattr(exc, "message", "") or exc)
        retry_after = retry_after_seconds(exc.response.headers)
        if exc.status_code == 429:
            return RateLimited(f"{model}: rate limited ({message})", model=model, retry_after=retry_after)
        if exc.status_code in (503, 529):
            return Overloaded(f"{model}: overloaded ({message})", model=model, retry_after=retry_after)
        if exc.status_code in (400, 413) and any(words in message.lower() for words in _TOO_LONG):
            return PromptTooLong(f"{model}: {message}", model=model)
        return ProviderError(f"{model}: HTTP {exc.status_code} {message}", model=model, status=exc.status_code)
    if isinstance(exc, openai.APIConnectionError):
        return ProviderError(f"{model}: connection failed ({exc})", model=model)
    return ProviderError(f"{model}: {type(exc).__name__}: {exc}", model=model)


def _dump(value: Any) -> Mapping[str, Any]:
    dumped = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
    return dumped if isinstance(dumped, Mapping) else {}


class OpenAICompatibleLLM:
    """One OpenAI-compatible endpoint; `provider` is the name profiles use for it (`openai`, `local`)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        provider: str = "openai",
        max_tokens: int = 2048,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._base_url = base_url
        # local servers take no key, but the SDK wants one: any placeholder passes
        self._api_key = api_key or "not-needed"
        self._provider = provider
        self._headers = dict(headers or {})
        self.max_tokens = max_tokens
        self._client: openai.AsyncOpenAI | None = None

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def client(self) -> openai.AsyncOpenAI:
        if self._client is None:  # created on first use, never at import
            import openai

            self._client = openai.AsyncOpenAI(
                api_key=self._api_key, base_url=self._base_url, max_retries=0, default_headers=self._headers or None
            )
        return self._client

    async def warm(self) -> None:
        import importlib

        await asyncio.to_thread(importlib.import_module, "openai")
        _ = self.client

    def params(self, request: LlmRequest, *, model: str, temperature: float | None) -> dict[str, Any]:
        return build_params(request, model=model, temperature=temperature, max_tokens=self.max_tokens)

    async def complete(self, request: LlmRequest, *, model: str, timeout: float, temperature: float | None) -> LlmReply:
        params = self.params(request, model=model, temperature=temperature)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                completion = await self.client.chat.completions.create(**params, timeout=timeout)
        except Exception as exc:
            raise map_error(exc, model) from exc
        return reply_of(_dump(completion), model, started)

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
        collected = StreamedReply(model)
        emitted = False
        try:
            async with asyncio.timeout(timeout):
                chunks = await self.client.chat.completions.create(
                    **params, stream=True, stream_options={"include_usage": True}, timeout=timeout
                )
                async for chunk in chunks:
                    added = collected.add(_dump(chunk))
                    if added:
                        emitted = True
                        await on_text(added)
            return collected.reply(started)
        except LlmError as cut:
            cut.emitted = emitted
            raise
        except Exception as exc:
            mapped = map_error(exc, model)
            mapped.emitted = emitted
            raise mapped from exc

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


def configured(
    endpoints: Sequence[tuple[str, str | None, str | None]], *, max_tokens: int = 2048
) -> dict[str, OpenAICompatibleLLM]:
    """An adapter per configured endpoint: (provider name, base URL, key); no URL, no adapter."""
    return {
        name: OpenAICompatibleLLM(base_url=url, api_key=key, provider=name, max_tokens=max_tokens)
        for name, url, key in endpoints
        if url
    }
