"""Worker functions start without functions-framework (Flask, Werkzeug) unless it runs them."""

from __future__ import annotations

from tests.unit.test_nats_import import run

WORKERS = ("embed_index", "extract_observation", "record_feedback", "consolidate_memory")


def test_the_pull_runners_do_not_load_flask() -> None:
    out = run(
        f"""
        import importlib, sys
        for name in {WORKERS!r}:
            importlib.import_module(f"functions.{{name}}.main")
        print(sorted(m for m in ("functions_framework", "flask", "werkzeug") if m in sys.modules))
        """
    )
    assert out == "[]"


def test_under_functions_framework_the_functions_are_registered_as_cloud_events() -> None:
    out = run(
        f"""
        import functions_framework.aio
        from functions_framework import _function_registry as registry
        from functions_framework.aio import create_asgi_app
        for name in {WORKERS!r}:
            create_asgi_app(target=name, source=f"functions/{{name}}/main.py")
            print(registry.REGISTRY_MAP[name], name in registry.ASGI_FUNCTIONS)
        """
    )
    assert out.split() == ["cloudevent", "True"] * len(WORKERS)


def test_memory_api_starts_without_boto3() -> None:
    """boto3 (S3 archive for erasure) loads on the first erasure, not at start-up."""
    out = run(
        """
        import sys
        import functions.memory_api.main
        print(sorted(m for m in ("boto3", "botocore") if m in sys.modules))
        """
    )
    assert out == "[]"
