"""Differential fuzzing, one trace at a time: a random trace from the model, replayed on vLLM.

Each trace (model/sampler.py) is drawn from its seed alone and replayed on the vLLM
target (targets.harness.replay); `play` says how it ended in the model and what the
target did, `shrunk` minimises a divergent one (targets/fuzz/shrink.py: deleting steps and
shrinking numbers while the same kind of divergence remains). Known divergences
(targets/fuzz/presets.py KNOWN) can be masked so the fuzzer looks past them. The presets
are played under the profile of the vLLM tree loaded, so each release is fuzzed against
its own model. A campaign of many traces over releases, presets and runner modes, on
worker processes or Ray: targets/fuzz/campaign.py.

runner "real" replays on vLLM's scheduler with vLLM's own V1/V2 model runner
(targets/real_runner): what each step returns is the runner's decision, compared with
the model's. Two things the real runner cannot take on are kept out of the traces, by
name (`draw_for`): an `accepted` pick for drafts the runner makes placeholders is drawn
as 0, and a trace ends at a state beyond the runner's contract (prompt-beyond-tokens);
the campaign counts both. It also tallies what the runner fed (positions, placeholder
and wrong input ids).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from vllm_contract.model.interpreter import Disabled, nested
from vllm_contract.model.sampler import Draw, Limits, random_trace
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import TargetUnavailable
from vllm_contract.targets.fuzz.shrink import shrink
from vllm_contract.targets.harness import Divergence, replay
from vllm_contract.targets.vllm_target import CaseEnded

RUNNERS = ("model", "real")  # who decides what a step returns: the model, or vLLM's own runner
SAME, DIVERGED, NOT_PLAYED = "same", "diverged", "could not run"  # what a target did with a trace


def draw_for(runner: str) -> Draw:
    """What the traces for this runner mode may not contain (model/sampler.py Draw)."""
    if runner != "real":
        return Draw()
    from vllm_contract.targets.real_runner import beyond_runner_contract, drafts_are_placeholders

    return Draw(redraw_accepted=drafts_are_placeholders, beyond=beyond_runner_contract)


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


def signature_text(sig: tuple) -> str:
    """A signature as one line (results files and summaries): `deliver: num_computed_tokens, status`."""
    if len(sig) == 3:
        return f"{sig[0]}: {sig[1]} {sig[2]}"
    return f"{sig[0]}: {', '.join(sig[1])}"


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


@dataclass
class Played:
    """One trace drawn from its seed and replayed: how the model ended it (`end`: length,
    nothing enabled, fatal: ASSERTS, excluded: WHY) and what the target did with it."""

    init: dict
    steps: list
    end: str
    outcome: str = SAME  # SAME, DIVERGED or NOT_PLAYED
    why: str = ""  # diverged: the signature's text; could not run: the cause
    signature: tuple = ()
    message: str = ""
    runner: Counter = field(default_factory=Counter)  # --runner real: what the runner fed (runner_tally)
    redrawn: Counter = field(default_factory=Counter)  # --runner real: picks drawn again

    def row(self, index: int) -> list:
        """The trace as a results row: [index, steps, end, outcome]."""
        return [index, len(self.steps), self.end, self.outcome + (f": {self.why}" if self.why else "")]


def draw(cfg: Config, seed: int, length: int, runner: str = "model", lim: Limits | None = None):
    """(init, steps, ended, draw) of the trace a seed gives; the same for every process."""
    picks = draw_for(runner)
    init, steps, ended = random_trace(cfg, random.Random(seed), length, lim, picks)
    return init, steps, ended, picks


def play(
    cfg: Config,
    seed: int,
    length: int,
    target,
    ignore=None,
    runner: str = "model",
    engine: bool = False,
    lim: Limits | None = None,
) -> Played:
    """Draw the trace of `seed` and replay it on `target` beside the model."""
    init, steps, ended, picks = draw(cfg, seed, length, runner, lim)
    if hasattr(target, "log"):  # a target that fails to reset keeps the last trace's log: never count it twice
        target.log = []
    exc = try_replay(cfg, init, steps, target, ignore, engine)
    played = Played(init, steps, ended, runner=runner_tally(getattr(target, "log", ())), redrawn=picks.redrawn)
    if isinstance(exc, NotPlayed):
        played.outcome, played.why = NOT_PLAYED, str(exc)
    elif exc is not None:
        played.outcome, played.signature, played.message = DIVERGED, signature(exc), str(exc)
        played.why = signature_text(played.signature)
    return played


def shrunk(cfg: Config, played: Played, target, ignore=None, engine: bool = False) -> Played:
    """The divergent trace `played` minimised, with the same kind of divergence and the
    message of its shrunk replay."""

    def replay_one(cfg, init, steps, target, ignore):
        return try_replay(cfg, init, steps, target, ignore, engine)

    init, steps = shrink(cfg, played.init, played.steps, target, ignore, played.signature, replay_one, signature)
    exc = replay_one(cfg, init, steps, target, ignore)
    message = str(exc) if exc is not None and not isinstance(exc, NotPlayed) else played.message
    return Played(init, steps, played.end, DIVERGED, played.why, played.signature, message)


def target_class(runner: str = "model") -> type:
    """The target class a runner mode replays on: vLLM's scheduler with the model's runner
    decisions, or (runner "real") with vLLM's own model runner. What it observes (a
    runner's asserts among them) is the class's to say."""
    if runner == "real":
        from vllm_contract.targets.real_runner import RealRunnerTarget

        return RealRunnerTarget
    from vllm_contract.targets.vllm_target import VllmTarget

    return VllmTarget


def new_target(runner: str = "model"):
    """A fresh target of that runner mode (target_class)."""
    return target_class(runner)()


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
