"""Every event of the contract, and which ones a configuration enables."""

from __future__ import annotations

from spec import scheduler as sch
from spec.config import Config
from spec.events import Event

INIT = Event(
    "init", None, "all requests are added, in id order, before the first step",
    "sched:2616-2647", sch.init_args, lambda s, a, nxt, cfg, ops: sch.init(a, nxt, cfg, ops),
)

EVENTS: tuple[Event, ...] = (
    Event("schedule", None, "the engine schedules a step and the runner executes it",
          "sched:591-1556, async:25-57, core:724-759", sch.schedule_args, sch.schedule),
    Event("deliver", None, "the oldest step's output is applied",
          "sched:2026-2300, async:59-78, core:768-785", sch.deliver_args, sch.deliver),
    Event("preempt", "preempt|preempt-drop", "the last running request is preempted",
          "sched:834-840, sched:1571-1614", sch.preempt_args, sch.preempt),
    Event("reset_prefix_cache", "reset", "every running request is preempted, drop-stale",
          "sched:2840-2866", sch.reset_args, sch.reset_prefix_cache),
    Event("stream_update", "stream", "a streaming session's next input chunk arrives",
          "sched:2616-2626, sched:1650-1691", sch.stream_update_args, sch.stream_update),
    Event("abort", "abort", "the front end aborts a request",
          "sched:2649-2712", sch.abort_args, sch.abort),
)

BY_NAME = {e.name: e for e in (INIT,) + EVENTS}


def events_for(cfg: Config) -> tuple[Event, ...]:
    return tuple(e for e in EVENTS if e.enabled_in(cfg))
