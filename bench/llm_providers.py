"""`python -m bench.llm_providers`: what the OpenAI-compatible provider costs next to the Anthropic
one, and how long the fallback from a rate-limited cloud to the local model takes.

Both scripted servers (`tests/anthropic_server.py`, `tests/openai_server.py`) run in processes of
their own and answer instantly, so a call's time is the gateway, the adapter, the SDK and
loopback HTTP. Per provider: a completion, a streamed answer of 40 words, and a tool round (a
tool call streamed, then the answer). The Anthropic adapter is the baseline of the same run: the
ratio openai / anthropic is the figure to compare across runs. Last, the chain `cloud -> local`
with the cloud answering 429 (retry-after beyond the chat wait cap): the time until the local
model's answer, against a direct local call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench._common import console, machine, table

LOCAL = "llama3.1:8b"
CLOUD = "claude-sonnet-4-6"
LIMITED = "claude-rate-limited"  # the scripted server answers 429 for this model
CONFIG = f"""
profiles:
  cloud: {{model: {LIMITED}, timeout: 10, fallback: local}}
  anthropic: {{model: {CLOUD}, timeout: 10}}
  local: {{provider: local, model: {LOCAL}, timeout: 10}}
"""
ANSWER = " ".join(f"word{i}" for i in range(40))


def _anthropic(conn: Any) -> None:
    from tests.anthropic_server import AnthropicServer, rate_limited, text, tool_use

    server = AnthropicServer().start()

    def respond(request: Any) -> Any:
        if request.model == LIMITED:
            return rate_limited(30)
        if request.body.get("tools") and not any(
            isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"])
            for m in request.body.get("messages", [])
        ):
            return tool_use("lookup", {"query": "Contoso"})
        return text(ANSWER)

    server.responder = respond
    conn.send(server.url)
    conn.recv()
    server.stop()


def _openai(conn: Any) -> None:
    import tests.openai_server
    from tests.openai_server import OpenAIServer, answer, tool_call

    tests.openai_server.VALIDATE = False  # the Anthropic stub checks nothing either: same work per reply
    server = OpenAIServer().start()

    def respond(request: Any) -> Any:
        messages = request.body.get("messages", [])
        if request.body.get("tools") and not any(m.get("role") == "tool" for m in messages):
            return tool_call("lookup", {"query": "Contoso"})
        return answer(ANSWER)

    server.responder = respond
    conn.send(server.url)
    conn.recv()
    server.stop()


async def _timed(call: Callable[[], Awaitable[Any]], n: int, warm: int = 5) -> list[float]:
    for _ in range(warm):  # warm-up: imports, connections
        await call()
    out = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        out.append((time.perf_counter() - started) * 1000)
    return out


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(anthropic_url: str, openai_url: str, n: int) -> dict[str, Any]:
    from engram.adapters.anthropic_llm import AnthropicLLM
    from engram.adapters.openai_llm import OpenAICompatibleLLM
    from engram.domain.llm import LlmConfig, LlmRequest, PromptLibrary, SystemBlock, ToolSpec
    from engram.services.gateway import LlmGateway, TelemetryBuffer, Tool, ToolContext

    providers: dict[str, Any] = {"anthropic": AnthropicLLM("sk-bench", base_url=anthropic_url)}
    providers["local"] = OpenAICompatibleLLM(base_url=openai_url, provider="local")
    config, prompts = LlmConfig.from_yaml(CONFIG), PromptLibrary.from_yaml("x: {default: x}")
    gateway = LlmGateway(config, prompts, providers, realtime_wait_cap=2.0)
    request = LlmRequest(system=(SystemBlock("be brief", cache=True),), turn=({"role": "user", "content": "Hi"},))
    spec = ToolSpec("lookup", "look up", {"type": "object", "properties": {"query": {"type": "string"}}})

    async def lookup(_arguments: Any, _ctx: ToolContext) -> str:
        return "Contoso GmbH"

    async def sink(_chunk: str) -> None:
        return None

    calls: dict[str, Callable[[str], Awaitable[Any]]] = {
        "complete": lambda task: gateway.complete(task, request),
        "stream": lambda task: gateway.complete(task, request, on_text=sink),
        "tool_round": lambda task: gateway.run_tools(
            task, request, {"lookup": Tool(spec, lookup)}, telemetry=TelemetryBuffer(), on_text=sink
        ),
    }
    results: dict[str, dict[str, list[float]]] = {"anthropic": {}, "local": {}}
    for kind, call in calls.items():  # the two providers alternate call by call: the same machine
        for task in ("anthropic", "local"):
            await _timed(lambda task=task, call=call: call(task), 0, warm=5)
            results[task][kind] = []
        for _ in range(n):
            for task in ("anthropic", "local"):
                results[task][kind] += await _timed(lambda task=task, call=call: call(task), 1, warm=0)
    # interleaved, so both see the same machine: the chain that meets a 429, and a direct local call
    fallback, direct = [], []
    for _ in range(max(20, n // 2)):
        fallback += await _timed(lambda: _fresh(gateway, request), 1, warm=0)
        direct += await _timed(lambda: gateway.complete("local", request), 1, warm=0)
    await gateway.close()
    return {"results": results, "fallback": fallback, "direct_local": direct}


async def _fresh(chain: Any, request: Any) -> Any:
    chain._cooldown.clear()  # every call meets the 429 (not the cool-down that follows it)
    reply = await chain.complete("cloud", request)
    assert reply.profile == "local"
    return reply


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.llm_providers", description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from engram.runtime.logs import configure_logging

    configure_logging("ERROR")  # the 429s of the fallback phase are expected
    ctx = multiprocessing.get_context("spawn")
    pipes, procs = [], []
    for target in (_anthropic, _openai):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=target, args=(child,), daemon=True)
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    urls = [p.recv() for p in pipes]
    try:
        out = asyncio.run(measure(urls[0], urls[1], args.calls))
    finally:
        for p in pipes:
            p.send("stop")
        for proc in procs:
            proc.join(5)
    rows, summary = [], {}
    for kind in ("complete", "stream", "tool_round"):
        a, o = out["results"]["anthropic"][kind], out["results"]["local"][kind]
        ratio = statistics.median(o) / statistics.median(a)
        rows.append([kind, statistics.median(a), _p(a, 0.95), statistics.median(o), _p(o, 0.95), ratio])
        summary[kind] = {
            "anthropic_p50_ms": round(statistics.median(a), 2),
            "anthropic_p95_ms": round(_p(a, 0.95), 2),
            "openai_p50_ms": round(statistics.median(o), 2),
            "openai_p95_ms": round(_p(o, 0.95), 2),
            "ratio_p50": round(ratio, 3),
        }
    table("per call (ms)", ["call", "anthropic p50", "p95", "openai-compatible p50", "p95", "ratio p50"], rows)
    fb, direct = statistics.median(out["fallback"]), statistics.median(out["direct_local"])
    table(
        "cloud 429 -> local (ms)",
        ["chain p50", "chain p95", "direct local p50", "added by the 429 hop"],
        [[fb, _p(out["fallback"], 0.95), direct, fb - direct]],
    )
    result = {"bench": "llm_providers", **machine(), "calls": args.calls, "per_call": summary}
    result["fallback"] = {
        "chain_p50_ms": round(fb, 2),
        "chain_p95_ms": round(_p(out["fallback"], 0.95), 2),
        "direct_local_p50_ms": round(direct, 2),
        "ratio_p50": round(fb / direct, 3),
    }
    if args.json:
        console.print_json(json.dumps(result))
    else:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
