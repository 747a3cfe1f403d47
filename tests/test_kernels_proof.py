"""kernels/proof.py: every claim has its expected verdict, and the checks can fail."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import vllm_contract.kernels  # noqa: F401 - settles TRITON_INTERPRET first
import z3
from vllm_contract.kernels import proof

# the Triton kernels (interpreted on CPU): left out of make test-fast
pytestmark = pytest.mark.kernel

INT32_MIN, INT32_MAX = proof.INT32_MIN, proof.INT32_MAX
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def claims():
    return {r.claim: r for r in proof.all_claims()}


def test_every_claim_has_its_expected_verdict(claims):
    wrong = [
        f"{r.claim}: {r.status} (expected {r.expected}) {r.note}" for r in claims.values() if r.status != r.expected
    ]
    assert not wrong, "\n".join(wrong)
    assert len(claims) == 1 + 4 * len(proof.discard.THRESHOLD)


def test_agreement_is_proved_for_both_kernels_under_no_overflow(claims):
    for variant in ("snapshot", "live"):
        proved = [r for r in claims.values() if r.claim.startswith(variant) and r.status == proof.PROVED]
        assert any("g, n >= 0, g + n fits int32" in r.claim for r in proved)
        assert any(r.claim.endswith("decides through still_prefilling") for r in proved)


def test_wraparound_counterexample_is_real(claims):
    """Z3's counterexample overflows g + n, and the real kernel decides as Z3 predicted."""
    refuted = [r for r in claims.values() if r.status == proof.REFUTED]
    assert {r.claim.split(":")[0] for r in refuted} == {"snapshot", "live"}
    for r in refuted:
        cex = r.counterexample
        threshold = cex["prefill_len"] if r.claim.startswith("snapshot") else cex["total_len"]
        assert cex["g"] >= 0 and cex["n"] >= 0 and cex["g"] + cex["n"] > INT32_MAX
        assert cex["seq_len_int32"] == cex["g"] + cex["n"] - 2**32
        assert cex["spec_discards"] is False and cex["g"] + cex["n"] >= threshold
        assert cex["kernel_discards"] is True  # replayed on the Triton kernel, not on Z3
        assert (cex["g"], cex["n"], threshold) == (INT32_MAX, 1, 0)  # the minimised instance


def test_unknown_is_never_a_pass(monkeypatch):
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: z3.unknown)
    result = proof.equals_spec("snapshot", nonnegative=True, no_overflow=True)
    assert result.status == proof.UNKNOWN and result.status != result.expected
    assert proof.signed_comparison().status == proof.UNKNOWN


def test_main_exits_nonzero_on_unknown(monkeypatch, capsys):
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: z3.unknown)
    assert proof.main() == 1


def test_spec_encoding_is_integer_arithmetic():
    """The 64-bit widened spec term agrees with Python's unbounded ints on int32 inputs."""
    rng = random.Random(0)
    edges = [INT32_MIN, INT32_MIN + 1, -1, 0, 1, INT32_MAX - 1, INT32_MAX]
    triples = [(g, n, t) for g in edges for n in edges for t in edges[::2]]
    triples += [tuple(rng.randint(INT32_MIN, INT32_MAX) for _ in range(3)) for _ in range(200)]
    for g, n, t in triples:
        term = proof.spec_decision(*(z3.BitVecVal(v, 32) for v in (g, n, t)))
        assert z3.is_true(z3.simplify(term)) == (g + n < t), (g, n, t)


def _wired_to_wrong_pointer(
    num_sampled_ptr,
    num_rejected_ptr,
    seq_lens_ptr,
    cu_num_logits_ptr,
    idx_mapping_ptr,
    total_len_ptr,
    prefill_len_ptr,
    num_rows,
    BLOCK_ROWS,
):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)  # noqa: F821
    slots = tl.load(idx_mapping_ptr + rows)  # noqa: F821
    seq_lens = tl.load(seq_lens_ptr + rows)  # noqa: F821
    lengths = tl.load(prefill_len_ptr + slots)  # noqa: F821
    prefilling = still_prefilling(seq_lens, lengths)  # noqa: F821
    _store_counts(num_sampled_ptr, num_rejected_ptr, cu_num_logits_ptr, rows, prefilling)  # noqa: F821


def _indexed_by_row(seq_lens_ptr, idx_mapping_ptr, total_len_ptr, BLOCK_ROWS):
    rows = tl.arange(0, BLOCK_ROWS)  # noqa: F821
    seq_lens = tl.load(seq_lens_ptr + rows)  # noqa: F821
    lengths = tl.load(total_len_ptr + rows)  # noqa: F821
    prefilling = still_prefilling(seq_lens, lengths)  # noqa: F821
    store(prefilling)  # noqa: F821


def _compares_itself(seq_lens_ptr, idx_mapping_ptr, total_len_ptr, BLOCK_ROWS):
    rows = tl.arange(0, BLOCK_ROWS)  # noqa: F821
    slots = tl.load(idx_mapping_ptr + rows)  # noqa: F821
    seq_lens = tl.load(seq_lens_ptr + rows)  # noqa: F821
    lengths = tl.load(total_len_ptr + slots)  # noqa: F821
    store(seq_lens <= lengths)  # noqa: F821


@pytest.mark.parametrize(
    "fn, problem",
    [
        (_wired_to_wrong_pointer, "loaded from prefill_len_ptr, not total_len_ptr"),
        (_indexed_by_row, "not loaded from idx_mapping_ptr"),
        (_compares_itself, "expected one call to still_prefilling, found 0"),
    ],
)
def test_routing_check_catches_miswired_kernels(fn, problem):
    assert problem in proof._routing_problem(fn, "total_len_ptr")


def test_native_compile_lowers_the_decision_to_one_signed_comparison(tmp_path):
    """The same kernels built for sm_90 (no GPU needed): the decision is `arith.cmpi slt`,
    the operation the Z3 claims are about, and both kernels compile for the H200."""
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path))
    run = subprocess.run(
        [sys.executable, "-m", "vllm_contract.kernels.lowering", "--arch", "90"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if run.returncode != 0 and "ptxas" in run.stderr and "not found" in run.stderr:
        pytest.skip(f"this triton has no NVIDIA toolchain: {run.stderr.strip()[-200:]}")
    assert run.returncode == 0, run.stdout + run.stderr
    # one kernel, two variants x two num_sampled widths
    assert run.stdout.count("decision: arith.cmpi slt %seq_lens, %thresholds") == 4


@pytest.mark.parametrize(
    "ttir, problem",
    [
        ("%prefilling = arith.cmpi ult, %seq_lens_9, %prefill_lens_11 : tensor<1024xi32>", "cmpi ult"),
        ("%prefilling = arith.cmpi slt, %seq_lens_9, %total_lens_11 : tensor<1024xi32>", "%total_lens"),
        ("%3 = arith.cmpi slt, %seq_lens_9, %prefill_lens_11 : tensor<1024xi32>", "found 0"),
    ],
)
def test_lowering_check_catches_other_comparisons(ttir, problem):
    from vllm_contract.kernels import lowering

    assert problem in lowering.decision_problem("snapshot", ttir)
