"""Can a configuration reach a state with these counters? A shortest trace, or a proof that none can.

The operator's question after a crash: which mechanism can produce the counters the log
shows (`placeholders=-1 new_tokens=1 computed=8448 ...`)? For one configuration of the
matrix the answer is one of

  reached      a shortest trace whose last state has exactly those values for some
               request (and, for `new_tokens`, whose last step delivers that many tokens
               to it); replayed on the interpreter like every trace. The last step may
               fire an assert: a crash log shows the state the assert saw.
  unreachable  a proof: the configuration's invariants (the properties it proves,
               with those the matrix makes no claim about when they hold too, and
               their lemmas, proved here by k-induction) hold in every state a live
               engine reaches, and no single transition from such a state (firing or
               not) ends in the counters; nor does an initial state have them.
  unknown      neither within the search depth (or the time limit). Never a "no".

Integer values are pinned in the goal as they are: the encoding uses unbounded Int,
so a 9118-token prompt costs what a small one costs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import z3
from vllm_contract.model.bmc import Bmc, Goal
from vllm_contract.model.check import concrete_instances
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.induction import KInduction
from vllm_contract.model.interpreter import Interpreter
from vllm_contract.model.solvers import SolverUnknown
from vllm_contract.model.trace import Trace, confirm
from vllm_contract.model.z3ops import Z3Ops
from vllm_contract.spec.config import Config
from vllm_contract.spec.invariants import lemmas_for
from vllm_contract.spec.ops import INT_OPS
from vllm_contract.spec.properties import PROPERTIES, properties_for
from vllm_contract.spec.verdicts import Fired
from vllm_contract.spec.vocabulary import Status

MAX_DEPTH = 12
TIMEOUT_S = 20.0
BUDGET_S = 5.0  # per configuration, the proof and the search together
EDGE = 0.8  # an answer found after this share of its budget is at its edge (said in the answer)


class _OutOfTime(Exception):
    """The configuration's time budget ran out: in the proof (depth 0) or before the
    search reached max_depth."""

    def __init__(self, depth: int):
        self.depth = depth


class _BudgetedInduction(KInduction):
    """k-induction whose every query runs no longer than what is left of the budget."""

    def __init__(self, enc: Encoding, timeout_ms: int, deadline: float):
        super().__init__(enc, timeout_ms)
        self.cap, self.deadline = timeout_ms, deadline

    def _check(self, premises: list, goal, query: str = "k-induction"):
        left_ms = int((self.deadline - time.perf_counter()) * 1000)
        if left_ms <= 0:
            raise _OutOfTime(0)
        self.timeout_ms = min(self.cap, left_ms)
        try:
            return super()._check(premises, goal, query)
        except SolverUnknown:
            if time.perf_counter() >= self.deadline - 0.05:
                raise _OutOfTime(0) from None
            raise


@dataclass(frozen=True)
class Counter:
    """One counter an operator can give, and what it means in the spec."""

    name: str
    kind: str  # "int" | "bool" | "status"
    meaning: str
    var: str | None = None  # the per-request spec variable, when it is one


COUNTERS: dict[str, Counter] = {
    c.name: c
    for c in (
        Counter("placeholders", "int", "num_output_placeholders", "num_output_placeholders"),
        Counter(
            "new_tokens",
            "int",
            "tokens the runner returned for the request in the step just delivered "
            "(len(new_token_ids) in update_from_output)",
        ),
        Counter("computed", "int", "num_computed_tokens", "num_computed_tokens"),
        Counter("num_tokens", "int", "num_tokens (prompt + delivered output)", "num_tokens"),
        Counter("prompt", "int", "num_prompt_tokens", "num_prompt_tokens"),
        Counter("output", "int", "num_tokens - num_prompt_tokens (output tokens delivered)"),
        Counter("prefill_chunk", "bool", "is_prefill_chunk", "is_prefill_chunk"),
        Counter("in_flight", "int", "num_in_flight_tokens", "num_in_flight_tokens"),
        Counter("stale", "int", "num_stale_output_tokens", "num_stale_output_tokens"),
        Counter("drafts", "int", "len(spec_token_ids)", "num_spec_tokens"),
        Counter("status", "status", "the request's status: " + ", ".join(Status.NAMES.values()), "status"),
    )
}

# other spellings of the same counters: the spec's variable names and vLLM's attributes
ALIASES: dict[str, str] = {
    "num_output_placeholders": "placeholders",
    "num_computed_tokens": "computed",
    "num_prompt_tokens": "prompt",
    "is_prefill_chunk": "prefill_chunk",
    "num_in_flight_tokens": "in_flight",
    "num_stale_output_tokens": "stale",
    "num_spec_tokens": "drafts",
    "num_output_tokens": "output",
    "num_new_tokens": "new_tokens",
}


def accepted_names() -> str:
    return ", ".join(list(COUNTERS) + list(ALIASES))


@dataclass
class Answer:
    config: str
    verdict: str  # "reached" | "unreachable" | "unknown" | "could not run" (how: the cause)
    seconds: float
    how: str  # one phrase: what decided it
    depth: int | None = None
    trace: Trace | None = None
    request: int | None = None  # the request whose counters match
    fired: Fired | None = None  # reached: what vLLM does at the last step (an assert fires, or nothing)
    mechanisms: list = field(default_factory=list)
    instance: Config | None = None  # reached: the configuration the trace runs on (concrete)
    same_as: str | None = None  # answered once for this configuration, whose model is the same
    edge: bool = False  # decided after EDGE of its budget: a busier host may leave it unknown
    out_of_budget: bool = False  # unknown because its budget ran out (not its depth)
    cpu: float = 0.0  # CPU seconds it took (its process's)


class CounterGoal(Goal):
    """A goal over the last state and the last step: the counters of one request. The
    last step may fire an assert (a crash log shows the state the assert saw)."""

    values: dict[str, Any]
    requests: int

    def __init__(self, values: Mapping[str, Any], requests: int):
        object.__setattr__(self, "name", "counters")
        object.__setattr__(self, "kind", "witness")
        object.__setattr__(self, "predicate", None)
        object.__setattr__(self, "values", dict(values))
        object.__setattr__(self, "requests", requests)

    @property
    def may_end_engine(self) -> bool:
        return True

    def at(self, enc: Encoding, depth: int):
        """The goal reached by a trace of exactly `depth` steps (None: impossible)."""
        if "new_tokens" in self.values and depth == 0:
            return None
        return z3.Or(*[self.for_request(enc, depth, r) for r in range(self.requests)])

    def for_request(self, enc: Encoding, depth: int, r: int):
        before = enc.step(depth - 1).state if "new_tokens" in self.values else None
        delivers = enc.action_is(depth - 1, "deliver") if before is not None else False
        return z3.And(*counter_conditions(self.values, before, enc.step(depth).state, delivers, r, Z3Ops()))

    def holds_concretely(self, before: Mapping | None, after: Mapping, event: str | None, r: int) -> bool:
        """The same goal on interpreter states (the replayed trace's last step)."""
        if "new_tokens" in self.values and before is None:
            return False
        return INT_OPS.all(*counter_conditions(self.values, before, after, event == "deliver", r, INT_OPS))


def counter_conditions(values: Mapping[str, Any], before, after: Mapping, delivers, r: int, ops) -> list:
    """What it takes for request r to show these counters after a step, written once for
    the solver (Z3 terms of the step's states) and for a replayed trace (ints): `before`
    and `after` are the states around the last step, `delivers` whether it is a deliver."""
    conds = []
    for name, value in values.items():
        counter = COUNTERS[name]
        if name == "output":
            conds.append(after[("num_tokens", r)] - after[("num_prompt_tokens", r)] == value)
        elif name == "new_tokens":  # the step delivers tokens for r: how many the runner returned
            conds += [delivers, before[("q_scheduled", 0, r)] != 0, before[("q_sampled", 0, r)] == value]
        elif counter.kind == "bool":
            conds.append(after[(counter.var, r)] == bool(value))
        else:
            conds.append(after[(counter.var, r)] == value)
    return conds


class _Search(Bmc):
    def goal_at(self, goal, depth):
        if isinstance(goal, CounterGoal):
            return goal.at(self.enc, depth)
        return super().goal_at(goal, depth)


def _prove_unreachable(enc: Encoding, cfg: Config, goal: CounterGoal, timeout_ms: int, deadline: float) -> str | None:
    """A proof that no trace reaches the goal, as one phrase; None when there is none.

    Invariants are proved by k-induction: first every property that applies and the
    matrix does not expect violated (the matrix names only the properties a scenario is
    about, so a guard's run may hold the counter's property without saying so), then,
    if those are not all inductive, the ones it expects proved. One query asks whether
    a transition from a state where they hold can end in the goal, one whether an
    initial state is the goal."""
    if _initial_is_goal(enc, goal, timeout_ms):
        return None
    # k-induction proves invariants: a progress property is not one, and must not be named
    invariant = [p for p in properties_for(cfg) if PROPERTIES[p].kind != "progress"]
    expected = [p for p, e in cfg.expect.items() if e == "proved" and p in invariant]
    unclaimed = [p for p in invariant if p not in cfg.expect]
    tries = [expected + unclaimed, expected] if unclaimed else [expected]
    for n, proved in enumerate(tries, 1):
        lemmas = [(lemma.name, lemma.holds) for lemma in lemmas_for(cfg, proved)]
        try:
            result = _BudgetedInduction(enc, timeout_ms, deadline).prove(proved, lemmas)
        except SolverUnknown:
            if n == len(tries):
                raise
            continue  # no proof from this try: the next assumes less
        left_ms = min(timeout_ms, int((deadline - time.perf_counter()) * 1000))
        if left_ms <= 0:
            raise _OutOfTime(0)
        if result.status == "proved" and not _one_step_reaches(enc, cfg, goal, proved, lemmas, left_ms):
            what = ", ".join(proved) if proved else "no property"
            return (
                f"k-induction (k={result.k}) proves {len(lemmas)} lemma(s) and {what}; "
                "no step from a state where they hold ends in these counters"
            )
    return None


def _initial_is_goal(enc: Encoding, goal: CounterGoal, timeout_ms: int) -> bool:
    start = goal.at(enc, 0)
    if start is None:
        return False
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(enc.initial(), start)
    return solver.check() != z3.unsat


def _one_step_reaches(enc: Encoding, cfg: Config, goal: CounterGoal, proved, lemmas, timeout_ms: int) -> bool:
    """Can one transition from a state where the invariants hold end in the goal?"""
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    premises = [enc.state_formula(fn, 0) for _, fn in lemmas]
    premises += [enc.holds(p, 0) for p in proved if PROPERTIES[p].kind == "state"]
    premises += [z3.Not(enc.bad(p, 0)) for p in proved if PROPERTIES[p].kind == "transition"]
    solver.add(*premises, enc.transition(0), goal.at(enc, 1))
    started = time.perf_counter()
    answer = solver.check()
    if answer == z3.unknown:
        if time.perf_counter() - started >= timeout_ms / 1000 - 0.05:
            raise _OutOfTime(0)  # it ran to what was left of the budget
        raise SolverUnknown(f"{cfg.name}: the one-step query after the invariants' proof: {solver.reason_unknown()}")
    return answer != z3.unsat


def explain_config(
    cfg: Config,
    values: Mapping[str, Any],
    max_depth: int = MAX_DEPTH,
    timeout_s: float = TIMEOUT_S,
    budget_s: float = BUDGET_S,
) -> Answer:
    """Reach the counters under one configuration, or prove that nothing can. The proof
    comes first; the search deepens one step at a time until max_depth; both stop once
    budget_s is spent (then: unknown, saying where the budget ran out). An answer decided
    after EDGE of the budget says so: on a busier host it may come back unknown."""
    started, cpu = time.perf_counter(), time.process_time()
    deadline = started + budget_s
    timeout_ms = max(int(timeout_s * 1000), 1)
    enc = Encoding(cfg)
    goal = CounterGoal(values, cfg.requests)

    def answer(verdict: str, how: str, **kw) -> Answer:
        seconds = time.perf_counter() - started
        edge = verdict in ("reached", "unreachable") and seconds >= EDGE * budget_s
        if edge:
            how += (
                f"; at the edge of its {budget_s:g} s budget ({seconds:.1f} s): on a busier host it may come back "
                "unknown (raise --budget)"
            )
        return Answer(cfg.name, verdict, seconds, how, edge=edge, cpu=time.process_time() - cpu, **kw)

    def limited(search: _Search):
        """Before each depth's query: stop once the budget is spent, and let the query
        run no longer than what is left of it (one deep query would overrun it)."""

        def in_time(depth: int):
            left_s = budget_s - (time.perf_counter() - started)
            if left_s <= 0:
                raise _OutOfTime(depth)
            search.limit_queries(max(min(int(left_s * 1000), timeout_ms), 1))
            return z3.BoolVal(True)

        return in_time

    try:
        proof = _prove_unreachable(enc, cfg, goal, timeout_ms, deadline)
        if proof is not None:
            return answer("unreachable", proof)
        # an abstract rest proves for every size but never reaches: its traces are
        # searched on concrete instances (one request, then two), so each is a real one
        trace, where = None, cfg
        for instance in concrete_instances(cfg):
            search = _Search(enc if instance is cfg else Encoding(instance), timeout_ms)
            trace = search.shortest(CounterGoal(values, instance.requests), max_depth, limited(search))
            if trace is not None:
                where = instance
                break
    except _OutOfTime as exc:
        when = "while proving" if exc.depth == 0 else f"with no trace within {exc.depth - 1} steps"
        return answer(
            "unknown",
            f"the {budget_s:g} s budget per configuration ran out {when} (raise --budget), and no proof that "
            "none exists",
            out_of_budget=True,
        )
    except SolverUnknown:
        return answer(
            "unknown",
            "a solver query ran past its limit (the search's: what is left of the "
            f"{budget_s:g} s budget; raise --budget), and no proof that none exists",
            out_of_budget=True,
        )
    if trace is None:
        return answer("unknown", f"no trace within {max_depth} steps, and no proof that none exists")
    interp = Interpreter(where)
    confirm(interp, trace, trace.solver_states)
    last = trace.states[-1]
    before = trace.states[-2] if len(trace.states) > 1 else None
    event = trace.steps[-1].event if trace.steps else None
    goal = CounterGoal(values, where.requests)
    matching = [r for r in range(where.requests) if goal.holds_concretely(before, last, event, r)]
    if not matching:  # the solver's trace, replayed, must show the counters
        raise AssertionError(f"{cfg.name}: the replayed trace does not end in the counters {dict(values)}")
    return answer(
        "reached",
        f"BMC: a shortest trace of {trace.depth} step(s)",
        depth=trace.depth,
        trace=trace,
        request=matching[0],
        fired=trace.fired_at_end,
        mechanisms=list(trace.mechanisms),
        instance=where,
    )
