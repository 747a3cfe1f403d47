"""The driver protocol every target implements (after quint-connect's Driver).

A target is reset for a configuration and a trace's initial picks, then stepped one
event at a time. After every step the harness compares `project()` with the same
projection of the reference interpreter's state. A step that trips one of vLLM's
engine-killing asserts reports it as `fired` instead of raising, so a suite can check
that a violation happens exactly where the model predicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from spec.config import Config


class TargetUnavailable(Exception):
    """The target cannot run here (not installed, no device); the message says how to fix it."""


@dataclass
class Outcome:
    fired: str | None = None  # name of the fatal property whose assert fired, if any
    detail: str = ""
    observed: dict[str, Any] = field(default_factory=dict)  # target-specific facts


class Target(Protocol):
    name: str
    observes_asserts: bool  # True when `fired` reports the target's own assert

    def accepts(self, cfg: Config) -> str | None:
        """None when the target can run this configuration, else the reason it cannot."""

    def reset(self, cfg: Config, init: Mapping[tuple, Any]) -> None:
        """Start a fresh instance for this configuration and the init picks."""

    def step(self, event: str, args: Mapping[tuple, Any]) -> Outcome:
        """Apply one event with its arguments (flat keys, as in the spec)."""

    def project(self) -> dict[tuple, Any]:
        """The target's state on the spec variables it can observe (flat keys)."""
