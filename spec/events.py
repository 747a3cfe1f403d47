"""Events: a guard and an update, written once, plus the properties they check.

An event is a function `(s, a, nxt, cfg, ops) -> Effect`. It reads the current state
`s` and its arguments `a` (nondeterministic picks: a budget, which request, ...),
writes the successor into `nxt`, and returns its guard, the transition properties it
checks (name -> condition that must hold) and the vLLM asserts it passes through
(name -> condition under which the assert passes; spec/properties.py). Argument
domains declared here are added to the guard, so every interpreter sees the same
choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from vllm_contract.spec.config import Config
from vllm_contract.spec.ops import Ops
from vllm_contract.spec.state import Next, View
from vllm_contract.spec.vocabulary import keys_of


@dataclass(frozen=True)
class Arg:
    """An event argument. `over=("req",)` makes one value per request."""

    name: str
    sort: type
    doc: str
    over: tuple[str, ...] = ()
    lo: int | None = None
    hi: int | None = None
    default: Any = None  # when a caller leaves it out; None means 0 / False

    def fallback(self):
        if self.default is not None:
            return self.default
        return False if self.sort is bool else 0


@dataclass
class Effect:
    guard: Any
    checks: dict[str, Any] = field(default_factory=dict)
    asserts: dict[str, Any] = field(default_factory=dict)
    # facts a target may need that are not state, e.g. the V2 kernel's row inputs;
    # the concrete interpreter returns them, the Z3 encoding ignores them
    observed: dict[str, Any] = field(default_factory=dict)


EventFn = Callable[[View, View, Next, Config, Ops], Effect]


@dataclass(frozen=True)
class Event:
    name: str
    family: str | None  # None: always enabled
    doc: str
    source: str
    args: Callable[[Config], tuple[Arg, ...]]
    fn: EventFn

    def enabled_in(self, cfg: Config) -> bool:
        return self.family is None or any(f in cfg.events for f in self.family.split("|"))

    def arg_keys(self, cfg: Config) -> list[tuple[Arg, tuple]]:
        out = []
        for arg in self.args(cfg):
            for key in keys_of(arg, cfg):
                out.append((arg, key))
        return out


def domain_guard(event: Event, a_values: Mapping[tuple, Any], cfg: Config, ops: Ops):
    """The static bounds of an event's arguments, as a condition."""
    conds = []
    for arg, key in event.arg_keys(cfg):
        v = a_values[key]
        if arg.lo is not None:
            conds.append(v >= arg.lo)
        if arg.hi is not None:
            conds.append(v <= arg.hi)
    return ops.all(*conds)


class ArgView(View):
    """Named, read-only access to an event's arguments."""

    def __init__(self, event: Event, cfg: Config, values: Mapping):
        object.__setattr__(self, "_cfg", cfg)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_decls", {arg.name: arg for arg in event.args(cfg)})
