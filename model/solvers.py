"""The three kinds of Z3 solver the prover uses, configured in one place.

All run linear integer arithmetic on Z3's older simplex (`arith.solver=2`), measured
fastest on these formulas (z3-encoding-notes; bench/prover_bench.py):
  incremental  one solver queried many times under assumptions (BMC deepening);
  one_shot     a fresh solver per query that simplifies first (induction steps);
  optimiser    the least pick sum along one fixed path (counterexample minimisation).
And what their answers mean: a value read from a model, and an `unknown` classified (a
timeout, an interrupt or a plain unknown: never a pass).
"""

from __future__ import annotations

import z3

# Optimize reads the global setting, not a per-solver one.
z3.set_param("smt.arith.solver", 2)


def incremental(timeout_ms: int) -> z3.Solver:
    solver = z3.Solver()
    solver.set("smt.arith.solver", 2)
    solver.set("timeout", timeout_ms)
    return solver


def one_shot(timeout_ms: int) -> z3.Solver:
    """A solver that simplifies before it searches. An incremental solver (one queried
    with assumptions) skips Z3's preprocessing; a query asked once gains from it: with
    the acting event pinned, constant propagation drops every other event's formulas,
    and solve-eqs / elim-uncnstr remove the next-state variables the query never reads
    (3-4x on the induction step, measured)."""
    tactic = z3.Then(
        "simplify",
        "propagate-values",
        "solve-eqs",
        "elim-uncnstr",
        "simplify",
        z3.With("smt", **{"arith.solver": 2}),
    )
    solver = tactic.solver()
    solver.set("timeout", timeout_ms)
    return solver


def optimiser(timeout_ms: int) -> z3.Optimize:
    optimise = z3.Optimize()
    optimise.set("timeout", timeout_ms)
    return optimise


class SolverUnknown(RuntimeError):
    """Z3 answered unknown (or ran out of time): the check is inconclusive."""


class SolverTimeout(SolverUnknown):
    """A query ran past its time limit. Still inconclusive (a failure), but the message
    names the query, the limit and how to raise it, so it does not read like a bug."""

    def __init__(self, query: str, limit_s: float, config: str = ""):
        self.query, self.limit_s, self.config = query, limit_s, config
        again = f"python -m vllm_contract.model.prove {config} --timeout {max(2 * limit_s, 1):g}".replace("  ", " ")
        super().__init__(
            f"solver timeout: {query} ran past the {limit_s:g} s limit per query; "
            f"raise it with --timeout SECONDS (e.g. {again})"
        )

    def __reduce__(self):  # travels back from a worker process intact
        return SolverTimeout, (self.query, self.limit_s, self.config)


class SolverInterrupted(Exception):
    """Z3 stopped because the process got SIGINT (Z3 catches it while it searches and
    answers `unknown`). Not a verdict: the run is being stopped, so nothing is recorded.
    Deliberately not a SolverUnknown, so no caller turns it into an `unknown` row."""


def classify_unknown(reason: str, elapsed_s: float, timeout_ms: int, query: str, config: str = "") -> Exception:
    """The exception for a solver `unknown`. Z3 says "interrupted from keyboard" for a
    SIGINT and "timeout" for its limit, but some solvers say "canceled" for both: a
    cancel well before the limit can only be an interrupt."""
    why = reason.strip().lower()
    limit_s = timeout_ms / 1000
    if "interrupt" in why or (why == "canceled" and elapsed_s < 0.9 * limit_s):
        return SolverInterrupted(f"{query}: the solver was interrupted ({reason})")
    if "timeout" in why or why == "canceled":
        return SolverTimeout(query, limit_s, config)
    return SolverUnknown(f"{query}: the solver answered unknown ({reason or 'no reason given'})")


def value_of(model: z3.ModelRef, var):
    """A variable's value in a model: a bool or an int (unconstrained ones completed)."""
    v = model.eval(var, model_completion=True)
    if z3.is_bool(v):
        return z3.is_true(v)
    return v.as_long()
