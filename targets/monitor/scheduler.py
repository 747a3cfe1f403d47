"""The online contract monitor as a `scheduler_cls`, for every supported vLLM release.

    vllm serve ... --scheduler-cls vllm_contract.monitor.MonitoredAsyncScheduler
    SchedulerConfig(scheduler_cls="vllm_contract.monitor.MonitoredAsyncScheduler")

(with this project installed in vLLM's environment; vllm_contract/monitor.py is the public
path, this module its implementation). `MonitoredAsyncScheduler` is the
loaded release's AsyncScheduler, unchanged (adapter/hooked.py): each hook records what
the step did in the model's vocabulary and runs the monitor's checks (targets/monitor/core.py),
then lets vLLM do exactly what it does. On the first violation, or just before one of
vLLM's asserts fires, the monitor writes the last events as an ITF trace and logs one
line saying where; `vllm-contract explain --trace FILE` names the mechanism (or where the
trace leaves the model), `vllm-contract generate --trace FILE` makes it a test of that
release's scheduler.

When vLLM builds the scheduler, the monitor reads the tree's source for everything it
will read (adapter/internals.py). On a vLLM it cannot monitor it refuses to start, with
one line per missing internal, which `vllm serve` shows; with
VLLM_CONTRACT_MONITOR_UNSUPPORTED=warn it says so in a warning instead and vLLM runs
unmonitored. A vLLM newer than every modelled release is monitored against the newest
release's model, and the first log line says so.

Settings (environment, read when the scheduler is built): VLLM_CONTRACT_MONITOR_DIR
(where traces go, default ./vllm-contract-monitor), VLLM_CONTRACT_MONITOR_WINDOW (events
kept, default 1024), VLLM_CONTRACT_MONITOR_TRACES (traces one process writes at most,
default 4), VLLM_CONTRACT_MONITOR_DROP=1: drop what a step did not reserve, as the
step-reservation guard does (fixes/step-reservation-guard), and say so in the line;
VLLM_CONTRACT_MONITOR_UNSUPPORTED=refuse|warn (default refuse).
"""

from __future__ import annotations

from collections import defaultdict

from vllm_contract.adapter import objects
from vllm_contract.adapter.hooked import HookedAsyncScheduler, logger
from vllm_contract.adapter.internals import MONITOR
from vllm_contract.adapter.tree import nearest_release
from vllm_contract.spec.errors import MonitorUnsupported
from vllm_contract.targets.monitor.core import Monitor, Settings

# the public path (vllm_contract/monitor.py re-exports the class: the same object)
MONITOR_SCHEDULER_CLS = "vllm_contract.monitor.MonitoredAsyncScheduler"
# the path before the one installed namespace, still taken from a checkout's root for one
# release (targets/monitor_scheduler.py)
DEPRECATED_MONITOR_SCHEDULER_CLS = "targets.monitor_scheduler.MonitoredAsyncScheduler"


class MonitoredAsyncScheduler(HookedAsyncScheduler):
    def make_watcher(self) -> Monitor | None:
        # request id -> tokens the drop mode dropped (the guard's counter, for tests)
        self.guard_dropped: defaultdict[str, int] = defaultdict(int)
        settings = Settings.from_env()
        version = objects.vllm_version()
        release, why = nearest_release(version)
        found = objects.features((MONITOR,))
        if found.missing:
            lines = found.problems(f"vLLM {version}", release)
            if settings.unsupported == "warn":
                logger.warning(
                    "vllm-contract monitor: this vLLM cannot be monitored, and vLLM runs unmonitored "
                    "(VLLM_CONTRACT_MONITOR_UNSUPPORTED=warn): %s",
                    " | ".join(lines),
                )
                return None
            raise MonitorUnsupported(
                "vllm-contract monitor: this vLLM cannot be monitored: "
                + " | ".join(lines)
                + " | to run vLLM unmonitored instead, set VLLM_CONTRACT_MONITOR_UNSUPPORTED=warn"
            )
        if "newer than every modelled release" in why:
            logger.warning("vllm-contract monitor: checking vLLM %s against the %s model (%s)", version, release, why)
        return Monitor(self, settings, release, logger.warning)

    @property
    def monitor(self) -> Monitor | None:
        return self.watcher

    @property
    def monitoring(self) -> bool:
        return self.watching
