"""A platform plugin's own patch of vLLM's scheduler classes, applied for one block and undone.

A runner variant's `scheduler_patch` (spec/runner_variants.py) names it. tpu-inference's
Continue Decode monkeypatches vLLM's Scheduler and AsyncScheduler for the whole process
([cite:tpu-cd-precompensate tpu-cd-advances-computed]). The targets play
other arms in the same process, so the patch is applied around each call into the
scheduler and every class attribute it set is put back after (`applied`). The plugin's
file is executed as it ships, from its pinned and fetched tree: its package's
`__init__` would bring up JAX and TPU discovery, which the patch does not use.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from vllm_contract.adapter.current import load
from vllm_contract.spec.errors import CouldNotRun
from vllm_contract.spec.runner_variants import SchedulerPatch

_MISSING = object()
_MODULES: dict[Path, ModuleType] = {}


def continue_decode_config(max_decode_steps: int) -> dict:
    """VllmConfig.additional_config as tpu-inference reads it for Continue Decode (the patch
    reserves max_decode_steps - 1 lookahead tokens in Scheduler.__init__)."""
    return {"enable_continue_decode": True, "max_decode_steps": max_decode_steps}


def _module(patch: SchedulerPatch, tree: Path) -> ModuleType:
    path = (tree / patch.file).resolve()
    if path not in _MODULES:
        if not path.is_file():
            raise CouldNotRun(f"{patch.plugin}'s tree {tree} has no {patch.file}: fetch it again")
        spec = importlib.util.spec_from_file_location(f"_plugin_patch_{len(_MODULES)}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not callable(getattr(module, patch.function, None)):
            raise CouldNotRun(f"{patch.plugin}'s {patch.file} has no {patch.function}(): a tree of another version?")
        _MODULES[path] = module
    return _MODULES[path]


def _scheduler_classes() -> list[type]:
    """AsyncScheduler and the classes it inherits from in vLLM (what a patch may change)."""
    return [c for c in load().AsyncScheduler.__mro__ if c.__module__.startswith("vllm.")]


@contextmanager
def applied(patch: SchedulerPatch, tree: Path) -> Iterator[None]:
    """The loaded tree's scheduler classes as the plugin's patch leaves them, for the block;
    after it every attribute of theirs the patch added or replaced is as it was."""
    patch_fn = getattr(_module(patch, tree), patch.function)
    classes = _scheduler_classes()
    saved = [(cls, dict(vars(cls))) for cls in classes]
    try:
        patch_fn()
        yield
    finally:
        for cls, before in saved:
            for name, value in list(vars(cls).items()):
                old = before.get(name, _MISSING)
                if old is _MISSING:
                    delattr(cls, name)
                elif old is not value:
                    setattr(cls, name, old)
