"""vLLM's AsyncScheduler, unchanged, calling a watcher at each of its events.

`HookedAsyncScheduler` is the loaded vLLM's own AsyncScheduler: every method runs as
vLLM wrote it, and around each one a hook hands the watcher what the method saw (a
request added, a victim preempted, a step scheduled, a step's output delivered, one of
vLLM's asserts). The watcher (the contract monitor, targets/monitor/core.py) never sees a
vLLM name: it gets the objects and reads them through adapter/objects.py.

A watcher's error never stops the engine: it is said once and the watcher is dropped
(`watching` False). What the watcher must do before vLLM's own code runs (the drop
mode's cut of a delivery's rows) it asks for through `delivering`'s answer.
"""

from __future__ import annotations

from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm_contract.adapter import objects
from vllm_contract.adapter.guard_scheduler import CutAtRead

logger = init_logger(__name__)


def _reported_cut(report):
    """CutAtRead's cut for the monitor's drop mode: the watcher is told of every row
    read, and the row is kept up to what its step reserved."""

    def cut(req_id: str, row: list[int], reserved: int) -> list[int]:
        report(req_id, row, reserved)
        return list(row[:reserved])

    return cut


class HookedAsyncScheduler(AsyncScheduler):
    """Subclasses give `make_watcher(scheduler)`; the watcher's hooks are called as below."""

    def make_watcher(self):  # pragma: no cover - every subclass gives one
        raise NotImplementedError

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.watcher = self.make_watcher()
        self.watching = self.watcher is not None

    def _watcher_failed(self, exc: Exception) -> None:
        """A bug of the watcher's must never stop the engine: say so once, and stop watching."""
        self.watching = False
        logger.warning(
            "vllm-contract monitor: stopped after an error of its own (%s: %s); vLLM runs on unmonitored",
            type(exc).__name__,
            exc,
        )

    def _watch(self, hook: str, *args):
        """Call one of the watcher's hooks by name; an error of its own turns it off."""
        if self.watching:
            try:
                return getattr(self.watcher, hook)(*args)
            except Exception as exc:
                self._watcher_failed(exc)
        return None

    # ---------------------------------------------------------------- front end
    def add_request(self, request) -> None:
        self._watch("added", request)
        try:
            return super().add_request(request)
        except AssertionError as exc:  # a session update's keep assert (0.33.0): written, then raised
            self._watch("assert_outside_delivery", exc)
            raise

    def _preempt_request(self, request, timestamp, drop_stale_output: bool = False) -> None:
        super()._preempt_request(request, timestamp, drop_stale_output=drop_stale_output)
        self._watch("preempted", request, drop_stale_output)

    def reset_prefix_cache(self, *args, **kwargs) -> bool:
        self._watch("resetting")
        try:
            return super().reset_prefix_cache(*args, **kwargs)
        finally:
            self._watch("reset_done")

    def finish_requests(self, request_ids, finished_status):
        done = super().finish_requests(request_ids, finished_status)
        if finished_status == objects.aborted_status():
            self._watch("aborted", [r.request_id for r in done or ()])
        return done

    # ---------------------------------------------------------------- steps
    def schedule(self, *args, **kwargs):
        try:
            return super().schedule(*args, **kwargs)
        except AssertionError as exc:  # e.g. an admission's token count: written, then raised
            self._watch("schedule_failed", exc)
            raise

    def _update_after_schedule(self, scheduler_output) -> None:
        super()._update_after_schedule(scheduler_output)
        if self.watching:  # every step: the hook inline, not through _watch
            try:
                self.watcher.scheduled(scheduler_output)
            except Exception as exc:
                self._watcher_failed(exc)

    def update_from_output(self, scheduler_output, model_runner_output):
        watcher, pending, rows = self.watcher, None, objects.output_rows(model_runner_output)
        if self.watching:
            try:
                pending, cut = watcher.delivering(scheduler_output, model_runner_output)
                if cut:  # row index -> (request id, tokens kept): read cut, as the guard cuts
                    read_cut = CutAtRead(rows, cut, _reported_cut(watcher.dropped_tokens))
                    objects.set_output_rows(model_runner_output, read_cut)
            except Exception as exc:
                self._watcher_failed(exc)
                pending = None
        try:
            outputs = super().update_from_output(scheduler_output, model_runner_output)
        except AssertionError as exc:  # one of vLLM's asserts: the watcher records it, then it goes on
            self._watch("assert_fired", exc, pending)
            raise
        finally:
            objects.set_output_rows(model_runner_output, rows)
        if pending is not None and self.watching:
            try:
                watcher.delivered(pending, model_runner_output)
            except Exception as exc:
                self._watcher_failed(exc)
        return outputs
