"""The contract monitor's public path, for vLLM's `scheduler_cls`:

    vllm serve ... --scheduler-cls vllm_contract.monitor.MonitoredAsyncScheduler

vLLM's own AsyncScheduler of the loaded release with the contract's checks in its hooks
(the implementation: targets/monitor/scheduler.py; what it does and costs: docs/monitor.md).
"""

from vllm_contract.targets.monitor.scheduler import MONITOR_SCHEDULER_CLS, MonitoredAsyncScheduler

__all__ = ["MONITOR_SCHEDULER_CLS", "MonitoredAsyncScheduler"]
