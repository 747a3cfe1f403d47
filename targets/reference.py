"""The reference target: the spec's own interpreter, behind the driver protocol.

Every generated case runs on it in the default `make test`. It is the oracle the
other targets are compared with, so on its own it checks that a case's recorded
outcome still follows from spec/ (a spec change that alters a prediction fails here
until the suites are regenerated).
"""

from __future__ import annotations

from typing import Any, Mapping

from vllm_contract.model import hang
from vllm_contract.model.interpreter import Interpreter, State, nested
from vllm_contract.model.run import is_named
from vllm_contract.spec.config import Config
from vllm_contract.targets.protocol import Outcome


class ReferenceTarget:
    observes_asserts = True
    observes_runner_asserts = True

    def __init__(self, clamp: bool | None = None):
        self.clamp = clamp  # None: either arm; True/False: only that arm
        self.name = "reference" if clamp is None else ("reference-clamp" if clamp else "reference-noclamp")
        self.interp: Interpreter | None = None
        self.state: State = {}

    def accepts(self, cfg: Config) -> str | None:
        if self.clamp is not None and cfg.clamp != self.clamp:
            return f"this target runs the clamp-{'on' if self.clamp else 'off'} arm only"
        return None

    def reset(self, cfg: Config, init: Mapping[str, Any]) -> None:
        self.interp = Interpreter(cfg)
        self.state = self.interp.initial(**(dict(init) if is_named(init) else nested(init)))

    def step(self, event: str, args: Mapping[tuple, Any], model=None) -> Outcome:
        """Steps an interpreter of its own: the reference is the spec itself, played again
        from the same picks (the harness's model play is not read)."""
        result = self.interp.step(self.state, event, args)
        self.state = result.state
        fired = result.fired
        return Outcome(fired=fired[0] if fired else None)

    def engine_step(self) -> tuple[str | None, Outcome]:
        """The engine run on by itself (model/hang.py next_step): the spec's own policy."""
        found = hang.next_step(self.interp, self.state)
        if found is None:
            return None, Outcome()
        event, _, result = found
        self.state = result.state
        return event, Outcome(fired=result.fired[0] if result.fired else None)

    def engine_view(self) -> dict[str, Any]:
        return {"has_requests": hang.busy_in(self.interp.cfg, self.state)}

    def project(self) -> dict[tuple, Any]:
        return dict(self.state)
