"""Bounded model checking: shortest counterexamples, minimal picks, violation classes.

Iterative deepening on one incremental solver, one `check(assumption)` per depth (the
fast mode in z3-encoding-notes), so the first depth that is satisfiable gives a
shortest trace. The picks (budgets, prompt lengths, ...) are then minimised along that
trace's event sequence (least sum). A solver `unknown` raises `SolverUnknown` (its
subclass `SolverTimeout` when the time limit ran out): it is a failure, never a pass. A
SIGINT that Z3 caught raises `SolverInterrupted`, which is not a verdict at all.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable

import z3
from vllm_contract.model import progress, solvers
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.solvers import SolverUnknown, classify_unknown, value_of
from vllm_contract.model.trace import Step, Trace
from vllm_contract.model.z3ops import Z3_OPS
from vllm_contract.spec.catalog import BY_NAME, INIT
from vllm_contract.spec.deliver import failure_sharers
from vllm_contract.spec.events import ArgView
from vllm_contract.spec.properties import PROPERTIES, reported_by
from vllm_contract.spec.state import View
from vllm_contract.spec.vocabulary import Status


@dataclass(frozen=True)
class Goal:
    """What to reach: a property's violation, or a witness state."""

    name: str
    kind: str  # "transition" | "state" | "progress" | "witness"
    # witness: (View, cfg, ops) -> condition; progress: (Encoding, depth) -> a formula over
    # the steps after the trace's last state (model/progress.py goal)
    predicate: Callable | None = None

    @staticmethod
    def violation(prop: str) -> "Goal":
        kind = PROPERTIES[prop].kind
        if kind == "progress":
            return Goal(prop, kind, progress.goal)
        return Goal(prop, kind)

    @property
    def may_end_engine(self) -> bool:
        """May the step that reaches the goal also fire an assert? Yes for a transition
        property, and for a state property some assert reports (a counter that goes
        negative in the very delivery whose assert then fires); a witness and other
        state properties must be reached by a live engine."""
        return self.kind == "transition" or (self.kind == "state" and bool(reported_by(self.name)))


class Bmc:
    def __init__(self, enc: Encoding, timeout_ms: int = 60_000):
        self.enc = enc
        self.timeout_ms = timeout_ms
        self.query_ms = timeout_ms  # the search's own queries (limit_queries); minimising keeps timeout_ms
        self.solver = solvers.incremental(timeout_ms)
        self.solver.add(enc.initial())
        # transition t and "transition t keeps the engine alive" are asserted under
        # activation literals, so one solver serves goals of every depth: a search for
        # depth d assumes only the literals below d
        self._step_on: list = []
        self._alive_on: list = []

    def limit_queries(self, ms: int) -> None:
        """The next search queries run at most ms (a caller's budget that is running out)."""
        self.query_ms = ms
        self.solver.set("timeout", ms)

    def _unroll(self, depth: int) -> None:
        while len(self._step_on) < depth:
            t = len(self._step_on)
            on, alive = z3.Bool(f"unroll@{t}"), z3.Bool(f"alive@{t}")
            self.solver.add(z3.Implies(on, self.enc.transition(t)))
            self.solver.add(z3.Implies(alive, self.enc.fatal_ok(t)))
            self._step_on.append(on)
            self._alive_on.append(alive)

    def _prefix(self, depth: int, last_alive: bool) -> list:
        """Assumptions for a trace of `depth` transitions; the last one may kill the
        engine only when it is the violating one (last_alive False)."""
        alive = depth if last_alive else depth - 1
        return self._step_on[:depth] + self._alive_on[: max(alive, 0)]

    def goal_at(self, goal: Goal, depth: int):
        """The goal, reached by a trace of exactly `depth` transitions (None: impossible)."""
        enc = self.enc
        if goal.kind == "transition":
            return None if depth == 0 else enc.bad(goal.name, depth - 1)
        if goal.kind == "state":
            return z3.Not(enc.holds(goal.name, depth))
        if goal.kind == "progress":
            assert goal.predicate is not None, f"progress goal {goal.name} has no predicate"
            return goal.predicate(enc, depth)
        return enc.state_formula(goal.predicate, depth)

    def _check(self, assumptions: list, query: str = "BMC search") -> z3.CheckSatResult:
        started = time.perf_counter()
        result = self.solver.check(*assumptions)
        if result == z3.unknown:
            raise classify_unknown(
                self.solver.reason_unknown(),
                time.perf_counter() - started,
                self.query_ms,
                f"{self.enc.cfg.name}: {query}",
                self.enc.cfg.name,
            )
        return result

    # ------------------------------------------------------------------ searches
    def shortest(
        self, goal: Goal, max_depth: int, extra: Callable[[int], object] | None = None, minimise: bool = True
    ) -> Trace | None:
        """A shortest trace (<= max_depth transitions) reaching the goal, picks minimised
        (or, with minimise=False, as the solver found them)."""
        for depth in range(max_depth + 1):
            target = self.goal_at(goal, depth)
            if target is None:
                continue
            self._unroll(depth)
            assumptions = self._prefix(depth, last_alive=not goal.may_end_engine) + [target]
            if extra is not None:
                assumptions.append(extra(depth))
            query = f"BMC search for {goal.name} at depth {depth}"
            if self._check(assumptions, query) == z3.sat:
                model = self._minimise(depth, assumptions, goal.name) if minimise else self.solver.model()
                return self._trace(model, depth, goal)
        return None

    def picks(self, depth: int):
        """Sum of the integer picks a trace shows that have no fixed upper bound (shifted
        to start at 0). Picks a configuration bounds (a max budget) are left as found,
        so minimisation costs the same whatever the integer sizes."""
        enc = self.enc
        terms = []
        for arg, key in INIT.arg_keys(enc.cfg):
            if arg.sort is int and not (arg.name == "prompt_len" and enc.cfg.prompt_lens is not None):
                terms.append(enc.init_args[key] - (arg.lo or 0))
        for t in range(depth):
            step = enc.step(t)
            for index, event in enumerate(enc.events):
                ints = [
                    step.args[event.name][key] - (arg.lo or 0)
                    for arg, key in event.arg_keys(enc.cfg)
                    if arg.sort is int and arg.hi is None
                ]
                flags = [
                    z3.If(step.args[event.name][key], 1, 0) for arg, key in event.arg_keys(enc.cfg) if arg.sort is bool
                ]
                if ints or flags:
                    terms.append(z3.If(step.act == index, z3.Sum(*(ints + flags)), 0))
        return z3.Sum(*terms) if terms else z3.IntVal(0)

    def small_picks(self, depth: int, bound: int):
        """Every pick of a trace of this depth is at most `bound` above its lower limit."""
        return self.picks_each(depth, lambda term: term <= bound)

    def picks_each(self, depth: int, condition):
        enc = self.enc
        conds = [
            condition(enc.init_args[key] - (arg.lo or 0)) for arg, key in INIT.arg_keys(enc.cfg) if arg.sort is int
        ]
        for t in range(depth):
            step = enc.step(t)
            for index, event in enumerate(enc.events):
                ints = [
                    condition(step.args[event.name][key] - (arg.lo or 0))
                    for arg, key in event.arg_keys(enc.cfg)
                    if arg.sort is int and arg.hi is None
                ]
                if ints:
                    conds.append(z3.Implies(step.act == index, z3.And(*ints)))
        return z3.And(*conds) if conds else z3.BoolVal(True)

    def _minimise(self, depth: int, assumptions: list, goal: str = "") -> z3.ModelRef:
        """Smallest pick sum along the event sequence the solver found.

        The sequence (which event at each step) is pinned, and so are the picks the
        configuration bounds (they are not minimised), so this is an integer
        optimisation over the other picks of one fixed path, which one Optimize call answers
        (searching every path of this depth costs several times more, measured). Its
        model satisfies the same formulas as the search, and is replayed concretely
        like every trace."""
        enc = self.enc
        model = self.solver.model()
        objective = self.picks(depth)
        if value_of(model, objective) == 0:
            return model
        optimise = solvers.optimiser(self.timeout_ms)
        optimise.add(*self._formulas(assumptions))
        for t in range(depth):
            step = enc.step(t)
            index = value_of(model, step.act)
            event = enc.events[index]
            optimise.add(step.act == index)
            # picks the configuration bounds are not minimised: keep them as found
            optimise.add(
                *[
                    step.args[event.name][key] == value_of(model, step.args[event.name][key])
                    for arg, key in event.arg_keys(enc.cfg)
                    if arg.sort is int and arg.hi is not None
                ]
            )
        optimise.minimize(objective)
        started = time.perf_counter()
        result = optimise.check()
        if result == z3.unknown:
            raise classify_unknown(
                optimise.reason_unknown(),
                time.perf_counter() - started,
                self.timeout_ms,
                f"{enc.cfg.name}: minimising the picks of the {goal or 'found'} trace at depth {depth}",
                enc.cfg.name,
            )
        if result != z3.sat:
            raise SolverUnknown(f"{enc.cfg.name}: minimising the picks along a found path: {result}")
        return optimise.model()

    def _formulas(self, assumptions: list) -> list:
        """The main solver's facts under these assumptions, as plain formulas."""
        literals = {lit.get_id() for lit in self._step_on + self._alive_on}
        on = {a.get_id() for a in assumptions if a.get_id() in literals}
        out = []
        for fact in self.solver.assertions():
            if z3.is_implies(fact) and fact.arg(0).get_id() in literals:
                if fact.arg(0).get_id() in on:
                    out.append(fact.arg(1))
            else:
                out.append(fact)
        return out + [a for a in assumptions if a.get_id() not in literals]

    def _trace(self, model: z3.ModelRef, depth: int, goal: Goal) -> Trace:
        enc = self.enc
        init = {key: value_of(model, var) for key, var in enc.init_args.items()}
        names = enc.event_index()
        steps = []
        for t in range(depth):
            sv = enc.step(t)
            event = names[value_of(model, sv.act)]
            steps.append(Step(event, {k: value_of(model, v) for k, v in sv.args[event].items()}))
        trace = Trace(
            config=enc.cfg.name,
            init=init,
            steps=steps,
            goal=goal.name,
            kind="witness" if goal.kind == "witness" else "violation",
        )
        trace.solver_states = [{k: value_of(model, v) for k, v in enc.step(t).state.items()} for t in range(depth + 1)]
        trace.mechanisms = sorted(m for m, used in self.mechanisms(depth).items() if value_of(model, used))
        return trace

    # ------------------------------------------------------------------ classes
    def mechanisms(self, depth: int) -> dict[str, object]:
        """Which optional mechanisms a trace of this depth uses (its class view): its
        front-end events, and the configuration's mechanisms (spec/config.py MECHANISMS)."""
        enc, cfg = self.enc, self.enc.cfg
        names = [n for n in enc.event_index() if n not in ("schedule", "deliver")] + cfg.mechanisms()
        used: dict[str, list] = {name: [] for name in names}
        reqs = range(cfg.requests)
        for t in range(depth):
            step = enc.step(t)
            for name in enc.event_index():
                if name in ("schedule", "deliver"):
                    continue
                used.setdefault(name, []).append(enc.action_is(t, name))
            delivering, scheduling = enc.action_is(t, "deliver"), enc.action_is(t, "schedule")
            state = View(cfg, step.state)
            if cfg.has("kvfail"):
                used["kv-load-failure"].append(z3.And(delivering, step.args["deliver"][("kv_fail_req",)] >= 0))
            if "stale-slot-read" in cfg.faults:
                used["stale-slot-read"].append(
                    z3.And(scheduling, z3.Or(*[step.args["schedule"][("stale_read", r)] for r in reqs]))
                )
            if "over-delivery" in cfg.faults:
                used["over-delivery"].append(
                    z3.And(scheduling, z3.Or(*[step.args["schedule"][("extra", r)] > 0 for r in reqs]))
                )
            if "under-drain" in cfg.faults:
                used["under-drain"].append(
                    z3.And(delivering, z3.Or(*[step.args["deliver"][("short", r)] > 0 for r in reqs]))
                )
            if "lost-sample" in cfg.faults:
                used["lost-sample"].append(
                    z3.And(delivering, z3.Or(*[step.args["deliver"][("lost", r)] for r in reqs]))
                )
            if cfg.has("stream"):
                used["session-stop"].append(
                    z3.And(
                        delivering,
                        z3.Or(*[z3.And(state.resumable[r], step.args["deliver"][("stop", r)] > 0) for r in reqs]),
                    )
                )
            if cfg.has("prefix-cache"):
                after = View(cfg, enc.step(t + 1).state)
                used["prefix-hit"].append(
                    z3.And(
                        scheduling,
                        z3.Or(
                            *[
                                z3.And(
                                    state.status[r] != Status.RUNNING,
                                    after.status[r] == Status.RUNNING,
                                    after.hit_tokens[r] > 0,
                                )
                                for r in reqs
                            ]
                        ),
                    )
                )
                if cfg.has("kvfail"):
                    args = ArgView(BY_NAME["deliver"], cfg, step.args["deliver"])
                    sharers = failure_sharers(state, args, cfg, Z3_OPS, [])
                    used["shared-block-failure"].append(
                        z3.And(delivering, z3.Or(*[z3.BoolVal(x) if isinstance(x, bool) else x for x in sharers]))
                    )
        return {name: (z3.Or(*terms) if terms else z3.BoolVal(False)) for name, terms in used.items()}

    def through(self, depth: int):
        """The configuration's `via`: a trace of this depth goes through each of them."""
        view = self.mechanisms(depth)
        return z3.And(*[view[name] for name in sorted(self.enc.cfg.via)])

    def classes(self, goal: Goal, first: Trace, max_depth: int, limit: int) -> list[Trace]:
        """Further counterexamples whose mechanisms are not a superset of a found class."""
        found = [first]
        blocked: list[list[str]] = [first.mechanisms]
        while len(found) < limit:

            def extra(depth, blocked=tuple(tuple(b) for b in blocked)):
                view = self.mechanisms(depth)
                clauses = []
                for used in blocked:
                    clauses.append(z3.Or(*[z3.Not(view[m]) for m in used]) if used else z3.BoolVal(False))
                clauses += [view[m] for m in sorted(self.enc.cfg.via)]  # the configuration's `via` still
                return z3.And(*clauses) if clauses else z3.BoolVal(True)

            trace = self.shortest(goal, max_depth, extra)
            if trace is None:
                break
            found.append(trace)
            blocked.append(trace.mechanisms)
        return found


_ONE_STEP_VIEWS: dict[str, tuple] = {}
_ONE_STEP_VIEWS_KEPT = 64


def _one_step_view(cfg) -> tuple:
    """The encoding of one step and its class view, built once per semantics (configurations
    with equal semantics have the same encoding; a monitor's or a campaign's traces share a
    few): the most recent 64 are kept."""
    key = json.dumps(cfg.semantics(), sort_keys=True, default=sorted)
    if key not in _ONE_STEP_VIEWS:
        if len(_ONE_STEP_VIEWS) >= _ONE_STEP_VIEWS_KEPT:
            del _ONE_STEP_VIEWS[next(iter(_ONE_STEP_VIEWS))]
        enc = Encoding(cfg)
        _ONE_STEP_VIEWS[key] = (enc, Bmc(enc).mechanisms(1), enc.step(0), enc.step(1), enc.event_index())
    return _ONE_STEP_VIEWS[key]


def mechanisms_of(cfg, steps: list[Step], states: list[dict]) -> list[str]:
    """The class of a concrete trace (its steps and the states its replay went through):
    `Bmc.mechanisms`'s own conditions for one step, evaluated on each step of the trace, so
    a recorded trace is named by the definition the searches use."""
    enc, view, here, there, names = _one_step_view(cfg)

    def value(v):
        return z3.BoolVal(v) if isinstance(v, bool) else z3.IntVal(v)

    used: set[str] = set()
    for t, step in enumerate(steps):
        pairs = [(here.state[k], value(states[t][k])) for k in enc.keys]
        pairs += [(there.state[k], value(states[t + 1][k])) for k in enc.keys]
        pairs.append((here.act, z3.IntVal(names.index(step.event))))
        for event in enc.events:
            for arg, key in event.arg_keys(enc.cfg):
                given = step.args[key] if event.name == step.event else arg.fallback()
                pairs.append((here.args[event.name][key], value(given)))
        for name, term in view.items():
            if name not in used and z3.is_true(z3.simplify(z3.substitute(term, *pairs))):
                used.add(name)
    return sorted(used)
