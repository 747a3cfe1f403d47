"""Differential fuzzing: random traces from the model, replayed on vLLM, divergences shrunk.

Each trace (model/sampler.py) is replayed on the vLLM target (targets.harness.replay);
a divergence is minimised (targets/shrink.py) by deleting steps and shrinking numbers
while the same kind of divergence remains. Known divergences (targets/fuzz_presets.py
KNOWN) can be masked so the fuzzer looks past them. The presets are played under the
profile of the vLLM tree loaded, so each release is fuzzed against its own model.

runner "real" replays on vLLM's scheduler with vLLM's own V1/V2 model runner
(targets/real_runner): what each step returns is the runner's decision, compared with
the model's. Two things the real runner cannot take on are kept out of the traces, by
name (`draw_for`): an `accepted` pick for drafts the runner makes placeholders is drawn
as 0, and a trace ends at a state beyond the runner's contract (prompt-beyond-tokens);
the report counts both. It also tallies what the runner fed (positions, placeholder and
wrong input ids).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field

from model.interpreter import Disabled, nested
from model.sampler import Draw, Limits, random_trace
from spec.config import Config
from spec.errors import TargetUnavailable
from targets.fuzz_presets import ignore_known
from targets.harness import Divergence, replay
from targets.shrink import shrink
from targets.vllm_target import CaseEnded

RUNNERS = ("model", "real")  # who decides what a step returns: the model, or vLLM's own runner


def draw_for(runner: str) -> Draw:
    """What the traces for this runner mode may not contain (model/sampler.py Draw)."""
    if runner != "real":
        return Draw()
    from targets.real_runner import beyond_runner_contract, drafts_are_placeholders

    return Draw(redraw_accepted=drafts_are_placeholders, beyond=beyond_runner_contract)


# ------------------------------------------------------------------ replay


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
    could_not_run: Counter = field(default_factory=Counter)  # cause -> traces the target could not play


class NotPlayed(str):
    """A trace the target could not play (its cause): counted apart, never a divergence or a pass."""


def signature(exc) -> tuple:
    """What kind of divergence: an error or a fired-assert mismatch by itself, else
    the event and the names of the variables that differ."""
    if isinstance(exc, NotPlayed):
        return ("not played", str(exc))
    for special in ("error", "fired"):
        if (special,) in exc.diff:
            return (exc.event, special, str(exc.diff[(special,)]))
    keys = sorted({k[0] for k in exc.diff})
    return (exc.event, tuple(keys))


def try_replay(cfg: Config, init, steps, target, ignore, engine: bool = False):
    """None if the trace replays cleanly (or is not a valid trace), else the Divergence,
    or NotPlayed when the target could not play it. engine: also compare the engine
    loop's has_requests with the model's."""
    try:
        replay(cfg, init, steps, target, ignore=ignore, engine=engine)
    except Divergence as exc:
        return exc
    except Disabled:
        return None
    except CaseEnded:  # a masked error (KNOWN) ended the engine: nothing more to compare
        return None
    except TargetUnavailable as exc:  # a pick the real runner cannot realise (targets/real_runner/)
        return NotPlayed(str(exc).splitlines()[0])
    return None


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
    runner: str = "model",
    engine: bool = False,
    tick=lambda case, rep: None,
) -> Report:
    target = target or new_target(runner)
    ignore = ignore_known(known, runner)
    draw = draw_for(runner)
    rep = Report(cfg.name)
    t0 = time.time()

    def replay_one(cfg, init, steps, target, ignore):
        return try_replay(cfg, init, steps, target, ignore, engine)

    for case in range(cases):
        case_seed = seed * 100003 + case
        rng = random.Random(case_seed)
        init, steps, ended = random_trace(cfg, rng, length, lim, draw)
        rep.cases += 1
        rep.steps += len(steps)
        if ended.startswith("fatal"):
            rep.fired[ended[7:]] += 1
        if ended.startswith("excluded"):
            rep.excluded[ended[10:]] += 1
        exc = replay_one(cfg, init, steps, target, ignore)
        rep.runner.update(runner_tally(getattr(target, "log", ())))
        tick(case + 1, rep)
        if exc is None:
            continue
        if isinstance(exc, NotPlayed):
            rep.could_not_run[str(exc)] += 1
            continue
        sig = signature(exc)
        rep.signatures[sig] += 1
        if rep.signatures[sig] == 1:
            if minimize:
                init, steps = shrink(cfg, init, steps, target, ignore, sig, replay_one, signature)
                exc = replay_one(cfg, init, steps, target, ignore) or exc
            rep.divergences.append(Found(cfg.name, sig, init, steps, str(exc), case_seed))
            log(f"[{cfg.name}] new divergence {sig} (seed {case_seed})")
    rep.seconds = time.time() - t0
    rep.excluded.update(draw.redrawn)
    return rep


def new_target(runner: str = "model"):
    """The target the fuzzer replays on: vLLM's scheduler with the model's runner
    decisions, or (runner "real") with vLLM's own model runner."""
    if runner == "real":
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
