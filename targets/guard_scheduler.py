"""The step-reservation guard as a real vLLM scheduler class (fixes/step-reservation-guard).

`GuardAsyncScheduler` is the loaded release's AsyncScheduler with two additions:

  * at schedule time it remembers, per request of the step, how many output
    placeholders it reserved for that step (0 for a prefill chunk, 1 + drafts otherwise:
    the reservation `_update_after_schedule` just made);
  * when that step's output comes back, before anything reads it, a live (non-stale)
    request's tokens are cut to that reservation. What is dropped was never reserved:
    a token sampled for a prefill chunk, or committed beyond 1 + drafts.

Unlike the seed's clamp, which compares with the request's total placeholders (so a
stray token can take a later step's placeholder and the later, legitimate token is
dropped), the guard compares each step with its own reservation, and it runs before
the spec-rejection decrement, so no draft count drives the counter negative. The
model's definition is in spec/scheduler.py (`cfg.guard == "step-reservation"`), with
its proofs in the matrix (guard-*).

Observability as the clamp: one warning per process, a debug line per occurrence, and
`scheduler.guard_dropped` (request id -> tokens) for tests.
"""

from __future__ import annotations

from collections import defaultdict

from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler

logger = init_logger(__name__)

WARNING = (
    "The model runner returned more tokens for a request than the scheduler reserved for "
    "that step; the extra token(s) were dropped (a token sampled for a prefill chunk, or "
    "committed beyond its drafts, is not a valid continuation). Enable debug logging to "
    "see the affected requests."
)

_warned = False


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        logger.warning(WARNING)


class GuardAsyncScheduler(AsyncScheduler):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.guard_dropped: defaultdict[str, int] = defaultdict(int)
        # id(scheduler_output) -> {request id: placeholders reserved in that step}
        self._reserved: dict[int, dict[str, int]] = {}

    def _update_after_schedule(self, scheduler_output) -> None:
        before = {req_id: self.requests[req_id].num_output_placeholders
                  for req_id in scheduler_output.num_scheduled_tokens}
        super()._update_after_schedule(scheduler_output)
        self._reserved[id(scheduler_output)] = {
            req_id: self.requests[req_id].num_output_placeholders - placeholders
            for req_id, placeholders in before.items()
        }

    def update_from_output(self, scheduler_output, model_runner_output):
        reserved = self._reserved.pop(id(scheduler_output), {})
        sampled = model_runner_output.sampled_token_ids
        if sampled:
            for req_id, index in model_runner_output.req_id_to_index.items():
                request = self.requests.get(req_id)
                if request is None or request.num_stale_output_tokens > 0:
                    continue  # gone, or output from before a preemption: not this step's
                keep = reserved.get(req_id, 0)
                tokens = sampled[index]
                if len(tokens) > keep:
                    _warn_once()
                    logger.debug("Request %s: the runner returned %d token(s) for a step that reserved %d; "
                                 "dropping %d.", req_id, len(tokens), keep, len(tokens) - keep)
                    self.guard_dropped[req_id] += len(tokens) - keep
                    sampled[index] = list(tokens[:keep])
        return super().update_from_output(scheduler_output, model_runner_output)
