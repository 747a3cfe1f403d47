"""Queue orders as lists of request ids, derived from a model state.

vLLM keeps order as list positions (Scheduler.running, the waiting queues); the model
keeps rank numbers. Targets that can show their lists (the vLLM target's `orders()`)
are compared on these lists, not on rank values.
"""

from __future__ import annotations

from typing import Any, Mapping

from vllm_contract.adapter.construct import request_id
from vllm_contract.spec.config import Config
from vllm_contract.spec.engine import served_first
from vllm_contract.spec.state import View
from vllm_contract.spec.vocabulary import Status


def model_orders(cfg: Config, state: Mapping[tuple, Any]) -> dict[str, list[str]]:
    """Running requests by running_rank; waiting ones (WAITING, PREEMPTED,
    WAITING_FOR_STREAMING_REQ) in the queue served first (holding KV blocks, c > 0,
    [cite:kv-holding-waiting-first]; or, 0.29.0 and 0.30.0, in skipped_waiting) first, then by waiting_rank."""
    reqs = range(cfg.requests)
    status = {r: state[("status", r)] for r in reqs}
    running = sorted((r for r in reqs if status[r] == Status.RUNNING), key=lambda r: state[("running_rank", r)])
    queued = (Status.WAITING, Status.PREEMPTED, Status.WAITING_FOR_STREAMING_REQ)
    view = View(cfg, state)
    waiting = sorted(
        (r for r in reqs if status[r] in queued),
        key=lambda r: (0 if served_first(view, cfg, r) else 1, state[("waiting_rank", r)]),
    )
    return {"running": [request_id(r) for r in running], "waiting": [request_id(r) for r in waiting]}
