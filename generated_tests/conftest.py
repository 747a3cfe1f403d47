"""Targets for the generated suites: --target=reference,vllm,vllm-clamp,kernel.

Each generated test runs once per selected target. A target that cannot run here
(vLLM or Triton not installed) or cannot run a case (a V1 case on the kernel target,
a historical profile on vLLM 0.32.0) is skipped with its reason, never passed.
"""

from __future__ import annotations

import pytest

from targets.protocol import TargetUnavailable

TARGETS = ("reference", "vllm", "vllm-clamp", "kernel")
MARKS = {"reference": "reference", "vllm": "vllm", "vllm-clamp": "vllm", "kernel": "kernel"}
_built: dict = {}


def pytest_addoption(parser):
    parser.addoption(
        "--target", default=",".join(TARGETS),
        help="comma-separated targets for the generated suites: " + ", ".join(TARGETS),
    )


def _selected(config) -> list[str]:
    names = [n.strip() for n in config.getoption("target").split(",") if n.strip()]
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        raise pytest.UsageError(f"--target: unknown {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    return names


def pytest_generate_tests(metafunc):
    if "target" in metafunc.fixturenames:
        names = _selected(metafunc.config)
        params = [pytest.param(n, marks=getattr(pytest.mark, MARKS[n]), id=n) for n in names]
        metafunc.parametrize("target", params, indirect=True)


def _build(name: str):
    if name == "reference":
        from targets.reference import ReferenceTarget

        return ReferenceTarget()
    if name in ("vllm", "vllm-clamp"):
        from targets.vllm_target import VllmTarget

        return VllmTarget(clamp=name == "vllm-clamp")
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
        pytest.skip(f"{name}: {built}")
    return built
