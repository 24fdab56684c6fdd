"""chat-turn (R-1.1, R-8): one user message in, an answer with memory out.

`POST /api/ai/chats/{chat_id}/turns` answers with JSON, or streams tokens as server-sent
events when the client sends `Accept: text/event-stream` (`token` events, then `done` with
the same body as the JSON answer, or `error`). The answer carries the chat's memory proposals
waiting for a decision (`proposals`); `GET /api/ai/chats/{chat_id}/proposals` lists them and
`POST /api/ai/chats/{chat_id}/proposals/{proposal_id}` approves or rejects one. Thin: parse,
call `services.chat` / `services.proposals`, shape.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

import structlog
from fastapi import Header, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from engram.bootstrap import Services
from engram.runtime.http import CurrentPrincipal, ServicesDep, document, function_app, warm_embedder
from engram.runtime.problems import problem
from engram.services.chat import ChatTurns, TurnFailed, TurnRequest, TurnResponse
from engram.services.proposals import ProposalDecision, ProposalView

log = structlog.get_logger(__name__)


async def _warm(services: Services) -> None:
    if services.gateway is not None:
        await services.gateway.warm()  # the SDK import, off the first turn's path
    await warm_embedder(services)  # the query model (e5: ~0.7 s to load), off the first turn's path


# a missing recall service is reported by each turn (503), not by readiness
app = function_app(
    "Engram chat-turn",
    "A chat turn with memory: multi-stream recall, model routing, tools, persistence.",
    name="chat-turn",
    warm=_warm,
    deadline_seconds=120.0,  # the model's own timeouts and fallbacks come first
    strip_fields=("message",),  # free text a person typed: NUL removed, lone surrogates replaced
)


async def _turn_failed(_: Request, exc: Exception) -> JSONResponse:
    return problem(502, str(exc), title="Bad Gateway")


app.add_exception_handler(TurnFailed, _turn_failed)


def _describe(schema: dict[str, Any]) -> None:
    """`model` takes a configured model id or profile name (llm.yaml), read when the document is first asked for."""
    from engram.bootstrap import load_llm_config
    from engram.settings import get_settings

    config = load_llm_config(get_settings())
    choices = sorted(set(config.known_models()) | set(config.profiles))
    schema["components"]["schemas"]["TurnRequest"]["properties"]["model"]["anyOf"] = [
        {"type": "string", "enum": choices},
        {"type": "null"},
    ]


document(app, _describe)

_running: set[asyncio.Task[Any]] = set()  # streamed turns finish (and persist) even if the client leaves


def chat_service(services: Services) -> ChatTurns:
    if services.chat is None:
        raise RuntimeError("the chat service is not built (engram.bootstrap.build)")
    return services.chat


def _sse(name: str, data: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _server_timing(result: TurnResponse) -> str:
    return ", ".join(f"{name};dur={value:.2f}" for name, value in result.timings.items())


@app.post(
    "/api/ai/chats/{chat_id}/turns",
    response_model=TurnResponse,
    tags=["chat"],
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def chat_turn(
    chat_id: uuid.UUID,
    body: TurnRequest,
    principal: CurrentPrincipal,
    services: ServicesDep,
    response: Response,
    accept: Annotated[str | None, Header()] = None,
) -> Any:
    chat = chat_service(services)
    prepared = await chat.begin(principal, chat_id, body)  # 4xx/503 leave as problem+json, also for SSE
    if accept is None or "text/event-stream" not in accept:
        result = await chat.run(prepared)
        response.headers["Server-Timing"] = _server_timing(result)
        return result

    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def on_text(chunk: str) -> None:
        await queue.put(_sse("token", {"text": chunk}))

    async def produce() -> None:
        try:
            result = await chat.run(prepared, on_text=on_text)
            await queue.put(_sse("done", result.model_dump(mode="json")))
        except TurnFailed as exc:
            await queue.put(_sse("error", {"status": 502, "title": "Bad Gateway", "detail": str(exc)}))
        except Exception as exc:
            await queue.put(
                _sse("error", {"status": 500, "title": "Internal Server Error", "detail": type(exc).__name__})
            )
        finally:
            await queue.put(None)

    task = asyncio.create_task(produce())
    _running.add(task)
    task.add_done_callback(_running.discard)

    async def events() -> AsyncIterator[bytes]:
        yield _sse(
            "start",
            {
                "chat_id": str(prepared.chat.id),
                "session_id": str(prepared.session.id),
                "tier": prepared.decision.tier,
                "reason": prepared.decision.reason,
            },
        )
        while (item := await queue.get()) is not None:
            yield item

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


class SessionEndedResponse(BaseModel):
    session_id: uuid.UUID | None
    ended: bool


@app.post("/api/ai/chats/{chat_id}/session/end", response_model=SessionEndedResponse, tags=["chat"])
async def end_session(chat_id: uuid.UUID, principal: CurrentPrincipal, services: ServicesDep) -> SessionEndedResponse:
    """Close the chat's active session now (it gets a summary); idle sessions also end on the next turn."""
    session_id = await chat_service(services).end_session(principal, chat_id)
    return SessionEndedResponse(session_id=session_id, ended=session_id is not None)


@app.get("/api/ai/chats/{chat_id}/proposals", response_model=list[ProposalView], tags=["chat"])
async def proposals(chat_id: uuid.UUID, principal: CurrentPrincipal, services: ServicesDep) -> list[dict[str, Any]]:
    """The chat's memory proposals waiting for your decision (sensitive, team-wide or uncertain
    memories chat extraction did not store on its own); undecided ones expire after seven days."""
    return await services.proposals.pending(principal, chat_id)


@app.post(
    "/api/ai/chats/{chat_id}/proposals/{proposal_id}",
    response_model=ProposalView,
    tags=["chat"],
    responses={
        403: {"description": "not a person, or the memory is for a team you are not in / sensitive"},
        404: {"description": "no such proposal in your chat"},
        409: {"description": "decided or expired already"},
    },
)
async def decide_proposal(
    chat_id: uuid.UUID,
    proposal_id: uuid.UUID,
    body: ProposalDecision,
    principal: CurrentPrincipal,
    services: ServicesDep,
) -> dict[str, Any]:
    """Approve (stored as your verified memory, under the same write rule as remember) or reject a
    memory proposal; either way `io.engram.chat.approval_decision.v1` is published."""
    return await services.proposals.decide(principal, chat_id, proposal_id, body.decision)
