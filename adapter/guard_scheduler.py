"""The step-reservation guard as a `scheduler_cls`, for a vLLM that does not carry the patch.

    vllm serve ... --scheduler-cls vllm_contract.adapter.guard_scheduler.GuardAsyncScheduler
    vllm serve ... --scheduler-cls guard_scheduler.GuardAsyncScheduler   # this file copied onto sys.path

`GuardAsyncScheduler` is the loaded release's AsyncScheduler (0.29.0 to 0.34.0) doing what
fixes/step-reservation-guard/vllm-<release>.patch does, and nothing else:

  * at schedule time it records, per request of the step, the output placeholders
    `_update_after_schedule` reserved for it (0 for a prefill chunk, else the sampled
    token plus the scheduled drafts), in the step's SchedulerOutput under the patch's
    field name, `num_reserved_output_placeholders`;
  * when the step's output comes back, a live (non-stale) request's tokens are cut to
    that reservation at the very point the patch cuts them: where update_from_output
    reads the request's row, i.e. after its KV-load-failure, finished and drop-stale
    skips and before spec-decode rejection and the placeholder decrement. A release
    has no hook there, so the row list is handed over as `CutAtRead`, which cuts a row
    when it is read; the runner's own list is never modified.

Observability as in the patch: one warning per process, a debug line per occurrence,
plus `scheduler.guard_dropped` (request id -> tokens dropped) for tests. The model's
definition is spec/deliver.py (`cfg.guard == "step-reservation"`), proved in the
matrix's guard-* configurations; the vllm-guard target plays this class. It imports
nothing of this project, so the file works on its own where the package is not installed.
"""

from __future__ import annotations

from collections import defaultdict

from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler

logger = init_logger(__name__)

FIELD = "num_reserved_output_placeholders"  # SchedulerOutput's field in the patch
WARNING = (
    "The model runner returned more tokens for a request than the scheduler reserved for "
    "that step; the extra tokens were dropped. Enable debug logging to see the affected "
    "requests."
)
DEBUG = "Request %s: the model runner returned %d token(s) for a step that reserved %d; dropped %d."

_warned = False  # the warning is emitted once per process


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        logger.warning(WARNING)


class CutAtRead(list):
    """A step's sampled_token_ids; row i comes back as `cut(req_id, row, reserved)` when read,
    keep[i] = (req_id, reserved), cut once however often it is read; the runner's list is
    never modified. update_from_output reads a row only after its own skips (a failed KV
    load, a finished request, stale output), so only rows vLLM would append are cut. The
    contract monitor's drop mode cuts with it too (adapter/hooked.py)."""

    def __init__(self, rows, keep: dict[int, tuple[str, int]], cut):
        super().__init__(rows)
        self._keep = keep  # row index -> (request id, tokens reserved)
        self._cut_row = cut
        self._cut: dict[int, list[int]] = {}  # rows already cut: read twice, counted once

    def __getitem__(self, index):
        row = super().__getitem__(index)
        if type(index) is not int or index not in self._keep:
            return row
        if index not in self._cut:
            req_id, reserved = self._keep[index]
            self._cut[index] = self._cut_row(req_id, row, reserved)
        return self._cut[index]


class GuardAsyncScheduler(AsyncScheduler):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # request id -> tokens the guard dropped so far
        self.guard_dropped: defaultdict[str, int] = defaultdict(int)

    def _update_after_schedule(self, scheduler_output) -> None:
        before = {
            req_id: self.requests[req_id].num_output_placeholders for req_id in scheduler_output.num_scheduled_tokens
        }
        super()._update_after_schedule(scheduler_output)
        setattr(
            scheduler_output,
            FIELD,
            {
                req_id: self.requests[req_id].num_output_placeholders - placeholders
                for req_id, placeholders in before.items()
            },
        )

    def _drop_unreserved(self, req_id: str, tokens: list[int], reserved: int) -> list[int]:
        if len(tokens) <= reserved:
            return tokens
        _warn_once()
        logger.debug(DEBUG, req_id, len(tokens), reserved, len(tokens) - reserved)
        self.guard_dropped[req_id] += len(tokens) - reserved
        return list(tokens[:reserved])

    def update_from_output(self, scheduler_output, model_runner_output):
        reserved = getattr(scheduler_output, FIELD, None) or {}
        rows = model_runner_output.sampled_token_ids
        if not rows or not reserved:
            return super().update_from_output(scheduler_output, model_runner_output)
        keep = {}
        # where update_from_output finds a request's row: req_id_to_index up to 0.33.0
        # ([cite:output-req-id-to-index]), the row's position in req_ids from 0.34.0
        # ([cite:output-indexed-by-position])
        index_of = getattr(model_runner_output, "req_id_to_index", None)
        if index_of is None:
            index_of = {req_id: i for i, req_id in enumerate(model_runner_output.req_ids)}
        for req_id, index in index_of.items():
            request = self.requests.get(req_id)
            # stale output (from before a preemption) is not this step's: never cut;
            # whether the row is read at all is update_from_output's decision
            if request is not None and request.num_stale_output_tokens == 0 and req_id in reserved:
                keep[index] = (req_id, reserved[req_id])
        model_runner_output.sampled_token_ids = CutAtRead(rows, keep, self._drop_unreserved)
        try:
            return super().update_from_output(scheduler_output, model_runner_output)
        finally:
            model_runner_output.sampled_token_ids = rows
