"""The project's counterexample search against its peers, side by side, in one run.

    .venv/bin/python bench/peers.py [--limit 20] [--jobs 1] [--only NAME ...] [--no-proved]

Why: a bounded model checker is worth its cost only where it beats the obvious
alternatives on the same model. For every `violated` expectation of spec/matrix.py this
measures, on the same configuration and property:

(a) the project: the BMC's first counterexample without minimising (it deepens one step at
    a time, so the first one is already of the shortest length), the shortest with its
    picks minimised and replayed (what `make prove` reports); and the two ways
    model/probe.py offers to get a first counterexample sooner: probe() for a fixed
    budget before the BMC, and Race, random walks interleaved with the BMC as its
    `extra` hook (the BMC still gives the shortest trace);
(b) a random walk on the interpreter: the fuzzer's sampler (targets.fuzz.propose, the
    fuzzer's sizes and walk length), restarted with fresh seeds until the property is
    violated: time to the first violation and its length, and the time per violation
    over the run (up to WALK_FINDS of them: the expected time, less luck);
(c) Hypothesis stateful testing: a RuleBasedStateMachine over the interpreter, one rule per
    event, whose arguments are the fuzzer's sampler answered by Hypothesis draws (so it
    generates what the walk does and can shrink it); the invariant is the property.
    Time to find, time to shrink, and the shrunk trace's length against the shortest;
(d) an explicit-state BFS on the interpreter at the counterexample's fixed parameters:
    the shortest trace's initial picks, and each unbounded integer pick bounded to the
    values that trace uses plus the three smallest. A finite search, shortest by
    construction; states explored and time to the violation.

For every configuration with `proved` expectations: how far the same BFS gets in the
same budget (states, complete depth), at small fixed parameters; the counters grow, so
it does not terminate where the proofs cover every depth.

Every peer has the same time limit per case (--limit); "not found" means that limit ran
out. All times and limits are CPU seconds of the process doing the work (see CLOCK); the
walk's time to a first violation varies far more than any of them (it is luck), hence
its time per violation over several.
A violated case whose configuration has a symbolic draft count (spec_tokens None) or an
abstract rest is not a concrete instance: the concrete peers skip it, with the reason
printed. A proved configuration of that kind (its proof covers every K, or any number
of requests) is run by BFS at a concrete instance, K = 1 and two requests, labelled.
Results: bench/results/peers.txt.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import z3  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from model.bmc import Bmc, Goal  # noqa: E402
from model.check import MAX_DEPTH  # noqa: E402
from model.encoding import Encoding  # noqa: E402
from model.interpreter import Disabled, Interpreter, nested  # noqa: E402
from model.probe import CAP as RACE_CAP  # noqa: E402
from model.probe import HEAD as RACE_HEAD  # noqa: E402
from model.probe import SECONDS as PROBE_S  # noqa: E402
from model.probe import Race, _generic, _init, probe, violated_by, walk  # noqa: E402
from model.trace import confirm  # noqa: E402
from spec.catalog import INIT  # noqa: E402
from spec.config import Config  # noqa: E402
from targets.fuzz import Limits, propose  # noqa: E402

WALK_LENGTH = 30  # the fuzzer's default trace length (targets/fuzz.py --length)
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
        from model.check import concrete_instances
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


# ------------------------------------------------------------------ (a) the project


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


# ------------------------------------------------------------------ (b) random walk


def random_walk(cfg: Config, prop: str, limit: float, seed: int = 1) -> dict:
    it, test, lim = Interpreter(cfg), violated_by(cfg, prop), Limits()
    started = CLOCK()
    deadline = started + limit
    tried = finds = steps = 0
    first = first_len = None
    while CLOCK() < deadline and finds < WALK_FINDS:
        got = walk(it, cfg, test, random.Random(seed * 1_000_003 + tried), WALK_LENGTH, None, lim)
        tried += 1
        steps += len(got.steps)
        if got.violated:
            finds += 1
            if first is None:
                first, first_len = CLOCK() - started, len(got.steps)
    elapsed = CLOCK() - started
    return {
        "first": first,
        "len": first_len,
        "finds": finds,
        "walks": tried,
        "steps": steps,
        "per_find": elapsed / finds if finds else None,
        "elapsed": elapsed,
    }


# ------------------------------------------------------------------ (c) Hypothesis


class OutOfTime(BaseException):
    """Raised inside a rule when the case's limit is spent. Not an Exception, so
    Hypothesis does not take it for a failure to shrink: it ends the run."""


class DrawRng:
    """The random.Random calls the fuzzer's sampler makes, answered by Hypothesis draws.
    Integers shrink to their lower bound; random() shrinks to 1.0, so the sampler's rare
    branches (a KV-load failure, a stop token, drop-stale) shrink to off."""

    def __init__(self, data):
        from hypothesis import strategies as st

        self.data, self.st = data, st

    def randint(self, a: int, b: int) -> int:
        return self.data.draw(self.st.integers(a, b))

    def randrange(self, n: int) -> int:
        return self.data.draw(self.st.integers(0, n - 1))

    def choice(self, seq):
        return seq[self.data.draw(self.st.integers(0, len(seq) - 1))]

    def random(self) -> float:
        return 1.0 - self.data.draw(self.st.integers(0, 999)) / 1000


@dataclass
class HypRecord:
    deadline: float
    started: float
    limit: float
    found_at: float | None = None
    failures: list = field(default_factory=list)  # the lengths of failing runs, in order
    steps: int = 0


def hypothesis_search(cfg: Config, prop: str, limit: float) -> dict:
    from hypothesis import HealthCheck, Phase, Verbosity, settings
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

    it, test, lim = Interpreter(cfg), violated_by(cfg, prop), Limits()
    started = CLOCK()
    rec = HypRecord(deadline=started + limit, started=started, limit=limit)

    def do(self, name: str, data) -> None:
        if self.dead:
            return
        if CLOCK() > rec.deadline:
            raise OutOfTime()
        rng = DrawRng(data)
        try:
            got = propose(it, cfg, self.state, name, rng, lim)
        except ValueError:  # an event the fuzzer has no sampler for
            got = _generic(it, cfg, self.state, name, rng)
        if got is None:
            return
        args, res = got
        self.trace.append(name)
        rec.steps += 1
        if test(res):
            if rec.found_at is None:
                rec.found_at = CLOCK()
                rec.deadline = rec.found_at + rec.limit  # shrinking gets a limit of its own
            rec.failures.append(len(self.trace))
            raise AssertionError(f"{prop} violated after {len(self.trace)} steps")
        if res.fired:
            self.dead = True  # the engine is dead: the rest of this run does nothing
        self.state = res.state

    def setup(self, data) -> None:
        self.state = it.initial(**_init(cfg, DrawRng(data), lim))

    def make(name: str):
        def event(self, data):
            do(self, name, data)

        event.__name__ = f"event_{name}"
        return rule(data=st.data())(event)

    def __init__(self):
        RuleBasedStateMachine.__init__(self)
        self.state, self.trace, self.dead = None, [], False

    namespace = {"__init__": __init__, "setup": initialize(data=st.data())(setup)}
    namespace.update({f"event_{name}": make(name) for name in it.events})
    machine = type("Contract", (RuleBasedStateMachine,), namespace)
    opts = settings(
        max_examples=10**7,
        stateful_step_count=HYP_STEPS,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
        print_blob=False,
        verbosity=Verbosity.quiet,
    )
    outcome = "passed"
    try:
        run_state_machine_as_test(machine, settings=opts)
    except OutOfTime:
        outcome = "limit"
    except AssertionError:
        outcome = "found"
    except Exception as exc:  # a Hypothesis error (e.g. Flaky, Unsatisfiable): say which
        # Hypothesis records the OutOfTime that ended a run and may then complain that the
        # run drew less than an earlier one (FlakyStrategyDefinition): that is the limit too
        cause, timed_out = exc, False
        while cause is not None and not timed_out:
            timed_out = isinstance(cause, OutOfTime)
            cause = cause.__context__ or cause.__cause__
        outcome = "limit" if timed_out or CLOCK() > rec.deadline else f"error: {type(exc).__name__}"
        if os.environ.get("PEERS_DEBUG"):
            import traceback

            traceback.print_exc()
    ended = CLOCK()
    found = rec.found_at is not None
    return {
        "found": found,
        "outcome": outcome,
        "find": rec.found_at - started if found else None,
        "shrink": (ended - rec.found_at) if found else None,
        "shrink_cut": found and outcome == "limit",
        # the final run Hypothesis reports is its shrunk example; if shrinking was cut, the shortest seen
        "len": (rec.failures[-1] if outcome == "found" else min(rec.failures)) if found else None,
        "first_len": rec.failures[0] if found else None,
        "steps": rec.steps,
    }


# ------------------------------------------------------------------ (d) explicit-state BFS


def pick_values(cfg: Config, trace=None, extra: dict | None = None) -> dict:
    """Candidate values of each event argument (by name): a bounded integer takes its
    whole domain, a bool both values, an unbounded integer its SMALL smallest values
    plus those the trace uses (and `extra`)."""
    values: dict = {}
    if trace is not None:
        for step in trace.steps:
            for key, value in step.args.items():
                if not isinstance(value, bool):
                    values.setdefault(key[0], set()).add(value)
    for name, more in (extra or {}).items():
        values.setdefault(name, set()).update(more)
    return values


def domain(arg, values: dict) -> list:
    if arg.sort is bool:
        return [False, True]
    lo = arg.lo if arg.lo is not None else 0
    if arg.hi is not None:
        return list(range(lo, arg.hi + 1))
    return sorted({lo + i for i in range(SMALL)} | {v for v in values.get(arg.name, ()) if v >= lo})


def successors(it: Interpreter, cfg: Config, s: dict, values: dict):
    """Every (event, args, step result) from s with arguments from the candidate values.
    Picks that only matter for a sampled request (accepted drafts, over-delivery) or an
    appended token (a stop) are enumerated after a trial step with them at 0, which is
    always allowed when the rest is: the guard pins them to 0 where they do not apply, so
    enumerating them blindly would only be rejected."""
    for name, event in it.events.items():
        arg_keys = event.arg_keys(cfg)
        late_names = {"accepted", "extra"} if name == "schedule" else {"stop"} if name == "deliver" else set()
        early = [(a, k) for a, k in arg_keys if a.name not in late_names]
        late = [(a, k) for a, k in arg_keys if a.name in late_names]
        for combo in itertools.product(*[domain(a, values) for a, _ in early]):
            base = {k: v for (_, k), v in zip(early, combo)}
            base.update({k: a.fallback() for a, k in late})
            try:
                trial = it.step(s, name, base)
            except Disabled:
                continue
            yield name, base, trial
            if not late:
                continue
            options = []
            for a, k in late:
                r = k[1]
                if name == "schedule":
                    pos = s[("queue_len",)]
                    if not trial.state[("q_sampled", pos, r)]:
                        options.append([0])
                    elif a.name == "accepted":
                        options.append(list(range(0, trial.state[("q_spec", pos, r)] + 1)))
                    else:
                        options.append(domain(a, values))
                else:  # a stop lands on an appended token, or there is none
                    appended = trial.state[("num_tokens", r)] - s[("num_tokens", r)]
                    options.append([0] + [v for v in domain(a, values) if 1 <= v <= appended])
            for lcombo in itertools.product(*options):
                if not any(lcombo):
                    continue  # the trial itself
                args = dict(base)
                args.update({k: v for (_, k), v in zip(late, lcombo)})
                try:
                    yield name, args, it.step(s, name, args)
                except Disabled:
                    continue


def bfs(cfg: Config, prop: str | None, init: dict, values: dict, limit: float) -> dict:
    """Breadth-first over the states reachable with these picks; stops at the first
    violation of prop (None: never), when the states run out, or at the limit."""
    it = Interpreter(cfg)
    test = violated_by(cfg, prop) if prop else (lambda res: False)
    started = CLOCK()
    s0 = it.initial(**init)
    key = lambda s: tuple(s[k] for k in it.keys)  # noqa: E731
    seen = {key(s0)}
    frontier, depth, edges = [s0], 0, 0
    while frontier:
        layer = []
        for s in frontier:
            if CLOCK() - started > limit:
                return {
                    "found": False,
                    "status": "limit",
                    "depth": depth,
                    "states": len(seen),
                    "edges": edges,
                    "seconds": CLOCK() - started,
                    "frontier": len(frontier),
                }
            for _name, _args, res in successors(it, cfg, s, values):
                edges += 1
                if test(res):
                    return {
                        "found": True,
                        "status": "found",
                        "depth": depth + 1,
                        "states": len(seen),
                        "edges": edges,
                        "seconds": CLOCK() - started,
                    }
                if res.fired:
                    continue
                k = key(res.state)
                if k not in seen:
                    seen.add(k)
                    layer.append(res.state)
        depth += 1
        frontier = layer
    return {
        "found": False,
        "status": "exhausted",
        "depth": depth,
        "states": len(seen),
        "edges": edges,
        "seconds": CLOCK() - started,
    }


def proved_init(cfg: Config) -> tuple[dict, dict]:
    """Small fixed parameters for a proved configuration: prompts of 3 tokens (one more
    than a KV block when KV-load failures are on, so one can happen), resumable
    sessions, and budgets 1..3 plus a whole prompt."""
    length = cfg.block_size + 1 if cfg.has("kvfail") else 3
    lens = list(cfg.prompt_lens) if cfg.prompt_lens is not None else [length] * cfg.requests
    init: dict = {}
    for arg, _key in INIT.arg_keys(cfg):
        if arg.name == "prompt_len":
            init.setdefault("prompt_len", lens)
        elif arg.sort is bool:
            init.setdefault(arg.name, []).append(True)
        else:
            init.setdefault(arg.name, []).append(arg.lo or 0)
    return init, {"budget": set(lens)}


# ------------------------------------------------------------------ one case


def run_case(job) -> dict:
    kind, cfg, prop, limit = job
    out = {"kind": kind, "config": cfg.name, "property": prop, "skip": concrete(cfg)}
    if kind == "proved":
        inst, out["instance"] = instance(cfg)
        out["skip"] = None if inst is not None else out["instance"]
        if inst is not None:
            init, extra = proved_init(inst)
            out["bfs"] = bfs(inst, None, init, pick_values(inst, None, extra), limit)
        return out
    out["project"] = project(cfg, prop)
    if out["skip"] is not None:
        return out
    out["walk"] = random_walk(cfg, prop, limit)
    out["hyp"] = hypothesis_search(cfg, prop, limit)
    trace = out["project"]["trace"]
    if trace is not None:
        out["bfs"] = bfs(cfg, prop, nested(trace.init), pick_values(cfg, trace), limit)
    out["project"]["trace"] = None  # not needed past here (and not picklable cheaply)
    return out


def jobs(only: list[str] | None, limit: float, proved: bool) -> list:
    from spec.matrix import by_name

    out = []
    for cfg in by_name(only):
        for prop, verdict in cfg.expect.items():
            if verdict == "violated":
                out.append(("violated", cfg, prop, limit))
        if proved and any(v == "proved" for v in cfg.expect.values()):
            out.append(("proved", cfg, None, limit))
    return out


# ------------------------------------------------------------------ report


def sec(x) -> str:
    return "-" if x is None else f"{x:.3f}" if x < 10 else f"{x:.1f}"


def ratio(a, b) -> str:
    if a is None or b is None:
        return "-"
    return f"{a / b:.2f}x" if a / b < 10 else f"{a / b:.0f}x"


def report(results: list, limit: float, console: Console) -> None:
    violated = [r for r in results if r["kind"] == "violated"]
    table = Table(
        title=f"Violated cases: seconds to the first violation and to a shortest trace "
        f"(limit {limit:g} s per peer per case)",
        show_lines=False,
    )
    cols = [
        "case",
        "d",
        "BMC 1st",
        "BMC min",
        "probe>BMC",
        "race",
        "walk 1st (len)",
        "walk s/viol",
        "BMC/walk",
        "probe>BMC/walk",
        "race/walk",
        "Hyp find",
        "shrink",
        "Hyp len",
        "BFS s",
        "BFS states",
        "BFS d",
    ]
    for name in cols:
        table.add_column(name, justify="left" if name == "case" else "right", no_wrap=True)

    def against(mine, ref):
        # below 1: the project's first counterexample came before the walk's (expected) one
        return ratio(mine, ref) if ref else "<" + ratio(mine, limit)

    for r in violated:
        p = r["project"]
        case = f"{r['config']} {r['property']}"
        if r["skip"]:
            table.add_row(case, str(p["depth"]), sec(p["plain"]), sec(p["shortest"]), *["skip"] * (len(cols) - 4))
            continue
        w, h, b = r["walk"], r["hyp"], r.get("bfs")
        walk_first = f"{sec(w['first'])} ({w['len']})" if w["first"] is not None else "not found"
        per = w["per_find"]
        if h["found"]:
            hyp_len = str(h["len"]) + (" >" if p["depth"] is not None and h["len"] > p["depth"] else "")
            hyp = (sec(h["find"]), sec(h["shrink"]) + ("+" if h["shrink_cut"] else ""), hyp_len)
        else:
            hyp = ("not found" if h["outcome"] == "limit" else h["outcome"], "-", "-")
        if b is None:
            bfs_cells = ("-", "-", "-")
        else:
            bfs_cells = (
                sec(b["seconds"]) if b["found"] else f">{limit:g}" if b["status"] == "limit" else "none",
                f"{b['states']:,}",
                str(b["depth"]) + ("" if b["found"] else "+"),
            )
        table.add_row(
            case,
            str(p["depth"]),
            sec(p["plain"]),
            sec(p["shortest"]),
            f"{sec(p['with_probe'])} ({p['probe_hits']}/{PROBE_SEEDS})",
            f"{sec(p['race'])} ({p['race_hits']}/{RACE_SEEDS})",
            walk_first,
            sec(per) if per is not None else f">{limit:g}",
            against(p["plain"], per),
            against(p["with_probe"], per),
            against(p["race"], per),
            *hyp,
            *bfs_cells,
        )
    console.print(table)
    console.print(
        f"d: the shortest counterexample's depth. BMC 1st (best of {BMC_REPEAT}): encoding + BMC to its first "
        "counterexample (already of the shortest length), not minimised; BMC min: the same with its picks "
        "minimised and replayed (make prove's trace). "
        f"probe>BMC: model/probe.py's probe() for {PROBE_S:g} s, then the BMC if it found nothing: mean over "
        f"{PROBE_SEEDS} seeds (how many found it). race: the walks interleaved with the BMC (model/probe.py "
        f"Race as Bmc.shortest's extra hook: a {RACE_HEAD:g} s head start, then equal time, walks capped at "
        f"{RACE_CAP:g} s): time to the first counterexample "
        f"of either, mean over {RACE_SEEDS} seeds (how many times the walks came first). "
        f"walk: the fuzzer's sampler, fresh seeds, length {WALK_LENGTH}: the first violation (its length), and "
        f"the seconds per violation over up to {WALK_FINDS} of them, the walk's expected time to a first one. "
        "X/walk: that time against the walk's seconds per violation (below 1: the project first; '<': the "
        "walk found none in the limit). "
        "Hyp: Hypothesis stateful (the same sampler, drawn by Hypothesis), seconds to find and to shrink "
        "('+': shrinking cut at the limit), and the shrunk length ('>': longer than the shortest). "
        f"BFS: explicit-state breadth-first search at the shortest trace's prompt lengths and picks (plus the "
        f"{SMALL} smallest of each unbounded pick): seconds, distinct states, depth of the violation "
        "('+': none found to that depth)."
    )
    proved = [r for r in results if r["kind"] == "proved"]
    if proved:
        ptable = Table(title=f"Proved configurations: how far BFS gets in {limit:g} s (small fixed parameters)")
        for name in ("configuration", "instance run", "states", "complete depth", "frontier", "status"):
            ptable.add_column(name, justify="left" if name == "configuration" else "right")
        for r in proved:
            if r["skip"]:
                ptable.add_row(r["config"], "-", "-", "-", "-", "skip: " + r["skip"])
                continue
            b = r["bfs"]
            ptable.add_row(
                r["config"],
                r["instance"] or "as is",
                f"{b['states']:,}",
                str(b["depth"]),
                f"{b.get('frontier', 0):,}",
                b["status"],
            )
        console.print(ptable)
    console.print(summary(results, limit))


def summary(results: list, limit: float) -> str:
    """The paragraph the README quotes, computed from this run."""
    rows = [r for r in results if r["kind"] == "violated" and not r["skip"]]
    if not rows:
        return "no concrete violated case ran"
    n = len(rows)
    walk_found = [r for r in rows if r["walk"]["per_find"] is not None]
    walk_first = [r for r in walk_found if r["walk"]["per_find"] < r["project"]["plain"]]
    never = [r for r in rows if r["walk"]["per_find"] is None]
    ratios = [r["project"]["with_probe"] / r["walk"]["per_find"] for r in walk_found]
    race_ratios = [r["project"]["race"] / r["walk"]["per_find"] for r in walk_found]
    plain_ratios = [r["project"]["plain"] / r["walk"]["per_find"] for r in walk_found]
    hyp_found = [r for r in rows if r["hyp"]["found"]]
    hyp_longer = [r for r in hyp_found if r["project"]["depth"] is not None and r["hyp"]["len"] > r["project"]["depth"]]
    bfs_rows = [r for r in rows if r.get("bfs")]
    bfs_found = [r for r in bfs_rows if r["bfs"]["found"]]
    bfs_same = [r for r in bfs_found if r["bfs"]["depth"] == r["project"]["depth"]]
    bmc_plain = [r["project"]["plain"] for r in rows]
    bmc_min = [r["project"]["shortest"] for r in rows]
    proved = [r for r in results if r["kind"] == "proved" and not r["skip"]]
    walk_behind = [r["project"]["plain"] / r["walk"]["per_find"] for r in walk_first]
    bmc_ahead = [r["walk"]["per_find"] / r["project"]["plain"] for r in walk_found if r not in walk_first]
    never_bmc = [r["project"]["plain"] for r in never]
    text = (
        f"On the {n} violated cases of the matrix (CPU seconds), the BMC reaches its first counterexample, "
        f"which is already a shortest one, in {statistics.median(bmc_plain):.2f} s median "
        f"({max(bmc_plain):.2f} s max), and the minimised, replayed trace in {statistics.median(bmc_min):.2f} s "
        f"median ({max(bmc_min):.2f} s max). A random walk on the interpreter (the fuzzer's sampler) needs less "
        f"time per violation than the BMC needs for its first in {len(walk_first)} of {n} cases"
        + (f" (the BMC up to {max(walk_behind):.1f}x behind)" if walk_behind else "")
        + (f"; where the BMC is first it is up to {max(bmc_ahead):.0f}x ahead" if bmc_ahead else "")
        + (
            f"; the walk finds nothing in {limit:g} s in {len(never)} cases "
            f"({', '.join(sorted({r['config'] + ' ' + r['property'] for r in never}))}), which the BMC answers in "
            f"{max(never_bmc):.2f} s at most"
            if never
            else ""
        )
        + f". Against the walk's time per violation, the first counterexample is within 2x in "
        f"{sum(x <= 2 for x in plain_ratios)} of {len(plain_ratios)} cases with the BMC alone, in "
        f"{sum(x <= 2 for x in ratios)} with a {PROBE_S:g} s probe before it (worst {max(ratios, default=0):.1f}x), "
        f"and in {sum(x <= 2 for x in race_ratios)} with the walks interleaved with it, the race "
        f"(worst {max(race_ratios, default=0):.1f}x). "
        f"Hypothesis (stateful, the same sampler) finds {len(hyp_found)} of {n} within {limit:g} s; after "
        f"shrinking, {len(hyp_longer)} of its traces are still longer than the shortest. An explicit-state BFS "
        f"at the counterexample's own prompt lengths and picks finds {len(bfs_found)} of {len(bfs_rows)} "
        f"({len(bfs_same)} at the BMC's depth, as it must), but only because those parameters are given to it"
    )
    if proved:
        depths = [r["bfs"]["depth"] for r in proved]
        states = [r["bfs"]["states"] for r in proved]
        exhausted = [r for r in proved if r["bfs"]["status"] == "exhausted"]
        text += (
            f"; on the {len(proved)} proved configurations, BFS at small fixed parameters explores "
            f"{min(states):,}-{max(states):,} states and completes depth {min(depths)}-{max(depths)} in "
            f"{limit:g} s"
            + (
                f" ({len(exhausted)} exhausted: a finite space at those parameters, which is "
                "still no proof for other sizes)"
                if exhausted
                else ""
            )
            + ", where k-induction proves every depth and every prompt length."
        )
    else:
        text += "."
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="bench/peers.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--limit", type=float, default=20.0, help="seconds per peer per case (default 20)")
    ap.add_argument("--jobs", type=int, default=1, help="cases run in parallel (default 1: cleanest timings)")
    ap.add_argument("--only", action="append", help="configuration or scenario (repeatable)")
    ap.add_argument("--no-proved", action="store_true", help="skip the BFS runs on proved configurations")
    ap.add_argument("--out", default=str(RESULTS), help=f"results file (default {RESULTS.relative_to(ROOT)})")
    ns = ap.parse_args(argv)
    todo = jobs(ns.only, ns.limit, not ns.no_proved)
    for kind, cfg, prop, _ in todo:
        why = concrete(cfg)
        if why and kind == "violated":
            print(f"skip the concrete peers for {cfg.name} {prop}: {why}", file=sys.stderr, flush=True)
        elif why:
            inst, label = instance(cfg)
            print(
                f"{cfg.name} is {why.split(':')[0]}: BFS runs "
                + (f"its concrete instance {label}" if inst else f"nothing: {label}"),
                file=sys.stderr,
                flush=True,
            )
    Bmc(Encoding(todo[0][1])) if todo else None  # warm z3 up once, so the first case is not charged for it
    results: list = []
    load_before = f"{os.getloadavg()[0]:.1f}"
    started = time.perf_counter()

    def progress(r: dict) -> None:
        results.append(r)
        bits = []
        if "project" in r:
            bits.append(f"bmc {r['project']['plain']:.2f}s d={r['project']['depth']}")
        if "walk" in r:
            bits.append(f"walk {sec(r['walk']['per_find'])}s/viol")
        if "hyp" in r:
            bits.append(f"hyp {sec(r['hyp']['find'])}+{sec(r['hyp']['shrink'])}s len={r['hyp']['len']}")
        if r.get("bfs"):
            bits.append(f"bfs {r['bfs']['status']} d={r['bfs']['depth']} {r['bfs']['states']:,} states")
        print(
            f"[{len(results)}/{len(todo)} {time.perf_counter() - started:.0f}s] {r['config']} "
            f"{r['property'] or '(proved)'}: " + ", ".join(bits or ["skipped"]),
            file=sys.stderr,
            flush=True,
        )

    if ns.jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(ns.jobs) as pool:
            for r in pool.imap_unordered(run_case, todo):
                progress(r)
    else:
        for job in todo:
            progress(run_case(job))
    order = {(k, c.name, p): i for i, (k, c, p, _) in enumerate(todo)}
    results.sort(key=lambda r: order[(r["kind"], r["config"], r["property"])])
    console = Console(width=260, highlight=False, record=True)
    console.print(
        f"z3 {z3.get_version_string()}, {os.cpu_count()} cores, {ns.jobs} job(s), "
        f"whole run {time.perf_counter() - started:.0f} s, load average {load_before} before, "
        f"{os.getloadavg()[0]:.1f} after (above the job count: other work shared the cores)"
    )
    report(results, ns.limit, console)
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(console.export_text())
    print(f"written {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
