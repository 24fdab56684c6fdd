"""Multi-stream recall (R-7.4): intent -> parallel streams -> compression -> one memory block.

1. Intent: the keyword fast path from `decision_engine.yaml`; if nothing matches, the LLM slow
   path through the gateway's fast profile with a tolerant parser; otherwise FACT_WHAT.
2. Streams run concurrently, each a `Recall.search` with the stream's types, boosts, query
   template and limit, always `want_sensitive=False` (standard chat context, R-7.2). A stream
   that fails or times out is recorded and skipped; the others still answer. A recall service
   that plans queries together (`BatchRecall.search_many`) gets all streams in one call (one
   embedding call, one transaction); a stream whose query is invalid still fails alone. All
   streams of a turn share one `query_id`. A message that asks what the assistant said also gets
   the `answers` stream (its earlier answers' passages), whatever the intent.
3. Every hit carries `stream_origin`; hits the caller may not see in standard context are
   dropped again here (defence in depth); an observation found by two streams is kept once.
4. A stream whose text exceeds its `compression_threshold` is condensed by the fast profile;
   on any failure the original text is used.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from datetime import UTC, tzinfo

import structlog

from engram.domain.addressee import asks_assistant
from engram.domain.llm import LlmError, Priority
from engram.domain.recall import RecallQuery
from engram.domain.scopes import Principal
from engram.domain.search import Vector
from engram.domain.streams import (
    DecisionEngine,
    Intent,
    StreamResult,
    dedupe_across_streams,
    fair_shares,
    keyword_intent,
    live_only,
    memory_context,
    parse_intent,
    render_stream,
    standard_context_filter,
    with_origin,
)
from engram.domain.telemetry import ChatError
from engram.ports import BatchRecall, EmbedAhead, Recall
from engram.services.gateway import LlmGateway, TelemetryBuffer

log = structlog.get_logger(__name__)

ANSWERS = "answers"  # the stream of the assistant's earlier answers (`decision_engine.yaml`)


def _failure(exc: BaseException) -> str:
    """A stream's error as recorded in its result and telemetry."""
    return f"{type(exc).__name__}: {exc}"[:500]


@dataclass
class MultiStreamResult:
    intent: Intent
    streams: list[StreamResult]
    query_id: uuid.UUID
    memory: str | None
    duration_ms: float = 0.0
    router_ms: float = 0.0

    @property
    def hit_count(self) -> int:
        return sum(len(s.hits) for s in self.streams)

    def trace(self) -> dict[str, object]:
        return {
            "intent": self.intent.name,
            "intent_source": self.intent.source,
            "intent_keywords": list(self.intent.matched),
            "streams": {
                s.name: {
                    "hits": len(s.hits),
                    "error": s.error,
                    "compressed": s.compressed,
                    "duration_ms": round(s.duration_ms, 1),
                    "query_id": s.query_id,
                }
                for s in self.streams
            },
        }


class MultiStreamRecall:
    def __init__(self, engine: DecisionEngine, gateway: LlmGateway) -> None:
        self.engine = engine
        self.gateway = gateway

    async def classify(self, text: str, telemetry: TelemetryBuffer) -> Intent:
        fast = keyword_intent(text, self.engine)
        if fast is not None:
            return fast
        router = self.engine.router
        if router.llm_slow_path and self.gateway.available:
            try:
                reply = await self.gateway.prompt(
                    router.task,
                    router.prompt_key,
                    {"query": text[:4_000]},
                    timeout=router.timeout_seconds,
                    max_tokens=20,
                    telemetry=telemetry,
                )
                parsed = parse_intent(reply.text, self.engine.intents)
                if parsed is not None:
                    return Intent(parsed, "llm")
                log.info("intent.unparsed", output=reply.text[:100])
            except LlmError as exc:
                log.info("intent.llm_failed", error=str(exc))
        return Intent(router.fallback, "fallback")

    def keyword_intent(self, text: str) -> Intent | None:
        """The fast path alone (no model): known before the turn, handed to `recall(intent=)`."""
        return keyword_intent(text, self.engine)

    def texts_ahead(self, text: str, intent: Intent | None) -> list[str]:
        """The kNN texts the message's streams will search, as far as known before the turn: with
        a keyword intent, each of its streams' vector texts (by default all the message itself);
        otherwise the message."""
        if intent is None:
            return [text]
        return list(dict.fromkeys(self.engine.streams[n].vector_query(text) for n in self.stream_names(intent, text)))

    def stream_names(self, intent: Intent, text: str) -> list[str]:
        """The intent's streams, and `ANSWERS` (if configured) when the message asks what the
        assistant said: the other streams leave its answers out (`addressee`)."""
        names = list(self.engine.strategies[intent.name].streams)
        if ANSWERS in self.engine.streams and ANSWERS not in names and asks_assistant(text):
            names.append(ANSWERS)
        return names

    def _query(self, name: str, text: str, query_id: uuid.UUID, zone: tzinfo) -> RecallQuery:
        spec = self.engine.streams[name]
        return RecallQuery(
            text=spec.query(text),
            vector_text=spec.vector_query(text),
            limit=spec.limit,
            types=spec.types,
            type_boosts=dict(spec.boosts),
            want_sensitive=False,  # never sensitive in standard chat context
            stream_origin=name,
            query_id=query_id,
            zone=zone,  # "yesterday" in a message is the user's
        )

    async def _stream(
        self, name: str, principal: Principal, recall: Recall, text: str, query_id: uuid.UUID, zone: tzinfo
    ) -> StreamResult:
        started = time.perf_counter()
        result = StreamResult(name)
        try:
            found = await asyncio.wait_for(
                recall.search(principal, self._query(name, text, query_id, zone)),
                timeout=self.engine.stream_timeout_seconds,
            )
            result.query_id = str(found.query_id)
            result.hits = with_origin(live_only(standard_context_filter(principal, found.hits)), name)
        except TimeoutError:
            result.error = f"timed out after {self.engine.stream_timeout_seconds}s"
        except Exception as exc:  # one stream's failure never fails the recall
            result.error = _failure(exc)
        result.duration_ms = (time.perf_counter() - started) * 1000
        return result

    async def _streams_together(
        self,
        names: list[str],
        principal: Principal,
        recall: BatchRecall,
        text: str,
        query_id: uuid.UUID,
        zone: tzinfo,
        ahead: Awaitable[Mapping[str, Vector]] | None = None,
    ) -> list[StreamResult]:
        started = time.perf_counter()
        results = [StreamResult(name) for name in names]
        queries = [self._query(n, text, query_id, zone) for n in names]
        search = (
            recall.search_many(principal, queries, ahead=ahead)
            if ahead is not None and isinstance(recall, EmbedAhead)
            else recall.search_many(principal, queries)
        )
        try:
            found = await asyncio.wait_for(search, timeout=self.engine.stream_timeout_seconds)
        except TimeoutError:
            for r in results:
                r.error = f"timed out after {self.engine.stream_timeout_seconds}s"
        except Exception as exc:  # recall failed for every stream; the turn still answers
            for r in results:
                r.error = _failure(exc)
        else:
            for r, one in zip(results, found, strict=True):
                if isinstance(one, Exception):
                    r.error = _failure(one)
                    continue
                r.query_id = str(one.query_id)
                r.hits = with_origin(live_only(standard_context_filter(principal, one.hits)), r.name)
        elapsed = (time.perf_counter() - started) * 1000
        for r in results:
            r.duration_ms = elapsed
        return results

    async def _compress(self, result: StreamResult, text: str, telemetry: TelemetryBuffer) -> None:
        spec = self.engine.streams[result.name]
        if len(result.text) <= spec.compression_threshold:
            return
        if not (self.engine.compression.enabled and self.gateway.available):
            return
        try:
            reply = await self.gateway.prompt(
                self.engine.compression.task,
                self.engine.compression.prompt_key,
                {"stream": result.name, "query": text[:2_000], "content": result.text},
                priority=Priority.realtime,
                max_tokens=max(200, spec.compression_threshold // 4),
                telemetry=telemetry,
            )
            condensed = reply.text.strip()
            if condensed and len(condensed) < len(result.text):
                result.text = condensed
                result.compressed = True
        except LlmError as exc:  # the original text is used
            telemetry.emit(
                ChatError(stage=f"compression:{result.name}", error_type=type(exc).__name__, message=str(exc)[:2000])
            )

    async def recall(
        self,
        principal: Principal,
        recall: Recall,
        text: str,
        telemetry: TelemetryBuffer,
        *,
        ahead: Awaitable[Mapping[str, Vector]] | None = None,
        intent: Intent | None = None,
        zone: tzinfo = UTC,
    ) -> MultiStreamResult:
        """The streams of the message's intent (`intent` when the caller has it from
        `keyword_intent`, else classified here); `ahead` holds query vectors already being made
        (`EmbedAhead.embed_ahead`), used when `recall` takes them; days shown, and days the message
        names ("yesterday"), in the user's `zone`."""
        started = time.perf_counter()
        if intent is None:
            intent = await self.classify(text, telemetry)
        router_ms = (time.perf_counter() - started) * 1000
        names = self.stream_names(intent, text)
        query_id = uuid.uuid4()
        if isinstance(recall, BatchRecall):
            results = await self._streams_together(names, principal, recall, text, query_id, zone, ahead)
        else:
            streams = (self._stream(n, principal, recall, text, query_id, zone) for n in names)
            results = list(await asyncio.gather(*streams))
        for r in results:
            if r.error is not None:
                log.warning("recall.stream_failed", stream=r.name, error=r.error)
                telemetry.emit(ChatError(stage=f"recall:{r.name}", error_type="stream_failed", message=r.error))
        dedupe_across_streams(results)
        budget = self.engine.memory_budget_chars
        for r in results:
            spec = self.engine.streams[r.name]
            r.text, r.shown = render_stream(r, max(budget, spec.compression_threshold * 4), zone)
        await asyncio.gather(*(self._compress(r, text, telemetry) for r in results))
        # the block's budget split by need: a stream that found little leaves its share to the others
        for r, share in zip(results, fair_shares([len(r.text) for r in results], budget), strict=True):
            if len(r.text) > share and r.compressed:
                r.text = r.text[:share]
            elif len(r.text) > share:
                r.text, r.shown = render_stream(r, share, zone)
        return MultiStreamResult(
            intent=intent,
            streams=results,
            query_id=query_id,
            memory=memory_context(results, intent.name),
            duration_ms=(time.perf_counter() - started) * 1000,
            router_ms=router_ms,
        )
