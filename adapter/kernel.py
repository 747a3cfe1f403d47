"""vLLM's own discard kernel, loaded so that it really runs, for equivalence tests and benchmarks.

On a CPU-only install, `vllm.triton_utils` finds no CPU backend and swaps triton for
a placeholder, which turns `@triton.jit` into a no-op. This module executes a private
copy of vllm/v1/worker/gpu/input_batch.py with the real triton patched in for the
duration of the import (and restored after), so vLLM's shared module state is left
as it was. kernels.runtime is imported first, so under the interpreter the copy's
kernels are interpreted too.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from vllm_contract.kernels import runtime  # noqa: F401 - settles TRITON_INTERPRET first

# isort: split
import triton
import triton.language as tl

KERNEL_FILE = "v1/worker/gpu/input_batch.py"
_PRIVATE_NAME = "adapter._vllm_input_batch"
_loaded: ModuleType | None = None


class VllmUnavailable(RuntimeError):
    """vLLM (or the file holding its kernel) cannot be imported; the message says why."""


def vllm_version() -> str:
    import vllm

    return getattr(vllm, "__version__", "unknown")


def load_input_batch() -> ModuleType:
    """A private copy of vllm.v1.worker.gpu.input_batch whose kernels use the real triton."""
    global _loaded
    if _loaded is not None:
        return _loaded
    try:
        import vllm
        import vllm.triton_utils as triton_utils
    except Exception as exc:  # ImportError, or a broken install raising at import time
        raise VllmUnavailable(f"vLLM is not importable here ({type(exc).__name__}: {exc})") from exc
    path = Path(vllm.__file__).parent / KERNEL_FILE
    if not path.is_file():
        raise VllmUnavailable(f"vLLM {vllm_version()} has no {KERNEL_FILE} (looked at {path})")

    saved = (triton_utils.triton, triton_utils.tl, triton_utils.HAS_TRITON)
    triton_utils.triton, triton_utils.tl, triton_utils.HAS_TRITON = triton, tl, True
    try:
        spec = importlib.util.spec_from_file_location(_PRIVATE_NAME, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_PRIVATE_NAME] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(_PRIVATE_NAME, None)
        raise VllmUnavailable(f"loading {path} with real triton failed ({type(exc).__name__}: {exc})") from exc
    finally:
        triton_utils.triton, triton_utils.tl, triton_utils.HAS_TRITON = saved
    for name in ("get_num_sampled_and_rejected", "_get_num_sampled_and_rejected_kernel"):
        if not hasattr(module, name):
            raise VllmUnavailable(f"vLLM {vllm_version()}'s {KERNEL_FILE} has no {name}")
    _loaded = module
    return module


def get_num_sampled_and_rejected():
    """vLLM's launcher (num_sampled, seq_lens, cu_num_logits, idx_mapping, prefill_len)."""
    return load_input_batch().get_num_sampled_and_rejected
