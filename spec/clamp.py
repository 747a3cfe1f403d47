"""The seed PR's clamp, as a function of the contract.

When a live (non-stale) delivery carries more tokens than the request has reserved
placeholders, keep only the reserved number, before the parent appends them. A
negative counter reserves nothing. `codegen`'s vLLM arm implements the same rule as a
real scheduler class (adapter/clamp_scheduler.py); this is its definition.
"""

from __future__ import annotations

from vllm_contract.spec.ops import Ops, Term


def clamp_delivery(ops: Ops, applies: Term, delivered: Term, reserved: Term) -> tuple[Term, Term]:
    """Returns (tokens kept, tokens dropped) for one delivery."""
    over = ops.all(applies, delivered > reserved)
    kept = ops.ite(over, ops.max(reserved, 0), delivered)
    return kept, delivered - kept
