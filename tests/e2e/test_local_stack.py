"""End to end: `engram dev` (what `make run` runs) as real processes, and its printed calls work."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from engram.development.localstack import DEMO_TENANT, chat_examples, examples
from engram.services.auth import issue_jwt
from tests.conftest import JWT_SECRET
from tests.e2e.dev_process import engram_dev


@pytest.fixture(scope="module")
def local_stack(stack: dict[str, str], tmp_path_factory: Any) -> Iterator[dict[str, Any]]:
    with engram_dev(stack, tmp_path_factory.mktemp("dev") / "dev.log") as dev:
        yield {"api": dev.url(1), "proc": dev.proc, "log": dev.log}


def _call(api: str, example: Any, token: str) -> httpx.Response:
    headers = {k: (str(time.time_ns()) if "$(" in v else v) for k, v in example.headers.items()}
    headers["Authorization"] = f"Bearer {token}"
    return httpx.request(example.method, api + example.path, headers=headers, content=example.body, timeout=10)


def test_printed_calls_work_and_a_domain_event_becomes_one_visible_observation(local_stack: Any) -> None:
    api = local_stack["api"]
    text = local_stack["log"].read_text()
    token = next(line.split("'")[1] for line in text.splitlines() if line.startswith("export TOKEN="))
    listing, remember, event, profile = examples()
    assert all(example.curl(api) in text for example in (listing, remember, event, profile))

    before = _call(api, listing, token).json()
    assert before["total"] >= 4  # the seed: three domain events and a preference
    assert _call(api, remember, token).status_code in (200, 201)
    r = _call(api, event, token)
    assert r.status_code == 202, r.text

    def schmidt(tok: str) -> list[Any]:
        items = httpx.get(f"{api}/api/ai/memory?size=200", headers={"Authorization": f"Bearer {tok}"}).json()
        return [o for o in items["items"] if o["title"] == "Customer Schmidt Logistik AG was created"]

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not schmidt(token):
        time.sleep(0.2)
    assert len(schmidt(token)) == 1  # exactly one, also when the example is sent again (key upsert)
    assert _call(api, event, token).status_code == 202
    time.sleep(1.0)
    assert len(schmidt(token)) == 1
    # a permitted colleague sees it (public, tenant-wide); another tenant does not
    bob = issue_jwt(JWT_SECRET, tenant_id=DEMO_TENANT, user_id="bob", permissions=["read:AiObservation"])
    assert len(schmidt(bob)) == 1
    stranger = issue_jwt(JWT_SECRET, tenant_id="another-tenant", user_id="eve", permissions=["read:AiObservation"])
    assert schmidt(stranger) == []
    assert "Alice prefers short answers with bullet points" in _call(api, profile, token).text  # the seed's
    assert json.loads(httpx.get(f"{api}/readyz").text)["checks"] == {"postgres": True, "nats": True, "schema": True}


def test_printed_chat_calls_answer_offline_from_memory(local_stack: Any) -> None:
    """`make run` without ANTHROPIC_API_KEY: chat-turn answers in marked offline mode from recalled memory."""
    text = local_stack["log"].read_text()
    token = next(line.split("'")[1] for line in text.splitlines() if line.startswith("export TOKEN="))
    chat = "http://127.0.0.1:" + str(int(local_stack["api"].rsplit(":", 1)[1]) + 1)
    as_json, streamed = chat_examples()
    assert as_json.curl(chat) in text and streamed.curl(chat) in text
    # the seed is recalled once embed-index has indexed it (the test before this one may or may
    # not have given it that time)
    deadline = time.monotonic() + 30
    while True:
        r = _call(chat, as_json, token)
        if r.status_code == 503 and "recall is not configured" in r.text:
            pytest.skip("needs the recall service (Services.recall), which the retrieval branch provides")
        assert r.status_code == 200, r.text
        body = r.json()
        if "Müller Maschinenbau" in body["answer"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert body["offline"] is True and body["answer"].startswith("[Offline mode")
    assert "Müller Maschinenbau" in body["answer"]  # the seeded domain events, recalled
    sse = _call(chat, streamed, token)
    assert sse.status_code == 200 and "event: token" in sse.text and "event: done" in sse.text


def _pids(group: int, pattern: str) -> list[int]:
    found = subprocess.run(["pgrep", "-g", str(group), "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in found.split()]


def test_a_killed_worker_is_restarted_and_the_http_functions_keep_serving(local_stack: Any) -> None:
    proc, api = local_stack["proc"], local_stack["api"]
    (worker,) = _pids(proc.pid, "functions.embed_index")
    os.kill(worker, signal.SIGKILL)
    deadline = time.monotonic() + 20
    restarted: list[int] = []
    while time.monotonic() < deadline:
        assert httpx.get(f"{api}/healthz", timeout=5).status_code == 200  # memory-api never stops serving
        restarted = [p for p in _pids(proc.pid, "functions.embed_index") if p != worker]
        if restarted:
            break
        time.sleep(0.2)
    assert restarted, local_stack["log"].read_text()[-3000:]
    assert proc.poll() is None
    text = local_stack["log"].read_text()
    assert "embed-index (pid " in text and "exited with signal 9" in text and "restarting in" in text


def test_no_secret_or_message_body_reaches_a_log_line(local_stack: Any, stack: dict[str, str]) -> None:
    """R-12.3/R-16.5: the stack runs at DEBUG; after calls that carry a JWT, an agent key and
    message bodies (also failing ones), no line of its log holds any of them."""
    import sys
    from pathlib import Path

    api = local_stack["api"]
    chat = "http://127.0.0.1:" + str(int(api.rsplit(":", 1)[1]) + 1)
    token = issue_jwt(
        JWT_SECRET,
        tenant_id=DEMO_TENANT,
        user_id="logcheck",
        permissions=["create:AiObservation", "read:AiObservation", "create:AiObservationFeedback"],
    )
    created = subprocess.run(
        [
            sys.executable,
            "-m",
            "engram.operations.cli",
            "agent-key",
            "create",
            "--tenant",
            DEMO_TENANT,
            "--name",
            "log-check",
            "--user",
            "logcheck",
            "--permission",
            "create:AiObservation",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "DATABASE_URL": stack["database_url"]},
        timeout=60,
    )
    agent_key = created.stdout.split()[-1]
    assert agent_key.startswith("egk_"), created.stdout + created.stderr
    body = "Zebra-Geheimnis-4711: my salary is 91234 EUR"
    jwt_headers = {"Authorization": f"Bearer {token}"}
    calls = [
        httpx.post(f"{api}/api/ai/memory", headers={"X-Agent-Key": agent_key}, json={"title": body}),
        httpx.post(f"{api}/api/ai/memory/mark", headers=jwt_headers, json={"text": body}),
        httpx.post(
            f"{chat}/api/ai/chats/{uuid.uuid4()}/turns", headers=jwt_headers, json={"message": body}, timeout=30
        ),
        httpx.post(f"{api}/api/ai/memory", headers={"Authorization": f"Bearer {token}x"}, json={"title": body}),
        httpx.post(f"{api}/api/ai/memory", headers={"X-Agent-Key": agent_key + "x"}, json={"title": body}),
        httpx.post(f"{api}/api/ai/memory", headers=jwt_headers, json={"title": body, "scope": "martian"}),
    ]
    assert [c.status_code for c in calls[:3]] == [201, 202, 200], [c.text for c in calls]
    assert [c.status_code for c in calls[3:]] == [401, 401, 422]
    time.sleep(3)  # extraction, indexing and feedback have logged what they do
    seed = (Path(stack["nats_dir"]) / "credentials" / "engram.nk").read_text().strip()
    secrets = {
        "jwt": token,
        "jwt secret": JWT_SECRET,
        "agent key": agent_key,
        "message body": "Zebra-Geheimnis",
        "nkey seed": seed,
    }
    lines = local_stack["log"].read_text(errors="replace").splitlines()
    assert len(lines) > 50
    leaks = {name: [line for line in lines if value in line][:2] for name, value in secrets.items()}
    assert {name: found for name, found in leaks.items() if found} == {}


async def test_the_printed_mcp_server_recalls_the_seed(local_stack: Any) -> None:
    """memory-mcp runs in the local stack (port base + 4) and answers the SDK's client with the demo JWT."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    text = local_stack["log"].read_text()
    token = next(line.split("'")[1] for line in text.splitlines() if line.startswith("export TOKEN="))
    url = "http://127.0.0.1:" + str(int(local_stack["api"].rsplit(":", 1)[1]) + 3) + "/mcp"
    assert f'{url}  with the header "Authorization: Bearer $TOKEN"' in text
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as c,
    ):
        assert "remember" in {t.name for t in (await c.list_tools()).tools}
        deadline = time.monotonic() + 30
        while True:
            result = await c.call_tool("search", {"query": "Müller Maschinenbau"})
            assert not result.is_error, result.content
            assert result.structured_content is not None
            if result.structured_content["hits"] or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert any("Müller" in h["observation"]["title"] for h in result.structured_content["hits"])


def test_ctrl_c_stops_every_process(local_stack: Any) -> None:
    proc = local_stack["proc"]
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(30)
    time.sleep(0.5)
    leftovers = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert leftovers == []
    assert "stopped." in local_stack["log"].read_text()
