"""(a) The project: the BMC's first and minimised counterexamples, the probe and the race."""

from __future__ import annotations

import statistics

from bench.peers.common import BMC_REPEAT, CLOCK, PROBE_SEEDS, RACE_SEEDS, concrete, searched_on
from model.bmc import Bmc, Goal
from model.check import MAX_DEPTH
from model.encoding import Encoding
from model.interpreter import Interpreter
from model.probe import SECONDS as PROBE_S
from model.probe import Race, probe
from model.trace import confirm
from spec.config import Config


def project(cfg: Config, prop: str) -> dict:
    """Best of BMC_REPEAT for each BMC time (each from a fresh encoding): the machine is
    shared, and a solver run that lost its core for a second says nothing about it."""
    goal = Goal.violation(prop)
    plain = minimised = float("inf")
    first = shortest = None

    def search(minimise: bool):
        # as make prove: an abstract rest is refuted on its concrete instances, in order
        for where in searched_on(cfg):
            found = Bmc(Encoding(where)).shortest(goal, MAX_DEPTH, minimise=minimise)
            if found is not None:
                return where, found
        return None, None

    for _ in range(BMC_REPEAT):
        started = CLOCK()
        _, first = search(False)
        plain = min(plain, CLOCK() - started)
        started = CLOCK()
        where, shortest = search(True)
        if shortest is not None:
            confirm(Interpreter(where), shortest, shortest.solver_states)
        minimised = min(minimised, CLOCK() - started)
    out = {
        "plain": plain,
        "shortest": minimised,
        "depth": shortest.depth if shortest else None,
        "trace": shortest,
        "first_depth": first.depth if first else None,
    }
    if concrete(cfg) is None:
        # the probe is deterministic per seed and lucky or not per seed: its expected cost is
        # measured over PROBE_SEEDS seeds; after a probe that found nothing the BMC runs as
        # measured above
        costs, hits = [], 0
        for seed in range(PROBE_SEEDS):
            started = CLOCK()
            early = probe(searched_on(cfg)[0], prop, PROBE_S, seed=seed)
            spent = CLOCK() - started
            hits += early is not None
            costs.append(spent if early is not None else spent + plain)
        out["probe_hits"] = hits
        out["with_probe"] = statistics.mean(costs)
        # the race: walks interleaved with the BMC (its extra hook), RACE_SEEDS runs; a run
        # stops at the first counterexample of either (the BMC would go on to the shortest)
        costs, hits = [], 0
        for seed in range(RACE_SEEDS):
            started = CLOCK()
            first_at = None
            try:
                for where in searched_on(cfg):
                    race = _StopRace(where, prop, seed=seed)  # its own shares in wall time, as in make prove
                    if Bmc(Encoding(where)).shortest(goal, MAX_DEPTH, minimise=False, extra=race) is not None:
                        first_at = CLOCK() - started
                        break
            except _WalksFirst as won:
                first_at = won.seconds - started
                hits += 1
            costs.append(first_at if first_at is not None else CLOCK() - started)
        out["race_hits"] = hits
        out["race"] = statistics.mean(costs)
    return out


class _WalksFirst(Exception):
    def __init__(self, seconds: float):
        super().__init__(seconds)
        self.seconds = seconds


class _StopRace(Race):
    """The race as make prove would run it, stopped when the walks come first: only the
    time to the first counterexample is measured here."""

    def __call__(self, depth: int):
        out = super().__call__(depth)
        if self.trace is not None:
            raise _WalksFirst(CLOCK())
        return out
