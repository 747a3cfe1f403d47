"""Queue orders as lists of request ids, derived from a model state.

vLLM keeps order as list positions (Scheduler.running, the waiting queues); the model
keeps rank numbers. Targets that can show their lists (the vLLM target's `orders()`)
are compared on these lists, not on rank values.
"""

from __future__ import annotations

from typing import Any, Mapping

from vllm_contract.adapter.construct import request_id
from vllm_contract.spec.config import Config
from vllm_contract.spec.vocabulary import Status


def model_orders(cfg: Config, state: Mapping[tuple, Any]) -> dict[str, list[str]]:
    """Running requests by running_rank; waiting ones (WAITING, PREEMPTED,
    WAITING_FOR_STREAMING_REQ) in the queue served first (holding KV blocks, c > 0,
    [cite:kv-holding-waiting-first]; or, 0.29.0 and 0.30.0, in skipped_waiting) first, then by waiting_rank."""
    reqs = range(cfg.requests)
    status = {r: state[("status", r)] for r in reqs}
    running = sorted((r for r in reqs if status[r] == Status.RUNNING), key=lambda r: state[("running_rank", r)])
    queued = (Status.WAITING, Status.PREEMPTED, Status.WAITING_FOR_STREAMING_REQ)
    waiting = sorted(
        (r for r in reqs if status[r] in queued),
        key=lambda r: (0 if _served_first(cfg, state, r) else 1, state[("waiting_rank", r)]),
    )
    return {"running": [request_id(r) for r in running], "waiting": [request_id(r) for r in waiting]}


def _served_first(cfg: Config, state: Mapping[tuple, Any], r: int) -> bool:
    if cfg.prof.waiting_queues == "skipped-first":
        return bool(state[("in_skipped_waiting", r)])
    return state[("num_computed_tokens", r)] > 0
