"""(a) The project: the BMC's first and minimised counterexamples, the probe and make prove's race."""

from __future__ import annotations

import statistics
import time

from vllm_contract.bench.peers.common import BMC_REPEAT, CLOCK, PROBE_SEEDS, RACE_SEEDS, concrete, searched_on
from vllm_contract.model.bmc import Bmc, Goal
from vllm_contract.model.check import MAX_DEPTH, TIMEOUT_S, search_violation
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.interpreter import Interpreter
from vllm_contract.model.probe import SECONDS as PROBE_S
from vllm_contract.model.probe import probe
from vllm_contract.model.trace import confirm
from vllm_contract.spec.config import Config


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
        # the race: make prove's own search (model/check.py search_violation: walks in a
        # thread beside the BMC), RACE_SEEDS runs; its time to the first counterexample of
        # either is wall time (the walks run while the solver checks, on another core)
        costs, hits = [], 0
        for seed in range(RACE_SEEDS):
            started = time.perf_counter()
            found = search_violation(cfg, prop, MAX_DEPTH, int(TIMEOUT_S * 1000), seed=seed)
            hits += found.found_by == "walk"
            costs.append(found.found_seconds if found.found_seconds is not None else time.perf_counter() - started)
        out["race_hits"] = hits
        out["race"] = statistics.mean(costs)
    return out
