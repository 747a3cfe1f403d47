"""Differential fuzzing: random traces from the reference interpreter, replayed on vLLM.

A trace is built by sampling, at each step, an enabled event and random arguments
(checked with Interpreter.enabled / a trial step), so every trace is one the model
allows. It ends where a fatal property fails in the model (the engine would be
dead), when nothing is enabled, or at the length limit. Each trace is replayed on the
vLLM target (targets.harness.replay); a divergence is minimised by deleting steps
and shrinking numbers while the same kind of divergence remains.

Known divergences (analysed, reported to the spec's owner) can be masked so the
fuzzer looks past them: see KNOWN (--known NAME, or --known all). A masked
difference is ignored by the comparison and the trace goes on.

    .venv/bin/python -m targets.fuzz --cases 200 --length 30 --known all [--engine] [--config NAME ...]
                                      [--vllm 0.32.0|0.33.0|PATH] [--runner model|real]

The presets are played under the profile of the vLLM tree loaded (--vllm, else $VLLM,
else 0.32.0), so each release is fuzzed against its own model.

--runner real replays on vLLM's scheduler with vLLM's own V1/V2 model runner
(targets/real_runner.py): what each step returns is the runner's decision, compared
with the model's. Two things the real runner cannot take on are kept out of the traces,
by name: an `accepted` pick for drafts the runner makes placeholders is drawn as 0
(real_runner.drafts_are_placeholders), and a trace ends at a state beyond the runner's
contract (real_runner.beyond_runner_contract: prompt-beyond-tokens); the summary counts
both. It also tallies what the runner fed (positions, placeholder and wrong input ids).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from model.interpreter import Disabled, Interpreter, args_for, nested
from spec.config import Config
from spec.vocabulary import Status
from targets.harness import Divergence, replay
from targets.protocol import TargetUnavailable
from targets.vllm_target import CaseEnded

# ------------------------------------------------------------------ configurations

F = frozenset
PRESETS: dict[str, Config] = {
    c.name: c
    for c in (
        Config("v1-core", runner="v1"),
        Config("v2-core", runner="v2"),
        Config("v1-thr", runner="v1", long_prefill_threshold=5, block_size=4),
        Config("v1-preempt", runner="v1", events=F({"preempt", "preempt-drop"})),
        Config("v2-preempt", runner="v2", events=F({"preempt", "preempt-drop"})),
        Config("v1-reset", runner="v1", events=F({"reset"})),
        Config("v2-reset", runner="v2", events=F({"reset"})),
        Config("v1-stream", runner="v1", events=F({"stream"})),
        Config("v2-stream", runner="v2", events=F({"stream"})),
        Config("v1-abort", runner="v1", events=F({"abort", "preempt"})),
        Config("v1-kvfail", runner="v1", events=F({"kvfail"}), block_size=4),
        Config("v2-kvfail", runner="v2", events=F({"kvfail"}), block_size=4),
        Config("v1-spec", runner="v1", spec_tokens=1),
        Config("v2-spec", runner="v2", spec_tokens=1),
        Config("v1-spec2-preempt", runner="v1", spec_tokens=2, events=F({"preempt", "reset"})),
        Config("v2-spec-stream", runner="v2", spec_tokens=1, events=F({"stream", "abort"})),
        Config(
            "v1-all",
            runner="v1",
            spec_tokens=1,
            block_size=4,
            events=F({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
        ),
        Config(
            "v2-all",
            runner="v2",
            spec_tokens=1,
            block_size=4,
            events=F({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
        ),
        Config("v2-pp2", runner="v2", pp=2, events=F({"preempt", "abort"})),
        Config("v2-stale-slot", runner="v2", faults=F({"stale-slot-read"})),
        Config("v2-stale-slot-clamp", runner="v2", faults=F({"stale-slot-read"}), clamp=True),
        Config("v1-over-clamp", runner="v1", faults=F({"over-delivery"}), clamp=True),
        Config("v1-3req", runner="v1", requests=3, events=F({"preempt", "stream"})),
        Config("v1-pad-thr", runner="v1", spec_tokens=2, long_prefill_threshold=2, events=F({"preempt", "stream"})),
        Config(
            "v1-4req-all",
            runner="v1",
            requests=4,
            spec_tokens=2,
            long_prefill_threshold=6,
            block_size=4,
            events=F({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
        ),
        Config(
            "v2-pp2-all",
            runner="v2",
            pp=2,
            spec_tokens=1,
            block_size=4,
            events=F({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
        ),
        Config("v2-pp3-stream", runner="v2", pp=3, requests=3, events=F({"stream", "preempt"})),
        Config(
            "v2live-all",
            runner="v2-live",
            spec_tokens=3,
            block_size=4,
            long_prefill_threshold=5,
            events=F({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
        ),
        Config(
            "v2-all-clamp",
            runner="v2",
            spec_tokens=1,
            block_size=4,
            clamp=True,
            faults=F({"stale-slot-read", "over-delivery"}),
            events=F({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
        ),
        Config(
            "v1-all-over-clamp",
            runner="v1",
            spec_tokens=2,
            block_size=4,
            clamp=True,
            faults=F({"over-delivery"}),
            events=F({"preempt", "reset", "stream", "kvfail"}),
        ),
    )
}

# ------------------------------------------------------------------ known divergences


@dataclass(frozen=True)
class Known:
    name: str
    doc: str
    matches: Callable[[tuple, Any, Any, Mapping], bool]


def _finished(state: Mapping, key: tuple) -> bool:
    return len(key) == 2 and state.get(("status", key[1])) == Status.FINISHED


KNOWN: dict[str, Known] = {
    k.name: k
    for k in (
        Known(
            "reset-held-blocks",
            "reset_prefix_cache(reset_running_requests=True) preempts every running "
            "request, then raises RuntimeError (sched:2868-2875) because a streaming "
            "session outside `running` still holds KV blocks (block_pool.py:837-844); "
            "EngineCore reports a failed utility call and runs on. The model has no "
            "failure outcome for reset",
            lambda key, a, b, s: key == ("error",) and "Failed to reset KV cache" in str(b),
        ),
        Known(
            "runner-negative-position",
            "a request scheduled from position -1 (finding 9: a KV-load recompute under "
            "two rejected drafts) makes vLLM's V1 runner index its token table at a negative "
            "position: IndexError in _prepare_inputs (gpu_model_runner.py:1975 on 0.32.0), "
            "which ends the engine. The model states the cause (computed-nonnegative), not "
            "the runner's exception; at that step nothing else is compared (the runner "
            "did not run it), and the case ends there",
            lambda key, a, b, s: (
                _scheduled_below_zero(s) and ("IndexError" in str(b) if key == ("error",) else RUNNER == "real")
            ),
        ),
    )
}


def _scheduled_below_zero(state: Mapping) -> bool:
    """The newest step scheduled some request from a negative position: its computed
    count after the step, less what the step scheduled, is below 0."""
    newest = state.get(("queue_len",), 0) - 1
    requests = sum(1 for key in state if key[0] == "num_computed_tokens")
    return newest >= 0 and any(
        state[("q_scheduled", newest, r)] > 0
        and state[("num_computed_tokens", r)] - state[("q_scheduled", newest, r)] < 0
        for r in range(requests)
    )


def ignore_known(names) -> Callable | None:
    chosen = [KNOWN[n] for n in names]
    if not chosen:
        return None
    return lambda key, a, b, s: any(k.matches(key, a, b, s) for k in chosen)


# ------------------------------------------------------------------ trace generation


@dataclass
class Limits:
    max_prompt: int = 40
    max_budget: int = 48
    max_update: int = 12


def _running_last(cfg: Config, s: Mapping) -> int | None:
    running = [r for r in range(cfg.requests) if s[("status", r)] == Status.RUNNING]
    if not running:
        return None
    return max(running, key=lambda r: s[("running_rank", r)])


def _try(it: Interpreter, s, name: str, args: dict):
    try:
        return it.step(s, name, args)
    except Disabled:
        return None


def propose(
    it: Interpreter, cfg: Config, s: Mapping, name: str, rng: random.Random, lim: Limits
) -> tuple[dict, Any] | None:
    """Random enabled (flat) arguments for an event in state s, with the step result."""
    ev = it.event(name)
    R = range(cfg.requests)
    if name == "schedule":
        hi = cfg.max_budget or lim.max_budget
        named = {"budget": rng.choice([rng.randint(1, hi), rng.randint(1, 8)])}
        faults = cfg.faults
        if "stale-slot-read" in faults:
            trial = _try(it, s, name, args_for(ev, cfg, named))
            if trial is None:
                return None
            pos = trial.state[("queue_len",)] - 1
            named["stale_read"] = [bool(trial.state[("q_admitted", pos, r)]) and rng.random() < 0.5 for r in R]
        trial = _try(it, s, name, args_for(ev, cfg, named))
        if trial is None:
            return None
        pos = trial.state[("queue_len",)] - 1
        if cfg.drafts:
            named["accepted"] = [
                rng.randint(0, trial.state[("q_spec", pos, r)]) if trial.state[("q_sampled", pos, r)] else 0 for r in R
            ]
            if RUNNER == "real":  # drafts the real runner makes placeholders are never accepted
                from targets.real_runner import drafts_are_placeholders

                for r, placeholder in enumerate(drafts_are_placeholders(cfg, s, trial)):
                    if placeholder and named["accepted"][r]:
                        named["accepted"][r] = 0
                        PINNED["accepted>0 on placeholder drafts, drawn as 0"] += 1
        if "over-delivery" in faults:
            named["extra"] = [(rng.choice([0, 0, 1, 2]) if trial.state[("q_sampled", pos, r)] else 0) for r in R]
        args = args_for(ev, cfg, named)
        res = _try(it, s, name, args)
        return (args, res) if res is not None else None
    if name == "deliver":
        named: dict[str, Any] = {}
        if cfg.has("kvfail") and rng.random() < 0.3:
            cands = []
            for r in R:
                n = s[("q_scheduled", 0, r)]
                if s[("status", r)] == Status.RUNNING and s[("q_admitted", 0, r)] and n:
                    room = min(s[("num_computed_tokens", r)] - n, s[("num_prompt_tokens", r)])
                    blocks = -(-room // cfg.block_size) if room > 0 else 0
                    if blocks:
                        cands.append((r, blocks))
            if cands:
                r, blocks = rng.choice(cands)
                named["kv_fail_req"] = r
                named["kv_fail_block"] = rng.randrange(blocks)
        trial = _try(it, s, name, args_for(ev, cfg, named))
        if trial is None:
            return None
        stops = []
        for r in R:
            appended = trial.state[("num_tokens", r)] - s[("num_tokens", r)]
            stops.append(rng.randint(1, appended) if appended > 0 and rng.random() < 0.2 else 0)
        named["stop"] = stops
        args = args_for(ev, cfg, named)
        res = _try(it, s, name, args)
        return (args, res) if res is not None else None
    if name == "preempt":
        victim = _running_last(cfg, s)
        if victim is None:
            return None
        named = {"req": victim}
        if cfg.has("preempt") and cfg.has("preempt-drop"):
            named["drop"] = rng.random() < 0.5
    elif name == "reset_prefix_cache":
        named = {}
    elif name == "stream_update":
        cands = [
            r for r in R if s[("resumable", r)] and s[("status", r)] != Status.FINISHED and not s[("pending_update", r)]
        ]
        if not cands:
            return None
        named = {"req": rng.choice(cands), "new_tokens": rng.randint(1, lim.max_update)}
    elif name == "abort":
        cands = [r for r in R if s[("status", r)] != Status.FINISHED]
        if not cands:
            return None
        named = {"req": rng.choice(cands)}
    else:
        raise ValueError(f"no argument sampler for event {name!r}")
    args = args_for(ev, cfg, named)
    res = _try(it, s, name, args)
    return (args, res) if res is not None else None


WEIGHTS = {"schedule": 4, "deliver": 4, "preempt": 1.5, "reset_prefix_cache": 1, "stream_update": 2, "abort": 0.15}


def random_init(cfg: Config, rng: random.Random, lim: Limits) -> dict:
    if cfg.prompt_lens is not None:
        lens = list(cfg.prompt_lens)
    else:
        lens = [rng.choice([rng.randint(1, lim.max_prompt), rng.randint(1, 6)]) for _ in range(cfg.requests)]
    init: dict[str, Any] = {"prompt_len": lens}
    if cfg.has("stream"):
        init["resumable"] = [rng.random() < 0.7 for _ in range(cfg.requests)]
    if cfg.k_symbolic:
        top = cfg.spec_tokens_max if cfg.spec_tokens_max is not None else 3
        init["spec_tokens"] = rng.randint(0, top)
    return init


def random_trace(cfg: Config, rng: random.Random, length: int, lim: Limits | None = None):
    """(init, [(event, flat args)], ended_by) from the model's enabled events."""
    lim = lim or Limits()
    it = Interpreter(cfg)
    init = random_init(cfg, rng, lim)
    s = it.initial(**init)
    steps = []
    names = list(it.events)
    for _ in range(length):
        # every enabled event with random arguments, then a weighted choice
        options = []
        for name in names:
            got = propose(it, cfg, s, name, rng, lim)
            if got is not None:
                options.append((name, got))
        if not options:
            return init, steps, "nothing enabled"
        weights = [WEIGHTS.get(name, 1) for name, _ in options]
        name, picked = rng.choices(options, weights)[0]
        steps.append((name, picked[0]))
        res = picked[1]
        s = res.state
        if res.fired:
            return init, steps, f"fatal: {','.join(res.fired)}"
        if RUNNER == "real":
            from targets.real_runner import beyond_runner_contract

            beyond = beyond_runner_contract(cfg, s)
            if beyond:
                return init, steps, f"excluded: {beyond}"
    return init, steps, "length"


# ------------------------------------------------------------------ replay and shrink


@dataclass
class Found:
    config: str
    signature: tuple
    init: dict
    steps: list
    message: str
    seed: int


@dataclass
class Report:
    config: str
    cases: int = 0
    steps: int = 0
    fired: Counter = field(default_factory=Counter)
    divergences: list[Found] = field(default_factory=list)
    signatures: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    runner: Counter = field(default_factory=Counter)  # --runner real: what the runner fed (runner_tally)
    excluded: Counter = field(default_factory=Counter)  # --runner real: traces ended early, picks redrawn


def signature(exc) -> tuple:
    """What kind of divergence: an error or a fired-assert mismatch by itself, else
    the event and the names of the variables that differ."""
    for special in ("error", "fired"):
        if (special,) in exc.diff:
            return (exc.event, special, str(exc.diff[(special,)]))
    keys = sorted({k[0] for k in exc.diff})
    return (exc.event, tuple(keys))


ENGINE = False  # also compare has_requests (set by --engine)
RUNNER = "model"  # what decides the runner's returns: the model, or vLLM's own runner (--runner real)
PINNED: Counter = Counter()  # --runner real: picks the generator drew as 0 (drafts_are_placeholders)


def try_replay(cfg: Config, init, steps, target, ignore):
    """None if the trace replays cleanly (or is not a valid trace), else the Divergence."""
    try:
        replay(cfg, init, steps, target, ignore=ignore, engine=ENGINE)
    except Divergence as exc:
        return exc
    except Disabled:
        return None
    except CaseEnded:  # a masked error (KNOWN) ended the engine: nothing more to compare
        return None
    except TargetUnavailable as exc:  # a pick the real runner cannot realise (targets/real_runner.py)
        return Divergence(str(exc), -1, "schedule", {("unrealisable",): (None, type(exc).__name__)})
    return None


def _revalidate(cfg: Config, init, steps):
    """Keep a candidate trace only if the model allows it, re-deriving the args keys."""
    it = Interpreter(cfg)
    try:
        s = it.initial(**init)
        for name, args in steps:
            s = it.step(s, name, args).state
    except Disabled:
        return False
    return True


NEUTRAL = {
    "stop": 0,
    "kv_fail_req": -1,
    "kv_fail_block": 0,
    "accepted": 0,
    "extra": 0,
    "stale_read": False,
    "drop": False,
}


def shrink(cfg: Config, init, steps, target, ignore, sig, budget: int = 400):
    """Greedy: delete steps, then shrink prompt lengths and budgets, keeping sig."""
    tries = 0

    def same(i, st):
        nonlocal tries
        tries += 1
        if not _revalidate(cfg, i, st):
            return False
        exc = try_replay(cfg, i, st, target, ignore)
        return exc is not None and signature(exc) == sig

    steps = list(steps)
    # cut the tail after the divergence
    exc = try_replay(cfg, init, steps, target, ignore)
    if exc is not None and exc.step >= 0:
        steps = steps[: exc.step + 1]
    changed = True
    while changed and tries < budget:
        changed = False
        for width in (1, 2):  # single steps, then pairs (a schedule and its delivery)
            i = len(steps) - width
            while i >= 0 and tries < budget:
                cand = steps[:i] + steps[i + width :]
                if same(init, cand):
                    steps = cand
                    changed = True
                i -= 1
        for r in range(cfg.requests):
            while tries < budget and init["prompt_len"][r] > 1:
                cand_init = dict(init)
                cand_init["prompt_len"] = list(init["prompt_len"])
                cand_init["prompt_len"][r] = max(1, init["prompt_len"][r] // 2)
                if same(cand_init, steps):
                    init = cand_init
                    changed = True
                else:
                    cand_init["prompt_len"][r] = init["prompt_len"][r] - 1
                    if same(cand_init, steps):
                        init = cand_init
                        changed = True
                    else:
                        break
        for j, (name, args) in enumerate(steps):
            # neutral picks: no stop, no KV failure, no fault, no accepted draft
            for key in [k for k in args if k[0] in NEUTRAL]:
                if tries >= budget or args[key] == NEUTRAL[key[0]]:
                    continue
                cand_args = dict(args)
                cand_args[key] = NEUTRAL[key[0]]
                cand = steps[:j] + [(name, cand_args)] + steps[j + 1 :]
                if same(init, cand):
                    steps, args = cand, cand_args
                    changed = True
            for key in [k for k in args if k[0] in ("budget", "new_tokens")]:
                while tries < budget and args[key] > 1:
                    cand_args = dict(args)
                    cand_args[key] = args[key] - 1
                    cand = steps[:j] + [(name, cand_args)] + steps[j + 1 :]
                    if same(init, cand):
                        steps, args = cand, cand_args
                        changed = True
                    else:
                        break
    return init, steps


def fuzz_config(
    cfg: Config,
    cases: int,
    length: int,
    seed: int,
    target=None,
    known=(),
    lim: Limits | None = None,
    minimize: bool = True,
    log=print,
) -> Report:
    target = target or new_target()
    ignore = ignore_known(known)
    rep = Report(cfg.name)
    pinned = Counter(PINNED)
    t0 = time.time()
    for case in range(cases):
        case_seed = seed * 100003 + case
        rng = random.Random(case_seed)
        init, steps, ended = random_trace(cfg, rng, length, lim)
        rep.cases += 1
        rep.steps += len(steps)
        if ended.startswith("fatal"):
            rep.fired[ended[7:]] += 1
        if ended.startswith("excluded"):
            rep.excluded[ended[10:]] += 1
        exc = try_replay(cfg, init, steps, target, ignore)
        rep.runner.update(runner_tally(getattr(target, "log", ())))
        if exc is None:
            continue
        sig = signature(exc)
        rep.signatures[sig] += 1
        if rep.signatures[sig] == 1:
            if minimize:
                init, steps = shrink(cfg, init, steps, target, ignore, sig)
                exc = try_replay(cfg, init, steps, target, ignore) or exc
            rep.divergences.append(Found(cfg.name, sig, init, steps, str(exc), case_seed))
            log(f"[{cfg.name}] new divergence {sig} (seed {case_seed})")
    rep.seconds = time.time() - t0
    rep.excluded.update(PINNED - pinned)
    return rep


def new_target():
    """The target the fuzzer replays on: vLLM's scheduler with the model's runner
    decisions, or (--runner real) with vLLM's own model runner."""
    if RUNNER == "real":
        from targets.real_runner import RealRunnerTarget

        return RealRunnerTarget()
    from targets.vllm_target import VllmTarget

    return VllmTarget()


def runner_tally(log) -> Counter:
    """What the real runner computed, summed over a trace's schedule steps (per
    scheduled request): positions other than the scheduler's, placeholder input ids,
    input ids other than the scheduler's token at the scheduler's position."""
    tally: Counter = Counter()
    for step in log:
        for seen in step.get("runner", {}).values():
            tally["scheduled"] += 1
            if (seen["start"], seen["length"]) != (seen["sched_start"], seen["sched_length"]) or not seen["contiguous"]:
                tally["positions differ"] += 1
            if seen["placeholder_at"]:
                tally["placeholder input"] += 1
            if seen["wrong_at"]:
                tally["wrong input"] += 1
    return tally


def format_trace(init, steps) -> str:
    lines = [f"init {init}"]
    for name, args in steps:
        lines.append(f"  {name}({nested(args) if args else ''})")
    return "\n".join(lines)


def _count(low: int):
    """argparse type: a whole number >= low (CASES=abc or --cases 0 is a line, not a traceback)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {value}")
        return value

    return parse


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse would print the whole usage first)
        print(f"error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def main(argv=None) -> int:
    ap = _Parser(
        prog="python -m targets.fuzz", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", action="append", help=f"preset(s): {', '.join(PRESETS)}")
    ap.add_argument("--cases", type=_count(1), default=100, help="traces per preset (make fuzz CASES=N)")
    ap.add_argument("--length", type=_count(1), default=30)
    ap.add_argument("--seed", type=_count(0), default=0)
    ap.add_argument("--known", action="append", default=[], help=f"mask: {', '.join(KNOWN)} or 'all'")
    ap.add_argument("--no-minimize", action="store_true")
    ap.add_argument(
        "--engine", action="store_true", help="also compare the engine loop's has_requests with the model's"
    )
    ap.add_argument(
        "--runner",
        choices=("model", "real"),
        default="model",
        help="who decides what the runner returns: the model (default), or vLLM's own V1/V2 "
        "model runner of the same tree (targets/real_runner.py)",
    )
    ap.add_argument(
        "--vllm",
        default=None,
        help="vLLM tree: 0.32.0 (installed), 0.33.0 (make vllm-0.33.0) or a checkout path "
        "(default: $VLLM, else 0.32.0)",
    )
    try:
        ns = ap.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    unknown = [n for n in ns.config or [] if n not in PRESETS]
    if unknown:
        print(f"error: unknown --config {', '.join(unknown)}; presets: {', '.join(PRESETS)}", file=sys.stderr)
        return 2
    bad = [n for n in ns.known if n != "all" and n not in KNOWN]
    if bad:
        print(f"error: unknown --known {', '.join(bad)}; use {', '.join(KNOWN)} or 'all'", file=sys.stderr)
        return 2
    global ENGINE, RUNNER
    ENGINE = ns.engine
    RUNNER = ns.runner
    known = list(KNOWN) if "all" in ns.known else ns.known
    names = list(dict.fromkeys(ns.config or PRESETS))  # a preset named twice runs once
    from targets import vllm_env
    from targets.vllm_tree import TreeError

    try:
        vllm_env.select(ns.vllm)
        print(f"fuzzing {vllm_env.preflight()}", flush=True)
        if RUNNER == "real":
            from targets import real_runner

            print(f"with {real_runner.preflight()}", flush=True)
        target = new_target()
    except (TreeError, TargetUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    profile = vllm_env.tree().profile
    total = traces = steps = 0
    fired: Counter = Counter()
    runner_total: Counter = Counter()
    excluded_total: Counter = Counter()
    started = time.time()
    for name in names:
        rep = fuzz_config(
            PRESETS[name].with_(profile=profile),
            ns.cases,
            ns.length,
            ns.seed,
            target,
            known,
            minimize=not ns.no_minimize,
        )
        div = sum(rep.signatures.values())
        total += div
        traces += rep.cases
        steps += rep.steps
        fired.update(rep.fired)
        print(
            f"== {name}: {rep.cases} traces, {rep.steps} steps, {div} divergent "
            f"({len(rep.signatures)} kinds), model-fatal ends {dict(rep.fired)}, {rep.seconds:.1f}s"
        )
        if rep.excluded:
            excluded_total.update(rep.excluded)
            print(
                "   kept out (ended early at real_runner.beyond_runner_contract, or a pick redrawn): "
                + ", ".join(f"{k} {v}" for k, v in rep.excluded.items())
            )
        if rep.runner:
            runner_total.update(rep.runner)
            print("   runner: " + ", ".join(f"{k} {v}" for k, v in rep.runner.items()))
        for found in rep.divergences:
            print(f"-- {found.signature} x{rep.signatures[found.signature]} (seed {found.seed})")
            print(format_trace(found.init, found.steps))
            print(found.message)
    ends = ", ".join(f"{k} {v}" for k, v in sorted(fired.items())) or "none"
    print(
        f"total: {traces} traces, {steps} steps, {total} divergent; vLLM asserts that ended a trace "
        f"(fired in the model and in vLLM at the same step): {ends}; {time.time() - started:.0f}s"
    )
    if excluded_total:
        print("kept out: " + ", ".join(f"{k} {v}" for k, v in excluded_total.items()))
    if runner_total:
        print("runner (per scheduled request): " + ", ".join(f"{k} {v}" for k, v in runner_total.items()))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
