"""Benchmarks (`vllm-contract bench NAME`); each takes --small, a size of seconds that only
checks it runs (tests/test_bench.py)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generated_cases():
    """Every generated module's case, as (path relative to the repository, CASE)."""
    from vllm_contract.codegen.generate import generated_cases as cases

    return [(path.relative_to(ROOT), case) for path, case in cases()]
