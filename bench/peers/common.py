"""What every peer of the comparison shares: the limits, the clock, the instances searched."""

from __future__ import annotations

import time
from pathlib import Path

from vllm_contract.spec.config import Config

ROOT = Path(__file__).resolve().parent.parent

WALK_LENGTH = 30  # the fuzzer's default trace length (targets/fuzz/differential.py --length)
BMC_REPEAT = 3  # BMC times are the best of this many runs
PROBE_SEEDS = 10  # the probe's expected cost: mean over this many seeds
RACE_SEEDS = 10  # the race's, likewise
WALK_FINDS = 10  # violations the walk collects for its time per violation
HYP_STEPS = 30  # Hypothesis steps per example, as the walk's length
SMALL = 3  # BFS: every unbounded integer pick also takes its 3 smallest values
RESULTS = ROOT / "bench" / "results" / "peers.txt"
# Every time here is CPU time of this process: the machine is shared, and under other
# work wall time varied 2-3x between runs of the same search, CPU time far less. The
# limits are CPU time too, so each peer gets the same work whatever the load.
CLOCK = time.process_time


def concrete(cfg: Config) -> str | None:
    """Why the concrete peers cannot run this configuration (None: they can)."""
    if cfg.spec_tokens is None:
        return "symbolic draft count (spec_tokens None): not a concrete instance"
    if getattr(cfg, "rest", False):
        return "abstract rest: its picks stand for other requests, not a concrete instance"
    return None


def searched_on(cfg: Config) -> list[Config]:
    """Where make prove searches this configuration's counterexamples."""
    try:
        from vllm_contract.model.check import concrete_instances
    except ImportError:  # a tree without abstract rests
        return [cfg]
    return concrete_instances(cfg)


def instance(cfg: Config) -> tuple[Config | None, str]:
    """A proved configuration as a concrete instance BFS can run: a symbolic draft count
    becomes K = 1 and an abstract rest two concrete requests (the instance the matrix
    proved before its proofs covered every size). (None, why) when there is none."""
    changes: dict = {}
    if cfg.spec_tokens is None:
        changes.update(spec_tokens=1, spec_tokens_max=None)
    if getattr(cfg, "rest", False):
        changes.update(rest=False, requests=2)
    if not changes:
        return cfg, ""
    changes["expect"] = {p: v for p, v in cfg.expect.items() if v == "proved"}
    try:
        return cfg.with_(**changes).validate(), ", ".join(
            f"{k}={v}" for k, v in changes.items() if k not in ("spec_tokens_max", "expect")
        )
    except Exception as exc:  # a configuration field this bench does not know
        return None, f"no concrete instance ({exc})"
