"""Benchmarks: `python -m bench.NAME [--json]`; results in bench/RESULTS.md."""
