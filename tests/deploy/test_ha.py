"""The production overlay survives losing a node (issue 19, part 4): it renders and validates
(the CloudNativePG, barman-cloud and ECK schemas included), each HA property holds, the
clustered NATS configuration parses, and deliberately broken copies fail."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import ha, manifests

Docs = list[dict[str, Any]]
HA = "components/ha"


def test_the_prod_overlay_has_every_ha_property(rendered: dict[str, Docs]) -> None:
    docs = rendered["prod"]
    assert manifests.validate(docs) == []
    kinds = {(manifests.group_of(d), d["kind"]) for d in docs}
    assert kinds >= {
        ("postgresql.cnpg.io", "Cluster"),
        ("postgresql.cnpg.io", "Pooler"),
        ("postgresql.cnpg.io", "ScheduledBackup"),
        ("barmancloud.cnpg.io", "ObjectStore"),
        ("elasticsearch.k8s.elastic.co", "Elasticsearch"),
        ("policy", "PodDisruptionBudget"),
    }
    assert ha.check_ha(docs) == []


def test_dev_stays_single_node(rendered: dict[str, Docs]) -> None:
    """The dev overlay keeps one NATS server with R1 streams and the plain PostgreSQL: the
    topology check holds there at its own replica count, as it does for prod at 3."""
    docs = rendered["dev"]
    assert manifests.check_topology(docs) == []
    assert {d["spec"]["replicas"] for d in manifests.find(docs, "Stream") + manifests.find(docs, "Consumer")} == {1}
    assert ha.check_nats(docs) and ha.check_postgres(docs)  # no cluster: the HA checks do not hold
    assert manifests.check_topology(rendered["prod"]) == []


def test_the_clustered_nats_config_parses(tmp_path: Path) -> None:
    from engram.adapters.nats_auth import write_cluster_credentials
    from engram.development.embedded import EmbeddedNats

    (tmp_path / "nats.conf").write_text((manifests.K8S / "components" / "ha" / "nats.conf").read_text())
    (tmp_path / "auth.conf").write_text((manifests.K8S / "base" / "nats" / "auth.conf").read_text())
    _, keys = write_cluster_credentials(tmp_path / "secrets")
    env = dict(line.split("=", 1) for line in keys.read_text().splitlines() if "=" in line and line[0] != "#")
    result = subprocess.run(
        [EmbeddedNats.binary(), "-t", "-c", str(tmp_path / "nats.conf")],
        env={**os.environ, **env, "POD_NAME": "nats-1"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_index_template_keeps_a_replica_on_a_second_node() -> None:
    from engram.adapters.elasticsearch_index import index_template

    assert index_template(1024)["template"]["settings"]["auto_expand_replicas"] == "0-1"


def test_resource_quantities() -> None:
    assert ha.quantity("256Mi") == 256 * 2**20 and ha.quantity("250m") == 0.25 and ha.quantity("2") == 2


# ---- broken copies fail -----------------------------------------------------------------------

BROKEN = [
    # (file under k8s/, text, replacement, expected problem)
    (f"{HA}/postgres.yaml", "  instances: 3\n", "  instance: 3\n", "Additional properties are not allowed ('instance'"),
    (f"{HA}/postgres.yaml", "  instances: 3\n", "  instances: 1\n", "1 instances, needs 3"),
    (f"{HA}/postgres.yaml", "      number: 1\n", "      number: 0\n", "no synchronous standby"),
    (
        f"{HA}/postgres.yaml",
        "      dataDurability: required\n",
        "      dataDurability: preferred\n",
        "dataDurability must be 'required'",
    ),
    (
        f"{HA}/postgres.yaml",
        "    podAntiAffinityType: required\n",
        "    podAntiAffinityType: preferred\n",
        "different nodes",
    ),
    (f"{HA}/postgres.yaml", "      isWALArchiver: true\n", "      isWALArchiver: false\n", "WAL is not archived"),
    (
        f"{HA}/postgres.yaml",
        "        barmanObjectName: engram-backups",
        "        barmanObjectName: other",
        "ObjectStore is not deployed",
    ),
    (
        f"{HA}/postgres.yaml",
        "    destinationPath: s3://engram-backups/postgres\n",
        "",
        "'destinationPath' is a required property",
    ),
    (f"{HA}/postgres.yaml", "  method: plugin\n", "  method: snapshot\n", "'snapshot' is not one of"),
    (f"{HA}/postgres.yaml", "    poolMode: session\n", "    poolMode: statement\n", "'statement' is not one of"),
    (f"{HA}/postgres.yaml", "  instances: 3\n  type: rw", "  instances: 1\n  type: rw", "Pooler: needs at least 2"),
    ("overlays/prod/secrets/engram.env.example", "@postgres-pooler.", "@postgres-rw.", "not at the Pooler"),
    (
        f"{HA}/kustomization.yaml",
        "        path: /spec/replicas\n        value: 3\n      - op: add",
        "        path: /spec/replicas\n        value: 1\n      - op: add",
        "1 servers, needs 3",
    ),
    (
        f"{HA}/kustomization.yaml",
        "      - ENGRAM_STREAM_REPLICAS=3",
        "      - ENGRAM_STREAM_REPLICAS=1",
        "replicas is 3 in the manifest, 1 in the code",
    ),
    (
        f"{HA}/kustomization.yaml",
        "      kind: Consumer\n    patch: |-\n      - op: replace\n        path: /spec/replicas\n        value: 3",
        "      kind: Consumer\n    patch: |-\n      - op: replace\n        path: /spec/replicas\n        value: 2",
        "replicas is 2 in the manifest, 3 in the code",
    ),
    (
        f"{HA}/nats.conf",
        "    nats://nats-2.nats-headless",
        "    nats://nats-9.nats-headless",
        "no cluster block routing",
    ),
    (f"{HA}/disruption.yaml", "  minAvailable: 2\n", "  minAvailable: 1\n", "keep a quorum"),
    (
        f"{HA}/disruption.yaml",
        "  name: embed-index\nspec:\n  maxUnavailable: 1",
        "  name: embed-index\nspec:\n  minAvailable: 1",
        "minAvailable blocks draining",
    ),
    (
        f"{HA}/disruption.yaml",
        "      app.kubernetes.io/name: chat-turn",
        "      app.kubernetes.io/name: chat-turns",
        "chat-turn: no PodDisruptionBudget",
    ),
    (
        f"{HA}/kustomization.yaml",
        "{app.kubernetes.io/name: record-feedback}}}\n          - {maxSkew: 1, topologyKey: topology",
        "{app.kubernetes.io/name: other}}}\n          - {maxSkew: 1, topologyKey: topology",
        "record-feedback: no topologySpreadConstraints",
    ),
    (
        f"{HA}/outbox-relay.yaml",
        "              memory: 128Mi\n",
        "              memory: 1Gi\n",
        "memory request 1Gi above its limit",
    ),
    ("components/search/elasticsearch.yaml", "      count: 3\n", "      count: 1\n", "1 master-eligible nodes"),
    (
        "components/search/elasticsearch.yaml",
        "      count: 3\n",
        "      count: three\n",
        "'three' is not of type 'integer'",
    ),
    ("components/search/elasticsearch.yaml", "  version: 8.19.3\n", "", "'version' is a required property"),
]


@pytest.mark.parametrize(("relative", "old", "new", "expected"), BROKEN, ids=[b[3][:48] for b in BROKEN])
def test_a_broken_copy_fails(tmp_path: Path, relative: str, old: str, new: str, expected: str) -> None:
    root = manifests.copy_tree(tmp_path)
    path = root / relative
    text = path.read_text()
    assert old in text, f"the test's anchor text is no longer in {relative}"
    path.write_text(text.replace(old, new, 1))
    if relative.endswith(".env.example"):  # copy_tree filled the secrets from the examples already
        path.with_name(path.name.removesuffix(".example")).write_text(path.read_text())
    docs = manifests.render(root / "overlays" / "prod")
    problems = manifests.check_all(docs) + ha.check_ha(docs)
    assert any(expected in p for p in problems), "\n".join(problems) or "no problem found"


def test_the_restore_in_the_docs_is_a_valid_cluster() -> None:
    """docs/deploy.md's recovery Cluster validates against the CloudNativePG schema and recovers
    from the ObjectStore the production cluster archives to."""
    import re

    import yaml

    text = (manifests.REPO / "docs" / "deploy.md").read_text()
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "bootstrap:\n" in b]
    cluster = yaml.safe_load("\n".join(line.removeprefix("   ") for line in block.splitlines()))
    assert manifests.validate([cluster]) == []
    origin = cluster["spec"]["externalClusters"][0]["plugin"]["parameters"]
    ha_docs = [d for d in yaml.safe_load_all((manifests.K8S / HA / "postgres.yaml").read_text()) if d]
    store = next(d for d in ha_docs if d["kind"] == "ObjectStore")
    production = next(d for d in ha_docs if d["kind"] == "Cluster")
    assert origin == {"barmanObjectName": store["metadata"]["name"], "serverName": production["metadata"]["name"]}
    assert cluster["spec"]["bootstrap"]["recovery"]["source"] == "origin"


def test_the_operations_job_templates_run_commands_the_cli_knows(rendered: dict[str, Docs]) -> None:
    """Each suspended CronJob of components/operations runs an `engram` command that parses, with
    its environment substituted as Kubernetes does (`$(VAR)`), and never runs on its own."""
    import re

    from engram.operations import cli, dlq, tenants

    cronjobs = manifests.find(rendered["prod"], "CronJob")
    jobs = [d for d in cronjobs if d["metadata"]["labels"].get("app.kubernetes.io/component") == "operations"]
    assert {j["metadata"]["name"] for j in jobs} == {"engram-dlq-replay", "engram-reindex-all"}
    handlers = {"engram-dlq-replay": dlq.cmd_dlq, "engram-reindex-all": tenants.cmd_reindex}
    for job in jobs:
        assert job["spec"]["suspend"] is True
        [container] = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
        command = [re.sub(r"\$\((\w+)\)", lambda m, env=env: env[m.group(1)], part) for part in container["command"]]
        assert command[0] == "engram"
        args = cli.build_parser().parse_args(command[1:])
        assert args.func is handlers[job["metadata"]["name"]]
    replay = cli.build_parser().parse_args(["dlq", "replay", "--consumer", "", "--tenant", ""])
    assert not dlq._selected(replay)  # all filters empty: the Job replays nothing and says so (exit 2)
