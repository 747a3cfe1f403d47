"""vLLM's own V1/V2 model runners in the loop (the `runner` targets); what is ours: docs/real-runners.md."""

from vllm_contract.targets.real_runner.contract import UnrealisablePick, beyond_runner_contract, drafts_are_placeholders
from vllm_contract.targets.real_runner.target import RealRunnerTarget, preflight

__all__ = ["RealRunnerTarget", "UnrealisablePick", "beyond_runner_contract", "drafts_are_placeholders", "preflight"]
