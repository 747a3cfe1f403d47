"""Every benchmark of `vllm-contract bench` (what `make bench` runs, by name) runs to completion.

Each runs with --small, at a size of seconds, in a process of its own (as a user runs
it: one vLLM tree per process). The numbers mean nothing; what is checked is that the
benchmark ends with a status of its own (0 measured, 1 a target missed, which a small
size often does) and no traceback: a benchmark that crashes after minutes on what
landed (bench speed once did, on a property no walk sees) fails here first.
Committed results are never written: --small writes nowhere unless --out is given.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vllm_contract.commands.bench import BENCHES

ROOT = Path(__file__).resolve().parent.parent
# what each needs besides the prover: vLLM (a tree loaded in its process), the kernels, Ray
NEEDS = {
    "prover": [pytest.mark.vllm],  # its last part plays a generated module on vLLM's scheduler
    "real-runner": [pytest.mark.vllm],
    "runner-measure": [pytest.mark.vllm],
    "monitor": [pytest.mark.vllm],
    "fuzz-scaling": [pytest.mark.vllm, pytest.mark.ray],
    "kernel-agreement": [pytest.mark.kernel],
    "kernels-gpu": [pytest.mark.kernel],
}
# the ones that take over 8 s even at --small (a Ray cluster, vLLM's runners driven for
# each size): make test-all runs them, make test the rest
SWEEP = {"fuzz-scaling", "prover", "real-runner", "runner-measure", "monitor"}


def _marks(name: str) -> list:
    return [*NEEDS.get(name, []), *([pytest.mark.sweep] if name in SWEEP else [])]


def test_every_benchmark_is_tested():
    assert set(NEEDS) <= set(BENCHES) and SWEEP <= set(BENCHES)


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n)) for n in BENCHES])
def test_a_benchmark_runs_to_completion_at_a_small_size(name, tmp_path):
    before = {p: p.stat().st_mtime_ns for p in (ROOT / "bench" / "results").rglob("*") if p.is_file()}
    done = subprocess.run(
        [sys.executable, "-m", "vllm_contract", "bench", name, "--small"],
        cwd=tmp_path,  # anything written to the current folder lands here
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = (done.stdout + done.stderr)[-3000:]
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, said
    after = {p: p.stat().st_mtime_ns for p in (ROOT / "bench" / "results").rglob("*") if p.is_file()}
    assert after == before, "a --small run wrote into bench/results"
