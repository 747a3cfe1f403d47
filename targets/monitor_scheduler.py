"""The online contract monitor as a `scheduler_cls`, for every supported vLLM release.

    vllm serve ... --scheduler-cls targets.monitor_scheduler.MonitoredAsyncScheduler
    SchedulerConfig(scheduler_cls="targets.monitor_scheduler.MonitoredAsyncScheduler")

(with this project installed in vLLM's environment). `MonitoredAsyncScheduler` is the
loaded release's AsyncScheduler, unchanged: each hook records what the step did in the
model's vocabulary and runs the monitor's checks (targets/monitor.py), then lets vLLM do
exactly what it does. On the first violation, or just before one of vLLM's asserts
fires, the monitor writes the last events as an ITF trace and logs one line saying
where; `vllm-contract explain --trace FILE` names the mechanism (or where the trace leaves
the model), `vllm-contract generate
--trace FILE` makes it a test of that release's scheduler.

Settings (environment, read when the scheduler is built): VLLM_CONTRACT_MONITOR_DIR
(where traces go, default ./vllm-contract-monitor), VLLM_CONTRACT_MONITOR_WINDOW (events
kept, default 1024), VLLM_CONTRACT_MONITOR_TRACES (traces one process writes at most,
default 4), VLLM_CONTRACT_MONITOR_DROP=1: drop what a step did not reserve, as the
step-reservation guard does (fixes/step-reservation-guard), and say so in the line.
"""

from __future__ import annotations

from collections import defaultdict

from vllm import __version__ as VLLM_VERSION
from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.request import RequestStatus

from spec.vocabulary import Status
from targets.guard_scheduler import _guard
from targets.monitor import Monitor, Settings, status_code
from targets.vllm_tree import nearest_release

logger = init_logger(__name__)


def status_of(status) -> int:
    """RequestStatus -> spec.vocabulary.Status (a status the contract leaves out: waiting)."""
    return status_code(status, RequestStatus, Status.WAITING)


class MonitoredAsyncScheduler(AsyncScheduler):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        settings = Settings.from_env()
        self.monitor = Monitor(
            self,
            settings,
            nearest_release(VLLM_VERSION)[0],
            status_of,
            RequestStatus.WAITING_FOR_STREAMING_REQ,
            logger.warning,
        )
        self.monitoring = True  # off after an error of the monitor's own: vLLM runs on, unmonitored
        # request id -> tokens the drop mode dropped (the guard's counter, for tests)
        self.guard_dropped: defaultdict[str, int] = defaultdict(int)

    def _monitor_failed(self, exc: Exception) -> None:
        """A bug of ours must never stop the engine: say so once, and stop monitoring."""
        self.monitoring = False
        logger.warning(
            "vllm-contract monitor: stopped after an error of its own (%s: %s); vLLM runs on unmonitored",
            type(exc).__name__,
            exc,
        )

    def _watch(self, hook, *args):
        """Call one of the monitor's hooks; an error of its own turns the monitor off."""
        if self.monitoring:
            try:
                return hook(*args)
            except Exception as exc:
                self._monitor_failed(exc)
        return None

    # ---------------------------------------------------------------- front end
    def add_request(self, request) -> None:
        self._watch(self.monitor.added, request)
        try:
            return super().add_request(request)
        except AssertionError as exc:  # a session update's keep assert (0.33.0): written, then raised
            self._watch(self.monitor.assert_outside_delivery, exc)
            raise

    def _preempt_request(self, request, timestamp, drop_stale_output: bool = False) -> None:
        super()._preempt_request(request, timestamp, drop_stale_output=drop_stale_output)
        self._watch(self.monitor.preempted, request, drop_stale_output)

    def reset_prefix_cache(self, *args, **kwargs) -> bool:
        self._watch(self.monitor.resetting)
        try:
            return super().reset_prefix_cache(*args, **kwargs)
        finally:
            self._watch(self.monitor.reset_done)

    def finish_requests(self, request_ids, finished_status):
        done = super().finish_requests(request_ids, finished_status)
        if finished_status == RequestStatus.FINISHED_ABORTED:
            self._watch(self.monitor.aborted, [r.request_id for r in done or ()])
        return done

    # ---------------------------------------------------------------- steps
    def schedule(self, *args, **kwargs):
        try:
            return super().schedule(*args, **kwargs)
        except AssertionError as exc:  # e.g. an admission's token count: written, then raised
            self._watch(self.monitor.schedule_failed, exc)
            raise

    def _update_after_schedule(self, scheduler_output) -> None:
        super()._update_after_schedule(scheduler_output)
        if self.monitoring:  # every step: the hook inline, not through _watch
            try:
                self.monitor.scheduled(scheduler_output)
            except Exception as exc:
                self._monitor_failed(exc)

    def _drop_unreserved(self, req_id: str, tokens: list[int], reserved: int) -> list[int]:
        """The guard's cut (_CutAtRead calls it when update_from_output reads a row)."""
        self.guard_dropped[req_id] += len(tokens) - reserved
        self.monitor.dropped += len(tokens) - reserved
        return list(tokens[:reserved])

    def update_from_output(self, scheduler_output, model_runner_output):
        monitor, pending, rows = self.monitor, None, model_runner_output.sampled_token_ids
        if self.monitoring:
            try:
                pending = monitor.delivering(scheduler_output, model_runner_output)
                overflow = monitor.live_overflow(pending, model_runner_output) if pending and pending.suspects else {}
                if overflow:
                    monitor.before_delivery(pending, overflow)
                if overflow and monitor.settings.drop:
                    model_runner_output.sampled_token_ids = _guard._CutAtRead(rows, self, overflow)
                    monitor.dropped_at.add(pending.record.seq)
            except Exception as exc:
                self._monitor_failed(exc)
                pending = None
        try:
            outputs = super().update_from_output(scheduler_output, model_runner_output)
        except AssertionError as exc:  # one of vLLM's asserts: the trace is written, then it goes on
            self._watch(monitor.assert_fired, exc, pending)
            raise
        finally:
            model_runner_output.sampled_token_ids = rows
        if pending is not None and self.monitoring:
            try:
                monitor.delivered(pending, model_runner_output)
            except Exception as exc:
                self._monitor_failed(exc)
        return outputs
