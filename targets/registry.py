"""Building a target by its name (the names, and what each drives, are codegen.case.TARGETS)."""

from __future__ import annotations

from vllm_contract.codegen.case import TARGETS

BY_NAME = {t.name: t for t in TARGETS}


def build(name: str):
    """A fresh target of that name; TargetUnavailable (or ImportError) when it cannot run here."""
    if name == "reference":
        from vllm_contract.targets.reference import ReferenceTarget

        return ReferenceTarget()
    if name in ("vllm", "vllm-clamp", "vllm-guard"):
        from vllm_contract.targets.vllm_target import VllmTarget

        if name == "vllm-guard":
            return VllmTarget(guard=True)
        return VllmTarget(clamp=name == "vllm-clamp")
    if name in ("runner", "runner-clamp"):
        from vllm_contract.targets.real_runner import RealRunnerTarget

        return RealRunnerTarget(clamp=name == "runner-clamp")
    if name == "kernel":
        from vllm_contract.targets.kernel import KernelTarget

        return KernelTarget()
    raise KeyError(f"no target {name!r}; the targets are {', '.join(BY_NAME)}")
