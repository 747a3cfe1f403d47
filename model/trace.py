"""Traces: what a counterexample or witness is, and its concrete replay.

A trace is the init picks plus a list of steps (event name and its arguments). States
are not stored as input: they are recomputed by the reference interpreter, so a trace
means exactly what the spec says it means. The solver's states are compared with the
replayed ones; any difference is an internal error of the encoding, never reported
as a finding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_contract.model import hang
from vllm_contract.model.interpreter import Disabled, Interpreter, State, args_for, flat, nested
from vllm_contract.model.run import Run
from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.properties import PROPERTIES, properties_for
from vllm_contract.spec.verdicts import Fired


class ReplayMismatch(AssertionError):
    """The solver's trace and the concrete interpreter disagree: a bug in model/."""


@dataclass
class Step:
    event: str
    args: dict  # flat keys -> value

    def named_args(self) -> dict:
        return nested(self.args)


@dataclass
class Trace:
    config: str
    init: dict  # flat init picks
    steps: list[Step]
    goal: str  # the property violated, or the witness reached
    kind: str  # "violation" | "witness" | "divergence" (model/itf.py KINDS)
    states: list[State] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)  # per step: transition property -> held
    fired: list[list] = field(default_factory=list)  # per step: the vLLM asserts that fired
    observed: list[dict] = field(default_factory=list)
    mechanisms: list[str] = field(default_factory=list)  # optional mechanisms it uses (its class)
    solver_states: list[State] | None = None  # as the solver saw them, before replay
    recorded: list[dict] | None = None  # the states an ITF file records (variable -> nested value)
    stuck: tuple = ()  # a liveness violation: the requests the engine, run on, never runs again (model/hang.py)

    @property
    def depth(self) -> int:
        return len(self.steps)

    @property
    def fired_at_end(self) -> Fired:
        """What vLLM does at the trace's last step: an assert fires (crash), the engine runs
        on without ever running a request again (hang), or nothing (silent)."""
        last = self.fired[-1] if self.fired else []
        return Fired(last[0] if last else None, hang=bool(self.stuck) and not last)


def replay(
    interp: Interpreter, init: dict, steps: list[Step], fired: list | None = None
) -> tuple[list[State], list[dict], list[dict]]:
    """Run a trace on the reference interpreter; returns states, checks and observations
    (and appends each step's fired asserts to `fired` when given)."""
    run = Run(interp, init, steps)
    states, checks, observed = [run.initial], [], []
    for played in run:
        states.append(played.state)
        checks.append(played.result.checks)
        observed.append(played.result.observed)
        if fired is not None:
            fired.append(played.fired)
    return states, checks, observed


def confirm(interp: Interpreter, trace: Trace, solver_states: list[State] | None = None) -> Trace:
    """Replay, compare with the solver's states, and check the goal really happens."""
    fired: list = []
    states, checks, observed = replay(interp, trace.init, trace.steps, fired)
    trace.fired = fired
    if solver_states is not None:
        for t, (mine, theirs) in enumerate(zip(states, solver_states)):
            diff = {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}
            if diff:
                raise ReplayMismatch(
                    f"{trace.config}: state {t} differs between the interpreter and Z3 "
                    f"(interpreter, z3): {dict(list(diff.items())[:8])}"
                )
    trace.states, trace.checks, trace.observed = states, checks, observed
    if trace.kind == "violation":
        if not happens(interp, trace, trace.goal):
            raise ReplayMismatch(
                f"{trace.config}: the counterexample for {trace.goal} does not violate it when replayed"
            )
        trace.stuck = left_stuck(interp, trace)
    return trace


def left_stuck(interp: Interpreter, trace: Trace) -> tuple:
    """For a replayed violation of a liveness property that no assert ends: the requests the
    engine, run on from its last state, never runs again (model/hang.py); else ()."""
    if trace.kind != "violation" or not PROPERTIES[trace.goal].hangs or (trace.fired and trace.fired[-1]):
        return ()
    return hang.shown(interp, trace.states[-1])[1]


def happens(interp: Interpreter, trace: Trace, prop: str) -> bool:
    """Does the (replayed) trace violate `prop` at its last step or state?"""
    if PROPERTIES[prop].kind == "transition":
        return bool(trace.checks) and trace.checks[-1].get(prop, True) is False
    if PROPERTIES[prop].kind == "progress":  # the engine, run on from the last state, leaves a request
        return bool(hang.shown(interp, trace.states[-1])[1])
    return not interp.state_properties(trace.states[-1])[prop]


def first_difference(trace: Trace) -> str | None:
    """Where the states a trace file records contradict its replay (the spec's states):
    the first step and variable, recorded vs spec; None when they agree. Only the
    variables the spec has are compared (a trace may record fewer, or more of its own)."""
    if trace.recorded is None:
        return None
    for t, (recorded, state) in enumerate(zip(trace.recorded, trace.states)):
        spec = nested(state)
        for name in sorted(set(recorded) & set(spec)):
            mine, theirs = flat({name: spec[name]}), flat({name: recorded[name]})
            for key in sorted(set(mine) | set(theirs)):
                if key in mine and key in theirs and mine[key] == theirs[key]:
                    continue
                label = name + "".join(f"[{i}]" for i in key[1:])
                where = "the initial state" if t == 0 else f"after step {t} ({trace.steps[t - 1].event})"
                recorded_as = f"is recorded as {theirs[key]!r}" if key in theirs else "is not recorded"
                spec_gives = f"the spec gives {mine[key]!r}" if key in mine else "the spec has no such element"
                return f"state {t}, {where}: {label} {recorded_as}, {spec_gives}"
    return None


@dataclass
class Replayed:
    """How far the model replays the trace and what it says at its end."""

    steps_run: int = 0
    left_at: int | None = None  # the step the model refuses (1-based), if any
    why: str = ""
    fired: list[str] = field(default_factory=list)  # vLLM asserts the model fires at the last step
    violated: list[str] = field(default_factory=list)  # properties the model violates at the last step
    differs: str | None = None  # the first recorded value the replay contradicts
    states: list = field(default_factory=list)  # the replay's states, as far as it went
    stuck: tuple = ()  # run on from the last state, the requests the engine leaves behind (model/hang.py)


def judge(it: Interpreter | None, cfg, init: dict, steps: list, recorded: list | None) -> Replayed:
    """How far the model replays a recorded trace (named init picks, [(event, named picks)]),
    what it says at its last step, and the first recorded value (a state of `recorded`,
    e.g. what vLLM showed the monitor) the replay contradicts. `it` None: the trace's
    configuration is outside the model."""
    replay = Replayed()
    if it is None:
        replay.left_at, replay.why = 0, "the configuration is outside the model"
        return replay
    try:
        state = it.initial(**init)
    except (Disabled, SpecError) as exc:
        replay.left_at, replay.why = 0, f"the initial picks: {exc}"
        return replay
    states: list[State] = [state]
    checks: dict = {}
    fired: list[str] = []
    for number, (event, named) in enumerate(steps, 1):
        if fired:
            replay.left_at, replay.why = number, f"the model's engine died at step {number - 1} ({', '.join(fired)})"
            return replay
        try:
            result = it.step(state, event, args_for(it.event(event), cfg, named))
        except (Disabled, SpecError) as exc:
            replay.left_at, replay.why = number, str(exc)
            return replay
        state, checks, fired = result.state, result.checks, result.fired
        states.append(state)
        replay.steps_run = number
    replay.states = states
    replay.fired = list(fired)
    replay.violated = [p for p in properties_for(cfg) if PROPERTIES[p].kind == "transition" and not checks.get(p, True)]
    replay.violated += [p for p, ok in it.state_properties(state).items() if not ok]
    if not fired:  # run on by itself from the last state: a request left behind violates bounded-progress
        replay.stuck = hang.shown(it, state)[1]
        if replay.stuck and "bounded-progress" in properties_for(cfg):
            replay.violated.append("bounded-progress")
    trace = Trace(cfg.name, {}, [Step(e, {}) for e, _ in steps], "", "violation")
    trace.states, trace.recorded = states, recorded
    replay.differs = first_difference(trace)
    return replay
