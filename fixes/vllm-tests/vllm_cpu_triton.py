"""A pytest plugin: vLLM on a CPU sees the installed Triton, so that it configures Model
Runner V2 and vLLM's scheduler tests of V2 run there instead of skipping.

    TRITON_INTERPRET=1 PYTHONPATH=<this folder> python -m pytest -p vllm_cpu_triton ...

On a CPU vLLM switches Triton off unless Triton has a CPU backend
(vllm/triton_utils/importing.py: a "+cpu" build without triton-cpu, or a build whose
version names no device, finds no active driver), and VllmConfig then refuses Model
Runner V2 ("Model Runner V2 requires Triton"). TRITON_INTERPRET=1 alone changes nothing
there: vLLM does not read it. Importing this module sets
vllm.triton_utils.importing.HAS_TRITON and reloads vllm.triton_utils, before vllm.config
binds the name: a `-p` plugin is imported before any conftest.py (vLLM's
tests/conftest.py imports vllm.config). No scheduler test runs a Triton kernel;
TRITON_INTERPRET=1 (required) makes any that would run interpreted, not on a GPU.

fixes/vllm-tests/conftest.py imports it the same way for `make vllm-tests` and
`make export-check` (FIX_ENABLE_TRITON=1).
"""

from __future__ import annotations

import importlib
import os


def _enable_triton() -> None:
    """vllm.triton_utils exposes the installed Triton; raises if it still does not."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("vllm_cpu_triton: set TRITON_INTERPRET=1 (no GPU here runs a Triton kernel)")
    import triton
    import vllm.triton_utils as triton_utils
    from vllm.triton_utils import importing

    if not triton_utils.HAS_TRITON:
        importing.HAS_TRITON = True
        importlib.reload(triton_utils)
    if not triton_utils.HAS_TRITON or triton_utils.triton is not triton:
        raise RuntimeError("vllm_cpu_triton: vllm.triton_utils does not expose the installed Triton after reloading it")


_enable_triton()


def pytest_report_header(config) -> str:
    import vllm

    return f"vllm {vllm.__version__} from {os.path.dirname(vllm.__file__)}; Triton visible to vLLM (interpreted)"
