"""k-induction: unbounded proofs, strengthened by the contract's auxiliary invariants.

For a property p and lemmas A (state predicates), with k = 1, 2, ...:
  base:  no trace of < k transitions from an initial state violates A or p;
  step:  k consecutive transitions that keep A and p (and the engine alive) cannot be
         followed by one that violates p or breaks A.
Both unsat => p holds in every reachable state, for every length and integer size.
If the step is satisfiable up to k_max, the last model is a counterexample to induction
(CTI): an unreachable-or-not state the lemmas fail to exclude; it is returned so a
failed proof can be diagnosed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import z3
from vllm_contract.model import solvers
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.solvers import classify_unknown, value_of
from vllm_contract.spec.properties import PROPERTIES, reported_by

Lemma = tuple[str, Callable]  # (name, (View, cfg, ops) -> condition)


@dataclass
class InductionResult:
    status: str  # "proved" | "not-inductive" | "violated-base"
    k: int
    lemmas: list[str]
    cti: dict = field(default_factory=dict)  # failing step states, for diagnosis
    failed: str = ""  # which lemma or property broke in the CTI / base


class KInduction:
    def __init__(self, enc: Encoding, timeout_ms: int = 60_000):
        self.enc = enc
        self.timeout_ms = timeout_ms

    def _check(self, premises: list, goal, query: str = "k-induction") -> z3.ModelRef | None:
        """Are the premises and the goal satisfiable together? A model if so; unknown raises
        (naming the query: a timeout must say which one ran out)."""
        solver = solvers.one_shot(self.timeout_ms)
        solver.add(*premises, goal)
        started = time.perf_counter()
        result = solver.check()
        if result == z3.unknown:
            name = self.enc.cfg.name
            raise classify_unknown(
                solver.reason_unknown(), time.perf_counter() - started, self.timeout_ms, f"{name}: {query}", name
            )
        return solver.model() if result == z3.sat else None

    def _lemmas_at(self, lemmas: list[Lemma], t: int) -> list:
        return [self.enc.state_formula(fn, t) for _, fn in lemmas]

    def prove(self, props: list[str], lemmas: list[Lemma], k_max: int = 2) -> InductionResult:
        """Prove several properties of one configuration together (they share lemmas)."""
        enc = self.enc
        names = [n for n, _ in lemmas]
        state_props = [p for p in props if PROPERTIES[p].kind == "state"]
        trans_props = [p for p in props if PROPERTIES[p].kind == "transition"]

        def good_state(t):
            return self._lemmas_at(lemmas, t) + [enc.holds(p, t) for p in state_props]

        def breaks(t):
            """Ways transition t can fail: a property breaks on it, or s_{t+1} loses one."""
            out = [(p, enc.bad(p, t)) for p in trans_props]
            alive = enc.fatal_ok(t)
            # a state property some assert reports must hold even after a step whose
            # assert fires (the counter is negative in that very state); others, and
            # the lemmas, only in states a live engine reaches
            out += [
                (p, z3.Not(enc.holds(p, t + 1)) if reported_by(p) else z3.And(alive, z3.Not(enc.holds(p, t + 1))))
                for p in state_props
            ]
            out += [("lemma " + n, z3.And(alive, z3.Not(enc.state_formula(fn, t + 1)))) for n, fn in lemmas]
            return out

        def keeps(t):
            return [enc.fatal_ok(t)] + [z3.Not(enc.bad(p, t)) for p in trans_props]

        base_premises = [enc.initial()]
        step_premises: list = []
        for k in range(1, k_max + 1):
            t = k - 1
            # base: from an initial state, states 0..t and transition t are good
            if t > 0:
                base_premises += [enc.transition(t - 1), *keeps(t - 1)]
            failures = [("lemma " + n, z3.Not(f)) for n, f in zip(names, self._lemmas_at(lemmas, t))]
            failures += [(p, z3.Not(enc.holds(p, t))) for p in state_props]
            failures += [(p, enc.bad(p, t)) for p in trans_props]
            proving = ", ".join(props)
            hit = self._first(base_premises + [enc.transition(t)], failures, f"k-induction base case k={k} ({proving})")
            if hit is not None:
                label, model = hit
                return InductionResult("violated-base", k, names, self._states(model, t + 2), label)
            # step: k good states and k-1 good transitions; can transition t break?
            # One query per event of transition t: each is small once the event is fixed.
            step_premises += [*good_state(t), enc.transition(t)]
            broken, failing = None, breaks(t)
            for event in enc.event_index():
                broken = self._first(
                    step_premises + [enc.action_is(t, event)],
                    failing,
                    f"k-induction step k={k}, event {event} ({proving})",
                )
                if broken is not None:
                    break
            if broken is None:
                return InductionResult("proved", k, names)
            if k == k_max:
                label, model = broken
                return InductionResult("not-inductive", k, names, self._states(model, t + 2), label)
            step_premises += keeps(t)
        raise AssertionError("unreachable")

    def _first(self, premises: list, labelled: list, query: str = "k-induction") -> tuple[str, z3.ModelRef] | None:
        """One query for 'any of these can happen'; names the first that does."""
        model = self._check(premises, z3.Or(*[f for _, f in labelled]), query)
        if model is None:
            return None
        for label, formula in labelled:
            if z3.is_true(model.eval(formula, model_completion=True)):
                return label, model
        raise AssertionError("a disjunct held but none evaluates true")

    def _states(self, model: z3.ModelRef, count: int) -> dict:
        enc = self.enc
        out = {}
        for t in range(count):
            sv = enc.step(t)
            out[t] = {k: value_of(model, v) for k, v in sv.state.items()}
            if t + 1 < count:
                name = (
                    enc.event_index()[value_of(model, sv.act)]
                    if 0 <= value_of(model, sv.act) < len(enc.events)
                    else "?"
                )
                out[t]["->"] = (name, {k: value_of(model, v) for k, v in sv.args.get(name, {}).items()})
        return out
