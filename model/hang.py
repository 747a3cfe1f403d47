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

from vllm_contract.model.interpreter import Interpreter, State, args_for
from vllm_contract.spec.config import Config
from vllm_contract.spec.engine import has_requests, spec_k
from vllm_contract.spec.ops import INT_OPS, Ops
from vllm_contract.spec.properties import in_flight_sum
from vllm_contract.spec.state import View
from vllm_contract.spec.vocabulary import Status

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
    "leaked": (
        "placeholders no step in flight will resolve",
        "it is running with output placeholders although none of its steps is in flight, so the scheduler "
        "counts a step that will never come back: the max_tokens skip (num_computed_tokens + 2 - "
        "num_output_placeholders >= prompt + max_tokens) passes it over at every step",
    ),
    # only a target shows these two: the model's has_requests() counts every request by its
    # status, vLLM's counts its queues (a request in none of them is not counted)
    "asleep": (
        "the engine idles while it waits",
        "has_requests() is false while it waits, so EngineCore schedules nothing and waits for new "
        "input: it runs again only when another request arrives (a lost wake-up)",
    ),
    "unqueued": (
        "in no queue the scheduler serves",
        "it waits, but neither the running queue nor a waiting queue holds it, so schedule() never "
        "visits it (a lost wake-up)",
    ),
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


def next_step(interp: Interpreter, state: State):
    """The engine's own next step from `state`: (event, named picks, StepResult), or None
    when nothing is enabled (no request left and the queue drained: EngineCore waits)."""
    cfg = interp.cfg
    for event in ("schedule", "deliver"):
        named = _picks(cfg, state, event)
        result = interp.try_step(state, event, args_for(interp.event(event), cfg, named))
        if result is not None:
            return event, named, result
    return None


def run_on(interp: Interpreter, state: State) -> list[tuple[str, dict]]:
    """The engine's own next steps from `state`, up to engine_bound: (event, named picks).
    It ends early when nothing is left to do, or after a step at which an assert fires."""
    return played_on(interp, state)[0]


def stuck(
    cfg: Config,
    events: Sequence[str],
    states: Sequence[Mapping],
    busy: bool,
    start: Mapping | None = None,
    queued: Mapping[int, bool] | None = None,
) -> tuple:
    """(request, why code) for each request the engine's steps left behind: waiting, running
    or preempted at the end, scheduled in none of `events` (their states `states`, flat
    keys, a model state or a target's projection), while has_requests() (`busy`) is true
    at the end; empty unless the steps are a whole engine_bound. With has_requests() false
    the engine has stopped stepping and waits for input: every request still waiting is
    left ("asleep"; `start` is the state when no step ran). `queued` (a target's queues:
    request -> whether a queue the scheduler serves holds it) names a request in none."""
    end = states[-1] if states else start
    if end is None:
        return ()
    if not busy:
        last = View(cfg, end)
        return tuple((r, "asleep") for r in range(cfg.requests) if waits(last, r, INT_OPS))
    if len(events) < engine_bound(cfg):
        return ()
    views = [View(cfg, st) for st in states]
    out = []
    for r in range(cfg.requests):
        if not waits(views[-1], r, INT_OPS):
            continue
        if not any(event == "schedule" and ran(v, cfg, INT_OPS, r) for event, v in zip(events, views)):
            out.append((r, _why(end, r, queued)))
    return tuple(out)


def _why(end: Mapping, r: int, queued: Mapping[int, bool] | None = None) -> str:
    if end[("num_stale_output_tokens", r)] > 0 and not end[("drop_stale_output", r)]:
        return "stale"
    if queued is not None and not queued.get(r, True):
        return "unqueued"
    in_flight = any(
        key[0] == "q_scheduled" and key[2] == r and key[1] < end[("queue_len",)] and value for key, value in end.items()
    )
    if end[("status", r)] == Status.RUNNING and end[("num_output_placeholders", r)] > 0 and not in_flight:
        return "leaked"
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


def played_on(interp: Interpreter, state: State) -> tuple[list[tuple[str, dict]], list[State], list[str]]:
    """The engine run on from `state`: its steps (event, named picks), the state after each,
    and the asserts that fired at its last step (the engine then dies: a crash, not a hang)."""
    steps, states = [], []
    for _ in range(engine_bound(interp.cfg)):
        found = next_step(interp, state)
        if found is None:
            break
        event, named, result = found
        state = result.state
        steps.append((event, named))
        states.append(state)
        if result.fired:
            return steps, states, list(result.fired)
    return steps, states, []


def shown(interp: Interpreter, state: State) -> tuple[list[tuple[str, dict]], tuple]:
    """The engine run on from `state`, and the requests it leaves stuck (empty: no hang)."""
    steps, states, fired = played_on(interp, state)
    if fired:  # the engine dies: a crash, not a hang
        return steps, ()
    end = states[-1] if states else state
    return steps, stuck(interp.cfg, [e for e, _ in steps], states, busy_in(interp.cfg, end), start=state)


def describe(cfg: Config, stuck_requests: Sequence, end: Mapping | None = None) -> str:
    """The hang in words: which request is stuck and why; with the end state, the count
    that blocks it (blocker)."""
    parts = []
    for r, why in stuck_requests:
        said = f"request r{r} never runs again: {WHY[why][1]}"
        if end is not None:
            said += f" [{blocker(cfg, end, r, why)}]"
        parts.append(said)
    return f"HANG after {engine_bound(cfg)} engine steps with requests left: " + "; ".join(parts)


def short(stuck_requests: Sequence) -> str:
    return "; ".join(f"r{r} never runs again ({WHY[why][0]})" for r, why in stuck_requests)


def blocker(cfg: Config, end: Mapping, r: int, why: str) -> str:
    """What holds request r, with vLLM's counts as the state (flat keys) shows them: which
    count, which queue."""
    view = View(cfg, end)
    draining = int(in_flight_sum(view, cfg, INT_OPS, r, lambda i: view.q_scheduled[i, r]))
    status = Status.NAMES.get(end[("status", r)], str(end[("status", r)]))
    if why == "stale":
        return (
            f"num_stale_output_tokens {end[('num_stale_output_tokens', r)]} > {draining} token(s) its steps in "
            f"flight drain, so schedule() skips it; status {status}"
        )
    if why == "idle":
        return (
            f"running queue: num_tokens {end[('num_tokens', r)]} + drafts {end[('num_spec_tokens', r)]} + "
            f"num_output_placeholders {end[('num_output_placeholders', r)]} - num_computed_tokens "
            f"{end[('num_computed_tokens', r)]} leaves nothing to schedule, {draining} token(s) in flight"
        )
    if why == "leaked":
        return (
            f"running queue: num_output_placeholders {end[('num_output_placeholders', r)]} with {draining} token(s) "
            f"in flight, num_computed_tokens {end[('num_computed_tokens', r)]}, num_tokens {end[('num_tokens', r)]}"
        )
    if why == "asleep":
        return f"status {status}, has_requests() false, {draining} token(s) in flight"
    if why == "unqueued":
        return f"status {status}, in neither Scheduler.running nor a waiting queue"
    return f"status {status}, num_computed_tokens {end[('num_computed_tokens', r)]}, {draining} token(s) in flight"
