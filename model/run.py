"""One trace on the reference interpreter, a step at a time: the loop every replay builds on.

`Run(cfg, init, steps)` starts the interpreter from the init picks and yields a `Played`
per step: the event, its (flat) arguments, the state before and the interpreter's
result (the state after, the transition checks, the asserts, what the runner decided).
The engine is dead once one of vLLM's asserts fires, so the run ends after that step.
A step the spec does not allow raises Disabled, or, with `until_disabled`, ends the run
(a historical trigger that a release no longer lets happen).

The prover's replays (model/trace.py), the case predictions (codegen), the harness that
plays a case on a target beside the model (targets/harness.py), the review's observer,
the fix checks and the benchmarks all iterate a Run; a target is handed the model's step
so it never needs an interpreter of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, cast

from vllm_contract.model.interpreter import Disabled, Interpreter, State, StepResult, args_for, nested
from vllm_contract.spec.config import Config


def is_named(values: Mapping) -> bool:
    """Named ({"budget": 2}) rather than flat ({("budget",): 2}) arguments."""
    return all(isinstance(k, str) for k in values)


@dataclass(frozen=True)
class Played:
    """One step of a trace as the model played it."""

    number: int  # 1-based: the step's number in tables and messages
    event: str
    args: dict  # flat keys -> value, every argument present
    before: State
    result: StepResult

    @property
    def state(self) -> State:
        return self.result.state

    @property
    def fired(self) -> list[str]:
        return self.result.fired

    @property
    def named(self) -> dict:
        return nested(self.args)


class Run:
    """A trace replayed on the interpreter; iterate it for the steps (see the module docstring)."""

    def __init__(
        self,
        cfg: Config | Interpreter,
        init: Mapping[str, Any] | Mapping[tuple, Any],
        steps: Iterable,
        until_disabled: bool = False,
    ):
        self.interp = cfg if isinstance(cfg, Interpreter) else Interpreter(cfg)
        self.cfg = self.interp.cfg
        self.init = dict(init) if is_named(init) else nested(cast(Mapping[tuple, Any], init))  # flat: not named
        self.initial: State = self.interp.initial(**self.init)
        self.state: State = self.initial
        self.steps = steps
        self.until_disabled = until_disabled
        self.ended: str = ""  # why the run stopped before its last step ("fired", "disabled"), else ""

    def flat_args(self, event: str, args: Mapping) -> dict:
        """Every argument of the event, flat; one left out takes its default, an unknown
        one raises SpecError."""
        named = dict(args) if is_named(args) else nested(args)
        return args_for(self.interp.event(event), self.cfg, named)

    def __iter__(self) -> Iterator[Played]:
        for number, step in enumerate(self.steps, 1):
            event, args = (step.event, step.args) if hasattr(step, "event") else step
            flat_args = self.flat_args(event, args)
            before = self.state
            try:
                result = self.interp.step(before, event, flat_args)
            except Disabled:
                if self.until_disabled:
                    self.ended = "disabled"
                    return
                raise
            self.state = result.state
            yield Played(number, event, flat_args, before, result)
            if result.fired:
                self.ended = "fired"
                return
