"""The telemetry dashboard in headless Chromium against the local stack (`engram dev`).

Chromium is Debian's (`make test` installs it when missing and we are root), driven by
Playwright's Python package through `executable_path`: Playwright never downloads a
browser here. The test checks that the KPI tiles, the time-series chart and the tables show
the numbers the API returns, that the page talks to nothing but its own origin, and saves a
screenshot in `test-artifacts/`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from engram.services.auth import issue_jwt
from tests.conftest import JWT_SECRET, write_telemetry
from tests.e2e.dev_process import REPO, engram_dev

ARTIFACTS = REPO / "test-artifacts"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.slow

# what Chart.js holds for the series, and how many canvas pixels it painted
PAINTED_CHART = """() => {
  const c = Chart.getChart('timeseries');
  const px = c.canvas.getContext('2d').getImageData(0, 0, c.canvas.width, c.canvas.height).data;
  let painted = 0;
  for (let i = 3; i < px.length; i += 4) if (px[i]) painted++;
  return {values: c.data.datasets[0].data, labels: c.data.labels.length, painted};
}"""


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI: `make test` installs it (apt-get install chromium) as root")
        pytest.skip("chromium is not installed (as root, `make test` installs it)")
    return found


@pytest.fixture(scope="module")
def telemetry_url(stack: dict[str, str], tmp_path_factory: Any) -> Iterator[str]:
    """`engram dev --no-seed` on the test session's PostgreSQL and NATS; its telemetry-query URL."""
    with engram_dev(stack, tmp_path_factory.mktemp("dashboard") / "dev.log", "--no-seed") as dev:
        text = dev.log.read_text(errors="replace")
        assert "telemetry-query" in text, text
        yield dev.url(3)


def seed(stack: dict[str, str], tenant: str) -> None:
    from engram.adapters.postgres import Database
    from engram.domain import telemetry

    now = datetime.now(UTC)
    rows = []
    for i in range(36):  # a turn every 40 minutes, costs and cache reads that vary
        at = now - timedelta(minutes=40 * i + 7)
        meta = {
            "model": "claude-sonnet-4-6",
            "input_tokens": 1000 + 37 * i,
            "output_tokens": 200 + 11 * i,
            "cache_read_input_tokens": 500 * (i % 4),
            "cache_creation_input_tokens": 0,
            "cost_usd": round(0.01 * (i % 7 + 1), 4),
            "duration_ms": 800,
            "rag_hits": i % 5,
        }
        rows.append(("chat.turn_completed", meta, f"user-{i % 5}", at))
        tool = ["search_memory", "calendar", "crm_lookup"][i % 3]
        rows.append(("chat.tool_used", {"tool_name": tool, "duration_ms": 50 + i, "success": i % 6 != 0}, "user-1", at))
    rows.append(("chat.error", {"stage": "llm", "error_type": "overloaded", "message": "busy"}, "user-2", now))
    rows.append(("chat.ptl_recovery", {"model": "m", "dropped_messages": 3, "succeeded": True}, "user-3", now))
    rows.append(("chat.turn_completed", {**rows[0][1], "cost_usd": 3.5}, "user-9", now - timedelta(days=4)))
    records = [
        telemetry.TelemetryRecord(tenant, n, telemetry.record(tenant, n, m).metadata, user_id=u, created_at=at)
        for n, m, u, at in rows
    ]

    async def write() -> None:
        db = await Database.connect(stack["database_url"], max_size=1)
        try:
            async with db.tenant(tenant) as conn:
                await write_telemetry(conn, records)
        finally:
            await db.close()

    asyncio.run(write())


def api(url: str, token: str, path: str, **params: str) -> Any:
    r = httpx.get(f"{url}/api/ai/telemetry/{path}", params=params, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    return r.json()


def test_dashboard_draws_the_api_numbers(stack: dict[str, str], telemetry_url: str) -> None:
    from playwright.sync_api import sync_playwright

    executable = chromium()
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    seed(stack, tenant)
    token = issue_jwt(JWT_SECRET, tenant_id=tenant, user_id="ops", permissions=["view:FE_DevTools"])
    no_devtools = issue_jwt(JWT_SECRET, tenant_id=tenant, user_id="ops", permissions=["read:AiEvent"])
    ARTIFACTS.mkdir(exist_ok=True)

    overview = api(telemetry_url, token, "overview", period="24h")
    series = api(telemetry_url, token, "timeseries", period="24h", metric="turns", granularity="hour")
    tools = api(telemetry_url, token, "top-tools", period="24h", limit="10")["items"]
    users = api(telemetry_url, token, "top-users", period="24h", limit="10")["items"]
    week = api(telemetry_url, token, "overview", period="7d")
    assert overview["turns"] == 36 and week["turns"] == 37  # the seed is what the API sees

    requests: list[str] = []
    problems: list[str] = []
    with sync_playwright() as p, tempfile.TemporaryDirectory(prefix="engram-chromium-") as profile:
        browser = p.chromium.launch_persistent_context(
            profile, executable_path=executable, headless=True, args=FLAGS, viewport={"width": 1280, "height": 900}
        )
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(f"{telemetry_url}/api/ai/telemetry/dashboard#token={token}")
            page.wait_for_selector("body[data-state=ready]", timeout=20_000)
            try:
                assert "token=" not in page.url  # the token left the address bar

                tiles = page.eval_on_selector_all(
                    "[data-kpi] .value",
                    "els => els.map(e => [e.parentElement.dataset.kpi, e.dataset.value, e.textContent])",
                )
                shown = {k: (v, t) for k, v, t in tiles}
                assert float(shown["turns"][0]) == overview["turns"] and shown["turns"][1] == str(overview["turns"])
                assert float(shown["cost_usd"][0]) == pytest.approx(overview["cost_usd"])
                assert float(shown["tokens"][0]) == overview["tokens"]["total"]
                assert float(shown["errors"][0]) == overview["errors"] == 1
                assert float(shown["ptl_count"][0]) == overview["ptl_count"] == 1
                assert float(shown["cache_hit_rate"][0]) == pytest.approx(overview["cache_hit_rate"])
                assert shown["cache_hit_rate"][1].endswith("%")

                chart = page.evaluate(PAINTED_CHART)
                assert chart["values"] == [pt["value"] for pt in series["points"]]
                assert chart["labels"] == len(series["points"]) and sum(chart["values"]) == 36
                assert chart["painted"] > 5_000  # axes, labels and the line were drawn

                tool_rows = page.eval_on_selector_all(
                    "#top-tools tbody tr", "rows => rows.map(r => [r.cells[0].textContent, r.cells[1].dataset.value])"
                )
                assert tool_rows == [[t["tool_name"], str(t["calls"])] for t in tools]
                user_rows = page.eval_on_selector_all(
                    "#top-users tbody tr td:first-child", "c => c.map(x => x.textContent)"
                )
                assert user_rows == [u["user_id"] for u in users]

                page.click("#period button[data-period='7d']")
                page.wait_for_function(
                    "t => document.body.dataset.state === 'ready'"
                    " && document.querySelector('[data-kpi=turns] .value').dataset.value === String(t)",
                    arg=week["turns"],
                    timeout=20_000,
                )
                assert page.get_attribute("#period button[data-period='7d']", "aria-pressed") == "true"
                page.click("#period button[data-period='24h']")
                page.wait_for_function("() => document.body.dataset.state === 'ready'")
                page.screenshot(path=str(ARTIFACTS / "telemetry-dashboard.png"), full_page=True)

                # a token without the permission: the page says why, and shows nothing
                denied = browser.new_page()
                denied.goto(f"{telemetry_url}/api/ai/telemetry/dashboard#token={no_devtools}")
                denied.wait_for_selector("body[data-state=error]", timeout=20_000)
                assert "view:FE_DevTools" in (denied.text_content("#error") or "")
            except Exception:
                page.screenshot(path=str(ARTIFACTS / "telemetry-dashboard-failure.png"), full_page=True)
                raise
        finally:
            browser.close()
    assert problems == [] or all("403" in m for m in problems), problems
    assert requests and all(u.startswith(telemetry_url) for u in requests), requests  # nothing from elsewhere
    assert (ARTIFACTS / "telemetry-dashboard.png").stat().st_size > 10_000
