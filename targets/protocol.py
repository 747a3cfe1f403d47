"""The driver protocol every target implements (after quint-connect's Driver).

A target is reset for a configuration and a trace's initial picks, then stepped one
event at a time. Each step is handed the model's own play of it (model.run.Played:
the state after it and what the runner decided), so a target that plays only part of
the system (vLLM's scheduler without a model runner) takes the rest from the model
instead of stepping an interpreter of its own. After every step the harness compares
`project()` with the same projection of the reference interpreter's state. A step that
trips one of vLLM's engine-killing asserts reports it as `fired` instead of raising, so
a suite can check that a violation happens exactly where the model predicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from vllm_contract.model.run import Played
from vllm_contract.spec.config import Config


@dataclass
class Outcome:
    """What one step did on a target."""

    fired: str | None = None  # the spec's name of the vLLM assert that fired, if any
    detail: str = ""  # one line for messages
    error: str | None = None  # the target raised something the contract does not name (the case ends)
    assert_site: tuple | None = None  # (file, line, statement) where a vLLM assert fired
    mismatches: list[str] = field(default_factory=list)  # the target's computation against the model's claims
    facts: dict[str, Any] = field(default_factory=dict)  # target-specific observations (kernel rows, positions)


class Target(Protocol):
    name: str
    observes_asserts: bool  # True when `fired` reports the target's own assert
    observes_runner_asserts: bool  # and a runner's asserts too (it runs vLLM's runner, or is the model)

    def accepts(self, cfg: Config) -> str | None:
        """None when the target can run this configuration, else the reason it cannot."""

    def reset(self, cfg: Config, init: Mapping[tuple, Any]) -> None:
        """Start a fresh instance for this configuration and the init picks."""

    def step(self, event: str, args: Mapping[tuple, Any], model: Played) -> Outcome:
        """Apply one event with its arguments (flat keys, as in the spec); `model` is the
        model's play of the same step."""

    def project(self) -> dict[tuple, Any]:
        """The target's state on the spec variables it can observe (flat keys)."""
