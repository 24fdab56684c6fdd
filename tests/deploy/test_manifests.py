"""R-14.2: every rendered manifest validates offline, and the checks fail on broken copies."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import manifests

Docs = list[dict[str, Any]]


def test_the_vendored_schemas_are_found_not_skipped() -> None:
    folder = manifests.schemas_dir()
    for relative in set(manifests.CRD_SCHEMAS.values()) | {"skaffold_v4beta14.json"}:
        assert (folder / relative).is_file(), relative


def test_missing_schemas_fail_loudly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(manifests, "REPO", tmp_path / "nowhere" / "repo")
    monkeypatch.setattr(manifests, "WORKPLACE_SHARED", tmp_path / "no-shared")
    monkeypatch.setenv("ENGRAM_K8S_SCHEMAS", str(tmp_path / "empty"))
    with pytest.raises(manifests.SchemasMissing, match="ENGRAM_K8S_SCHEMAS"):
        manifests.schemas_dir()


def test_base_renders_and_validates(k8s_copy: Path) -> None:
    docs = manifests.render(k8s_copy / "base")
    assert manifests.validate(docs) == []
    kinds = {d["kind"] for d in docs}
    assert kinds >= {"Service", "Deployment", "ScaledObject", "CronJob", "Stream", "Consumer", "Job"}


@pytest.mark.parametrize("overlay", manifests.OVERLAYS)
def test_every_manifest_validates(rendered: dict[str, Docs], overlay: str) -> None:
    docs = rendered[overlay]
    assert manifests.validate(docs) == []
    core = [d for d in docs if manifests.group_of(d) in manifests.CORE_GROUPS]
    custom = [d for d in docs if manifests.group_of(d) not in manifests.CORE_GROUPS]
    assert len(core) > 15 and len(custom) >= 11  # 3 Knative Services, 3 ScaledObjects, 2 Streams, 3 Consumers


@pytest.mark.parametrize("overlay", manifests.OVERLAYS)
@pytest.mark.parametrize(
    "check",
    [
        manifests.check_references,
        manifests.check_service_hosts,
        manifests.check_keda,
        manifests.check_topology,
        manifests.check_settings,
        manifests.check_network,
        manifests.check_functions,
    ],
    ids=lambda c: c.__name__,
)
def test_cross_checks(rendered: dict[str, Docs], overlay: str, check: Any) -> None:
    assert check(rendered[overlay]) == []


def test_workers_scale_on_their_own_durable(rendered: dict[str, Docs]) -> None:
    from engram.domain.topology import consumers

    docs = rendered["prod"]
    durables = {c.durable for c in consumers()}
    triggers = {
        d["metadata"]["name"]: d["spec"]["triggers"][0]["metadata"] for d in manifests.find(docs, "ScaledObject")
    }
    assert set(triggers) == durables
    for name, meta in triggers.items():
        assert meta["consumer"] == name and meta["stream"] == "ENGRAM"
        assert meta["natsServerMonitoringEndpoint"] == "nats.engram.svc.cluster.local:8222"


def test_every_function_folder_is_deployed(rendered: dict[str, Docs]) -> None:
    """A new function folder needs its manifest (and an image in skaffold.yaml)."""
    folders = {p.parent.name for p in (manifests.REPO / "functions").glob("*/__main__.py")}
    assert folders, "no function folders found"
    assert folders <= {f.module for f in manifests.FUNCTIONS}, "add the new function to k8s/ and FUNCTIONS"
    images = {c["image"] for _, c in manifests.function_templates(rendered["prod"])}
    assert images == manifests.FUNCTION_IMAGES


def test_dev_credentials_agree(rendered: dict[str, Docs]) -> None:
    docs = rendered["dev"]
    secrets = manifests.data_of(manifests.generated(docs, "Secret", "engram-secrets"))
    postgres = manifests.data_of(manifests.generated(docs, "Secret", "postgres-credentials"))
    user, password, host = manifests.url_password(secrets["DATABASE_URL"])
    assert (user, password) == ("engram", postgres["POSTGRES_PASSWORD"])
    assert host == "postgres.engram.svc.cluster.local"
    assert secrets["ENGRAM_JWT_SECRET"]


def test_prod_examples_agree(rendered: dict[str, Docs]) -> None:
    docs = rendered["prod"]
    secrets = manifests.data_of(manifests.generated(docs, "Secret", "engram-secrets"))
    postgres = manifests.data_of(manifests.generated(docs, "Secret", "postgres-credentials"))
    elastic = manifests.data_of(manifests.generated(docs, "Secret", "elasticsearch-credentials"))
    # CloudNativePG's application user, reached through the Pooler
    user, password, host = manifests.url_password(secrets["DATABASE_URL"])
    assert (user, password) == (postgres["username"], postgres["password"]) == ("engram", "CHANGE_ME_POSTGRES")
    assert host == "postgres-pooler.engram.svc.cluster.local"
    # ECK's file-realm user (a basic-auth Secret) on ECK's HTTP Service
    user, password, host = manifests.url_password(secrets["ELASTICSEARCH_URL"])
    assert (user, password) == (elastic["username"], elastic["password"]) == ("engram_app", "CHANGE_ME_ES_APP")
    assert elastic["roles"] == "engram_app"
    assert host == "elasticsearch-es-http.engram.svc.cluster.local"
    for name in ("postgres-credentials", "elasticsearch-credentials"):
        assert manifests.generated(docs, "Secret", name)["type"] == "kubernetes.io/basic-auth"
    # every key of the base Secret is in the example, so nothing is forgotten in production
    base = manifests.render(manifests.K8S / "base")
    base_keys = manifests.data_of(manifests.generated(base, "Secret", "engram-secrets"))
    example = (manifests.K8S / "overlays" / "prod" / "secrets" / "engram.env.example").read_text()
    assert set(base_keys) <= set(re.findall(r"^([A-Z0-9_]+)=", example, re.M))


def test_search_component_switches_the_functions_to_es_and_tei(rendered: dict[str, Docs]) -> None:
    prod = manifests.data_of(manifests.generated(rendered["prod"], "ConfigMap", "engram-config"))
    dev = manifests.data_of(manifests.generated(rendered["dev"], "ConfigMap", "engram-config"))
    assert (prod["AI_MEMORY_PROVIDER"], prod["ENGRAM_EMBEDDER"]) == ("dense_vector", "tei")
    assert (dev["AI_MEMORY_PROVIDER"], dev["ENGRAM_EMBEDDER"]) == ("pgvector", "e5")
    tei = manifests.find(rendered["prod"], "Deployment", "tei")[0]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in tei["env"]}
    assert env["MODEL_ID"] == prod["TEI_EMBEDDING_MODEL"] == "BAAI/bge-m3"
    assert prod["TEI_EMBEDDING_DIMENSIONS"] == "1024"  # bge-m3's dense vectors
    assert prod["TEI_EMBEDDING_URL"] == "http://tei.engram.svc.cluster.local"
    roles = yaml.safe_load(
        manifests.data_of(manifests.generated(rendered["prod"], "Secret", "elasticsearch-roles"))["roles.yml"]
    )
    assert roles["engram_app"]["indices"] == [{"names": ["engram-*"], "privileges": ["all"]}]


def test_go_durations() -> None:
    assert manifests.go_duration("2m") == 120
    assert manifests.go_duration("1h30m") == 5400
    assert manifests.go_duration("120s") == 120
    with pytest.raises(ValueError):
        manifests.go_duration("2 minutes")


# ---- the checks fail on deliberately broken copies -------------------------------------------

BROKEN = [
    # (file under k8s/, text, replacement, expected problem, overlay)
    (
        "base/functions/extract-observation.yaml",
        "      terminationGracePeriodSeconds: 150",
        "      terminationGracePeriodSecond: 150",
        "Additional properties are not allowed ('terminationGracePeriodSecond'",
        "dev",
    ),
    (
        "base/functions/memory-api.yaml",
        "containerConcurrency: 50",
        "containerConcurrency: fifty",
        "Service/memory-api: 'fifty' is not of type 'integer'",
        "dev",
    ),
    (
        "base/functions/memory-api.yaml",
        "      timeoutSeconds: 60",
        "      timeoutSeconds: 60\n      runtimeClass: gvisor",
        "Additional properties are not allowed ('runtimeClass'",
        "dev",
    ),
    (
        "base/serviceaccount.yaml",
        "kind: ServiceAccount",
        "kind: ServiceAcount",
        "kubernetes-validate has no schema for v1 ServiceAcount",
        "dev",
    ),
    (
        "base/namespace.yaml",
        "apiVersion: v1\nkind: Namespace",
        "apiVersion: kibana.k8s.elastic.co/v1\nkind: Kibana",
        "has no vendored schema",
        "dev",
    ),
    (
        "base/nats/consumers.yaml",
        "  ackWait: 60s",
        "  ackWait: 90s",
        "Consumer record-feedback: ackWait is 90.0 in the manifest, 60.0 in the code",
        "dev",
    ),
    (
        "base/nats/consumers.yaml",
        "    - engram.feedback.>",
        "    - engram.feedback.recorded",
        "Consumer record-feedback: filterSubjects",
        "dev",
    ),
    (
        "base/nats/streams.yaml",
        "  maxAge: 168h",
        "  maxAge: 24h",
        "Stream ENGRAM: maxAge is 86400.0 in the manifest, 604800.0 in the code",
        "prod",
    ),
    (
        "base/functions/embed-index.yaml",
        '        lagThreshold: "200"',
        "        lagThreshold: 200",
        "metadata lagThreshold must be a string",
        "dev",
    ),
    (
        "base/functions/embed-index.yaml",
        '        consumer: "embed-index"',
        '        consumr: "embed-index"',
        "unknown nats-jetstream metadata key 'consumr'",
        "dev",
    ),
    (
        "base/functions/embed-index.yaml",
        '        consumer: "embed-index"',
        '        consumer: "embed-indexer"',
        "consumer 'embed-indexer' is not declared",
        "prod",
    ),
    (
        "base/functions/record-feedback.yaml",
        "      terminationGracePeriodSeconds: 90",
        "      terminationGracePeriodSeconds: 45",
        "must exceed the worst batch, the consumer's ackWait of 60s",
        "dev",
    ),
    (
        "base/config/engram.env",
        "ANTHROPIC_ADVISOR_MODEL=claude-opus-4-7\n",
        "",
        "setting ANTHROPIC_ADVISOR_MODEL is in neither its ConfigMap nor its Secret",
        "dev",
    ),
    (
        "base/config/engram.env",
        "ENGRAM_BATCH_SIZE=200\n",
        "",
        "the code reads ENGRAM_BATCH_SIZE, which is not configured",
        "prod",
    ),
    (
        "base/config/secrets.env",
        "ANTHROPIC_API_KEY=\n",
        "",
        "ANTHROPIC_API_KEY is in neither its ConfigMap nor its Secret",
        "dev",
    ),
    (
        "base/functions/telemetry-query.yaml",
        "                name: engram-secrets",
        "                name: engram-secret",
        "refers to Secret 'engram-secret', which is not deployed",
        "dev",
    ),
    (
        "components/postgres/networkpolicy.yaml",
        '            matchLabels:\n              engram.io/client: "true"',
        "            matchLabels: {}",
        "an empty podSelector admits every pod",
        "dev",
    ),
    (
        "components/search/networkpolicy.yaml",
        '              engram.io/client: "true"\n      ports:\n        - port: 8080',
        "              app.kubernetes.io/name: nats\n      ports:\n        - port: 8080",
        "admits pods {'app.kubernetes.io/name': 'nats'}, which are not Engram's functions",
        "prod",
    ),
    (
        "base/functions/chat-turn.yaml",
        "              path: /readyz",
        "              path: /healthz",
        "chat-turn: the readiness probe must GET /readyz",
        "dev",
    ),
    (
        "base/functions/retention-cron.yaml",
        "  concurrencyPolicy: Forbid",
        "  concurrencyPolicy: Allow",
        "retention-cron: concurrencyPolicy is 'Allow'",
        "dev",
    ),
    (
        "base/nats/streams.yaml",
        '  servers: ["nats://nats.engram.svc.cluster.local:4222"]\n  nkey: /etc/nack/engram/engram.nk\n---',
        '  servers: ["nats://nats.events.svc.cluster.local:4222"]\n---',
        "nats.events.svc.cluster.local:4222: namespace 'events'",
        "dev",
    ),
]


@pytest.mark.parametrize(("relative", "old", "new", "expected", "overlay"), BROKEN, ids=[b[3][:48] for b in BROKEN])
def test_a_broken_copy_fails(tmp_path: Path, relative: str, old: str, new: str, expected: str, overlay: str) -> None:
    root = manifests.copy_tree(tmp_path)
    path = root / relative
    text = path.read_text()
    assert old in text, f"the test's anchor text is no longer in {relative}"
    path.write_text(text.replace(old, new, 1))
    problems = manifests.check_all(manifests.render(root / "overlays" / overlay))
    assert any(expected in p for p in problems), "\n".join(problems) or "no problem found"


def test_rendering_fails_without_prod_secrets(tmp_path: Path) -> None:
    root = manifests.copy_tree(tmp_path)
    (root / "overlays" / "prod" / "secrets" / "engram.env").unlink()
    with pytest.raises(RuntimeError, match=r"engram\.env"):
        manifests.render(root / "overlays" / "prod")


def test_the_manifests_in_git_are_yaml_that_kustomize_uses() -> None:
    """Every YAML file under k8s/ is referenced by a kustomization (no forgotten, unvalidated file)."""
    referenced: set[Path] = set()
    for kustomization in manifests.K8S.rglob("kustomization.yaml"):
        spec = yaml.safe_load(kustomization.read_text())
        for entry in spec.get("resources", []) + spec.get("configurations", []):
            target = (kustomization.parent / entry).resolve()
            if target.is_file():
                referenced.add(target)
    files = {p.resolve() for p in manifests.K8S.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert files - referenced == set()


def test_the_clusters_nats_authorization_is_the_codes() -> None:
    """k8s/base/nats/auth.conf is what engram.adapters.nats_auth renders (`make run` and the
    tests run the same text on the embedded server)."""
    from engram.adapters.nats_auth import render_authorization

    committed = (manifests.K8S / "base" / "nats" / "auth.conf").read_text()
    assert committed == render_authorization("ENGRAM", []), "regenerate k8s/base/nats/auth.conf"


def test_nats_server_accepts_the_clusters_config(tmp_path: Path) -> None:
    """nats.conf + auth.conf as the pod gets them (public keys from engram-nats-keys) parse."""
    import os
    import subprocess

    from engram.adapters.nats_auth import write_cluster_credentials
    from engram.development.embedded import EmbeddedNats

    for name in ("nats.conf", "auth.conf"):
        (tmp_path / name).write_text((manifests.K8S / "base" / "nats" / name).read_text())
    _, keys = write_cluster_credentials(tmp_path / "secrets")
    env = dict(line.split("=", 1) for line in keys.read_text().splitlines() if "=" in line and line[0] != "#")
    result = subprocess.run(
        [EmbeddedNats.binary(), "-t", "-c", str(tmp_path / "nats.conf")],
        env={**os.environ, **env, "POD_NAME": "nats-0"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_functions_connect_as_their_own_bus_user(rendered: dict[str, Docs]) -> None:
    from engram.domain.bus_access import ADMIN, function_users

    names = {u.name for u in function_users()}
    for pod, container in manifests.function_templates(rendered["prod"]):
        if pod.owner["kind"] == "Job":
            continue  # the migration Job talks to PostgreSQL only
        env = {e["name"]: e for e in container.get("env", [])}
        user = env["ENGRAM_NATS_USER"]["value"]
        if pod.labels.get("app.kubernetes.io/component") == "operations":
            assert user == ADMIN, manifests.ident(
                pod.owner
            )  # the operations Job templates work across consumers and tenants
        else:
            assert user in names, container["image"]
        ref = env["ENGRAM_NATS_SEED"]["valueFrom"]["secretKeyRef"]
        assert ref["name"].startswith("engram-nats-seeds") and ref["key"].endswith(user.upper().replace("-", "_"))


@pytest.mark.parametrize("overlay", manifests.OVERLAYS)
def test_postgres_reads_ahead_as_the_embedded_default(rendered: dict[str, Docs], overlay: str) -> None:
    """The read-ahead measured in bench/RESULTS.md (cold tenants) and the autoprewarm worker
    (restarts) reach every deployed PostgreSQL: the CloudNativePG Cluster's parameters and
    preloaded libraries (prod), the StatefulSet's flags (dev). The Cluster's superuser creates
    pg_prewarm (the dev image's migrations run as its superuser)."""
    from engram.development.embedded import BUFFER_SETTINGS, IO_SETTINGS

    assert BUFFER_SETTINGS == {"shared_preload_libraries": "pg_prewarm"}

    docs = rendered[overlay]
    clusters = [d for d in docs if d.get("kind") == "Cluster" and d["apiVersion"].startswith("postgresql.cnpg.io")]
    sets = [d for d in docs if d.get("kind") == "StatefulSet" and d["metadata"]["name"] == "postgres"]
    assert clusters or sets, f"no PostgreSQL in {overlay}"
    for cluster in clusters:
        parameters = cluster["spec"]["postgresql"]["parameters"]
        assert {k: parameters.get(k) for k in IO_SETTINGS} == IO_SETTINGS
        assert "pg_prewarm" in cluster["spec"]["postgresql"].get("shared_preload_libraries", [])
        # graph warming (migration 0016) needs the extension, which only a superuser may create
        assert "CREATE EXTENSION IF NOT EXISTS pg_prewarm" in cluster["spec"]["bootstrap"]["initdb"].get(
            "postInitApplicationSQL", []
        )
    for stateful in sets:
        args = next(c for c in stateful["spec"]["template"]["spec"]["containers"] if c["name"] == "postgres")["args"]
        flags = dict(v.split("=", 1) for k, v in itertools.pairwise(args) if k == "-c")
        assert {k: flags.get(k) for k in IO_SETTINGS | BUFFER_SETTINGS} == IO_SETTINGS | BUFFER_SETTINGS
