"""Compile the kernels for an NVIDIA GPU without one, and show how the decision lowers.

Triton's wheel ships its NVIDIA backend (ptxas included), so the native pipeline
(TTIR -> TTGIR -> LLVM IR -> PTX -> cubin) runs on a CPU-only machine. That checks
that the kernels build for the benchmark's GPU (H200: sm_90) before device time is
spent, and shows the decision in Triton's IR: it must be one signed comparison,
`arith.cmpi slt`, the operation kernels/proof.py reasons about.

Run it where the interpreter is off (kernels decorated by the interpreter cannot be
compiled):    TRITON_INTERPRET=0 .venv/bin/python -m vllm_contract.kernels.lowering [--arch 90]
"""

from __future__ import annotations

import argparse
import re
import sys

from vllm_contract.kernels import discard, runtime

# the decision's SSA value is named after the kernel's `prefilling` variable
DECISION = re.compile(r"%prefilling(?:_\d+)? = arith\.cmpi (\w+), %(\w+?)(?:_\d+)?, %(\w+?)(?:_\d+)? :")
THRESHOLD_VALUE = "thresholds"  # the kernel's name for the per-slot values it compares with


def compile_variant(variant: str, arch: int = 90, sampled: str = "*i32"):
    """triton.compile the variant's kernel for CUDA sm_<arch>; returns the CompiledKernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {
        "num_sampled_ptr": sampled,
        "num_rejected_ptr": sampled,
        "seq_lens_ptr": "*i32",
        "cu_num_logits_ptr": "*i32",
        "idx_mapping_ptr": "*i64",
        "threshold_ptr": "*i32",
        "num_rows": "i32",
        "BLOCK_ROWS": "constexpr",
    }
    source = ASTSource(fn=discard.discard_kernel, signature=signature, constexprs={"BLOCK_ROWS": discard.BLOCK_ROWS})
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": discard.NUM_WARPS})


def decision_problem(variant: str, ttir: str) -> str | None:
    """None if the TTIR decides by one signed seq_lens < threshold comparison."""
    found = DECISION.findall(ttir)
    if len(found) != 1:
        return f"expected one comparison named prefilling in the TTIR, found {len(found)}"
    predicate, left, right = found[0]
    if (predicate, left, right) != ("slt", "seq_lens", THRESHOLD_VALUE):
        return f"decision lowers to cmpi {predicate} %{left}, %{right}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="compile the discard kernels for a CUDA arch")
    parser.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 for H100/H200")
    opts = parser.parse_args(argv)
    if runtime.INTERPRETED:
        print("kernels were decorated for the interpreter; rerun with TRITON_INTERPRET=0", file=sys.stderr)
        return 2
    failed = False
    for variant in discard.THRESHOLD:
        for sampled in ("*i32", "*i64"):
            compiled = compile_variant(variant, opts.arch, sampled)
            problem = decision_problem(variant, compiled.asm["ttir"])
            failed |= problem is not None
            print(
                f"{variant} (num_sampled {sampled[1:]}): sm_{opts.arch} cubin {len(compiled.asm['cubin'])} bytes; "
                f"decision: {problem or 'arith.cmpi slt %seq_lens, %' + THRESHOLD_VALUE}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
