"""The V2 runner's discard decision as Triton kernels, with a torch reference and a Z3 proof.

  runtime    picks native Triton (CUDA) or Triton's interpreter (CPU); imported first
  discard    the snapshot (vLLM 0.32.0) and live (fix) kernels and their launchers
  reference  plain torch versions, the oracle for tests and benchmarks
  proof      Z3: the kernels' decision equals the spec's runner predicate on int32
  lowering   builds the kernels for an NVIDIA arch without a GPU; checks the decision's IR
  (vLLM's own kernel, made runnable on CPU for equivalence tests and benchmarks, is adapter/kernel.py)

Import order matters: TRITON_INTERPRET is read when @triton.jit decorates, so runtime
is imported here before anything that defines a kernel.
"""

from vllm_contract.kernels import runtime  # must precede every kernel module
from vllm_contract.kernels.discard import (
    LAUNCHERS,
    get_num_sampled_and_rejected_live,
    get_num_sampled_and_rejected_snapshot,
)

__all__ = [
    "LAUNCHERS",
    "get_num_sampled_and_rejected_live",
    "get_num_sampled_and_rejected_snapshot",
    "runtime",
]
