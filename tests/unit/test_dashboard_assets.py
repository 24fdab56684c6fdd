"""The dashboard page ships everything it needs: a pinned, vendored Chart.js and no remote URL."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

STATIC = Path(__file__).resolve().parents[2] / "functions" / "telemetry_query" / "static"
VENDOR = STATIC / "assets" / "vendor" / "chart.js-4.6.1"
CHART_SHA256 = "87364cc2b2a76a6684929e7d6b80b18a897794db38400caff1fcf1791c6925d2"


def test_chart_js_is_the_pinned_npm_build_with_its_licence() -> None:
    bundle = (VENDOR / "chart.umd.min.js").read_bytes()
    assert hashlib.sha256(bundle).hexdigest() == CHART_SHA256
    assert b"Chart.js v4.6.1" in bundle[:200]
    licence = (VENDOR / "LICENSE.md").read_text()
    assert "MIT License" in licence and "Chart.js Contributors" in licence
    assert CHART_SHA256 in (VENDOR / "VENDORED.md").read_text()


def test_the_page_loads_only_local_files() -> None:
    html = (STATIC / "dashboard.html").read_text()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources and all(s.startswith("/api/ai/telemetry/dashboard/assets/") for s in sources), sources
    for path in sources:
        assert (STATIC / path.removeprefix("/api/ai/telemetry/dashboard/")).is_file(), path
    for own in ("dashboard.html", "assets/dashboard.js", "assets/dashboard.css"):
        assert not re.search(r"https?://", (STATIC / own).read_text()), own
