"""Bounded progress: the engine, run on by itself, schedules every request left within engine_bound steps.

The claim (spec/properties.py, `bounded-progress`): from every reachable state, the
engine loop with no further fault (model/hang.py's policy: schedule while the queue has
room and requests exist, else deliver the oldest step; every pick at its fault-free
default; each schedule's budget at least hang.budget_for, and with an abstract rest at
least that after the others' share) schedules every request that is waiting, running or
preempted within hang.engine_bound(cfg) engine steps, or the request finishes or waits
for input, or an assert ends the engine (a crash, which the safety properties report).

`prove` decides it on a symbolic start state that satisfies the configuration's proved
invariants (the lemmas and state properties k-induction proved: every reachable state
satisfies them, so a proof covers every reachable state, and with an abstract rest every
number of requests), in two queries:
  a step:     no such state with a request left has neither a schedule nor a delivery
              enabled at the policy's picks (else the next query would find no path at
              all, and call that progress);
  progress:   no engine_bound live steps of the policy from it leave a request waiting,
              running or preempted that none of them scheduled.
Sat says only that the invariants admit such a state, which may be unreachable: the
prover then searches a real one by BMC from the initial state (`goal`), replayed on the
interpreter and shown by model/hang.py like every hang.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import z3
from vllm_contract.model import hang, solvers
from vllm_contract.model.encoding import Encoding, _as_bool
from vllm_contract.model.solvers import classify_unknown, value_of
from vllm_contract.model.z3ops import Z3_OPS, _lift
from vllm_contract.spec.catalog import BY_NAME
from vllm_contract.spec.state import View

ENGINE = ("schedule", "deliver")
# what the others of an abstract rest do in the step a query checks is enabled: they keep
# has_requests() true, took nothing of the budget and stopped nothing
_REST_AT_REST = {"rest_busy": True}


@dataclass
class ProgressResult:
    status: str  # "proved" | "no-step" (a state the invariants admit where the engine has none) | "not-proved"
    bound: int
    seconds: float
    state: dict | None = None  # the start state of a sat query, for diagnosis


def _pins(enc: Encoding, t: int, exact: bool):
    """Step t is the engine's own with no fault: a schedule or a delivery, every pick at
    its default but the budget, which covers every request (exactly hang.budget_for when
    `exact`, as model/hang.py plays it; at least that otherwise). The others of an
    abstract rest take what they like of the budget beyond the focal request's share,
    and stop no admission (the budget has room for every padded one)."""
    cfg, sv = enc.cfg, enc.step(t)
    conds = [z3.Or(enc.action_is(t, "schedule"), enc.action_is(t, "deliver"))]
    for name in ENGINE:
        for arg, key in BY_NAME[name].arg_keys(cfg):
            if arg.name in ("budget", "rest_before"):
                continue  # the budget, below
            if arg.name.startswith("rest_") and arg.name != "rest_stopped":
                continue  # the others act as they may
            conds.append(sv.args[name][key] == arg.fallback())
    args = sv.args["schedule"]
    share = args[("budget",)] - (args[("rest_before",)] if cfg.rest else 0)
    need = hang.budget_for(View(cfg, sv.state), cfg, Z3_OPS)
    conds.append(share == need if exact else share >= need)
    return z3.And(*conds)


def engine_run(enc: Encoding, start: int, bound: int, exact: bool) -> list:
    """Transitions start .. start+bound-1 are the engine's own, and keep it alive."""
    out = []
    for t in range(start, start + bound):
        out += [enc.transition(t), enc.fatal_ok(t), _pins(enc, t, exact)]
    return out


def left_behind(enc: Encoding, start: int, bound: int):
    """Some request is waiting, running or preempted after transition start+bound-1 and
    none of the schedules among transitions start .. start+bound-1 ran it (hang.stuck)."""
    cfg = enc.cfg
    end = View(cfg, enc.step(start + bound).state)
    out = []
    for r in range(cfg.requests):
        never = []
        for t in range(start, start + bound):
            ran = _as_bool(hang.ran(View(cfg, enc.step(t + 1).state), cfg, Z3_OPS, r))
            never.append(z3.Not(z3.And(enc.action_is(t, "schedule"), ran)))
        out.append(z3.And(_as_bool(hang.waits(end, r, Z3_OPS)), *never))
    return z3.Or(*out)


def goal(enc: Encoding, depth: int):
    """The BMC's goal at `depth`: from the trace's last state, hang.engine_bound steps of
    the engine exactly as model/hang.py plays them leave a request unscheduled."""
    bound = hang.engine_bound(enc.cfg)
    return z3.And(*engine_run(enc, depth, bound, exact=True), left_behind(enc, depth, bound))


def prove(
    enc: Encoding, invariants: list[Callable], state_props: list[str], timeout_ms: int, bound: int | None = None
) -> ProgressResult:
    """The two queries of the module docstring from a state satisfying `invariants` (state
    formulas (View, cfg, ops) -> condition) and the proved state properties; `bound`
    defaults to hang.engine_bound. Raises SolverUnknown on an undecided query."""
    cfg = enc.cfg
    bound = hang.engine_bound(cfg) if bound is None else bound
    started = time.perf_counter()

    def holds(t: int) -> list:
        return [enc.state_formula(fn, t) for fn in invariants] + [enc.holds(p, t) for p in state_props]

    start = View(cfg, enc.step(0).state)
    left = z3.Or(*[_as_bool(hang.waits(start, r, Z3_OPS)) for r in range(cfg.requests)])
    stepless = z3.Not(z3.Or(*[_policy_step(enc, name) for name in ENGINE]))
    model = _check(enc, [*holds(0), left, stepless], "a step", timeout_ms)
    if model is not None:
        return ProgressResult("no-step", bound, time.perf_counter() - started, _state(enc, model, 0))
    # every state of a live run from a reachable state is reachable: the invariants hold there too
    premises = [fact for t in range(bound + 1) for fact in holds(t)] + engine_run(enc, 0, bound, exact=False)
    model = _check(enc, [*premises, left_behind(enc, 0, bound)], f"progress within {bound} steps", timeout_ms)
    if model is not None:
        return ProgressResult("not-proved", bound, time.perf_counter() - started, _state(enc, model, 0))
    return ProgressResult("proved", bound, time.perf_counter() - started)


def _policy_step(enc: Encoding, name: str):
    """The event's guard in state 0 at the policy's picks (the rest at rest)."""
    cfg, sv = enc.cfg, enc.step(0)
    args = sv.args[name]
    values = {}
    for arg, key in BY_NAME[name].arg_keys(cfg):
        values[key] = _REST_AT_REST.get(arg.name, arg.fallback())
    if name == "schedule":
        values[("budget",)] = hang.budget_for(View(cfg, sv.state), cfg, Z3_OPS)
    pairs = [(args[key], _lift(value)) for key, value in values.items()]
    return z3.substitute(enc.guard(name, 0), *pairs)


def _check(enc: Encoding, facts: list, query: str, timeout_ms: int):
    solver = solvers.one_shot(timeout_ms)
    solver.add(*facts)
    started = time.perf_counter()
    result = solver.check()
    if result == z3.unknown:
        name = enc.cfg.name
        query = f"{name}: bounded progress, {query}"
        raise classify_unknown(solver.reason_unknown(), time.perf_counter() - started, timeout_ms, query, name)
    return solver.model() if result == z3.sat else None


def _state(enc: Encoding, model: z3.ModelRef, t: int) -> dict:
    return {key: value_of(model, var) for key, var in enc.step(t).state.items()}
