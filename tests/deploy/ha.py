"""The production overlay survives losing a node (issue 19): each property as a check that
returns its problems (empty = holds), so tests can also prove each fails on a broken copy.

| property | check |
| --- | --- |
| PostgreSQL: 3 instances, one per node, a synchronous standby | `check_postgres` |
| PostgreSQL: WAL archiving and a scheduled base backup to the object store | `check_postgres` |
| PostgreSQL: the functions connect through the Pooler | `check_postgres` |
| NATS: 3 servers, one per node, clustered, streams and consumers R3 | `check_nats` (and `manifests.check_topology`) |
| Elasticsearch: 3 master-eligible data nodes, one per node | `check_elasticsearch` |
| every HTTP function, worker and the relay: a PodDisruptionBudget and topology spread | `check_disruption` |
| resources: every container requests and limits, requests within the limits | `check_resources` |
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from tests.deploy import manifests
from tests.deploy.manifests import Doc, data_of, find, generated, ident, selects

SPREAD_KEY = "kubernetes.io/hostname"
NATS_SERVERS = 3
REPLICAS = 3
# the HTTP functions and workers and the standalone outbox relay
SPREAD_WORKLOADS = (*(f.name for f in manifests.FUNCTIONS if f.kind in ("http", "worker")), "outbox-relay")


def _one(docs: list[Doc], kind: str, api_prefix: str) -> tuple[Doc | None, list[str]]:
    found = find(docs, kind, api_prefix=api_prefix)
    if len(found) != 1:
        return None, [f"expected one {api_prefix} {kind}, found {[ident(d) for d in found]}"]
    return found[0], []


def check_postgres(docs: list[Doc]) -> list[str]:
    cluster, problems = _one(docs, "Cluster", "postgresql.cnpg.io/")
    if cluster is None:
        return problems
    spec = cluster["spec"]
    name = cluster["metadata"]["name"]
    if spec.get("instances", 1) < 3:
        problems.append(f"Cluster {name}: {spec.get('instances', 1)} instances, needs 3 to lose one and keep a standby")
    affinity = spec.get("affinity", {})
    if not (
        affinity.get("enablePodAntiAffinity", True)
        and affinity.get("podAntiAffinityType") == "required"
        and affinity.get("topologyKey") == SPREAD_KEY
    ):
        problems.append(
            f"Cluster {name}: instances must be on different nodes (required anti-affinity on {SPREAD_KEY})"
        )
    sync = spec.get("postgresql", {}).get("synchronous") or {}
    if sync.get("number", 0) < 1 and spec.get("minSyncReplicas", 0) < 1:
        problems.append(f"Cluster {name}: no synchronous standby (a commit could live on one node only)")
    if sync and sync.get("dataDurability") != "required":
        problems.append(f"Cluster {name}: synchronous.dataDurability must be 'required'")
    archivers = [p for p in spec.get("plugins", []) if p.get("isWALArchiver") and p.get("enabled", True)]
    stores = {d["metadata"]["name"] for d in find(docs, "ObjectStore", api_prefix="barmancloud.cnpg.io/")}
    if len(archivers) != 1 or archivers[0].get("name") != "barman-cloud.cloudnative-pg.io":
        problems.append(f"Cluster {name}: WAL is not archived by the barman-cloud plugin")
    elif archivers[0].get("parameters", {}).get("barmanObjectName") not in stores:
        problems.append(f"Cluster {name}: the WAL archive's ObjectStore is not deployed (have {sorted(stores)})")
    backups = [
        b
        for b in find(docs, "ScheduledBackup", api_prefix="postgresql.cnpg.io/")
        if b["spec"]["cluster"]["name"] == name
        and b["spec"].get("method") == "plugin"
        and b["spec"].get("pluginConfiguration", {}).get("name") == "barman-cloud.cloudnative-pg.io"
    ]
    if not backups:
        problems.append(f"Cluster {name}: no ScheduledBackup through the barman-cloud plugin")
    poolers = [
        p for p in find(docs, "Pooler", api_prefix="postgresql.cnpg.io/") if p["spec"]["cluster"]["name"] == name
    ]
    rw = [p["metadata"]["name"] for p in poolers if p["spec"].get("type", "rw") == "rw"]
    if not rw:
        problems.append(f"Cluster {name}: no read-write Pooler")
    elif any(p["spec"].get("instances", 1) < 2 for p in poolers):
        problems.append("Pooler: needs at least 2 instances (one per node)")
    secrets = data_of(generated(docs, "Secret", "engram-secrets"))
    host = urlsplit(secrets.get("DATABASE_URL", "")).hostname or ""
    if rw and host.split(".")[0] not in rw:
        problems.append(f"DATABASE_URL points at {host!r}, not at the Pooler {rw}")
    return problems


def _spread_hard(template_spec: dict[str, Any], labels: dict[str, str]) -> bool:
    return any(
        c.get("topologyKey") == SPREAD_KEY
        and c.get("whenUnsatisfiable") == "DoNotSchedule"
        and selects(c.get("labelSelector", {}).get("matchLabels", {}), labels)
        for c in template_spec.get("topologySpreadConstraints", [])
    )


def check_nats(docs: list[Doc]) -> list[str]:
    problems = []
    [nats] = find(docs, "StatefulSet", "nats") or [None]
    if nats is None:
        return ["no NATS StatefulSet"]
    template = nats["spec"]["template"]
    if nats["spec"].get("replicas", 1) != NATS_SERVERS:
        problems.append(f"StatefulSet nats: {nats['spec'].get('replicas', 1)} servers, needs {NATS_SERVERS}")
    if not _spread_hard(template["spec"], template["metadata"]["labels"]):
        problems.append("StatefulSet nats: the servers must be on different nodes (DoNotSchedule spread)")
    conf = data_of(generated(docs, "ConfigMap", "nats-config"))["nats.conf"]
    routes = set(re.findall(r"nats://(nats-\d+)\.nats-headless\.engram\.svc\.cluster\.local:6222", conf))
    if "cluster {" not in conf or routes != {f"nats-{i}" for i in range(NATS_SERVERS)}:
        problems.append(f"nats.conf: no cluster block routing to all {NATS_SERVERS} servers (routes {sorted(routes)})")
    headless = find(docs, "Service", "nats-headless")
    if not headless or 6222 not in {p["port"] for p in headless[0]["spec"]["ports"]}:
        problems.append("Service nats-headless: no cluster port 6222")
    config = data_of(generated(docs, "ConfigMap", "engram-config"))
    if config.get("ENGRAM_STREAM_REPLICAS") != str(REPLICAS):
        problems.append(f"ENGRAM_STREAM_REPLICAS is {config.get('ENGRAM_STREAM_REPLICAS')!r}, not '{REPLICAS}'")
    for doc in find(docs, "Stream") + find(docs, "Consumer"):
        if doc["spec"].get("replicas") != REPLICAS:
            problems.append(f"{ident(doc)}: replicas {doc['spec'].get('replicas')}, needs {REPLICAS}")
    budgets = [
        p
        for p in find(docs, "PodDisruptionBudget")
        if selects(p["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])
    ]
    if not budgets or budgets[0]["spec"].get("minAvailable") != NATS_SERVERS // 2 + 1:
        problems.append("NATS: a PodDisruptionBudget must keep a quorum (minAvailable 2 of 3)")
    return problems


def check_elasticsearch(docs: list[Doc]) -> list[str]:
    es, problems = _one(docs, "Elasticsearch", "elasticsearch.k8s.elastic.co/")
    if es is None:
        return problems
    masters = 0
    for node_set in es["spec"]["nodeSets"]:
        roles = node_set.get("config", {}).get("node.roles", ["master", "data"])
        count = node_set.get("count", 0)
        if not isinstance(count, int):
            continue  # the schema says so
        if "master" in roles:
            masters += count
        pod = node_set.get("podTemplate", {}).get("spec", {})
        labels = {"elasticsearch.k8s.elastic.co/cluster-name": es["metadata"]["name"]}
        if count > 1 and not _spread_hard(pod, labels):
            problems.append(
                f"{ident(es)} nodeSet {node_set['name']}: nodes must be on different nodes (DoNotSchedule spread)"
            )
    if masters < 3:
        problems.append(f"{ident(es)}: {masters} master-eligible nodes, needs 3 (a quorum of two)")
    return problems


def _workload(docs: list[Doc], name: str) -> tuple[dict[str, str], dict[str, Any]] | None:
    for doc in find(docs, "Deployment", name) + find(docs, "Service", name, api_prefix="serving.knative.dev/"):
        template = doc["spec"]["template"]
        return dict(template["metadata"].get("labels", {})), template["spec"]
    return None


def check_disruption(docs: list[Doc]) -> list[str]:
    problems = []
    budgets = find(docs, "PodDisruptionBudget")
    for name in SPREAD_WORKLOADS:
        found = _workload(docs, name)
        if found is None:
            problems.append(f"{name}: not deployed")
            continue
        labels, spec = found
        covering = [b for b in budgets if selects(b["spec"]["selector"].get("matchLabels", {}), labels)]
        if not covering:
            problems.append(f"{name}: no PodDisruptionBudget")
        for budget in covering:
            if "minAvailable" in budget["spec"]:
                problems.append(f"{ident(budget)}: minAvailable blocks draining a single pod; use maxUnavailable")
        if not any(
            c.get("topologyKey") == SPREAD_KEY and selects(c.get("labelSelector", {}).get("matchLabels", {}), labels)
            for c in spec.get("topologySpreadConstraints", [])
        ):
            problems.append(f"{name}: no topologySpreadConstraints over {SPREAD_KEY}")
    return problems


_UNITS = {"": 1, "m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}


def quantity(value: Any) -> float:
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value)).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


def check_resources(docs: list[Doc]) -> list[str]:
    problems = []
    for pod in manifests.pod_templates(docs):
        for container in pod.containers:
            resources = container.get("resources", {})
            requests, limits = resources.get("requests", {}), resources.get("limits", {})
            where = f"{ident(pod.owner)} container {container.get('name')}"
            for resource in ("cpu", "memory"):
                if resource not in requests or resource not in limits:
                    problems.append(f"{where}: no {resource} request and limit")
                elif quantity(requests[resource]) > quantity(limits[resource]):
                    problems.append(
                        f"{where}: {resource} request {requests[resource]} above its limit {limits[resource]}"
                    )
    return problems


def check_ha(docs: list[Doc]) -> list[str]:
    return (
        check_postgres(docs)
        + check_nats(docs)
        + check_elasticsearch(docs)
        + check_disruption(docs)
        + check_resources(docs)
    )
