"""R-17.1: the monitoring component (PodMonitors, PrometheusRule, Grafana dashboard) validates
against the vendored monitoring.coreos.com schemas, scrapes what the functions serve, and names
only metrics the code exports; broken copies fail."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import manifests

MONITORING = manifests.K8S / "components" / "monitoring"
# the alerts the issue asks for (lag growing, DLQ growing, error ratio, recall p95, LLM fallback rate)
ALERTS = {
    "EngramConsumerLagGrowing",
    "EngramDeadLettersGrowing",
    "EngramHttpErrorRatio",
    "EngramRecallSlow",
    "EngramLlmFallbackRate",
}
_PROMQL_FUNCTIONS = {"rate", "increase", "deriv", "sum", "max", "histogram_quantile", "by", "and", "le"}


def exported_metrics() -> set[str]:
    """Every sample name the code's registry can expose (`_total`, `_bucket`, `_count`, `_sum`)."""
    from prometheus_client import REGISTRY

    import engram.instrumentation.metrics  # noqa: F401  (registers the families)

    names: set[str] = set()
    for family in REGISTRY.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_count", f"{family.name}_sum"}
        else:
            names.add(family.name)
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (Engram's own: `engram_...`)."""
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    return set(re.findall(r"\bengram_[a-z0-9_]+\b", without_strings))


def unknown_metrics(exprs: list[str]) -> list[str]:
    known = exported_metrics()
    problems = []
    for expr in exprs:
        names = metric_names(expr)
        if not names:
            problems.append(f"{expr!r} reads no Engram metric")
        problems += [f"{expr!r} reads {name}, which the code does not export" for name in sorted(names - known)]
    return problems


def rule_exprs(docs: list[dict[str, Any]]) -> dict[str, str]:
    rules = manifests.find(docs, "PrometheusRule")
    return {
        r.get("alert") or r["record"]: r["expr"] for doc in rules for g in doc["spec"]["groups"] for r in g["rules"]
    }


def dashboard_exprs(path: Path) -> list[str]:
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


def check_monitoring(docs: list[dict[str, Any]], dashboard: Path) -> list[str]:
    problems = manifests.validate(
        manifests.find(docs, "PodMonitor")
        + manifests.find(docs, "PrometheusRule")
        + manifests.find(docs, "ServiceMonitor")
    )
    exprs = rule_exprs(docs)
    problems += [f"no alert {name}" for name in sorted(ALERTS - set(exprs))]
    problems += unknown_metrics(list(exprs.values())) + unknown_metrics(dashboard_exprs(dashboard))
    problems += scraped_ports(docs)
    return problems


def scraped_ports(docs: list[dict[str, Any]]) -> list[str]:
    """Every function's pods are selected by a PodMonitor whose port the pod serves /metrics on."""
    problems = []
    monitors = manifests.find(docs, "PodMonitor")
    for pod, container in manifests.function_templates(docs):
        if pod.owner["kind"] in ("CronJob", "Job"):
            continue  # a job's process is gone before a scrape: no /metrics
        covering = [m for m in monitors if manifests.selects(m["spec"]["selector"]["matchLabels"], pod.labels)]
        if not covering:
            problems.append(f"{manifests.ident(pod.owner)}: no PodMonitor scrapes it")
            continue
        ports = {p.get("name") for p in container.get("ports", [])} | {
            p["containerPort"] for p in container.get("ports", [])
        }
        for monitor in covering:
            for endpoint in monitor["spec"]["podMetricsEndpoints"]:
                port = endpoint.get("port") or endpoint.get("portNumber")
                if port not in ports:
                    problems.append(f"{manifests.ident(monitor)}: {manifests.ident(pod.owner)} has no port {port!r}")
    return problems


def test_the_prod_overlay_is_monitored(rendered: dict[str, Any]) -> None:
    docs = rendered["prod"]
    assert len(manifests.find(docs, "PodMonitor")) == 3 and manifests.find(docs, "PrometheusRule")
    dashboard = manifests.generated(docs, "ConfigMap", "engram-grafana-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["engram.json"])["uid"] == "engram-overview"
    assert check_monitoring(docs, MONITORING / "grafana-dashboard.json") == []


def test_workers_serve_metrics_on_the_port_the_monitor_scrapes(rendered: dict[str, Any]) -> None:
    config = manifests.data_of(manifests.generated(rendered["prod"], "ConfigMap", "engram-config"))
    for deployment in manifests.find(rendered["prod"], "Deployment"):
        if deployment["metadata"]["labels"].get("app.kubernetes.io/component") != "worker":
            continue
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == "metrics"]
        assert str(port) == config["ENGRAM_METRICS_PORT"]
        assert {"name": "HOST", "value": "0.0.0.0"} in container["env"]


def test_metric_names_are_read_from_promql() -> None:
    assert metric_names('sum(rate(engram_http_request_duration_seconds_count{status=~"5.."}[5m]))') == {
        "engram_http_request_duration_seconds_count"
    }
    assert unknown_metrics(["rate(engram_worker_acked_total[5m])"]) == []
    assert unknown_metrics(["rate(engram_worker_acked[5m])"]) != []  # a counter is read with _total
    assert unknown_metrics(["up"]) != []


BROKEN = [
    ("prometheusrule.yaml", "for: 15m", "for: 15 minutes", "does not match"),
    (
        "prometheusrule.yaml",
        "engram_consumer_pending_messages) > 500",
        "engram_consumer_lag) > 500",
        "engram_consumer_lag",
    ),
    ("prometheusrule.yaml", "alert: EngramRecallSlow", "alert: EngramRecallP99", "no alert EngramRecallSlow"),
    ("podmonitors.yaml", "    - port: metrics", "    - port: 9090", "is not of type 'string'"),
    (
        "podmonitors.yaml",
        "app.kubernetes.io/component: worker",
        "app.kubernetes.io/component: workers",
        "no PodMonitor",
    ),
    ("grafana-dashboard.json", "engram_outbox_backlog_events", "engram_outbox_size", "engram_outbox_size"),
]


@pytest.mark.parametrize(("name", "old", "new", "expected"), BROKEN, ids=[b[3][:40] for b in BROKEN])
def test_a_broken_monitoring_copy_fails(tmp_path: Path, name: str, old: str, new: str, expected: str) -> None:
    root = manifests.copy_tree(tmp_path)
    path = root / "components" / "monitoring" / name
    text = path.read_text()
    assert old in text, f"the test's anchor text is no longer in {name}"
    path.write_text(text.replace(old, new, 1))
    problems = check_monitoring(manifests.render(root / "overlays" / "prod"), path.parent / "grafana-dashboard.json")
    assert any(expected in p for p in problems), "\n".join(problems) or "no problem found"
