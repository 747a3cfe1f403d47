"""Replaying a generated case on a target, arm by arm.

A case is a trace as data (init picks and steps) plus what the model predicts for it
under each *arm*: the configuration as found, the same with the seed's clamp switched
on or off, and, for a historical profile, vLLM 0.32.0 with and without the clamp. The
prediction of an arm is its `Expect`: how many steps run (a fatal assert ends the
engine; a step 0.32.0 no longer allows ends the replay), which fatal assert fires and
where, where the case's property is violated, how many tokens the clamp drops.

`replay_case` runs every arm the target can run: it steps the reference interpreter
and the target together, compares their states after every step (a diff headed
spec / target, the step and the command that replays it), and finally compares the
observed outcome with the recorded one, so a stale case fails too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from model.interpreter import Disabled, Interpreter, args_for, flat, nested
from spec.config import Config
from spec.properties import FATAL, PROPERTIES
from targets.orders import model_orders
from targets.protocol import Outcome, Target, TargetUnavailable

CURRENT = "vllm-0.32.0"


@dataclass(frozen=True)
class Expect:
    """What one arm of a case does, as the model predicts it."""

    runs: int  # steps that run (the replay stops at a fatal assert or a disabled step)
    fired: tuple | None = None  # (property, step) of the fatal assert, if any; steps count from 1
    violations: tuple = ()  # steps at which the case's property fails
    dropped: int = 0  # tokens the clamp dropped
    completed: bool = False  # some request finished on a stop token after decoding


@dataclass(frozen=True)
class Case:
    name: str
    config: Mapping[str, Any]
    init: Mapping[str, Any]
    steps: tuple  # ((event, {arg: value}), ...)
    kind: str  # "violation" | "witness"
    property: str | None
    arms: Mapping[str, tuple]  # label -> (overrides, Expect)
    path: str = ""  # the generated module, for replay commands

    def config_for(self, overrides: Mapping[str, Any]) -> Config:
        fields = dict(self.config)
        fields.update(overrides)
        for key in ("events", "faults"):
            fields[key] = frozenset(fields.get(key, ()))
        if fields.get("prompt_lens") is not None:
            fields["prompt_lens"] = tuple(fields["prompt_lens"])
        return Config(**fields).validate()


def arms_for(profile: str, clamp: bool) -> dict[str, dict]:
    """The arms a case is checked on (see the module docstring)."""
    if profile == CURRENT:
        return {"clamp-off": {"clamp": False}, "clamp-on": {"clamp": True}}
    return {
        profile: {"clamp": clamp},
        "vllm-0.32.0": {"profile": CURRENT, "clamp": False},
        "vllm-0.32.0+clamp": {"profile": CURRENT, "clamp": True},
    }


def predict(case_property: str | None, cfg: Config, init: Mapping, steps) -> Expect:
    """Run the steps on the reference interpreter and summarise what happens."""
    it = Interpreter(cfg)
    state = it.initial(**init)
    violations, fired, runs = [], None, 0
    for index, (event, named) in enumerate(steps):
        try:
            result = it.step(state, event, args_for(it.event(event), cfg, named))
        except Disabled:
            break
        state = result.state
        runs = index + 1
        if case_property and _violates(it, result, case_property):
            violations.append(index + 1)
        fatal = [p for p in result.failed() if p in FATAL]
        if fatal:
            fired = (fatal[0], index + 1)
            break
    view = nested(state)
    dropped = sum(view.get("clamp_dropped", [0]))
    return Expect(runs=runs, fired=fired, violations=tuple(violations), dropped=dropped,
                  completed=any(view["completed"]))


def _violates(it: Interpreter, result, prop: str) -> bool:
    if PROPERTIES[prop].kind == "transition":
        return result.checks.get(prop, True) is False
    return not it.state_properties(result.state)[prop]


def replay_command(case: Case, target: str) -> str:
    where = case.path or "<generated module>"
    return f".venv/bin/python -m pytest {where} --target={target}"


def replay_case(case: Case, target: Target) -> list[str]:
    """Check every arm this target can run; returns the arm labels it ran.

    Raises TargetUnavailable when the target can run none of them (the caller skips
    with that reason), Divergence on a state difference, AssertionError when the
    outcome differs from the recorded one."""
    ran, reasons = [], []
    for label, (overrides, expected) in case.arms.items():
        cfg = case.config_for(overrides)
        reason = target.accepts(cfg) if hasattr(target, "accepts") else None
        if reason:
            if reason not in reasons:
                reasons.append(reason)
            continue
        observed = _replay_arm(case, label, cfg, target)
        if observed != expected:
            raise AssertionError(
                f"{case.name} [{label}] on {target.name}: outcome differs from the recorded one\n"
                f"  recorded: {expected}\n  observed: {observed}\n"
                f"  (regenerate with `make generate` if the spec changed on purpose)"
            )
        ran.append(label)
    if not ran:
        raise TargetUnavailable("; ".join(reasons) or "it runs no arm of this case")
    return ran


def check_case(case: Case, target: Target) -> None:
    """What a generated test calls: replay, or skip with the reason the target gives."""
    import pytest

    try:
        replay_case(case, target)
    except TargetUnavailable as exc:
        pytest.skip(f"{target.name}: {exc}")


def _replay_arm(case: Case, label: str, cfg: Config, target: Target) -> Expect:
    it = Interpreter(cfg)
    state = it.initial(**case.init)
    target.reset(cfg, flat(case.init))  # the protocol takes flat keys
    _compare(case, label, cfg, target, state, 0, "init", case.init)
    violations, fired, runs = [], None, 0
    for index, (event, named) in enumerate(case.steps):
        args = args_for(it.event(event), cfg, named)
        if not it.enabled(state, event, args):
            break  # e.g. a historical trigger that 0.32.0 no longer lets happen
        result = it.step(state, event, args)
        state = result.state
        outcome = target.step(event, args)
        runs = index + 1
        if case.property and _violates(it, result, case.property):
            violations.append(index + 1)
        model_fatal = [p for p in result.failed() if p in FATAL]
        if getattr(target, "observes_asserts", False) and (outcome.fired or model_fatal):
            if outcome.fired not in model_fatal:
                raise Divergence(
                    f"{case.name} [{label}] on {target.name}, step {index + 1} {event}{named}: "
                    f"spec fires {model_fatal or 'nothing'}, target fires {outcome.fired or 'nothing'}\n"
                    f"{outcome.detail}\nreplay: {replay_command(case, target.name)}",
                    index + 1, event, {("fired",): (model_fatal or None, outcome.fired)},
                )
        mismatches = outcome.observed.get("mismatches") if outcome.observed else None
        if mismatches:
            raise Divergence(
                f"{case.name} [{label}] on {target.name}, step {index + 1} {event}{named}:\n  "
                + "\n  ".join(mismatches) + f"\nreplay: {replay_command(case, target.name)}",
                index + 1, event, {("kernel",): (None, mismatches)},
            )
        if model_fatal:
            fired = (model_fatal[0], index + 1)
            break
        _compare(case, label, cfg, target, state, index + 1, event, named)
    view = nested(state)
    return Expect(runs=runs, fired=fired, violations=tuple(violations),
                  dropped=sum(view.get("clamp_dropped", [0])), completed=any(view["completed"]))


def _compare(case, label, cfg, target, state, step, event, named) -> None:
    diff = compare(cfg, state, target)
    if diff:
        message = _diff_message(step, event, named, diff)
        raise Divergence(f"{case.name} [{label}] on {target.name}: {message}\n"
                         f"replay: {replay_command(case, target.name)}", step, event, diff)


# --------------------------------------------------------------------- replay


class Divergence(AssertionError):
    """The target and the reference interpreter disagree after a step."""

    def __init__(self, message: str, step: int, event: str, diff: dict):
        super().__init__(message)
        self.step = step
        self.event = event
        self.diff = diff


@dataclass
class ReplayResult:
    steps_run: int
    fired: str | None  # fatal property that fired (on both sides), if any
    spec_state: dict
    target_state: dict
    outcomes: list[Outcome] = field(default_factory=list)


def is_named(init_or_args: Mapping) -> bool:
    """Named ({"budget": 2}) rather than flat ({("budget",): 2}) arguments."""
    return all(isinstance(k, str) for k in init_or_args)


def _normalise_init(cfg: Config, init: Mapping) -> dict[str, Any]:
    return dict(init) if is_named(init) else nested(init)


def _fmt_args(args: Mapping) -> str:
    return repr(nested(args)) if args and not is_named(args) else repr(dict(args))


def _diff_message(step: int, event: str, args, diff: dict) -> str:
    lines = [f"divergence after step {step}: {event}({_fmt_args(args)})",
             f"{'key':<40} {'spec':>14} {'target':>14}"]
    for key, (a, b) in diff.items():
        lines.append(f"{str(key):<40} {str(a):>14} {str(b):>14}")
    return "\n".join(lines)


def compare(cfg: Config, spec_state: Mapping, target: Target, ignore=None) -> dict:
    """{key: (spec, target)} for every projected key that differs, plus the orders.
    ignore(key, spec_value, target_value, spec_state) -> True masks a known difference."""
    projected = target.project()
    diff = {k: (spec_state.get(k), v) for k, v in projected.items() if spec_state.get(k) != v}
    if ignore is not None:
        diff = {k: d for k, d in diff.items() if not ignore(k, d[0], d[1], spec_state)}
    if hasattr(target, "orders"):
        mine, theirs = model_orders(cfg, spec_state), target.orders()
        for name in ("running", "waiting"):
            if mine[name] != theirs[name]:
                diff[(f"order:{name}",)] = (mine[name], theirs[name])
    return diff


def model_engine_view(cfg: Config, state: Mapping) -> dict[str, Any]:
    """The model's counterpart of VllmTarget.engine_view (spec.scheduler.has_requests)."""
    from spec.ops import INT_OPS
    from spec.scheduler import has_requests
    from spec.state import View

    return {"has_requests": bool(has_requests(View(cfg, state), cfg, INT_OPS))}


def replay(cfg: Config, init: Mapping, steps: Sequence[tuple[str, Mapping]],
           target: Target, ignore=None, engine: bool = False) -> ReplayResult:
    """Step the reference interpreter and the target together; after every step
    compare the projections (and the queue orders). Raises Divergence (an
    AssertionError) with a spec/target diff, the step index and the event.

    A fatal property ends the trace: the model's failed fatal checks must contain the
    property whose vLLM assert fired, and vice versa. `ignore` masks known
    differences (see compare); the fuzzer uses it to look past them. engine=True also
    compares what the engine loop decides with (has_requests), which is not a spec
    variable: a difference there means the model's schedule/deliver guards admit an
    order EngineCore would not take."""
    cfg = cfg.validate()
    it = Interpreter(cfg)
    named_init = _normalise_init(cfg, init)
    state = it.initial(**named_init)
    target.reset(cfg, named_init)
    diff = compare(cfg, state, target, ignore)
    if diff:
        raise Divergence(_diff_message(-1, "init", named_init, diff), -1, "init", diff)
    outcomes = []
    for index, (event, args) in enumerate(steps):
        flat_args = args_for(it.event(event), cfg, args) if is_named(args) else dict(args)
        result = it.step(state, event, flat_args)
        state = result.state
        outcome = target.step(event, flat_args)
        outcomes.append(outcome)
        model_fatal = [p for p in result.failed() if p in FATAL]
        if outcome.fired or model_fatal:
            if outcome.fired not in model_fatal:
                diff = {("fired",): (model_fatal or None, outcome.fired)}
                raise Divergence(_diff_message(index, event, flat_args, diff) + f"\n{outcome.detail}",
                                 index, event, diff)
            return ReplayResult(index + 1, outcome.fired, state, {}, outcomes)
        diff = {}
        if "error" in outcome.observed:
            error = outcome.observed["error"]
            if ignore is None or not ignore(("error",), None, error, state):
                diff[("error",)] = (None, error)
        diff.update(compare(cfg, state, target, ignore))
        if engine and hasattr(target, "engine_view"):
            mine, theirs = model_engine_view(cfg, state), target.engine_view()
            for k in mine:
                if mine[k] != theirs[k] and (ignore is None or not ignore((k,), mine[k], theirs[k], state)):
                    diff[(k,)] = (mine[k], theirs[k])
        if diff:
            raise Divergence(_diff_message(index, event, flat_args, diff), index, event, diff)
    return ReplayResult(len(steps), None, state, target.project(), outcomes)
