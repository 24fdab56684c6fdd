"""`/metrics` of every function under `engram dev` (what `make run` runs), before and after traffic.

Each function answers the Prometheus text format (HTTP functions on their port, workers on
their metrics port), and the families that measure the traffic move: HTTP requests, worker
fetches and acks, recall, the embedder, the outbox and the consumers' lag, cold start.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engram.development.localstack import DEMO_TENANT, functions
from engram.services.auth import issue_jwt
from tests.conftest import ALL_PERMISSIONS, JWT_SECRET
from tests.e2e.dev_process import DevProcess, engram_dev


@pytest.fixture(scope="module")
def dev(stack: dict[str, str], tmp_path_factory: Any) -> Iterator[DevProcess]:
    with engram_dev(stack, tmp_path_factory.mktemp("metrics") / "dev.log") as process:
        yield process


def scrape(url: str) -> dict[str, float]:
    """Every sample of `url`, by name and labels (`name{a="x"}`), as a number."""
    r = httpx.get(url, timeout=30)
    assert r.status_code == 200, url
    assert r.headers["content-type"].startswith("text/plain"), r.headers
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}"] = s.value
    return samples


def total(samples: dict[str, float], name: str, **labels: str) -> float:
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in samples.items() if k.split("{")[0] == name and all(w in k for w in wanted))


def named(samples: dict[str, float]) -> set[str]:
    return {k.split("{")[0] for k in samples}


def test_every_function_serves_metrics_that_move_with_traffic(dev: DevProcess) -> None:
    fns = {f.name: f for f in functions(dev.base)}
    assert set(fns) >= {"memory-api", "chat-turn", "telemetry-query", "extract-observation", "embed-index"}
    before = {name: scrape(f.metrics_url) for name, f in fns.items()}
    for name, samples in before.items():
        assert "process_cpu_seconds_total" in named(samples), name
        assert total(samples, "engram_cold_start_seconds") > 0, name  # served since start-up

    token = issue_jwt(JWT_SECRET, tenant_id=DEMO_TENANT, user_id="metrics", permissions=ALL_PERMISSIONS)
    headers = {"Authorization": f"Bearer {token}"}
    api, chat, telemetry = fns["memory-api"].url, fns["chat-turn"].url, fns["telemetry-query"].url
    marker = uuid.uuid4().hex[:8]
    r = httpx.post(
        f"{api}/api/ai/memory", timeout=30, headers=headers, json={"type": "fact", "title": f"Metric {marker}"}
    )
    assert r.status_code == 201, r.text
    observation = r.json()["observation"]["id"]
    r = httpx.post(
        f"{api}/api/ai/memory/feedback",
        timeout=30,
        headers=headers,
        json={"kind": "confirmed", "observation_id": observation},
    )
    assert r.status_code == 202, r.text
    assert httpx.get(f"{api}/api/ai/memory/{uuid.uuid4()}", headers=headers, timeout=30).status_code == 404
    chat_id = str(uuid.uuid4())
    r = httpx.post(
        f"{chat}/api/ai/chats/{chat_id}/turns",
        timeout=60,
        headers=headers,
        json={"message": f"Was weißt du über {marker}?"},
    )
    assert r.status_code == 200, r.text
    assert httpx.get(f"{telemetry}/api/ai/telemetry/overview", headers=headers, timeout=30).status_code in (200, 403)

    def moved() -> dict[str, list[str]]:
        after = {name: scrape(f.metrics_url) for name, f in fns.items()}
        still: dict[str, list[str]] = {}

        def check(name: str, metric: str, **labels: str) -> None:
            if total(after[name], metric, **labels) <= total(before[name], metric, **labels):
                still.setdefault(name, []).append(metric)

        for name in ("memory-api", "chat-turn", "telemetry-query"):
            check(name, "engram_http_request_duration_seconds_count")
        check("memory-api", "engram_http_request_duration_seconds_count", route="/api/ai/memory/{observation_id}")
        check("memory-api", "engram_recall_duration_seconds_count")
        check("chat-turn", "engram_recall_duration_seconds_count")
        check("chat-turn", "engram_embedder_batch_duration_seconds_count")
        for worker in ("extract-observation", "embed-index", "record-feedback", "consolidate-memory"):
            if worker in fns:
                check(worker, "engram_worker_fetched_total")
                check(worker, "engram_worker_acked_total")
                check(worker, "engram_worker_batch_duration_seconds_count")
        check("embed-index", "engram_embedder_batch_duration_seconds_count", kind="passage")
        return still

    r = httpx.get(f"{api}/api/ai/memory/recall", headers=headers, params={"q": marker}, timeout=30)
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 30
    while (left := moved()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left
    after = {name: scrape(f.metrics_url) for name, f in fns.items()}
    assert "404" in str([k for k in after["memory-api"] if "engram_http_request_duration_seconds_count" in k])
    # no user or chat id in any label: routes are templates
    assert not any(chat_id in k or observation in k for samples in after.values() for k in samples)
    # the lag gauges and the outbox backlog exist (values depend on timing)
    assert "engram_consumer_pending_messages" in named(after["embed-index"])
    assert "engram_outbox_backlog_events" in named(after["memory-api"])
