"""A short random-walk probe, run before the BMC, for an early counterexample.

Why: on most violated cases a plain random walk on the interpreter reaches a violation
before the solver has unrolled a few steps (bench/peers.py measures it), while on the
rare ones the BMC is two orders of magnitude ahead. A probe of a few tens of
milliseconds before the BMC takes the walk's speed where it is cheap; the BMC still
gives the shortest trace, the minimised picks and every proof. The probe never decides
a verdict: a trace it returns is replayed on the reference interpreter (kind
"violation"), and None means nothing at all.

Walks use the fuzzer's argument sampler (targets.fuzz.propose, random_init), with one
difference that keeps the distribution and saves most of the cost: instead of trying
every event in every state and then choosing among the enabled ones by weight, events
are drawn by weight without replacement until one is enabled (the same law, one or two
trial steps per step instead of one per event). An event the fuzzer has no sampler
for gets arguments drawn from its declared domain.

Deterministic for a given seed: walk i draws from Random(seed * 1_000_003 + i), so the
same seed returns the same trace whenever the budget lets it get that far (the budget
only decides how many walks are tried).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from model.interpreter import Disabled, Interpreter, StepResult, args_for, flat
from model.trace import Step, Trace, confirm
from spec.catalog import INIT
from spec.config import Config
from spec.ops import INT_OPS
from spec.properties import PROPERTIES, reported_by
from spec.state import View

LENGTH = 24  # steps per walk: twice the matrix's search depth (model/check.py MAX_DEPTH)
# Walks alternate between the fuzzer's sizes and small ones: small prompts and budgets
# reach most violations in fewer steps (the BMC's minimised picks are small), but a
# KV-load failure needs a prompt of at least a whole block, which only the large ones
# draw. (small, large) as (max_prompt, max_budget, max_update); measured in bench/peers.py.
SMALL = (6, 8, 4)
SECONDS = 0.05  # default budget: what a probe in front of the BMC may cost (bench/peers.py)


@dataclass
class Walk:
    """One random walk's outcome: the steps taken, and whether the goal was violated."""

    init: dict  # named init picks
    steps: list  # [(event, flat args)]
    violated: bool
    ended: str  # "violation" | "fatal: <asserts>" | "nothing enabled" | "length" | "time"


def violated_by(cfg: Config, prop: str) -> Callable[[StepResult], bool]:
    """A cheap test of one property after one step (only that property is evaluated).

    A state property that no vLLM assert reports must be violated by a live engine: a
    step that fires an assert ends the trace and does not count, as in the BMC
    (Goal.may_end_engine)."""
    spec = PROPERTIES[prop]
    if spec.kind == "transition":
        return lambda res: res.checks.get(prop, True) is False
    may_end = bool(reported_by(prop))

    def test(res: StepResult) -> bool:
        if res.fired and not may_end:
            return False
        return not spec.holds(View(cfg, res.state), cfg, INT_OPS)
    return test


def _generic(it: Interpreter, cfg: Config, s, name: str, rng: random.Random, tries: int = 4):
    """Arguments drawn from an event's declared domain (for events the fuzzer cannot
    sample): bools fair, ints in [lo, hi] or [lo, lo + 3]."""
    event = it.event(name)
    for _ in range(tries):
        args = {}
        for arg, key in event.arg_keys(cfg):
            if arg.sort is bool:
                args[key] = rng.random() < 0.5
            else:
                lo = arg.lo if arg.lo is not None else 0
                hi = arg.hi if arg.hi is not None else lo + 3
                args[key] = rng.randint(lo, max(lo, hi))
        try:
            return args, it.step(s, name, args)
        except Disabled:
            continue
    return None


def _init(cfg: Config, rng: random.Random, lim) -> dict:
    """The fuzzer's init picks, plus any init argument it does not know (domain draw)."""
    from targets.fuzz import random_init

    named = random_init(cfg, rng, lim)
    known = {k[0] for k in flat(named)}
    for arg, key in INIT.arg_keys(cfg):
        if arg.name in known:
            continue
        if arg.sort is bool:
            value: Any = rng.random() < 0.5
        else:
            lo = arg.lo if arg.lo is not None else 0
            value = rng.randint(lo, arg.hi if arg.hi is not None else lo + 3)
        node = named.setdefault(arg.name, [] if len(key) > 1 else value)
        if len(key) > 1:
            node.append(value)
    return named


def walk(it: Interpreter, cfg: Config, test: Callable[[StepResult], bool], rng: random.Random,
         length: int = LENGTH, deadline: float | None = None, lim=None) -> Walk:
    """One walk from a random initial state, stopped at the first violation."""
    from targets.fuzz import WEIGHTS, Limits, propose

    lim = lim or Limits()
    init = _init(cfg, rng, lim)
    s = it.initial(**init)
    steps: list = []
    names = list(it.events)
    for _ in range(length):
        if deadline is not None and time.perf_counter() > deadline:
            return Walk(init, steps, False, "time")
        pool = list(names)
        picked = None
        while pool and picked is None:
            name = rng.choices(pool, [WEIGHTS.get(n, 1) for n in pool])[0]
            pool.remove(name)
            try:
                got = propose(it, cfg, s, name, rng, lim)
            except ValueError:  # an event the fuzzer has no sampler for
                got = _generic(it, cfg, s, name, rng)
            if got is not None:
                picked = (name, got)
        if picked is None:
            return Walk(init, steps, False, "nothing enabled")
        name, (args, res) = picked
        steps.append((name, args))
        if test(res):
            return Walk(init, steps, True, "violation")
        if res.fired:
            return Walk(init, steps, False, "fatal: " + ",".join(res.fired))
        s = res.state
    return Walk(init, steps, False, "length")


def walks(cfg: Config, prop: str, seconds: float, seed: int = 0, length: int = LENGTH,
          max_walks: int | None = None, lim=None):
    """Random walks until one violates `prop` or the budget runs out. Returns
    (Walk or None, walks tried, steps taken). `lim` fixes the sizes (targets.fuzz.Limits);
    by default walks alternate between SMALL and the fuzzer's."""
    from targets.fuzz import Limits

    it = Interpreter(cfg)
    test = violated_by(cfg, prop)
    sizes = [lim] if lim is not None else [Limits(*SMALL), Limits()]
    deadline = time.perf_counter() + seconds
    tried = taken = 0
    while time.perf_counter() < deadline and (max_walks is None or tried < max_walks):
        got = walk(it, cfg, test, random.Random(seed * 1_000_003 + tried), length, deadline,
                   sizes[tried % len(sizes)])
        tried += 1
        taken += len(got.steps)
        if got.violated:
            return got, tried, taken
    return None, tried, taken


def to_trace(cfg: Config, prop: str, found: Walk, it: Interpreter | None = None) -> Trace:
    """A walk's violation as a replayed Trace (what the BMC returns, not minimised)."""
    it = it or Interpreter(cfg)
    trace = Trace(config=cfg.name, init=args_for(INIT, cfg, found.init),
                  steps=[Step(name, dict(args)) for name, args in found.steps],
                  goal=prop, kind="violation", mechanisms=[])
    return confirm(it, trace)


def probe(cfg: Config, prop: str, seconds: float = SECONDS, seed: int = 0, length: int = LENGTH,
          max_walks: int | None = None) -> Trace | None:
    """A concrete violating trace of `prop` found by random walks within `seconds`
    (replayed, kind "violation"), or None: None proves nothing.

    A configuration the interpreter cannot run concretely (a symbolic parameter the
    walks cannot pick) gives None rather than an error: the probe is only a shortcut."""
    try:
        found, _, _ = walks(cfg, prop, seconds, seed, length, max_walks)
    except Disabled:  # init picks the configuration does not allow
        return None
    if found is None:
        return None
    return to_trace(cfg, prop, found)
