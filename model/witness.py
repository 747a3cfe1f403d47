"""Witnesses of non-vacuity: a healthy run on the interpreter, admitted by the encoding.

Every configuration must show a trace in which a request prefills in chunks, decodes
and completes, or an over-constrained encoding could "prove" anything. Searching for
one with BMC costs as much as a counterexample. Running a fixed engine policy on the
interpreter finds one in milliseconds; pinning that run's every event and pick in the
Z3 encoding then shows the encoding admits it (unsat there means the encoding is
over-constrained: the configuration is reported vacuous). The solver's states are
compared with the interpreter's like every trace's. The BMC search remains the
fallback for a configuration the policy does not get through.
"""

from __future__ import annotations

from typing import Any

import z3
from vllm_contract.model import solvers
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.interpreter import Interpreter, State, args_for, nested
from vllm_contract.model.solvers import SolverUnknown, value_of
from vllm_contract.model.trace import Step, Trace
from vllm_contract.spec.catalog import INIT
from vllm_contract.spec.ops import INT_OPS
from vllm_contract.spec.state import View
from vllm_contract.spec.vocabulary import Status

POLICY_STEPS = 60


def policy_run(interp: Interpreter, goal, goal_name: str) -> Trace | None:
    """The engine left alone: prompts prefill in two chunks, every step is scheduled
    while the queue has room, a request stops once it has decoded two tokens. No
    optional event, no fault, no KV-load failure."""
    cfg = interp.cfg
    prompts = list(cfg.prompt_lens) if cfg.prompt_lens is not None else [2] * cfg.requests
    budget = max(1, (max(prompts) + 1) // 2)
    if cfg.max_budget is not None:
        budget = min(budget, cfg.max_budget)
    picks: dict[str, Any] = {"prompt_len": prompts}  # not resumable
    if cfg.k_symbolic and (cfg.spec_tokens_max is None or cfg.spec_tokens_max >= 1):
        picks["spec_tokens"] = 1  # a healthy run with a draft token per step
    init = args_for(INIT, cfg, picks)
    state = interp.initial(**nested(init))
    steps: list[Step] = []
    for _ in range(POLICY_STEPS):
        if goal(View(cfg, state), cfg, INT_OPS):
            return Trace(config=cfg.name, init=init, steps=steps, goal=goal_name, kind="witness")
        step = _next_step(interp, state, budget)
        if step is None:
            return None
        state = interp.step(state, step.event, step.args).state
        steps.append(step)
    return None


def _next_step(interp: Interpreter, state: State, budget: int) -> Step | None:
    cfg = interp.cfg
    schedule = args_for(interp.event("schedule"), cfg, {"budget": budget})
    if interp.enabled(state, "schedule", schedule):
        return Step("schedule", schedule)
    # stop a request that already has a decoded token, if this delivery appends one
    stop = [0] * cfg.requests
    for r in range(cfg.requests):
        decoded = state[("num_tokens", r)] - state[("num_prompt_tokens", r)]
        if decoded >= 1 and state[("status", r)] == Status.RUNNING:
            trial = stop[:r] + [1] + stop[r + 1 :]
            if interp.enabled(state, "deliver", args_for(interp.event("deliver"), cfg, {"stop": trial})):
                stop = trial
    deliver = args_for(interp.event("deliver"), cfg, {"stop": stop})
    if interp.enabled(state, "deliver", deliver):
        return Step("deliver", deliver)
    return None


def admitted_by_encoding(enc: Encoding, trace: Trace, goal, timeout_ms: int = 60_000) -> list[State] | None:
    """The encoding's states along the trace with every event and pick pinned, or None
    when the encoding rejects the run (it is over-constrained there)."""
    solver = solvers.one_shot(timeout_ms)
    solver.add(enc.initial())
    solver.add(*[enc.init_args[key] == value for key, value in trace.init.items()])
    names = enc.event_index()
    for t, step in enumerate(trace.steps):
        sv = enc.step(t)
        solver.add(enc.transition(t), enc.fatal_ok(t), sv.act == names.index(step.event))
        solver.add(*[sv.args[step.event][key] == value for key, value in step.args.items()])
    solver.add(enc.state_formula(goal, trace.depth))
    result = solver.check()
    if result == z3.unknown:
        raise SolverUnknown(solver.reason_unknown())
    if result == z3.unsat:
        return None
    model = solver.model()
    return [{k: value_of(model, v) for k, v in enc.step(t).state.items()} for t in range(trace.depth + 1)]
