"""Targets for the generated suites: --target=reference,vllm,vllm-clamp,vllm-guard,runner,runner-clamp,kernel.

Each generated test runs once per selected target (the option and the vLLM tree are
defined in the root conftest.py, which validates them). A target that cannot run a case
(a V1 case on the kernel target, a historical profile on vLLM) is skipped with its
reason. A target that cannot be built at all is skipped only when it was not asked for
(the default target list); a vLLM target, or any target named in --target, stops the run.
"""

from __future__ import annotations

import pytest

from targets.protocol import TargetUnavailable

MARKS = {
    "reference": "reference",
    "vllm": "vllm",
    "vllm-clamp": "vllm",
    "vllm-guard": "vllm",
    "runner": "vllm",
    "runner-clamp": "vllm",
    "kernel": "kernel",
}
# the root conftest checked their tree already
ASKED_WHEN_SELECTED = ("vllm", "vllm-clamp", "vllm-guard", "runner", "runner-clamp")
_built: dict = {}


def _selected(config) -> list[str]:
    return [n for n in config.getoption("target").split(",") if n]


def pytest_generate_tests(metafunc):
    if "target" in metafunc.fixturenames:
        names = _selected(metafunc.config)
        params = [pytest.param(n, marks=getattr(pytest.mark, MARKS[n]), id=n) for n in names]
        metafunc.parametrize("target", params, indirect=True)


def _build(name: str):
    if name == "reference":
        from targets.reference import ReferenceTarget

        return ReferenceTarget()
    if name in ("vllm", "vllm-clamp", "vllm-guard"):
        from targets.vllm_target import VllmTarget

        if name == "vllm-guard":
            return VllmTarget(guard=True)
        return VllmTarget(clamp=name == "vllm-clamp")
    if name in ("runner", "runner-clamp"):
        from targets.real_runner import RealRunnerTarget

        return RealRunnerTarget(clamp=name == "runner-clamp")
    from targets.kernel import KernelTarget

    return KernelTarget()


@pytest.fixture
def target(request):
    name = request.param
    if name not in _built:
        try:
            _built[name] = _build(name)
        except TargetUnavailable as exc:
            _built[name] = exc
        except ImportError as exc:
            _built[name] = TargetUnavailable(f"{name} is not installed here ({exc})")
    built = _built[name]
    if isinstance(built, TargetUnavailable):
        if name in ASKED_WHEN_SELECTED or getattr(request.config.option, "target_given", False):
            pytest.exit(f"--target={name} cannot run here: {built}", returncode=pytest.ExitCode.USAGE_ERROR)
        pytest.skip(f"{name}: {built}")
    return built
