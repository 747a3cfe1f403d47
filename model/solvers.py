"""The three kinds of Z3 solver the prover uses, configured in one place.

All run linear integer arithmetic on Z3's older simplex (`arith.solver=2`), measured
fastest on these formulas (z3-encoding-notes; bench/prover_bench.py):
  incremental  one solver queried many times under assumptions (BMC deepening);
  one_shot     a fresh solver per query that simplifies first (induction steps);
  optimiser    the least pick sum along one fixed path (counterexample minimisation).
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
