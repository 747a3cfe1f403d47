"""The seed PR's clamp as a real vLLM scheduler class.

`ClampAsyncScheduler` is vLLM 0.32.0's AsyncScheduler with one change on the delivery
side: when a live (non-stale) delivery carries more tokens than the request has
reserved output placeholders, only max(placeholders, 0) of them are kept, before the
parent appends anything. The rest are dropped: they were sampled for a step the
scheduler classified as a prefill chunk (or beyond what it reserved), so they are not
a valid continuation. The definition the model checks is spec/clamp.py.

Observability: one warning per process, a debug line per occurrence (request id,
delivered, reserved, dropped), and a per-request count of dropped tokens in
`scheduler.clamp_dropped` (request id -> tokens) for tests.

Load it the way EngineCore does ([cite:engine-core-gets-scheduler-cls] ->
SchedulerConfig.get_scheduler_cls, [cite:get-scheduler-cls]), with
`SchedulerConfig(scheduler_cls="vllm_contract.adapter.clamp_scheduler.ClampAsyncScheduler")` or the
class itself.
"""

from __future__ import annotations

from collections import defaultdict

from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.request import Request

logger = init_logger(__name__)

WARNING = (
    "The model runner returned more tokens than the scheduler reserved output "
    "placeholders for; the extra token(s) were dropped. Such a token was sampled "
    "while the request was still being prefilled (or beyond its reservation) and is "
    "not a valid continuation. Enable debug logging to see the affected requests."
)

_warned = False  # the warning is emitted once per process


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        logger.warning(WARNING)


class ClampAsyncScheduler(AsyncScheduler):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # request id -> tokens dropped by the clamp so far
        self.clamp_dropped: defaultdict[str, int] = defaultdict(int)

    def _update_request_with_output(
        self, request: Request, new_token_ids: list[int], is_stale: bool = False
    ) -> tuple[list[int], bool]:
        reserved = request.num_output_placeholders
        delivered = len(new_token_ids)
        if not is_stale and delivered > reserved:
            keep = max(reserved, 0)
            dropped = delivered - keep
            _warn_once()
            logger.debug(
                "Request %s: the runner delivered %d token(s) with %d output placeholder(s) reserved; dropping %d.",
                request.request_id,
                delivered,
                reserved,
                dropped,
            )
            self.clamp_dropped[request.request_id] += dropped
            new_token_ids = new_token_ids[:keep]
        return super()._update_request_with_output(request, new_token_ids, is_stale)
