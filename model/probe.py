"""Random walks on the interpreter, for an early counterexample before or beside the BMC.

Why: on many violated cases a plain random walk on the interpreter reaches a violation
sooner than the solver reaches the depth of the shortest one, while on the rare ones the
BMC is orders of magnitude ahead (bench/peers.py measures both, case by case). Walks
take the walk's speed where it is cheap; the BMC still gives the shortest trace, the
minimised picks, the violation classes and every proof. A walk never decides a verdict:
a trace it returns is replayed on the reference interpreter (kind "violation"), and
finding nothing means nothing.

Two ways to use it: `probe(cfg, prop, seconds, seed)`, a fixed budget of walks (the
peers bench compares it); and `Race`, walks in a thread beside the BMC (the solver
releases the GIL while it checks), so the first counterexample comes about when the
faster of the two would give it alone (up to a cap on the walks). make prove runs the
race (model/check.py search_violation).

Walks use the fuzzer's argument sampler (model.sampler.propose, random_init), with one
difference that keeps the distribution and saves most of the cost: instead of trying
every event in every state and then choosing among the enabled ones by weight, events
are drawn by weight without replacement until one is enabled (the same law, one or two
trial steps per step instead of one per event). An event the fuzzer has no sampler
for gets arguments drawn from its declared domain.

Deterministic for a given seed: walk i draws from Random(seed * 1_000_003 + i), and a
walk paused at the end of a budget resumes where it was, so a seed's answer is its
first violating walk, whenever the budget lets it get that far.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from vllm_contract.model.interpreter import Disabled, Interpreter, StepResult, args_for, flat
from vllm_contract.model.sampler import WEIGHTS, Limits, propose, random_init
from vllm_contract.model.trace import Step, Trace, confirm
from vllm_contract.spec.catalog import INIT
from vllm_contract.spec.config import Config
from vllm_contract.spec.ops import INT_OPS
from vllm_contract.spec.properties import PROPERTIES, reported_by
from vllm_contract.spec.state import View

LENGTH = 24  # steps per walk: twice the matrix's search depth (model/check.py MAX_DEPTH)
SECONDS = 0.05  # default budget of probe(): what a probe in front of the BMC may cost
CAP = 1.0  # Race: the most CPU seconds the walks may have in one search (bench/peers.py measures both)


@dataclass
class Walk:
    """One random walk's outcome: the steps taken, and whether the goal was violated."""

    init: dict  # named init picks
    steps: list  # [(event, flat args)]
    violated: bool
    ended: str  # "violation" | "fatal: <asserts>" | "nothing enabled" | "length" | "time"


def walkable(prop: str) -> bool:
    """Whether a walk can see `prop` violated: a state or transition property is seen in a
    step; a progress property (bounded-progress) only by running the engine on from a
    state, which the BMC's goal does (model/progress.py), so no walk races its search."""
    return PROPERTIES[prop].kind in ("state", "transition")


def violated_by(cfg: Config, prop: str) -> Callable[[StepResult], bool]:
    """A cheap test of one property after one step (only that property is evaluated).

    A state property that no vLLM assert reports must be violated by a live engine: a
    step that fires an assert ends the trace and does not count, as in the BMC
    (Goal.may_end_engine). Raises ValueError for a property no walk can see (`walkable`)."""
    spec = PROPERTIES[prop]
    if not walkable(prop):
        raise ValueError(f"{prop} is a {spec.kind} property: no step shows it violated, so no walk looks for it")
    if spec.kind == "transition":
        return lambda res: res.checks.get(prop, True) is False
    may_end = bool(reported_by(prop))

    def test(res: StepResult) -> bool:
        if res.fired and not may_end:
            return False
        return not spec.state_holds(View(cfg, res.state), cfg, INT_OPS)

    return test


def _generic(it: Interpreter, cfg: Config, s, name: str, rng: random.Random, tries: int = 4):
    """Arguments drawn from an event's declared domain (for events the fuzzer cannot
    sample): bools fair, ints in [lo, hi] or [lo, lo + 3]."""
    event = it.event(name)
    for _ in range(tries):
        args: dict[tuple, Any] = {}
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


def stepping(
    it: Interpreter, cfg: Config, test: Callable[[StepResult], bool], rng: random.Random, length: int = LENGTH, lim=None
):
    """One walk from a random initial state, stopped at the first violation, as a
    generator: it yields after every step (so a caller can pause it between steps and
    resume it later without changing what it draws) and returns its Walk."""
    lim = lim or Limits()
    init = _init(cfg, rng, lim)
    s = it.initial(**init)
    steps: list = []
    names = list(it.events)
    for _ in range(length):
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
        yield
    return Walk(init, steps, False, "length")


def walk(
    it: Interpreter,
    cfg: Config,
    test: Callable[[StepResult], bool],
    rng: random.Random,
    length: int = LENGTH,
    deadline: float | None = None,
    lim=None,
) -> Walk:
    """One whole walk, or the part of it before the deadline (then ended "time")."""
    gen = stepping(it, cfg, test, rng, length, lim)
    taken = 0
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return done.value
        taken += 1
        if deadline is not None and time.perf_counter() > deadline:
            gen.close()
            return Walk({}, [None] * taken, False, "time")


class Walker:
    """The walks of one seed, in order, resumable: run(seconds) goes on where the last
    call stopped, in the middle of a walk if need be, so the k-th walk of a seed draws
    the same whatever the budgets were: a seed's first violating walk is its answer, and
    the budgets only decide whether and when it is reached."""

    def __init__(self, cfg: Config, prop: str, seed: int = 0, length: int = LENGTH, lim=None):
        self.cfg, self.prop, self.seed, self.length, self.lim = cfg, prop, seed, length, lim
        self.it = Interpreter(cfg)
        self.test = violated_by(cfg, prop)
        self.tried = self.taken = 0
        self._current: Iterator[Any] | None = None  # the walk under way (a generator: stepping)

    def run(self, seconds: float, max_walks: int | None = None) -> Walk | None:
        """Walk on for `seconds` (one step at least, so every slice makes progress)."""
        deadline = time.perf_counter() + seconds
        moved = False
        while not moved or time.perf_counter() < deadline:
            moved = True
            if self._current is None:
                if max_walks is not None and self.tried >= max_walks:
                    return None
                rng = random.Random(self.seed * 1_000_003 + self.tried)
                self._current = stepping(self.it, self.cfg, self.test, rng, self.length, self.lim)
                self.tried += 1
            try:
                next(self._current)
                self.taken += 1
            except StopIteration as done:
                self._current = None
                got = done.value
                if got.steps:
                    self.taken += 1
                if got.violated:
                    return got
        return None


def walks(
    cfg: Config, prop: str, seconds: float, seed: int = 0, length: int = LENGTH, max_walks: int | None = None, lim=None
):
    """Random walks until one violates `prop` or the budget runs out. Returns
    (Walk or None, walks tried, steps taken). `lim`: the sizes (model.sampler.Limits; the
    fuzzer's by default: small prompts and budgets alone never reach a KV-load failure,
    which needs a whole block of prompt, and win little elsewhere, measured)."""
    walker = Walker(cfg, prop, seed, length, lim)
    found = walker.run(seconds, max_walks)
    return found, walker.tried, walker.taken


def to_trace(cfg: Config, prop: str, found: Walk, it: Interpreter | None = None) -> Trace:
    """A walk's violation as a replayed Trace (what the BMC returns, not minimised)."""
    it = it or Interpreter(cfg)
    trace = Trace(
        config=cfg.name,
        init=args_for(INIT, cfg, found.init),
        steps=[Step(name, dict(args)) for name, args in found.steps],
        goal=prop,
        kind="violation",
        mechanisms=[],
    )
    return confirm(it, trace)


def probe(
    cfg: Config, prop: str, seconds: float = SECONDS, seed: int = 0, length: int = LENGTH, max_walks: int | None = None
) -> Trace | None:
    """A concrete violating trace of `prop` found by random walks within `seconds`
    (replayed, kind "violation"), or None: None proves nothing. The clock is read after
    every step, so it overruns by one step at most."""
    try:
        found, _, _ = walks(cfg, prop, seconds, seed, length, max_walks)
    except Disabled:  # init picks the configuration does not allow
        return None
    if found is None:
        return None
    return to_trace(cfg, prop, found)


class Race:
    """Random walks beside a BMC search, in a thread of their own:

        with Race(cfg, prop) as race:
            shortest = Bmc(enc).shortest(Goal.violation(prop), max_depth)
            race.stop()
        race.trace, race.wall_seconds  # the walks' counterexample and when (None: none found)

    The solver releases the GIL while it checks, so the walks run while it searches (on
    another core where there is one; sharing the interpreter with the encoding's Python
    otherwise), and a counterexample the walks find easily comes about when walks alone
    would give it, however long the BMC's next depth takes. Once the walks have found one,
    or have had `cap` seconds of CPU, or the search stops them, they end: the cap bounds
    what a search that finds nothing, or a long one, pays for the race. The walks touch
    no solver, so the BMC's queries and traces are the same with the race and without it.
    An error in a walk (not a disabled init pick) is raised again by __exit__."""

    def __init__(self, cfg: Config, prop: str, seed: int = 0, cap: float = CAP, slice_seconds: float = 0.005):
        self.cfg, self.prop, self.cap, self.slice = cfg, prop, cap, slice_seconds
        self.walker = Walker(cfg, prop, seed)
        self.walked = 0.0  # CPU seconds the walks have had
        self.trace: Trace | None = None
        self.wall_seconds: float | None = None  # from the start to the walks' counterexample
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"walks {cfg.name} {prop}", daemon=True)

    def __enter__(self) -> "Race":
        self.started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        self._thread.join()
        if self._error is not None and exc[0] is None:
            raise self._error

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        began = time.thread_time()
        try:
            while not self._stop.is_set() and self.walked < self.cap:
                found = self.walker.run(self.slice)
                self.walked = time.thread_time() - began
                if found is not None:
                    self.wall_seconds = time.perf_counter() - self.started
                    self.trace = to_trace(self.cfg, self.prop, found, self.walker.it)
                    return
        except Disabled:  # init picks the configuration does not allow: no walks
            return
        except BaseException as exc:  # handed to the search's thread by __exit__
            self._error = exc
