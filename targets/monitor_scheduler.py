"""The monitor's path before the one installed namespace, kept for one release:
`targets.monitor_scheduler.MonitoredAsyncScheduler`, imported from a checkout's root. The
one class (targets/monitor/scheduler.py), and a line in vLLM's log that says what to write
instead."""

from vllm_contract.adapter.hooked import logger
from vllm_contract.targets.monitor.scheduler import (
    DEPRECATED_MONITOR_SCHEDULER_CLS,
    MONITOR_SCHEDULER_CLS,
    MonitoredAsyncScheduler,
)

logger.warning(
    "vllm-contract monitor: --scheduler-cls %s is deprecated and goes in the next release; use %s",
    DEPRECATED_MONITOR_SCHEDULER_CLS,
    MONITOR_SCHEDULER_CLS,
)

__all__ = ["MonitoredAsyncScheduler"]
