"""Every event of the contract, and which ones a configuration enables."""

from __future__ import annotations

from vllm_contract.spec import deliver, engine, front_end, schedule
from vllm_contract.spec.config import Config
from vllm_contract.spec.events import Event

INIT = Event(
    "init",
    None,
    "all requests are added, in id order, before the first step",
    "[cite:add-request-streaming-update add-request-new]",
    engine.init_args,
    lambda s, a, nxt, cfg, ops: engine.init(a, nxt, cfg, ops),
)

EVENTS: tuple[Event, ...] = (
    Event(
        "schedule",
        None,
        "the engine schedules a step and the runner executes it",
        "[cite:schedule-begins schedule-ends-with-update], "
        "[cite:async-update-after-schedule reserve-placeholders spec-token-placeholders next-decode-eligible], "
        "[cite:engine-schedules engine-executes batch-queue-append engine-defers-delivery]",
        schedule.schedule_args,
        schedule.schedule,
    ),
    Event(
        "deliver",
        None,
        "the oldest step's output is applied",
        "[cite:update-from-output], [cite:async-update-request-with-output delivery-decrement-0.32], "
        "[cite:batch-queue-pop aborts-before-delivery engine-delivers]",
        deliver.deliver_args,
        deliver.deliver,
    ),
    Event(
        "preempt",
        "preempt|preempt-drop",
        "the last running request is preempted",
        "[cite:alloc-failure-preempts], "
        "[cite:preempt-request preempt-resets-request preempt-zeroes-placeholders preempt-prepends]",
        front_end.preempt_args,
        front_end.preempt,
    ),
    Event(
        "reset_prefix_cache",
        "reset",
        "every running request is preempted, drop-stale",
        "[cite:reset-prefix-cache reset-preempts-drop-stale reset-clears-prev-scheduled]",
        front_end.reset_args,
        front_end.reset_prefix_cache,
    ),
    Event(
        "stream_update",
        "stream",
        "a streaming session's next input chunk arrives",
        "[cite:add-request-streaming-update], "
        "[cite:update-request-as-session session-keep-computed session-appends-update] "
        "[cite:session-prompt-len session-to-waiting]",
        front_end.stream_update_args,
        front_end.stream_update,
    ),
    Event(
        "abort",
        "abort",
        "the front end aborts a request",
        "[cite:finish-requests]",
        front_end.abort_args,
        front_end.abort,
    ),
)

BY_NAME = {e.name: e for e in (INIT,) + EVENTS}


def events_for(cfg: Config) -> tuple[Event, ...]:
    return tuple(e for e in EVENTS if e.enabled_in(cfg))
