"""Benchmarks (`vllm-contract bench NAME`); each takes --small, a size of seconds that only
checks it runs (tests/test_bench.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generated_cases():
    """Every generated module's case, as (path relative to the repository, CASE), loaded
    from its file: generated_tests is not a package the installed command can import."""
    for path in sorted((ROOT / "generated_tests" / "cases").glob("*/test_*.py")):
        spec = importlib.util.spec_from_file_location(f"_bench_case_{path.parent.name}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield path.relative_to(ROOT), module.CASE
