"""The V2 runner's per-row discard decision, as Triton kernels.

vLLM 0.32.0 decides, per batch row b with state slot s = idx_mapping[b], whether the
row is still prefilling; such a row samples nothing, so its num_sampled and
num_rejected become 0 ([cite:v2-discard-kernel]). The
launchers here are drop-in replacements for `get_num_sampled_and_rejected` there:
same arguments, same in-place write to num_sampled, same returned pair.

  snapshot  vLLM 0.32.0: still prefilling iff seq_lens[b] < prefill_len[s], where
            prefill_len is written once, when the request is added to its slot.
  live      The fix discussed upstream: compare with the slot's live total_len
            instead, which grows with every sampled token.

One kernel serves both: the launchers differ only in the per-slot threshold they
pass. The decision is taken by one helper, `still_prefilling`, so that
kernels/proof.py can prove a property of the very code the kernel runs.

Unlike vLLM's kernel (one program per row), each program here handles BLOCK_ROWS
rows with vector loads, and num_sampled is only rewritten where it changes.
"""

from __future__ import annotations

from vllm_contract.kernels import runtime  # settles TRITON_INTERPRET before @triton.jit

# isort: split
import torch
import triton
import triton.language as tl

BLOCK_ROWS = 1024  # rows per program: 8 per thread at 4 warps, coalesced loads, few programs
NUM_WARPS = 4
_SIGNED_INTS = (torch.int32, torch.int64)


@triton.jit
def still_prefilling(seq_len, threshold):
    """The decision itself: the row's sequence has not reached its slot's threshold.

    A signed comparison, as in vLLM (int32 operands). kernels/proof.py applies this
    function's Python body to Z3 bit-vectors, so keep it a single comparison.
    """
    return seq_len < threshold


@triton.jit
def _store_counts(num_sampled_ptr, num_rejected_ptr, cu_num_logits_ptr, rows, in_batch, prefilling):
    """Zero both counts of prefilling rows; otherwise rejected = logits - sampled.

    Arithmetic happens in the operands' own widths, so int32 wraps exactly as in vLLM.
    Only Triton builtins here (see kernels/runtime.py on tl.zeros_like and friends).
    """
    sampled = tl.load(num_sampled_ptr + rows, mask=in_batch, other=0)
    logits_start = tl.load(cu_num_logits_ptr + rows, mask=in_batch, other=0)
    logits_end = tl.load(cu_num_logits_ptr + rows + 1, mask=in_batch, other=0)
    rejected = (logits_end - logits_start) - sampled
    # num_sampled is already right for rows that keep their sample: write only the zeros
    tl.store(num_sampled_ptr + rows, tl.where(prefilling, 0, sampled), mask=in_batch & prefilling)
    tl.store(num_rejected_ptr + rows, tl.where(prefilling, 0, rejected), mask=in_batch)


@triton.jit
def discard_kernel(
    num_sampled_ptr,
    num_rejected_ptr,
    seq_lens_ptr,
    cu_num_logits_ptr,
    idx_mapping_ptr,
    threshold_ptr,
    num_rows,
    BLOCK_ROWS: tl.constexpr,
):
    """Both variants: a row is prefilling while its seq_len is below its slot's threshold.
    The snapshot launcher passes prefill_len (vLLM 0.32.0), the live one total_len."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    in_batch = rows < num_rows
    slots = tl.load(idx_mapping_ptr + rows, mask=in_batch, other=0)
    seq_lens = tl.load(seq_lens_ptr + rows, mask=in_batch, other=0)
    thresholds = tl.load(threshold_ptr + slots, mask=in_batch, other=0)
    prefilling = still_prefilling(seq_lens, thresholds)
    _store_counts(num_sampled_ptr, num_rejected_ptr, cu_num_logits_ptr, rows, in_batch, prefilling)


def _check_inputs(num_sampled, seq_lens, cu_num_logits, idx_mapping, per_slot) -> int:
    """Shape, dtype and device checks that need no device sync; returns the row count.

    Slot indices are not range-checked (that would sync): like vLLM, the kernels trust
    idx_mapping to hold slots in [0, len(per_slot)).
    """
    runtime.check_runnable()
    named = {
        "num_sampled": num_sampled,
        "seq_lens": seq_lens,
        "cu_num_logits": cu_num_logits,
        "idx_mapping": idx_mapping,
        "the per-slot lengths": per_slot,
    }
    for name, t in named.items():
        if t.dim() != 1 or (t.numel() > 1 and t.stride(0) != 1):
            raise ValueError(f"{name} must be a contiguous 1-D tensor, got shape {tuple(t.shape)}")
        if t.dtype not in _SIGNED_INTS:
            raise TypeError(f"{name} must be int32 or int64 (signed, as in vLLM), got {t.dtype}")
        if t.device.type != runtime.DEVICE.type:
            raise ValueError(
                f"{name} is on {t.device}, but kernels run on {runtime.DEVICE} here ({runtime.describe()})"
            )
    num_rows = idx_mapping.shape[0]
    short = [
        f"{name} has {t.shape[0]} entries, needs {need}"
        for name, t, need in (
            ("num_sampled", num_sampled, num_rows),
            ("seq_lens", seq_lens, num_rows),
            ("cu_num_logits", cu_num_logits, num_rows + 1),
        )
        if t.shape[0] < need
    ]
    if short:
        raise ValueError(f"batch of {num_rows} rows (idx_mapping): " + "; ".join(short))
    return num_rows


def _launch(num_sampled, seq_lens, cu_num_logits, idx_mapping, per_slot, block_rows):
    if block_rows < 1 or block_rows & (block_rows - 1):
        raise ValueError(f"block_rows must be a power of two (tl.arange needs one), got {block_rows}")
    num_rows = _check_inputs(num_sampled, seq_lens, cu_num_logits, idx_mapping, per_slot)
    num_rejected = torch.empty_like(num_sampled)
    if num_rows:
        grid = (triton.cdiv(num_rows, block_rows),)
        discard_kernel[grid](
            num_sampled,
            num_rejected,
            seq_lens,
            cu_num_logits,
            idx_mapping,
            per_slot,
            num_rows,
            BLOCK_ROWS=block_rows,
            num_warps=NUM_WARPS,
        )
    return num_sampled, num_rejected


def get_num_sampled_and_rejected_snapshot(
    num_sampled: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_num_logits: torch.Tensor,
    idx_mapping: torch.Tensor,
    prefill_len: torch.Tensor,
    *,
    block_rows: int = BLOCK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM 0.32.0's get_num_sampled_and_rejected: rows with seq_len < prefill_len[slot]
    get num_sampled = num_rejected = 0; the others num_rejected = logits - num_sampled.

    num_sampled is updated in place and returned; num_rejected is a new tensor shaped
    like num_sampled (entries past the batch's rows are left uninitialised, as in vLLM).
    """
    return _launch(num_sampled, seq_lens, cu_num_logits, idx_mapping, prefill_len, block_rows)


def get_num_sampled_and_rejected_live(
    num_sampled: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_num_logits: torch.Tensor,
    idx_mapping: torch.Tensor,
    total_len: torch.Tensor,
    *,
    block_rows: int = BLOCK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """As the snapshot variant, but a row is prefilling iff seq_len < total_len[slot]."""
    return _launch(num_sampled, seq_lens, cu_num_logits, idx_mapping, total_len, block_rows)


# variant name -> launcher (which variant a V2 runner uses: its record in spec/runner_variants.py)
LAUNCHERS = {
    "snapshot": get_num_sampled_and_rejected_snapshot,
    "live": get_num_sampled_and_rejected_live,
}
THRESHOLD = {"snapshot": "prefill_len", "live": "total_len"}  # what each launcher passes
