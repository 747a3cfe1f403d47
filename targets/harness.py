"""Replaying a generated case on a target, arm by arm.

A case is a trace as data (init picks and steps) plus what the model predicts for it
under each *arm*: every vLLM release profile with the seed's clamp off and on, and,
for a historical profile, the profile itself. The prediction of an arm is its
`Expect`: how many steps run (a fatal assert ends the engine; a step the profile does
not allow ends the replay), which vLLM assert fires and where, where the case's
property and every other property are first violated, how many tokens the clamp drops.

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
from spec.profiles import PROFILES, RELEASES
from spec.properties import ASSERTS, PROPERTIES, properties_for
from targets.orders import model_orders
from targets.protocol import Outcome, Target, TargetUnavailable


@dataclass(frozen=True)
class Expect:
    """What one arm of a case does, as the model predicts it."""

    runs: int  # steps that run (the replay stops at a fatal assert or a disabled step)
    fired: tuple | None = None  # (assert, step) of the vLLM assert that fires, if any; steps count from 1
    violations: tuple = ()  # steps at which the case's property fails
    others: tuple = ()  # (property, first step) of every other property this arm violates
    dropped: int = 0  # tokens the clamp dropped
    completed: bool = False  # some request finished on a stop token after decoding

    @property
    def reaction(self) -> str:
        """What vLLM does about the case: "crash" (an assert fires), "silent" (a
        property is violated and nothing fires), or "holds"."""
        if self.fired:
            return "crash"
        return "silent" if self.violations or self.others else "holds"


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


def arm_label(profile: str, clamp: bool, guard: str = "none") -> str:
    return profile + ("+clamp" if clamp else "") + ("+guard" if guard != "none" else "")


def arms_for(profile: str, clamp: bool, guard: str = "none") -> dict[str, dict]:
    """The arms a case is checked on: every release as it is, with the seed's clamp and
    with the step-reservation guard; a historical profile also on itself, as found."""
    arms = {}
    if PROFILES[profile].historical:
        arms[arm_label(profile, clamp, guard)] = {"profile": profile, "clamp": clamp, "guard": guard}
    for release in RELEASES:
        for on, fix in ((False, "none"), (True, "none"), (False, "step-reservation")):
            arms[arm_label(release.name, on, fix)] = {"profile": release.name, "clamp": on, "guard": fix}
    return arms


def predict(case_property: str | None, cfg: Config, init: Mapping, steps) -> Expect:
    """Run the steps on the reference interpreter and summarise what happens."""
    it = Interpreter(cfg)
    state = it.initial(**init)
    watched = _watched(cfg, case_property)
    violations, first, fired, runs = [], {}, None, 0
    for index, (event, named) in enumerate(steps):
        try:
            result = it.step(state, event, args_for(it.event(event), cfg, named))
        except Disabled:
            break
        state = result.state
        runs = index + 1
        for prop in watched:
            if _violates(it, result, prop):
                if prop == case_property:
                    violations.append(index + 1)
                first.setdefault(prop, index + 1)
        if result.fired:
            fired = (result.fired[0], index + 1)
            break
    view = nested(state)
    dropped = sum(view.get("clamp_dropped", [0])) + sum(view.get("guard_dropped", [0]))
    others = tuple((p, step) for p, step in first.items() if p != case_property)
    return Expect(
        runs=runs,
        fired=fired,
        violations=tuple(violations),
        others=others,
        dropped=dropped,
        completed=any(view["completed"]),
    )


def _watched(cfg: Config, case_property: str | None) -> list[str]:
    """The properties an arm reports. That a guard dropped a token is its job under a
    fault (the arm says how many it dropped); it is a finding only where a case is about
    it (on a healthy path: never-drops)."""
    return [p for p in properties_for(cfg) if p != "never-drops" or p == case_property]


def _violates(it: Interpreter, result, prop: str) -> bool:
    if PROPERTIES[prop].kind == "transition":
        return result.checks.get(prop, True) is False
    return not it.state_properties(result.state)[prop]


def replay_command(case: Case, target: Target) -> str:
    """The command that reruns exactly what failed: this module, this target, and the
    vLLM tree the target loaded."""
    where = case.path or "<generated module>"
    name = getattr(target, "name", str(target))
    extra = getattr(target, "replay_option", "")
    return f".venv/bin/python -m pytest {where} --target={name}" + (f" {extra}" if extra else "")


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
                f"  (regenerate with `make generate` if the spec changed on purpose)\n"
                f"replay: {replay_command(case, target)}"
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


def _assert_words(name: str) -> str:
    a = ASSERTS[name]
    return f"`{a.statement}` ({name})" if a.statement else f"{name} (the model ends the trace: {a.doc})"


def fired_mismatch(model_fired: list[str], outcome: Outcome, cfg: Config, spec_state: Mapping, target: Target) -> str:
    """Say what differs when the model and the target disagree on an assert, so that "the
    bug is fixed" and "the assert was removed" read differently."""
    lines = []
    if model_fired:
        lines.append(
            "the model predicts that vLLM's "
            + " and ".join(_assert_words(a) for a in model_fired)
            + " fires here; the target fired "
            + (_assert_words(outcome.fired) if outcome.fired in ASSERTS else (outcome.fired or "nothing"))
        )
    else:
        lines.append(
            f"the target fired {_assert_words(outcome.fired) if outcome.fired in ASSERTS else outcome.fired}"
            f" where the model predicts no assert"
        )
    if outcome.detail:
        lines.append(f"target said: {outcome.detail}")
    if model_fired and not outcome.fired:
        try:
            theirs = target.project()
        except Exception:  # noqa: BLE001 - a half-updated target may not project
            theirs = {}
        props = {ASSERTS[a].property for a in model_fired}
        broken_in_model = [p for p in props if PROPERTIES[p].kind == "state"]
        differs = {k: (spec_state.get(k), v) for k, v in theirs.items() if spec_state.get(k) != v}
        shown = [k for k in spec_state if k[0] == "num_output_placeholders" or k[0] in ("num_stale_output_tokens",)]
        values = ", ".join(f"{k[0]}[r{k[1]}] model {spec_state[k]} / target {theirs.get(k, '?')}" for k in shown)
        if values:
            lines.append("after the step: " + values)
        if not differs and broken_in_model:
            lines.append(
                "the target reached the very state the assert guards and did not fire: "
                "the assert (the invariant check) was removed or moved, not the bug fixed"
            )
        elif differs:
            lines.append(
                "the target's state differs from the model's after this step "
                f"({len(differs)} variable(s)): the target no longer takes this path; if that is a "
                "fix, it shows here first"
            )
    return "\n".join(lines)


def _replay_arm(case: Case, label: str, cfg: Config, target: Target) -> Expect:
    it = Interpreter(cfg)
    state = it.initial(**case.init)
    target.reset(cfg, flat(case.init))  # the protocol takes flat keys
    _compare(case, label, cfg, target, state, 0, "init", case.init)
    watched = _watched(cfg, case.property)
    violations, first, fired, runs = [], {}, None, 0
    for index, (event, named) in enumerate(case.steps):
        args = args_for(it.event(event), cfg, named)
        if not it.enabled(state, event, args):
            break  # e.g. a historical trigger that a release no longer lets happen
        result = it.step(state, event, args)
        state = result.state
        outcome = target.step(event, args)
        _target_error(case, label, target, index + 1, event, named, outcome)
        runs = index + 1
        for prop in watched:
            if _violates(it, result, prop):
                if prop == case.property:
                    violations.append(index + 1)
                first.setdefault(prop, index + 1)
        model_fired = result.fired
        observable = [a for a in model_fired if ASSERTS[a].statement]
        if getattr(target, "observes_asserts", False) and (outcome.fired or observable):
            if outcome.fired not in model_fired:
                raise Divergence(
                    f"{case.name} [{label}] on {target.name}, step {index + 1} {event}{named}:\n"
                    + fired_mismatch(model_fired, outcome, cfg, state, target)
                    + f"\nreplay: {replay_command(case, target)}",
                    index + 1,
                    event,
                    {("fired",): (model_fired or None, outcome.fired)},
                )
        mismatches = outcome.observed.get("mismatches") if outcome.observed else None
        if mismatches:
            raise Divergence(
                f"{case.name} [{label}] on {target.name}, step {index + 1} {event}{named}:\n  "
                + "\n  ".join(mismatches)
                + f"\nreplay: {replay_command(case, target)}",
                index + 1,
                event,
                {("kernel",): (None, mismatches)},
            )
        if model_fired:
            fired = (model_fired[0], index + 1)
            break
        _compare(case, label, cfg, target, state, index + 1, event, named)
    view = nested(state)
    others = tuple((p, step) for p, step in first.items() if p != case.property)
    return Expect(
        runs=runs,
        fired=fired,
        violations=tuple(violations),
        others=others,
        dropped=sum(view.get("clamp_dropped", [0])) + sum(view.get("guard_dropped", [0])),
        completed=any(view["completed"]),
    )


def _target_error(case, label, target, step, event, named, outcome) -> None:
    """A step the target could not complete (vLLM raised something the contract does not
    name, e.g. an assert of the model runner) fails the case with what was raised."""
    error = outcome.observed.get("error") if outcome.observed else None
    if error:
        raise Divergence(
            f"{case.name} [{label}] on {target.name}, step {step} {event}{named}: the target raised: "
            f"{error}\n{outcome.detail}\nreplay: {replay_command(case, target)}",
            step,
            event,
            {("error",): (None, error)},
        )


def _compare(case, label, cfg, target, state, step, event, named) -> None:
    diff = compare(cfg, state, target)
    if diff:
        message = _diff_message(step, event, named, diff)
        raise Divergence(
            f"{case.name} [{label}] on {target.name}: {message}\nreplay: {replay_command(case, target)}",
            step,
            event,
            diff,
        )


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
    lines = [f"divergence after step {step}: {event}({_fmt_args(args)})", f"{'key':<40} {'spec':>14} {'target':>14}"]
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


def replay(
    cfg: Config, init: Mapping, steps: Sequence[tuple[str, Mapping]], target: Target, ignore=None, engine: bool = False
) -> ReplayResult:
    """Step the reference interpreter and the target together; after every step
    compare the projections (and the queue orders). Raises Divergence (an
    AssertionError) with a spec/target diff, the step index and the event.

    A fired assert ends the trace: the asserts the model fires must contain the one
    vLLM fired, and vice versa. `ignore` masks known
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
        model_fatal = result.fired
        if outcome.fired or model_fatal:
            if outcome.fired not in model_fatal:
                diff = {("fired",): (model_fatal or None, outcome.fired)}
                raise Divergence(
                    _diff_message(index, event, flat_args, diff) + f"\n{outcome.detail}", index, event, diff
                )
            return ReplayResult(index + 1, outcome.fired, state, {}, outcomes)
        diff = {}
        if "error" in outcome.observed:
            error = outcome.observed["error"]
            if ignore is None or not ignore(("error",), None, error, state):
                diff[("error",)] = (None, error)
        mismatches = outcome.observed.get("mismatches")
        if mismatches:  # what the target computed against the model's claims about it (kernel, runner)
            diff[("mismatches",)] = (None, mismatches)
        diff.update(compare(cfg, state, target, ignore))
        if engine and hasattr(target, "engine_view"):
            mine, theirs = model_engine_view(cfg, state), target.engine_view()
            for k in mine:
                if mine[k] != theirs[k] and (ignore is None or not ignore((k,), mine[k], theirs[k], state)):
                    diff[(k,)] = (mine[k], theirs[k])
        if diff:
            raise Divergence(_diff_message(index, event, flat_args, diff), index, event, diff)
    return ReplayResult(len(steps), None, state, target.project(), outcomes)
