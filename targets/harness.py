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

from dataclasses import dataclass
from typing import Any, Mapping

from model.interpreter import Disabled, Interpreter, args_for, flat, nested
from spec.config import Config
from spec.properties import FATAL, PROPERTIES
from targets.protocol import Target, TargetUnavailable

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


class Divergence(AssertionError):
    """The target and the reference interpreter disagree after a step."""


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
                    f"{outcome.detail}\nreplay: {replay_command(case, target.name)}"
                )
        mismatches = outcome.observed.get("mismatches") if outcome.observed else None
        if mismatches:
            raise Divergence(
                f"{case.name} [{label}] on {target.name}, step {index + 1} {event}{named}:\n  "
                + "\n  ".join(mismatches) + f"\nreplay: {replay_command(case, target.name)}"
            )
        if model_fatal:
            fired = (model_fatal[0], index + 1)
            break
        _compare(case, label, cfg, target, state, index + 1, event, named)
    view = nested(state)
    return Expect(runs=runs, fired=fired, violations=tuple(violations),
                  dropped=sum(view.get("clamp_dropped", [0])), completed=any(view["completed"]))


def _compare(case, label, cfg, target, state, step, event, named) -> None:
    projected = target.project()
    diff = {k: (state.get(k), v) for k, v in projected.items() if state.get(k) != v}
    if hasattr(target, "orders"):
        from targets.orders import model_orders

        mine, theirs = model_orders(cfg, state), target.orders()
        for name in mine:
            if mine[name] != theirs[name]:
                diff[(f"order:{name}",)] = (mine[name], theirs[name])
    if not diff:
        return
    lines = [f"{case.name} [{label}] on {target.name}: states diverge after step {step}: {event}{dict(named)}",
             f"  {'variable':<34} {'spec':>16} {'target':>16}"]
    for key, (mine, theirs) in sorted(diff.items(), key=lambda kv: str(kv[0])):
        lines.append(f"  {_key(key):<34} {str(mine):>16} {str(theirs):>16}")
    lines.append(f"replay: {replay_command(case, target.name)}")
    raise Divergence("\n".join(lines))


def _key(key: tuple) -> str:
    return key[0] + "".join(f"[{i}]" for i in key[1:])
