"""What a vLLM tree does on a trace, whatever the model predicts for it.

A generated case's replay (targets.harness) fails as soon as the target differs from
the model; a review needs the target's own behaviour instead. `observe` steps the
reference interpreter and the vLLM target together (the model still plays the runner:
it decides how many tokens each step returns) and records, without stopping:

  fired        which vLLM assert fired, at which step, at which source line
  error        anything else vLLM raised (the trace ends there)
  diverged     the first step where the target's state differs from the model's, and
               the variables that differ
  violations   the properties the target's own state or steps violate, first step each:
               counter-nonnegative and computed-nonnegative (its counters),
               no-token-while-prefilling (a live delivery appends to a request its
               scheduler reserved nothing for), predicates-agree (the runner samples iff
               the target's scheduler reserved), placeholder-accounting (its P against
               what it reserved for the steps in flight since the last preemption or
               resumable stop), and every property an assert reports when it fires
               and the liveness properties on its own state (stale-drains,
               no-stuck-request)
  stuck        after the trace the tree runs on by itself (model/hang.py's bound, no fault,
               targets.harness.run_target_on): the requests it leaves behind, why, and the
               count or queue that holds each (bounded-progress is then violated); beside
               it, what the model predicts (model_stuck), so a hang is never taken for the
               model's unless the model predicts that very hang
  reaction     crash (an assert fired), hang (a request left behind, nothing fired), silent
               (a violation, nothing fired), holds

    python -m vllm_contract.report.observe --vllm TREE --out FILE.json [--traces FILE.json]

runs every generated case (each arm of the tree's profile, clamp off and on) and the
given fuzz traces on one tree, in this process (one vLLM tree per process).
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vllm_contract.model.interpreter import Disabled, nested
from vllm_contract.model.run import Run
from vllm_contract.spec import expectations
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import SpecError, TargetUnavailable
from vllm_contract.spec.heartbeat import Heartbeat
from vllm_contract.spec.properties import ASSERTS
from vllm_contract.spec.verdicts import Reaction
from vllm_contract.spec.vocabulary import Status

OBSERVED_PROPERTIES = (
    "counter-nonnegative",
    "computed-nonnegative",
    "no-token-while-prefilling",
    "predicates-agree",
    "placeholder-accounting",
)


@dataclass
class Observation:
    runs: int = 0
    fired: list | None = None  # [assert name, step, "file:line"]
    error: str | None = None  # vLLM raised something the contract does not name (a reaction of its own)
    could_not_run: str | None = None  # the cause, when the tree could not run the trace at all
    diverged: dict | None = None  # {"step", "event", "keys": {key: [model, target]}}
    violations: dict = field(default_factory=dict)  # property -> first step
    completed: bool = False  # some request finished on a stop token after decoding (model's view)
    model_fired: list | None = None  # [assert name, step] where the model says vLLM's assert fires
    stuck: list = field(default_factory=list)  # [request, why, what holds it] the tree, run on, leaves behind
    model_stuck: list = field(default_factory=list)  # [request, why] the model, run on, leaves behind

    @property
    def reaction(self) -> str:
        if self.could_not_run:
            return Reaction.COULD_NOT_RUN.value
        if self.fired:
            return Reaction.CRASH.value
        if self.error:
            return Reaction.ERROR.value
        if self.stuck:
            return Reaction.HANG.value
        return (Reaction.SILENT if self.violations else Reaction.HOLDS).value


def cause(exc: BaseException) -> str:
    """One line for why a tree could not run a trace: the exception's type and its first
    line (a pydantic ValidationError's message starts with the count, then the field)."""
    text = " ".join(str(exc).split())
    # pydantic: "1 validation error for VllmConfig Value error, <what> [type=..., input_value=...]"
    text = re.sub(r"^\d+ validation errors? for (\w+) Value error, (.*?) \[type=.*$", r"\1: \2", text)
    if len(text) > 240:
        text = text[:237] + "..."
    return f"{type(exc).__name__}: {text}"


def _key(k: tuple) -> str:
    return k[0] + "".join(f"[{i}]" for i in k[1:])


def observe(cfg: Config, init: dict, steps, target) -> Observation:
    """Replay (init, steps) on the target under cfg; see the module docstring."""
    from vllm_contract.targets.harness import compare, target_liveness

    obs = Observation()
    run = Run(cfg, init, steps, until_disabled=True)
    try:
        target.reset(cfg, run.init)
    except Exception as exc:  # a tree that cannot even start a case says so
        obs.could_not_run = cause(exc)
        return obs
    reserved: list[dict[int, int]] = []  # per in-flight step, oldest first: the target's reservations
    mine = target.project()
    state = run.initial
    for played in run:
        n, event, args, state = played.number, played.event, played.args, played.state
        before = mine
        try:
            outcome = target.step(event, args, played)
        except TargetUnavailable as exc:  # the target cannot play this step (a pick real code cannot make)
            obs.could_not_run = f"step {n} {event}: {cause(exc)}"
            obs.runs = n
            break
        except Exception as exc:  # what vLLM raised is what it does: recorded, never raised through
            obs.error = f"step {n} {event}: {type(exc).__name__}: {exc}"
            obs.runs = n
            break
        obs.runs = n
        if played.fired and obs.model_fired is None:
            obs.model_fired = [played.fired[0], n]
        if outcome.fired not in (played.fired or [None]) and obs.diverged is None:
            # the tree and the model disagree on vLLM's assert at this step: the first
            # difference, seen on the tree itself (an assert removed reads here)
            obs.diverged = {
                "step": n,
                "event": event,
                "count": 1,
                "keys": {"fired": [played.fired[0] if played.fired else None, outcome.fired]},
            }
        if outcome.fired:
            site = outcome.assert_site
            where = f"{site[0]}:{site[1]}" if site else "?"
            obs.fired = [outcome.fired, n, where]
            try:  # the state the assert saw (vLLM updated it up to the assert)
                _target_properties(cfg, event, before, target.project(), state, reserved, obs, n)
            except Exception:  # a half-updated scheduler may not project
                pass
            obs.violations.setdefault(ASSERTS[outcome.fired].property, n)
            break
        if outcome.error:
            error = outcome.error
            if "Failed to reset KV cache" in str(
                error
            ):  # a known, survivable reset failure (targets/fuzz/differential.py)
                pass
            else:
                obs.error = f"step {n} {event}: {error}"
                break
        mine = target.project()
        _target_properties(cfg, event, before, mine, state, reserved, obs, n)
        for prop in target_liveness(cfg, mine):  # judged on the tree's own state, whatever the model's
            obs.violations.setdefault(prop, n)
        if obs.diverged is None:
            diff = compare(cfg, state, target)
            if diff:
                shown = dict(list(diff.items())[:6])
                obs.diverged = {
                    "step": n,
                    "event": event,
                    "count": len(diff),
                    "keys": {_key(k): [a, b] for k, (a, b) in shown.items()},
                }
    obs.completed = any(nested(state)["completed"])
    if not (obs.fired or obs.error or obs.could_not_run):
        _run_on(cfg, run, state, target, obs)
    return obs


def _run_on(cfg: Config, run: Run, state, target, obs: Observation) -> None:
    """After the trace: the tree runs on by itself; what it leaves behind (or the assert
    that ends it), beside what the model predicts from its own last state."""
    from vllm_contract.model import hang
    from vllm_contract.targets.harness import model_run_on, run_target_on

    mine = model_run_on(run.interp, state) if obs.model_fired is None else None
    if mine is not None:
        obs.model_stuck = [[r, why] for r, why in mine.stuck]
    try:
        theirs = run_target_on(cfg, target, mine)  # the runner's returns the model's, as in the steps
    except Exception as exc:  # what vLLM raises running on is what it does
        obs.error = f"run on by itself: {cause(exc)}"
        return
    if theirs.fired:
        where = f"{theirs.site[0]}:{theirs.site[1]}" if theirs.site else "?"
        obs.fired = [theirs.fired, obs.runs + len(theirs.events), f"{where} (run on)"]
        obs.violations.setdefault(ASSERTS[theirs.fired].property, obs.runs + len(theirs.events))
    elif theirs.error:
        obs.error = f"run on by itself, step {len(theirs.events)}: {theirs.error}"
    elif theirs.stuck:
        obs.stuck = [[r, why, hang.blocker(cfg, theirs.end, r, why)] for r, why in theirs.stuck]
        obs.violations.setdefault("bounded-progress", obs.runs)


def _target_properties(cfg, event, before, after, model_state, reserved, obs, n) -> None:
    """The properties the target's own state and step violate (first step each).
    `reserved` holds, per in-flight step (oldest first), {request: [placeholders the
    target reserved, still of the request's current epoch]}."""
    reqs = range(cfg.requests)
    for r in reqs:
        if after[("num_output_placeholders", r)] < 0:
            obs.violations.setdefault("counter-nonnegative", n)
        if after[("num_computed_tokens", r)] < 0:
            obs.violations.setdefault("computed-nonnegative", n)
    if event == "schedule":
        pos = after[("queue_len",)] - 1
        step = {}
        for r in reqs:
            if 0 <= pos < cfg.queue_depth and after.get(("q_scheduled", pos, r), 0):
                got = after[("num_output_placeholders", r)] - before[("num_output_placeholders", r)]
                step[r] = [got, True]
                # the runner is the model's: does it sample exactly what the target reserved for?
                if (model_state[("q_sampled", pos, r)] > 0) != (got > 0):
                    obs.violations.setdefault("predicates-agree", n)
        reserved.append(step)
    elif event == "deliver" and reserved:
        step = reserved.pop(0)
        for r, (got, _) in step.items():
            live = before[("num_stale_output_tokens", r)] == 0
            appended = after[("num_tokens", r)] - before[("num_tokens", r)]
            if live and got == 0 and appended > 0 and before[("status", r)] != Status.FINISHED:
                obs.violations.setdefault("no-token-while-prefilling", n)
    # a preemption or a resumable stop starts a new epoch: older reservations no longer count
    for r in reqs:
        was, now = before[("status", r)], after[("status", r)]
        if (
            was != now
            and now in (Status.PREEMPTED, Status.WAITING_FOR_STREAMING_REQ)
            or (was == Status.RUNNING and now == Status.WAITING)
        ):
            for step in reserved:
                if r in step:
                    step[r][1] = False
    for r in reqs:
        if after[("status", r)] == Status.FINISHED:
            continue
        owed = sum(step[r][0] for step in reserved if r in step and step[r][1])
        if after[("num_output_placeholders", r)] != owed:
            obs.violations.setdefault("placeholder-accounting", n)


# ------------------------------------------------------------------ one tree, many traces


def case_modules(pattern: str = "*") -> list:
    """The generated case modules whose path under generated_tests/cases matches `pattern`."""
    from fnmatch import fnmatch

    from vllm_contract.report.data import generated_modules

    return sorted(
        (
            m
            for m in generated_modules().values()
            if fnmatch(str(m.path), pattern) or fnmatch(Path(m.path).name, pattern)
        ),
        key=lambda m: m.path,
    )


def reviewed_arms(case, profile: str) -> list:
    """The arms of a case a review plays on a tree of `profile`: the release as it is,
    with and without the seed's clamp class. Not the +guard arm: it models our fix on top
    of the release, and the tree under review is played with its own scheduler."""
    return [
        (label, arm)
        for label, arm in case.arms.items()
        if arm[0].get("profile") == profile and arm[0].get("guard", "none") == "none"
    ]


def run_tree(spec: str, traces: list[dict], log=print, cases_pattern: str = "*") -> dict:
    """Every generated case (the tree's profile, clamp off and on) and every trace."""
    from vllm_contract.adapter import current as vllm_env
    from vllm_contract.adapter import objects
    from vllm_contract.adapter.preflight import preflight
    from vllm_contract.targets.vllm_target import VllmTarget

    vllm_env.select(spec)
    described = preflight(every_shape=False)  # a shape the tree cannot build: could-not-run arms
    tree = vllm_env.tree()
    log(f"observe: {described}")
    targets = {False: VllmTarget(clamp=False), True: VllmTarget(clamp=True)}
    cases = []
    modules = case_modules(cases_pattern)
    started, heartbeat = time.monotonic(), Heartbeat(log)
    no_v1 = None  # a V1 case on a tree without the V1 runner: each arm could not run, said so
    for i, module in enumerate(modules):
        case = module.case
        if case.config_for({}).is_v1 and not objects.has_v1_runner():
            no_v1 = no_v1 or f"{tree.title} has no V1 model runner (removed in 0.34.0): this case runs on V1"
            for clamp in (False, True):
                cases.append(
                    {
                        "case": case.name,
                        "module": module.path,
                        "kind": case.kind,
                        "property": case.property,
                        "clamp": clamp,
                        "arm": f"{tree.profile} (no V1 runner)",
                        # ended by design, not a failure to run: review counts it apart
                        "observed": {**asdict(Observation(could_not_run=no_v1)), "runner_removed": True},
                        "reaction": Observation(could_not_run=no_v1).reaction,
                        "model": None,
                    }
                )
            continue
        for label, (overrides, expect) in reviewed_arms(case, tree.profile):
            cfg = case.config_for(overrides)
            obs = observe(cfg, dict(case.init), case.steps, targets[bool(cfg.clamp)])
            cases.append(
                {
                    "case": case.name,
                    "module": module.path,
                    "kind": case.kind,
                    "property": case.property,
                    "clamp": bool(cfg.clamp),
                    "arm": label,
                    "observed": asdict(obs),
                    "reaction": obs.reaction,
                    "model": _expect(expect),
                }
            )
        heartbeat(lambda i=i: f"  {i + 1}/{len(modules)} case module(s)")
    fuzz = []
    for i, trace in enumerate(traces):
        steps = [(e, {tuple(k): v for k, v in a}) for e, a in trace["steps"]]
        try:
            cfg = expectations.from_record({**trace["config"], "profile": tree.profile})
        except SpecError as exc:  # e.g. a V1 trace on a tree without the V1 runner
            obs = Observation(could_not_run=f"{tree.title} cannot run this trace's configuration: {exc}")
        else:
            try:
                obs = observe(cfg, trace["init"], steps, targets[bool(cfg.clamp)])
            except Disabled:
                obs = Observation(error="the trace is not enabled under this profile")
        fuzz.append({"id": trace["id"], "preset": trace["preset"], "observed": asdict(obs), "reaction": obs.reaction})
        heartbeat(lambda i=i: f"  {i + 1}/{len(traces)} fuzz trace(s)")
    log(f"observe: {len(cases)} case arm(s), {len(fuzz)} fuzz trace(s) in {time.monotonic() - started:.1f} s")
    return {
        "tree": {
            "label": tree.label,
            "title": tree.title,
            "version": tree.version,
            "root": str(tree.root),
            "profile": tree.profile,
            "kind": tree.kind,
            "described": described,
        },
        "cases": cases,
        "fuzz": fuzz,
    }


def _expect(expect) -> dict:
    reaction = expect.reaction
    return {
        "reaction": reaction,
        "fired": list(expect.fired) if expect.fired else None,
        "violations": list(expect.violations),
        "others": [list(o) for o in expect.others],
    }
