"""skaffold.yaml (R-14.1): valid v4beta14, one artifact per function, images match the manifests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy import manifests

SKAFFOLD = manifests.REPO / "skaffold.yaml"
Config = dict[str, Any]


def load(path: Path = SKAFFOLD) -> Config:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert len(docs) == 1, "one skaffold config (module) is expected"
    return docs[0]  # type: ignore[no-any-return]


def schema_problems(config: Config) -> list[str]:
    validator = jsonschema.Draft7Validator(manifests.load_schema("skaffold_v4beta14.json"))
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(config)]


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def apply_profile(config: Config, name: str) -> Config:
    """What skaffold runs with `-p name`: the profile's sections replace the top-level ones, then its patches."""
    result = copy.deepcopy(config)
    profile = next(p for p in config.get("profiles", []) if p["name"] == name)
    for key, value in profile.items():
        if key not in ("name", "activation", "patches", "requiresAllActivations"):
            result[key] = copy.deepcopy(value)
    for patch in profile.get("patches", []):
        *parents, last = _pointer(patch["path"])
        node: Any = result
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) else last
        if patch["op"] == "remove":
            del node[key]
        else:
            if patch["op"] == "replace" and (key not in node if isinstance(node, dict) else key >= len(node)):
                raise AssertionError(f"profile {name}: nothing to replace at {patch['path']}")
            node[key] = patch["value"]
    result.pop("profiles", None)
    return result


def test_skaffold_yaml_matches_the_v4beta14_schema() -> None:
    config = load()
    assert config["apiVersion"] == "skaffold/v4beta14"
    assert schema_problems(config) == []


def test_a_broken_skaffold_yaml_fails(tmp_path: Path) -> None:
    broken = tmp_path / "skaffold.yaml"
    text = SKAFFOLD.read_text()
    broken.write_text(text.replace("        dockerfile: infra/Dockerfile", "        dockerFile: infra/Dockerfile", 1))
    problems = schema_problems(load(broken))
    assert any("dockerFile" in p for p in problems), problems


def test_one_artifact_per_function_from_the_shared_dockerfile() -> None:
    artifacts = load()["build"]["artifacts"]
    assert len(artifacts) == len(manifests.FUNCTIONS)
    assert {a["image"] for a in artifacts} == manifests.FUNCTION_IMAGES
    for artifact in artifacts:
        docker = artifact["docker"]
        assert artifact["context"] == "."
        assert docker["dockerfile"] == "infra/Dockerfile" and (manifests.REPO / docker["dockerfile"]).is_file()
        assert docker["buildArgs"]["FUNCTION"] == artifact["image"].replace("-", "_")


@pytest.mark.parametrize(("profile", "overlay", "embedder"), [("dev", "dev", "embedded"), ("prod", "prod", "tei")])
def test_profiles(rendered: dict[str, list[dict[str, Any]]], profile: str, overlay: str, embedder: str) -> None:
    config = apply_profile(load(), profile)
    assert schema_problems(config) == []
    assert config["manifests"]["kustomize"]["paths"] == [f"k8s/overlays/{overlay}"]
    assert (manifests.K8S / "overlays" / overlay / "kustomization.yaml").is_file()
    assert {a["docker"]["buildArgs"]["EMBEDDER"] for a in config["build"]["artifacts"]} == {embedder}
    assert config["build"]["local"]["push"] is (profile == "prod")
    # the image profile and the functions' configuration agree: no in-process model without one
    settings = manifests.data_of(manifests.generated(rendered[overlay], "ConfigMap", "engram-config"))
    assert (settings["ENGRAM_EMBEDDER"] == "tei") is (embedder == "tei")
    # every image the manifests run is either built here or pinned from a registry
    built = {a["image"] for a in config["build"]["artifacts"]}
    used = {c["image"] for pod in manifests.pod_templates(rendered[overlay]) for c in pod.containers}
    ours = {image for image in used if "/" not in image and ":" not in image}
    assert ours == built, f"images without an artifact: {ours - built}; artifacts never deployed: {built - ours}"
    for image in used - ours:
        assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), f"{image} is not pinned"


def test_port_forward_targets_the_ingress_not_a_knative_service() -> None:
    forwards = load()["portForward"]
    knative = {f.name for f in manifests.FUNCTIONS if f.kind == "http"}
    assert any(f["resourceName"] == "kourier" and f["namespace"] == "kourier-system" for f in forwards)
    for forward in forwards:
        assert forward["resourceType"].lower() in ("service", "pod", "deployment", "statefulset")
        assert forward["resourceName"] not in knative


def test_apply_profile_rejects_a_patch_of_nothing() -> None:
    config = load()
    config["profiles"][1]["patches"].append({"op": "replace", "path": "/build/artifacts/99/docker", "value": {}})
    with pytest.raises((AssertionError, IndexError)):
        apply_profile(config, "prod")
