"""bench.cold_start runs every function folder that exists, as the cluster would start it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import cold_start


def test_discovers_every_function_folder() -> None:
    found = {fn.module: fn.kind for fn in cold_start.discover()}
    folders = {p.parent.name for p in cold_start.FUNCTIONS_DIR.glob("*/__main__.py")}
    assert set(found) == folders and {"memory_api", "extract_observation"} <= folders
    assert found["memory_api"] == "http" and found["extract_observation"] == "worker"


def test_classifies_unknown_folders_by_their_entry_point() -> None:
    assert cold_start.classify("new_api", "import uvicorn\nuvicorn.run(...)") == "http"
    assert cold_start.classify("new_worker", "from functions.new_worker.main import WORKER\nWORKER.main()") == "worker"
    assert cold_start.classify("new_job", "asyncio.run(purge())") == "job"


def test_each_function_starts_and_becomes_healthy(stack: dict[str, str], tmp_path: Path) -> None:
    """One whole-process start per function (timing is the benchmark's business, not this test's)."""
    env = cold_start.function_env(
        {
            "DATABASE_URL": stack["database_url"],
            "NATS_URL": stack["nats_url"],
            "ENGRAM_NATS_SEED_FILE": str(Path(stack["nats_dir"]) / "credentials" / "engram.nk"),
        }
    )
    measured = 0
    for fn in cold_start.discover():
        if fn.kind == "job":
            continue
        start = cold_start.start_once(fn, env, tmp_path)
        assert 0 < start.healthy_s < cold_start.TIMEOUT
        if fn.kind == "http":  # /readyz needs PostgreSQL, NATS and the migrated schema
            assert start.ready_s is not None and start.ready_s >= start.healthy_s
        # the worker removes its ready file when it stops: a stopped worker never looks ready
        assert not (tmp_path / f"{fn.module}.ready").exists()
        measured += 1
    assert measured >= 2


def test_a_function_that_dies_is_reported(stack: dict[str, str], tmp_path: Path) -> None:
    env = cold_start.function_env({"DATABASE_URL": stack["database_url"], "NATS_URL": "nats://127.0.0.1:1"})
    env["ENGRAM_STREAM"] = "not a valid stream name"
    with pytest.raises(RuntimeError, match="exited"):
        cold_start.start_once(cold_start.Function("extract_observation", "worker"), env, tmp_path)


def test_report_compares_with_the_baseline() -> None:
    result = cold_start.Result(cold_start.Function("memory_api", "http"), [0.5, 0.7, 0.6])
    slow = cold_start.Result(cold_start.Function("embed_index", "worker"), [1.2, 1.1, 1.3])
    summary = cold_start.report([result, slow], [0.05, 0.04, 0.06], [], runs=3)
    functions = summary["functions"]
    assert isinstance(functions, dict)
    assert functions["memory-api"]["ratio_to_baseline"] == 12.0 and functions["memory-api"]["ok"]
    assert not functions["embed-index"]["ok"] and summary["all_ok"] is False


def test_workers_do_not_import_pyjwt() -> None:
    """Workers never authenticate: PyJWT and cryptography stay out of their start (about 50 ms)."""
    import subprocess
    import sys

    code = (
        "import sys, engram.bootstrap, engram.runtime.worker, engram.runtime.jetstream;"
        "print(sorted(m for m in ('jwt', 'cryptography') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_only_names_existing_functions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        cold_start.main(["--only", "memory-mcp", "--only", "no-such-function"])
    assert refused.value.code == 2 and "no such function: no-such-function" in capsys.readouterr().err
