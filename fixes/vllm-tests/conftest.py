"""Runs vLLM's own tests (unpacked from the release's sdist) on the tree $FIX_VLLM_TREE.

$FIX_VLLM_TREE is a release (0.32.0, 0.33.0) or the root of a patched tree
(fixes/trees.py) with $VLLM_PROFILE; $FIX_REPO is this project's root. The tree is
loaded exactly as the vLLM target loads it (adapter/tree.py: `prepare` puts the
overlay first on sys.meta_path before anything imports vllm), and its coherence is
checked when the session ends: every vllm module imported by the tests must come from
the tree, or the run fails.

Ours, not vLLM's (its tests/conftest.py needs models and GPUs):
  * `caplog_vllm`: caplog over the "vllm" logger, which does not propagate by default.
  * $FIX_ENABLE_TRITON=1 (with TRITON_INTERPRET=1): vLLM sees Triton and so picks its
    model runner as on a GPU (vllm_cpu_triton.py, see `_enable_triton`).
  * A test whose model config cannot be had offline (ModelConfig raises "Invalid
    repository ID or local directory specified: '<model>'"), or that asks for Ray
    (not installed), is skipped with that reason; nothing else is. facebook/opt-125m, the default of
    tests/v1/core/utils.py,
    is a local stand-in config (./facebook/opt-125m/config.json, no weights).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
from pathlib import Path

import pytest

# the project's one installed name: importing it shadows nothing of vLLM's (its `tests`
# package included), so the tree is loaded through the installed adapter, not by path
from vllm_contract.adapter import tree as _vllm_tree

_REPO = Path(os.environ["FIX_REPO"])


def _enable_triton() -> None:
    """$FIX_ENABLE_TRITON=1: vLLM sees the installed Triton (interpreted: no GPU), so that
    it picks its model runner as on a GPU: V2 unless a feature needs V1. On a CPU
    vllm.triton_utils switches Triton off, and vLLM takes the V1 runner. Importing
    fixes/vllm-tests/vllm_cpu_triton.py does it (the plugin docs/export.md runs with `-p`
    in a vLLM tree), as the vLLM target arranges it (adapter/current.py)."""
    path = _REPO / "fixes" / "vllm-tests" / "vllm_cpu_triton.py"
    spec = importlib.util.spec_from_file_location("vllm_cpu_triton", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)


TREE = _vllm_tree.resolve(os.environ.get("FIX_VLLM_TREE"))
_vllm_tree.prepare(TREE)  # before any test module imports vllm
TRITON = os.environ.get("FIX_ENABLE_TRITON") == "1"
if TRITON:
    _enable_triton()  # before vllm.config binds HAS_TRITON

_OFFLINE = re.compile(r"Invalid repository ID or local directory specified: '([^']+)'")
_NO_RAY = "Failed to import Ray: No module named 'ray'"


def _cannot_run_here(exc: BaseException) -> str | None:
    """Why a test cannot run here, if that is what it raised: a model config that is
    not available offline, or Ray, which is not installed."""
    text = str(exc)
    match = _OFFLINE.search(text)
    if match and not Path(match.group(1)).exists():
        return f"needs the Hugging Face config of {match.group(1)}, not available offline"
    if _NO_RAY in text:
        return "needs Ray (distributed_executor_backend='ray'), not installed"
    return None


def _skip_offline(outcome):
    try:
        return (yield)
    except Exception as exc:  # re-raised unless it says what is missing here
        reason = _cannot_run_here(exc)
        if reason is None:
            raise
        pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _skip_offline(None))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _skip_offline(None))


@pytest.fixture()
def caplog_vllm(caplog):
    logger = logging.getLogger("vllm")
    propagate = logger.propagate
    logger.propagate = True
    try:
        with caplog.at_level(logging.INFO):
            yield caplog
    finally:
        logger.propagate = propagate


def pytest_report_header(config):
    return f"vllm tree: {TREE.title} at {TREE.root} (profile {TREE.profile})" + (
        "; Triton enabled (interpreted)" if TRITON else ""
    )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    try:
        _vllm_tree.check(TREE, child=True)
    except _vllm_tree.TreeError as exc:
        print(f"\nERROR: {exc}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
