"""bench/kernels_gpu.py runs here too: correctness only, or its timing code with --smoke."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import vllm_contract.kernels  # noqa: F401 - settles TRITON_INTERPRET first
from vllm_contract.kernels import reference, runtime

# the Triton kernels (interpreted on CPU): left out of make test-fast
pytestmark = pytest.mark.kernel

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "kernels_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("kernels_gpu_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not runtime.INTERPRETED, reason="on a GPU the full benchmark is run by hand")
def test_checks_correctness_and_says_it_did_not_time(bench, capsys):
    assert bench.main(["--no-vllm"]) == 0
    out = capsys.readouterr().out
    assert "all equal" in out and "correctness on small sizes only" in out
    assert "median" not in out


@pytest.mark.skipif(not runtime.INTERPRETED, reason="--smoke is for machines without a GPU")
def test_smoke_run_prints_the_table(bench, capsys):
    assert bench.main(["--smoke", "--no-vllm", "--peak-tbps", "4.8", "--sets", "2"]) == 0
    out = capsys.readouterr().out
    assert "% of peak" in out and "snapshot" in out and "live" in out


def test_peak_bandwidth_assumptions(bench):
    assert bench.peak_bandwidth("NVIDIA H200", None)[0] == 4.8e12
    assert bench.peak_bandwidth("NVIDIA H100 80GB HBM3", None)[0] == 3.35e12
    assert bench.peak_bandwidth("Some GPU", None)[0] is None
    assert bench.peak_bandwidth("Some GPU", 2.0)[0] == 2.0e12


def test_floor_counts_each_input_once(bench):
    batch = bench.make_batch(100, seed=1, device=runtime.DEVICE)
    prefilling = int(reference.still_prefilling(batch.seq_lens, batch.idx_mapping, batch.prefill_len).sum())
    # int32 everywhere except the int64 idx_mapping; cu_num_logits has rows + 1 entries
    assert batch.floor_bytes("snapshot") == 4 * 100 * 5 + 8 * 100 + 4 + 4 * prefilling
