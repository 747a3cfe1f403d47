"""Playing a case (codegen/case.py) on a target, arm by arm, beside the model.

`replay_case` runs every arm the target can run: it plays the trace on the reference
interpreter (model.run.Run) and hands each step to the target, compares their states
after every step (a diff headed spec / target, the step and the command that replays
it), and finally compares the outcome with the recorded one, so a stale case fails too.
`replay` does the same for a bare trace (the fuzzer's), without a recorded outcome.

After the last step both run on by themselves (model/hang.py's bound, `run_target_on`: the
engine's own loop, no fault; the runner returns what the configuration's runner returned
in the model's run-on for each step both schedule, else what was reserved), and the requests
each leaves behind must be the same: a target that hangs where the model does not (or the
reverse) fails with the stuck request and the count that holds it. A state difference
is read first for the liveness properties on the target's own state (stale-drains,
no-stuck-request): a target that breaks one where the model does not is run on, and the
failure names the hang.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from vllm_contract.codegen.case import Case, Expect, Tally
from vllm_contract.model import hang
from vllm_contract.model.interpreter import Interpreter, flat, nested
from vllm_contract.model.run import Run, is_named
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import TargetUnavailable
from vllm_contract.spec.ops import INT_OPS
from vllm_contract.spec.properties import ASSERTS, PROPERTIES, properties_for
from vllm_contract.spec.state import View
from vllm_contract.targets.orders import model_orders
from vllm_contract.targets.protocol import Outcome, Target

__all__ = ["Case", "Expect", "Divergence", "RunOn", "check_case", "replay", "replay_case", "run_target_on"]

# the liveness properties a target's own state is judged by (spec/properties.py: hangs, a state property)
LIVENESS = tuple(
    name for name, p in PROPERTIES.items() if p.hangs and p.kind == "state" and name != "idle-only-when-done"
)


def replay_command(case: Case, target: Target) -> str:
    """The command that reruns exactly what failed: this module, this target, the vLLM
    tree the target loaded and every environment variable that chose the profile or the
    runtime (pasted as it is, it plays the same arms on the same code)."""
    where = case.path or "<generated module>"
    name = getattr(target, "name", str(target))
    extra = getattr(target, "replay_option", "")
    env = getattr(target, "replay_env", "")
    line = f".venv/bin/python -m pytest {where} --target={name}" + (f" {extra}" if extra else "")
    return f"{env} {line}" if env else line


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


def observes(target: Target, name: str) -> bool:
    """Whether a target can see this vLLM assert fire: it has a statement in vLLM, in code
    the target runs (a runner's assert only where vLLM's own runner runs)."""
    a = ASSERTS[name]
    return bool(a.statement) and (a.site == "scheduler" or getattr(target, "observes_runner_asserts", False))


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
        except Exception:  # a half-updated target may not project
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
    # until_disabled: a step the profile does not allow ends the arm (a trigger a release no longer has)
    run = Run(cfg, case.init, case.steps, until_disabled=True)
    target.reset(cfg, flat(run.init))  # the protocol takes flat keys
    _compare(case, label, cfg, target, run.initial, 0, "init", case.init)
    tally = Tally(cfg, case.property, case.engine_steps)
    seen: list = []  # the target's projection after every step, for the hang check
    diverged: Divergence | None = None  # the first state difference: the target then plays on alone
    alone = _Alone()
    for played in run:
        index, event = played.number - 1, played.event
        named = case.steps[index][1]
        if diverged is not None:
            alone.step(cfg, target, played, index + 1)
            continue
        outcome = target.step(event, played.args, played)
        _target_error(case, label, target, index + 1, event, named, outcome)
        tally.add(played, run.interp)
        model_fired = played.fired
        observable = [a for a in model_fired if observes(target, a)]
        if getattr(target, "observes_asserts", False) and (outcome.fired or observable):
            if outcome.fired not in model_fired:
                mismatch = Divergence(
                    f"{case.name} [{label}] on {target.name}, step {index + 1} {event}{named}:\n"
                    + fired_mismatch(model_fired, outcome, cfg, played.state, target)
                    + f"\nreplay: {replay_command(case, target)}",
                    index + 1,
                    event,
                    {("fired",): (model_fired or None, outcome.fired)},
                )
                if outcome.fired or outcome.error or not runs_on(target):
                    raise mismatch
                alone.judge(cfg, target, index + 1)  # the target lives on where the model's engine died
                raise alone.told(cfg, target, mismatch)
        if outcome.mismatches:
            raise Divergence(
                f"{case.name} [{label}] on {target.name}, step {index + 1} {event}{named}:\n  "
                + "\n  ".join(outcome.mismatches)
                + f"\nreplay: {replay_command(case, target)}",
                index + 1,
                event,
                {("kernel",): (None, outcome.mismatches)},
            )
        if model_fired:
            break
        try:
            _compare(case, label, cfg, target, played.state, index + 1, event, named)
        except Divergence as exc:
            if not runs_on(target):
                raise
            diverged = exc  # reported below, with what the target's own states then show
            alone.judge(cfg, target, index + 1)
            continue
        if case.engine_steps:
            seen.append(target.project())
    if diverged is not None:
        raise alone.told(cfg, target, diverged)
    expect = tally.expect(run.state, len(case.steps))
    _check_hang(case, label, cfg, target, tally, seen, expect)
    if not case.engine_steps and not tally.fired:
        _check_run_on(case.name, label, cfg, target, run.interp, run.state, replay_command(case, target))
    return expect


class _Alone:
    """After a state difference the target plays the case's remaining steps on its own
    (the model's picks, its own state), judged by the liveness properties on its own
    state, then runs on by itself: a tree that under-drains by any amount, or never
    drains, is named as the hang it is, whatever the case injected."""

    def __init__(self):
        self.broken: dict[str, int] = {}  # liveness property -> first step the target's state breaks it
        self.ended: str | None = None  # what stopped the target playing on

    def judge(self, cfg: Config, target: Target, step: int) -> None:
        try:
            for prop in target_liveness(cfg, target.project()):
                self.broken.setdefault(prop, step)
        except (KeyError, TypeError):  # a projection without the counters the properties read
            pass

    def step(self, cfg: Config, target: Target, played, step: int) -> None:
        if self.ended is not None:
            return
        try:
            outcome = target.step(played.event, played.args, played)
        except Exception as exc:  # its state is not the model's: a step may not fit it
            self.ended = f"step {step} {played.event}: {type(exc).__name__}: {exc}"
            return
        if outcome.fired or outcome.error:
            self.ended = f"step {step} {played.event}: {outcome.fired or outcome.error}"
            return
        self.judge(cfg, target, step)

    def told(self, cfg: Config, target: Target, diverged: Divergence) -> Divergence:
        """The first difference, led by the hang the target's own states show, if any."""
        said = ""
        if self.ended is None:
            try:
                theirs = run_target_on(cfg, target)
            except Exception as exc:  # noqa: BLE001 - said, the difference stands
                theirs, said = None, f"; running on by itself raised {type(exc).__name__}: {exc}"
            if theirs is not None and (theirs.stuck or self.broken):
                broken = ", ".join(f"{p} from step {n}" for p, n in self.broken.items())
                head = "HANG on the target" if theirs.stuck else "the target's own state breaks liveness"
                said = (
                    f"{head}: playing the case on by itself its own state violates {broken or 'no liveness property'}"
                    f"; after the last step, run on by itself: {theirs.says(cfg)}"
                )
        elif self.broken:
            said = f"the target's own state violates {', '.join(self.broken)}; it stopped playing on at {self.ended}"
        if not said:
            return diverged
        text = str(diverged)
        at = text.index(": ") + 2 if ": " in text else 0
        return Divergence(text[:at] + said + "\n" + text[at:], diverged.step, diverged.event, diverged.diff)


def _check_hang(case: Case, label: str, cfg: Config, target: Target, tally: Tally, seen: list, expect: Expect) -> None:
    """The hang, read off the target: the same rule as the model's (model/hang.py) on the
    target's own states and its own has_requests(). Differing, the case fails and says
    which request the model and the target each see stuck."""
    run = tally.engine_run(len(case.steps))
    if not run:
        return
    theirs = seen[-len(run) :]
    if ("status", 0) not in theirs[-1]:
        return  # a target that projects no scheduler state (the kernel) compares none, a hang included
    busy = target.engine_view()["has_requests"] if hasattr(target, "engine_view") else hang.busy_in(cfg, run[-1][1])
    queued = target.queued() if hasattr(target, "queued") else None
    found = hang.stuck(cfg, [e for e, _ in run], theirs, busy, queued=queued)
    if found != expect.stuck:
        model_says = hang.describe(cfg, expect.stuck) if expect.stuck else "no request is stuck"
        target_says = hang.describe(cfg, found) if found else "no request is stuck"
        raise Divergence(
            f"{case.name} [{label}] on {target.name}: after the engine's own last {len(run)} steps\n"
            f"  model:  {model_says}\n  target: {target_says} (has_requests() {busy})\n"
            f"replay: {replay_command(case, target)}",
            len(case.steps),
            run[-1][0],
            {("stuck",): (expect.stuck, found)},
        )


# ----------------------------------------------------------------- running on


@dataclass
class RunOn:
    """The engine run on by itself on a target: its events, its projection after each,
    has_requests() at the end, the requests left behind (model/hang.py stuck), or what ended
    the engine (an assert or an error: a crash, not a hang)."""

    start: dict
    events: list[str] = field(default_factory=list)
    states: list[dict] = field(default_factory=list)
    busy: bool = True
    stuck: tuple = ()
    fired: str | None = None
    error: str | None = None
    site: tuple | None = None  # (file, line, statement) of the assert that fired

    @property
    def end(self) -> dict:
        return self.states[-1] if self.states else self.start

    def says(self, cfg: Config) -> str:
        if self.fired or self.error:
            return f"the engine dies while it runs on: {self.fired or self.error}"
        return hang.describe(cfg, self.stuck, self.end) if self.stuck else "no request is stuck"


def runs_on(target: Target) -> bool:
    """A target that projects the scheduler's state and can run the engine on by itself
    (not one whose engine an error already ended: a masked one, in a fuzz replay)."""
    if not hasattr(target, "engine_step") or getattr(target, "ended", None) is not None:
        return False
    return ("status", 0) in target.project()


def _decided(cfg: Config, model: RunOn | None, index: int) -> dict[int, int] | None:
    """What the configuration's runner returns for the step the model's run-on schedules at
    engine step `index` (request -> tokens), or None where the model's run-on does not
    schedule there."""
    if model is None or index >= len(model.events) or model.events[index] != "schedule":
        return None
    state = model.states[index]
    slot = state[("queue_len",)] - 1
    return {r: state[("q_sampled", slot, r)] for r in range(cfg.requests) if state[("q_scheduled", slot, r)]}


def run_target_on(cfg: Config, target: Target, model: RunOn | None = None) -> RunOn:
    """EngineCore's own loop on the target, by itself, for model/hang.py's bound (the target's
    engine_step), then which requests it left behind, on the target's own state and
    has_requests() (and its queues, where it has them). With the model's run-on beside it
    (`model`), a step the target schedules where the model's schedules returns what the
    configuration's runner returned there, as the case's own steps do; without, or where
    the two part, a runner that returns what the scheduler reserved."""
    run = RunOn(target.project())
    if not getattr(target, "takes_run_on_decisions", False):
        model = None  # it plays a runner of its own (the reference: the spec's)
    for index in range(hang.engine_bound(cfg)):
        decided = _decided(cfg, model, index)
        event, outcome = target.engine_step(decided) if decided is not None else target.engine_step()
        if model is not None and (index >= len(model.events) or model.events[index] != event):
            model = None  # the two runs part: the model's later decisions are of other steps
        if event is None:
            break
        if outcome.fired or outcome.error:
            run.fired, run.error, run.site = outcome.fired, outcome.error, outcome.assert_site
            run.events.append(event)
            return run
        run.events.append(event)
        run.states.append(target.project())
    run.busy = bool(target.engine_view()["has_requests"]) if hasattr(target, "engine_view") else True
    queued = target.queued() if hasattr(target, "queued") else None
    run.stuck = hang.stuck(cfg, run.events, run.states, run.busy, start=run.start, queued=queued)
    return run


def model_run_on(interp: Interpreter, state) -> RunOn:
    """The model's counterpart: the engine run on from `state` on the interpreter."""
    steps, states, fired = hang.played_on(interp, state)
    run = RunOn(dict(state), [e for e, _ in steps], states, fired=fired[0] if fired else None)
    if not fired:
        run.busy = hang.busy_in(interp.cfg, run.end)
        run.stuck = hang.stuck(interp.cfg, run.events, run.states, run.busy, start=run.start)
    return run


def _check_run_on(name: str, label: str, cfg: Config, target: Target, interp, state, replay_line: str) -> None:
    """After the case: the model and the target each run on by themselves; they must leave
    the same requests behind for the same reason (and die of the same assert, if any)."""
    if not runs_on(target):
        return
    mine = model_run_on(interp, state)
    theirs = run_target_on(cfg, target, mine)
    if (mine.stuck, mine.fired) == (theirs.stuck, theirs.fired) and not theirs.error:
        return
    head = "HANG on the target" if theirs.stuck and not mine.stuck else "the engine run on differs"
    died = theirs.fired or theirs.error
    raise Divergence(
        f"{name} [{label}] on {target.name}: {head}: after the case's last step, run on by itself for "
        f"{hang.engine_bound(cfg)} engine steps (no fault, a budget for every request)\n"
        f"  model:  {mine.says(cfg)}\n  target: {theirs.says(cfg)} (has_requests() {theirs.busy})\n"
        f"replay: {replay_line}",
        len(theirs.events),
        theirs.events[-1] if theirs.events else "run-on",
        {("fired",): (mine.fired, died)} if died else {("stuck",): (mine.stuck, theirs.stuck)},
    )


def target_liveness(cfg: Config, projection) -> list[str]:
    """The liveness properties (LIVENESS) the target's own state violates, by the spec's
    definitions on its projection; none for a target that projects no scheduler state."""
    if ("status", 0) not in projection:
        return []
    applies = properties_for(cfg)
    view = View(cfg, projection)
    return [p for p in LIVENESS if p in applies and not PROPERTIES[p].holds(view, cfg, INT_OPS)]


def hang_words(cfg: Config, spec_state, target: Target) -> str:
    """For a state difference: the liveness properties the target's state breaks and the
    model's does not, and the hang the target then shows run on by itself; '' when none."""
    try:
        broken = [p for p in target_liveness(cfg, target.project()) if p not in target_liveness(cfg, spec_state)]
    except (KeyError, TypeError):  # a projection without the counters the properties read
        return ""
    if not broken or not runs_on(target):
        return ""
    theirs = run_target_on(cfg, target)
    said = theirs.says(cfg)
    lead = "HANG on the target" if theirs.stuck else "the target's own state breaks liveness"
    return f"{lead}: its state violates {', '.join(broken)} where the model's does not; run on by itself: {said}"


def _target_error(case, label, target, step, event, named, outcome) -> None:
    """A step the target could not complete (vLLM raised something the contract does not
    name, e.g. an assert of the model runner) fails the case with what was raised."""
    error = outcome.error
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
    """The model's counterpart of VllmTarget.engine_view (spec.engine.has_requests)."""
    from vllm_contract.spec.engine import has_requests
    from vllm_contract.spec.ops import INT_OPS
    from vllm_contract.spec.state import View

    return {"has_requests": bool(has_requests(View(cfg, state), cfg, INT_OPS))}


def replay(
    cfg: Config,
    init: Mapping,
    steps: Sequence[tuple[str, Mapping]],
    target: Target,
    ignore=None,
    engine: bool = False,
    run_on: bool = True,
) -> ReplayResult:
    """Step the reference interpreter and the target together; after every step
    compare the projections (and the queue orders). Raises Divergence (an
    AssertionError) with a spec/target diff, the step index and the event.

    A fired assert ends the trace: the asserts the model fires must contain the one
    vLLM fired, and vice versa. `ignore` masks known differences (see compare); the
    fuzzer uses it to look past them. engine=True also compares what the engine loop
    decides with (has_requests), which is not a spec variable: a difference there means
    the model's schedule/deliver guards admit an order EngineCore would not take.
    run_on: after the last step both run on by themselves (run_target_on); the requests
    each leaves behind must be the same, else a Divergence at the event "run-on"."""
    cfg = cfg.validate()
    run = Run(cfg, init, steps)
    target.reset(cfg, run.init)
    diff = compare(cfg, run.initial, target, ignore)
    if diff:
        raise Divergence(_diff_message(-1, "init", run.init, diff), -1, "init", diff)
    outcomes = []
    for played in run:
        index, event, flat_args, state = played.number - 1, played.event, played.args, played.state
        outcome = target.step(event, flat_args, played)
        outcomes.append(outcome)
        model_fatal = played.fired
        if model_fatal and not outcome.fired and not any(observes(target, a) for a in model_fatal):
            # an assert this target cannot see (a runner's where vLLM's runner does not run, or
            # the model's own, with no statement in vLLM): the model ends the trace here, as
            # a generated case's arm does (_replay_arm)
            return ReplayResult(index + 1, None, state, {}, outcomes)
        if outcome.fired or model_fatal:
            if outcome.fired not in model_fatal:
                diff = {("fired",): (model_fatal or None, outcome.fired)}
                raise Divergence(
                    _diff_message(index, event, flat_args, diff) + f"\n{outcome.detail}", index, event, diff
                )
            return ReplayResult(index + 1, outcome.fired, state, {}, outcomes)
        diff = {}
        if outcome.error is not None:
            if ignore is None or not ignore(("error",), None, outcome.error, state):
                diff[("error",)] = (None, outcome.error)
        if outcome.mismatches:  # what the target computed against the model's claims about it (kernel, runner)
            diff[("mismatches",)] = (None, outcome.mismatches)
        diff.update(compare(cfg, state, target, ignore))
        if engine and hasattr(target, "engine_view"):
            mine, theirs = model_engine_view(cfg, state), target.engine_view()
            for k in mine:
                if mine[k] != theirs[k] and (ignore is None or not ignore((k,), mine[k], theirs[k], state)):
                    diff[(k,)] = (mine[k], theirs[k])
        if diff:
            message = _diff_message(index, event, flat_args, diff)
            hung = hang_words(cfg, state, target)
            raise Divergence(f"{hung}\n{message}" if hung else message, index, event, diff)
    result = ReplayResult(len(steps), None, run.state, target.project(), outcomes)
    if run_on and runs_on(target):
        mine = model_run_on(run.interp, run.state)
        theirs = run_target_on(cfg, target, mine)
        differs = (mine.stuck, mine.fired) != (theirs.stuck, theirs.fired) or theirs.error
        if differs:
            key = ("stuck",) if not (theirs.fired or theirs.error) else ("fired",)
            values = (mine.stuck, theirs.stuck) if key == ("stuck",) else (mine.fired, theirs.fired or theirs.error)
            if ignore is None or not ignore(key, values[0], values[1], run.state):
                raise Divergence(
                    f"run on by itself after the last step ({hang.engine_bound(cfg)} engine steps, no fault)\n"
                    f"  model:  {mine.says(cfg)}\n  target: {theirs.says(cfg)} (has_requests() {theirs.busy})",
                    len(steps),
                    "run-on",
                    {key: values},
                )
    return result
