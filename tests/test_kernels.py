"""The discard kernels against the torch reference and against vLLM's installed kernel.

On a machine without CUDA these run under Triton's interpreter (kernels/runtime.py);
results are exact there, timings are not measured.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from vllm_contract.kernels import discard, reference, runtime

# the Triton kernels (interpreted on CPU): left out of make test-fast
pytestmark = pytest.mark.kernel

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
EDGES = (0, 1, 2, -1, INT32_MAX, INT32_MAX - 1, INT32_MIN, INT32_MIN + 1)
VARIANTS = ("snapshot", "live")
DEVICE = runtime.DEVICE


# ---------------------------------------------------------------------- batches


def _sprinkle(values: torch.Tensor, gen: torch.Generator, fraction: float) -> torch.Tensor:
    """Replace about `fraction` of the entries with int32 edge values."""
    hit = torch.rand(values.shape, generator=gen) < fraction
    picks = torch.tensor(EDGES, dtype=torch.int64)[torch.randint(0, len(EDGES), values.shape, generator=gen)]
    return torch.where(hit, picks, values)


def random_batch(seed: int, rows: int, slots: int, edge_fraction: float = 0.1, sampled_dtype=torch.int32):
    """Inputs of get_num_sampled_and_rejected: slots drawn with repetition and in no
    order, lengths mostly near each other (both decisions common), some int32 edges."""
    gen = torch.Generator().manual_seed(seed)
    idx_mapping = torch.randint(0, slots, (rows,), generator=gen, dtype=torch.int64)
    seq_lens = _sprinkle(torch.randint(0, 48, (rows,), generator=gen), gen, edge_fraction)
    per_slot = _sprinkle(torch.randint(0, 48, (slots,), generator=gen), gen, edge_fraction)
    logits = torch.randint(1, 5, (rows,), generator=gen)
    cu_num_logits = torch.cat([torch.zeros(1, dtype=torch.int64), logits.cumsum(0)])
    cu_num_logits = _sprinkle(cu_num_logits, gen, edge_fraction)  # arbitrary ends: logits wrap
    num_sampled = _sprinkle(torch.randint(0, 5, (rows,), generator=gen), gen, edge_fraction)
    return {
        "num_sampled": num_sampled.to(sampled_dtype).to(DEVICE),
        "seq_lens": seq_lens.to(torch.int32).to(DEVICE),
        "cu_num_logits": cu_num_logits.to(torch.int32).to(DEVICE),
        "idx_mapping": idx_mapping.to(DEVICE),
        "per_slot": per_slot.to(torch.int32).to(DEVICE),
    }


def run_kernel(variant: str, batch: dict, **kwargs):
    """Launch on copies (the kernel writes num_sampled in place); returns CPU lists."""
    args = [batch[k].clone() for k in ("num_sampled", "seq_lens", "cu_num_logits", "idx_mapping", "per_slot")]
    sampled, rejected = discard.LAUNCHERS[variant](*args, **kwargs)
    rows = batch["idx_mapping"].shape[0]
    return sampled.cpu().tolist(), rejected[:rows].cpu().tolist()


def run_reference(variant: str, batch: dict):
    args = [batch[k].cpu() for k in ("num_sampled", "seq_lens", "cu_num_logits", "idx_mapping", "per_slot")]
    sampled, rejected = reference.REFERENCES[variant](*args)
    return sampled.tolist(), rejected.tolist()


# ------------------------------------------------------------ kernel vs reference


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seed", range(6))
def test_matches_reference_on_random_batches(variant, seed):
    gen = torch.Generator().manual_seed(1000 + seed)
    rows = int(torch.randint(1, 2600, (1,), generator=gen))
    slots = int(torch.randint(1, 300, (1,), generator=gen))
    batch = random_batch(seed, rows, slots, edge_fraction=0.15)
    assert run_kernel(variant, batch) == run_reference(variant, batch)


@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_reference_on_full_int32_range(variant):
    """Every input uniform over int32: comparisons and subtractions far from zero."""
    gen = torch.Generator().manual_seed(7)
    rows, slots = 3000, 64

    def full(n):
        return torch.randint(INT32_MIN, INT32_MAX, (n,), generator=gen, dtype=torch.int64).to(torch.int32)

    batch = {
        "num_sampled": full(rows),
        "seq_lens": full(rows),
        "cu_num_logits": full(rows + 1),
        "idx_mapping": torch.randint(0, slots, (rows,), generator=gen),
        "per_slot": full(slots),
    }
    batch = {k: v.to(DEVICE) for k, v in batch.items()}
    assert run_kernel(variant, batch) == run_reference(variant, batch)


@pytest.mark.parametrize("variant", VARIANTS)
def test_wider_num_sampled(variant):
    """int64 num_sampled: num_rejected is computed and stored in int64, like vLLM's kernel."""
    batch = random_batch(3, rows=500, slots=40, edge_fraction=0.2, sampled_dtype=torch.int64)
    assert run_kernel(variant, batch) == run_reference(variant, batch)


@pytest.mark.parametrize("block_rows", [1, 2, 64, 4096])
def test_block_size_does_not_change_results(block_rows):
    """Rows per program only changes the masking at the batch's end."""
    batch = random_batch(11, rows=70, slots=50)
    assert run_kernel("snapshot", batch, block_rows=block_rows) == run_reference("snapshot", batch)


def test_comparison_is_signed():
    """INT32_MIN < 0 (prefilling) and INT32_MAX > INT32_MIN (not): signed, as the proof assumes."""
    batch = {
        "num_sampled": torch.tensor([1, 1, 1], dtype=torch.int32),
        "seq_lens": torch.tensor([INT32_MIN, INT32_MAX, -1], dtype=torch.int32),
        "cu_num_logits": torch.tensor([0, 1, 2, 3], dtype=torch.int32),
        "idx_mapping": torch.tensor([0, 1, 0]),
        "per_slot": torch.tensor([0, INT32_MIN], dtype=torch.int32),
    }
    batch = {k: v.to(DEVICE) for k, v in batch.items()}
    for variant in VARIANTS:
        assert run_kernel(variant, batch) == ([0, 1, 0], [0, 0, 0])


def test_writes_num_sampled_in_place_like_vllm():
    batch = random_batch(5, rows=200, slots=30)
    num_sampled = batch["num_sampled"].clone()
    returned, num_rejected = discard.get_num_sampled_and_rejected_snapshot(
        num_sampled, batch["seq_lens"], batch["cu_num_logits"], batch["idx_mapping"], batch["per_slot"]
    )
    assert returned is num_sampled
    assert num_rejected.shape == num_sampled.shape and num_rejected.dtype == num_sampled.dtype
    assert num_sampled.cpu().tolist() == run_reference("snapshot", batch)[0]


def test_leaves_entries_past_the_batch_alone():
    """The row count is idx_mapping's length; longer buffers (vLLM's max_num_reqs) are not touched."""
    batch = random_batch(9, rows=100, slots=20)
    padded = dict(batch)
    padded["num_sampled"] = torch.cat([batch["num_sampled"], torch.full((28,), 77, dtype=torch.int32, device=DEVICE)])
    padded["seq_lens"] = torch.cat([batch["seq_lens"], torch.zeros(28, dtype=torch.int32, device=DEVICE)])
    sampled, rejected = run_kernel("live", padded)
    want_sampled, want_rejected = run_reference("live", batch)
    assert sampled == want_sampled + [77] * 28 and rejected == want_rejected


def test_empty_batch():
    batch = random_batch(1, rows=1, slots=1)
    batch["idx_mapping"] = batch["idx_mapping"][:0]
    for variant in VARIANTS:
        assert run_kernel(variant, batch) == ([batch["num_sampled"].item()], [])


def test_rejects_inputs_it_cannot_handle():
    batch = random_batch(2, rows=10, slots=4)
    args = [batch[k] for k in ("num_sampled", "seq_lens", "cu_num_logits", "idx_mapping", "per_slot")]
    launch = discard.get_num_sampled_and_rejected_snapshot
    with pytest.raises(TypeError, match="seq_lens must be int32 or int64"):
        launch(args[0], args[1].float(), *args[2:])
    with pytest.raises(ValueError, match="cu_num_logits has 10 entries, needs 11"):
        launch(args[0], args[1], args[2][:10], *args[3:])
    with pytest.raises(ValueError, match="power of two"):
        launch(*args, block_rows=48)
    with pytest.raises(ValueError, match="contiguous 1-D"):
        launch(args[0], torch.stack([args[1], args[1]], 1)[:, 0], *args[2:])


# ------------------------------------------------------------------------ runtime


def test_runtime_chooses_the_interpreter_without_cuda():
    """A fresh process with no TRITON_INTERPRET: kernels/ sets it iff there is no CUDA,
    and the kernels run even when triton.language was imported first (as vLLM does)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    probe = (
        "import os, torch, triton.language\n"  # before kernels: its @jit library is compiled-mode
        "import vllm_contract.kernels\n"
        "from vllm_contract.kernels import discard, reference, runtime\n"
        "d = runtime.DEVICE\n"
        "args = [torch.tensor(v, dtype=torch.int32, device=d) for v in ([1, 1], [3, 9], [0, 1, 3])]\n"
        "args += [torch.tensor([1, 0], device=d), torch.tensor([5, 4], dtype=torch.int32, device=d)]\n"
        "got = discard.get_num_sampled_and_rejected_live(*[a.clone() for a in args])\n"
        "want = reference.live(*[a.cpu() for a in args])\n"
        "ok = all(g.cpu().tolist() == w.tolist() for g, w in zip(got, want))\n"
        "print(torch.cuda.is_available(), os.environ.get('TRITON_INTERPRET'), runtime.INTERPRETED,"
        " runtime.TRITON_LANGUAGE_IMPORTED_EARLY, type(discard.discard_kernel).__name__, ok)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert out.returncode == 0, out.stderr
    has_cuda, flag, interpreted, early, kernel_type, ok = out.stdout.split()
    assert (early, ok) == ("True", "True")
    if has_cuda == "True":
        assert (flag, interpreted, kernel_type) == ("None", "False", "JITFunction")
    else:
        assert (flag, interpreted, kernel_type) == ("1", "True", "InterpretedFunction")


def test_refuses_to_launch_with_neither_cuda_nor_interpreter(monkeypatch):
    monkeypatch.setattr(runtime, "INTERPRETED", False)
    monkeypatch.setattr(runtime, "HAS_CUDA", False)
    with pytest.raises(runtime.KernelsUnavailable, match="TRITON_INTERPRET"):
        runtime.check_runnable()


# ------------------------------------------------------------ kernel vs vLLM's own


@pytest.fixture(scope="module")
def vllm_launcher():
    from vllm_contract.adapter import kernel as vllm_kernel

    try:
        return vllm_kernel.get_num_sampled_and_rejected()
    except vllm_kernel.VllmUnavailable as exc:
        pytest.fail(f"cannot compare with vLLM's kernel: {exc}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seed", range(3))
def test_matches_vllm_kernel(vllm_launcher, variant, seed):
    """vLLM's kernel is one threshold comparison whatever tensor it is given: with
    prefill_len it is the snapshot rule, with total_len the live one."""
    rows = (1, 300, 1200)[seed]  # vLLM runs one program per row: interpreter time grows with rows
    batch = random_batch(100 + seed, rows=rows, slots=max(1, rows // 3), edge_fraction=0.3)
    vllm_num_sampled = batch["num_sampled"].clone()
    returned, vllm_rejected = vllm_launcher(
        vllm_num_sampled,
        batch["seq_lens"].clone(),
        batch["cu_num_logits"].clone(),
        batch["idx_mapping"].clone(),
        batch["per_slot"].clone(),
    )
    assert returned is vllm_num_sampled  # vLLM writes in place too
    assert run_kernel(variant, batch) == (vllm_num_sampled.cpu().tolist(), vllm_rejected.cpu().tolist())


def test_matches_vllm_kernel_on_every_edge_pair(vllm_launcher):
    """Every (seq_len, threshold) pair of int32 edge values, one row each."""
    pairs = [(s, t) for s in EDGES for t in EDGES]
    rows = len(pairs)
    batch = {
        "num_sampled": torch.tensor([EDGES[i % len(EDGES)] for i in range(rows)], dtype=torch.int32),
        "seq_lens": torch.tensor([s for s, _ in pairs], dtype=torch.int32),
        "cu_num_logits": torch.tensor([EDGES[(3 * i) % len(EDGES)] for i in range(rows + 1)], dtype=torch.int32),
        "idx_mapping": torch.arange(rows - 1, -1, -1),
        "per_slot": torch.tensor([t for _, t in reversed(pairs)], dtype=torch.int32),
    }
    batch = {k: v.to(DEVICE) for k, v in batch.items()}
    vllm_num_sampled = batch["num_sampled"].clone()
    _, vllm_rejected = vllm_launcher(
        vllm_num_sampled, batch["seq_lens"], batch["cu_num_logits"], batch["idx_mapping"], batch["per_slot"]
    )
    want = (vllm_num_sampled.cpu().tolist(), vllm_rejected.cpu().tolist())
    assert run_kernel("snapshot", batch) == want
    assert run_reference("snapshot", batch) == want
