"""A hang, shown: the engine loop run on with no further fault, and the requests it never runs again.

A state that violates a liveness property (spec/properties.py, `hangs`) is not yet a
hang: `run_on` plays what EngineCore does next on its own (schedule while the queue has
room and requests are left, else deliver the oldest step), every pick at its fault-free
value and each schedule's budget large enough for every request. `stuck` reads the
states of those steps: a request that is unfinished, never scheduled in them, while
has_requests() stays true, is stuck. The same reading serves the model's states and a
target's projection (targets/harness.py), so a generated test detects the hang on vLLM's
real scheduler with the rule the prover used.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from model.interpreter import Interpreter, State, args_for
from spec.config import Config
from spec.engine import has_requests, spec_k
from spec.ops import INT_OPS, Ops
from spec.state import View
from spec.vocabulary import Status

# why a request is stuck: a code (what cases record) -> (a short phrase, the sentence)
WHY = {
    "stale": (
        "stale output nothing is left to drain",
        "its stale output (num_stale_output_tokens) is more than its frames in flight drain, so "
        "schedule() skips it at every step and no delivery is left to clear it",
    ),
    "idle": (
        "running with nothing to schedule",
        "it is running with nothing to schedule (num_tokens + drafts + placeholders - computed is 0), "
        "so the running loop skips it at every step",
    ),
    "unscheduled": ("never scheduled", "it was not scheduled in any of the engine's steps"),
}


def engine_bound(cfg: Config) -> int:
    """Engine steps after which a request that can run has run. The frames in flight are
    all delivered within 2 * queue depth steps (the queue fills, then every other step
    delivers), and the next schedule, whose budget covers every request, serves each one
    that is not blocked."""
    return 2 * cfg.queue_depth + 2


def budget_for(s: View, cfg: Config, ops: Ops):
    """A schedule's budget large enough for every request: 1 + the sum of each one's
    tokens, drafts and placeholders (more than any of them can be owed; a finished one's
    counter may be negative, so none counts below 0), capped at the configuration's
    max_num_batched_tokens. With an abstract rest, the requests named (the focal one):
    what the others' share leaves it (model/progress.py)."""
    need = 1 + ops.sum(
        ops.max(s.num_tokens[r] + spec_k(s, cfg) + s.num_output_placeholders[r], 0) for r in range(cfg.requests)
    )
    return need if cfg.max_budget is None else ops.min(need, cfg.max_budget)


def waits(s: View, r: int, ops: Ops):
    """Request r is left for the engine to run: waiting, running or preempted (not
    finished, not a session waiting for input)."""
    return ops.any(*[s.status[r] == st for st in (Status.WAITING, Status.RUNNING, Status.PREEMPTED)])


def ran(s: View, cfg: Config, ops: Ops, r: int):
    """After a schedule: request r is in the step it appended (the newest in flight)."""
    return ops.any(*[ops.all(s.queue_len == i + 1, s.q_scheduled[i, r] > 0) for i in range(cfg.queue_depth)])


def _picks(cfg: Config, state: State, event: str) -> dict:
    """The fault-free picks of an engine step: every argument at its default (no stop, no
    KV-load failure, no draft accepted, no fault, an idle rest), and a schedule's budget
    large enough for every request (budget_for)."""
    if event != "schedule":
        return {}
    return {"budget": budget_for(View(cfg, state), cfg, INT_OPS)}


def run_on(interp: Interpreter, state: State) -> list[tuple[str, dict]]:
    """The engine's own next steps from `state`, up to engine_bound: (event, named picks).
    It ends early when nothing is left to do, or after a step at which an assert fires."""
    cfg = interp.cfg
    steps: list[tuple[str, dict]] = []
    for _ in range(engine_bound(cfg)):
        for event in ("schedule", "deliver"):
            named = _picks(cfg, state, event)
            args = args_for(interp.event(event), cfg, named)
            if interp.enabled(state, event, args):
                result = interp.step(state, event, args)
                steps.append((event, named))
                state = result.state
                if result.fired:
                    return steps
                break
        else:
            break
    return steps


def stuck(cfg: Config, events: Sequence[str], states: Sequence[Mapping], busy: bool) -> tuple:
    """(request, why code) for each request the engine's steps left behind: waiting, running
    or preempted at the end, scheduled in none of `events` (their states `states`, flat
    keys, a model state or a target's projection), while has_requests() (`busy`) is true
    at the end. Empty unless the steps are a whole engine_bound."""
    if not busy or len(events) < engine_bound(cfg):
        return ()
    end = states[-1]
    views = [View(cfg, st) for st in states]
    out = []
    for r in range(cfg.requests):
        if not waits(views[-1], r, INT_OPS):
            continue
        if not any(event == "schedule" and ran(v, cfg, INT_OPS, r) for event, v in zip(events, views)):
            out.append((r, _why(end, r)))
    return tuple(out)


def _why(end: Mapping, r: int) -> str:
    if end[("num_stale_output_tokens", r)] > 0 and not end[("drop_stale_output", r)]:
        return "stale"
    owed = (
        end[("num_tokens", r)]
        + end[("num_spec_tokens", r)]
        + end[("num_output_placeholders", r)]
        - end[("num_computed_tokens", r)]
    )
    if end[("status", r)] == Status.RUNNING and owed <= 0:
        return "idle"
    return "unscheduled"


def busy_in(cfg: Config, state: State) -> bool:
    """has_requests() in a model state, the others of an abstract rest idle."""
    return bool(has_requests(View(cfg, state), cfg, INT_OPS))


def shown(interp: Interpreter, state: State) -> tuple[list[tuple[str, dict]], tuple]:
    """The engine run on from `state`, and the requests it leaves stuck (empty: no hang)."""
    steps = run_on(interp, state)
    events, states = [], []
    for event, named in steps:
        result = interp.step(state, event, args_for(interp.event(event), interp.cfg, named))
        if result.fired:  # the engine dies: a crash, not a hang
            return steps, ()
        state = result.state
        events.append(event)
        states.append(state)
    return steps, stuck(interp.cfg, events, states, busy_in(interp.cfg, state))


def describe(cfg: Config, stuck_requests: Sequence) -> str:
    """The hang in words: which request is stuck and why."""
    parts = [f"request r{r} never runs again: {WHY[why][1]}" for r, why in stuck_requests]
    return f"HANG after {engine_bound(cfg)} engine steps with requests left: " + "; ".join(parts)


def short(stuck_requests: Sequence) -> str:
    return "; ".join(f"r{r} never runs again ({WHY[why][0]})" for r, why in stuck_requests)
