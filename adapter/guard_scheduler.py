"""The step-reservation guard's scheduler class for the vllm-guard target.

One definition: fixes/step-reservation-guard/guard_scheduler.py, the file a vLLM user puts
on sys.path. It is loaded from there by path (the folder's name is not a package name)
and re-exported here, so that `scheduler_cls="vllm_contract.adapter.guard_scheduler.GuardAsyncScheduler"`
resolves through vLLM's own SchedulerConfig.get_scheduler_cls.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "fixes" / "step-reservation-guard" / "guard_scheduler.py"
_NAME = "_fixes_step_reservation_guard_scheduler"


def _load():
    module = sys.modules.get(_NAME)
    if module is None:
        spec = importlib.util.spec_from_file_location(_NAME, SOURCE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = module
        spec.loader.exec_module(module)
    return module


_guard = _load()
GuardAsyncScheduler = _guard.GuardAsyncScheduler
WARNING = _guard.WARNING
DEBUG = _guard.DEBUG

__all__ = ["GuardAsyncScheduler", "WARNING", "DEBUG", "SOURCE"]
