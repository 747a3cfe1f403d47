"""Plain torch versions of the discard kernels, the oracle the kernels are tested against.

Written for clarity, not speed: every value is widened to int64, the comparison is
done there, and results are wrapped back to the width the kernel computes in. That
makes the int32 wrap-around of vLLM's arithmetic explicit instead of relying on what
torch happens to do on overflow.
"""

from __future__ import annotations

import torch


def wrap_to(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Two's-complement wrap of int64 values into dtype's range (a GPU's int add/cast)."""
    bits = torch.iinfo(dtype).bits
    if bits >= 64:
        return values.to(dtype)
    half = 1 << (bits - 1)
    return (torch.remainder(values + half, 1 << bits) - half).to(dtype)


def still_prefilling(seq_lens: torch.Tensor, idx_mapping: torch.Tensor, per_slot: torch.Tensor) -> torch.Tensor:
    """Per batch row: seq_lens[b] < per_slot[idx_mapping[b]], compared as signed integers."""
    num_rows = idx_mapping.shape[0]
    thresholds = per_slot[idx_mapping.long()]
    return seq_lens[:num_rows].long() < thresholds.long()


def num_sampled_and_rejected(
    num_sampled: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_num_logits: torch.Tensor,
    idx_mapping: torch.Tensor,
    per_slot: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the kernel for threshold tensor `per_slot` leaves in its two outputs.

    Pass prefill_len for the snapshot variant, total_len for the live one. Unlike the
    kernels this does not write its inputs: it returns a new num_sampled (same shape,
    entries past the batch untouched) and a num_rejected with one entry per row.
    """
    num_rows = idx_mapping.shape[0]
    prefilling = still_prefilling(seq_lens, idx_mapping, per_slot)
    sampled = num_sampled[:num_rows].long()
    # logits per row, in cu_num_logits' width (end - start wraps there)
    logits = wrap_to(cu_num_logits[1 : num_rows + 1].long() - cu_num_logits[:num_rows].long(), cu_num_logits.dtype)
    # logits - sampled, in the promoted width, then stored into num_sampled's dtype
    wider = torch.promote_types(cu_num_logits.dtype, num_sampled.dtype)
    rejected = wrap_to(wrap_to(logits.long() - sampled, wider).long(), num_sampled.dtype)

    out_sampled = num_sampled.clone()
    out_sampled[:num_rows] = torch.where(prefilling, torch.zeros_like(sampled), sampled).to(num_sampled.dtype)
    out_rejected = torch.where(prefilling, torch.zeros_like(rejected), rejected)
    return out_sampled, out_rejected


def snapshot(num_sampled, seq_lens, cu_num_logits, idx_mapping, prefill_len):
    """vLLM 0.32.0: prefilling iff seq_lens[b] < prefill_len[slot]."""
    return num_sampled_and_rejected(num_sampled, seq_lens, cu_num_logits, idx_mapping, prefill_len)


def live(num_sampled, seq_lens, cu_num_logits, idx_mapping, total_len):
    """The fix: prefilling iff seq_lens[b] < total_len[slot]."""
    return num_sampled_and_rejected(num_sampled, seq_lens, cu_num_logits, idx_mapping, total_len)


REFERENCES = {"snapshot": snapshot, "live": live}
