"""The CPU shims the real runners need here, each as small as it could be made (docs/real-runners.md)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import tempfile

from vllm_contract.adapter import construct as factory
from vllm_contract.adapter import current as env
from vllm_contract.adapter import objects
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import TargetUnavailable

_SETUP = False
_RUNNER_CONFIGS: dict = {}


def setup() -> None:
    """Once per process: the tree, vLLM's CPU patches, a gloo world of one."""
    global _SETUP
    if _SETUP:
        return
    env.load()
    try:
        import vllm.v1.worker.cpu.shm  # noqa: F401 - vLLM's own CPU patches, as cpu_worker imports them
        from vllm.config import set_current_vllm_config
        from vllm.distributed import parallel_state as ps
    except Exception as exc:  # any failure here means the CPU patches are unusable: said in one line
        raise TargetUnavailable(f"{env.tree().title}: vLLM's CPU worker patches do not import ({exc})") from exc
    cache_interpreter_builtins()
    interpret_libdevice_log1p()
    if not ps.model_parallel_is_initialized():
        cfg = runner_config(Config("runner-setup", runner="v1" if objects.has_v1_runner() else "v2", requests=1))
        handle, path = tempfile.mkstemp(prefix="real-runner-gloo-")
        os.close(handle)
        os.unlink(path)
        with set_current_vllm_config(cfg):
            ps.init_distributed_environment(
                world_size=1, rank=0, distributed_init_method=f"file://{path}", local_rank=0, backend="gloo"
            )
            ps.initialize_model_parallel(1, 1)
    _SETUP = True


def cache_interpreter_builtins() -> None:
    """Speed only: at every launch and device-function call, Triton's interpreter lists
    all members of triton.language (inspect.getmembers) to wrap its builtins, and the
    launch restores them afterwards, so the list is the same each time; it is computed
    once per package. About a quarter of a V2 step's time; no kernel runs differently."""
    import inspect

    from triton.runtime import interpreter

    if getattr(interpreter, "_builtins_cached", False):
        return
    members: dict[int, list] = {}

    def patch_builtin(pkg, builder, scope):
        found = members.get(id(pkg))
        if found is None:
            found = members[id(pkg)] = [
                (name, member) for name, member in inspect.getmembers(pkg) if interpreter.tl.core.is_builtin(member)
            ]
        for name, member in found:
            interpreter._patch_attr(pkg, name, member, builder, scope)

    interpreter._patch_builtin = patch_builtin
    interpreter._builtins_cached = True


def interpret_libdevice_log1p() -> None:
    """0.29.0 and 0.30.0's Gumbel sampler calls libdevice's log1p ([cite:v2-gumbel-log1p]);
    a libdevice function is a stub that only a GPU backend fills in, so under Triton's
    interpreter it returns None and the launch fails. Here it is numpy's log1p on the
    interpreter's tensor, elementwise, in the tensor's own dtype (0.31.0 on compute it
    from tl.log and need nothing). Installed only while the stub is still the stub."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    import numpy as np
    import triton.language as tl
    from triton.language.extra import libdevice
    from triton.runtime.interpreter import TensorHandle

    def stub(arg0): ...

    if libdevice.log1p.__code__.co_code != stub.__code__.co_code:
        return

    def log1p(arg0):
        handle = arg0.handle
        return tl.core.tensor(TensorHandle(np.log1p(handle.data), handle.dtype.scalar), arg0.type)

    libdevice.log1p = log1p


def runner_config(cfg: Config):
    """The runner's own VllmConfig: the scheduler's shape with pp=1 and no clamp, deep
    copied so that neither side's mutations reach the other, the budget restored."""
    shape = dataclasses.replace(factory.Shape.of(cfg), pp=1)
    if shape not in _RUNNER_CONFIGS:
        config = copy.deepcopy(factory.vllm_config(shape))
        config.scheduler_config.max_num_batched_tokens = factory.MAX_MODEL_LEN
        config.scheduler_config.async_scheduling = True
        _RUNNER_CONFIGS[shape] = config
    return _RUNNER_CONFIGS[shape]


@contextlib.contextmanager
def patched(obj, name, value):
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


class NoMemoryProfiler:
    """DeviceMemoryProfiler without its two gc.collect() calls (1 s per runner)."""

    consumed_memory = 0

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
