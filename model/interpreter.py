"""The reference interpreter: spec/ run on plain ints. Every trace is replayed here.

This is the oracle the generated suites and the prover's counterexamples are checked
against. It evaluates exactly the code the Z3 encoding is built from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from vllm_contract.spec.catalog import BY_NAME, INIT, events_for
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.events import Event
from vllm_contract.spec.ops import INT_OPS
from vllm_contract.spec.transition import apply
from vllm_contract.spec.vocabulary import decls_for, keys_of

State = dict  # key tuple -> int | bool


class Disabled(Exception):
    """An event was replayed in a state where its guard does not hold."""


@dataclass
class StepResult:
    state: State
    checks: dict[str, bool]  # transition property -> held
    observed: dict[str, Any]  # event-specific facts (see Effect.observed)
    asserts: dict[str, bool] | None = None  # vLLM assert -> passed (spec/properties.py ASSERTS)

    def failed(self) -> list[str]:
        return [name for name, ok in self.checks.items() if not ok]

    @property
    def fired(self) -> list[str]:
        """The vLLM asserts that fired in this step (the engine is dead after it)."""
        return [name for name, ok in (self.asserts or {}).items() if not ok]


def state_keys(cfg: Config) -> list[tuple]:
    return [k for d in decls_for(cfg) for k in keys_of(d, cfg)]


def nested(keys_values: Mapping[tuple, Any], names: list[str] | None = None) -> dict[str, Any]:
    """{(name, i, j): v} -> {name: [[v]]} (scalars stay scalars)."""
    out: dict[str, Any] = {}
    for key, value in keys_values.items():
        name, idx = key[0], key[1:]
        if not idx:
            out[name] = value
            continue
        node = out.setdefault(name, [])
        for depth, i in enumerate(idx):
            last = depth == len(idx) - 1
            while len(node) <= i:
                node.append(None if last else [])
            if last:
                node[i] = value
            else:
                node = node[i]
    if names is not None:
        out = {n: out[n] for n in names if n in out}
    return out


def flat(named: Mapping[str, Any]) -> dict[tuple, Any]:
    """{name: [[v]]} -> {(name, i, j): v}."""
    out: dict[tuple, Any] = {}

    def walk(prefix: tuple, value):
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(prefix + (i,), item)
        else:
            out[prefix] = value

    for name, value in named.items():
        walk((name,), value)
    return out


def args_for(event: Event, cfg: Config, named: Mapping[str, Any]) -> dict[tuple, Any]:
    """An event's arguments from names; a missing one defaults to 0/False."""
    given = flat(named)
    unknown = {k[0] for k in given} - {a.name for a in event.args(cfg)}
    if unknown:
        raise SpecError(
            f"event {event.name!r} has no argument(s) {', '.join(sorted(unknown))} under config "
            f"{cfg.name!r}; its arguments are: {', '.join(a.name for a in event.args(cfg)) or 'none'}"
        )
    out = {}
    for arg, key in event.arg_keys(cfg):
        out[key] = given.get(key, arg.fallback())
    return out


class Interpreter:
    def __init__(self, cfg: Config):
        self.cfg = cfg.validate()
        self.events = {e.name: e for e in events_for(cfg)}
        self.keys = state_keys(cfg)

    def initial(self, **named) -> State:
        args = args_for(INIT, self.cfg, named)
        blank = {k: None for k in self.keys}
        guard, writes, _ = apply(INIT, blank, args, self.cfg, INT_OPS)
        if not guard:
            raise Disabled(f"init arguments {named} are not allowed under config {self.cfg.name!r}")
        missing = [k for k in self.keys if k not in writes]
        assert not missing, f"init leaves {missing} unset"
        return dict(writes)

    def event(self, name: str) -> Event:
        if name not in self.events:
            known = BY_NAME.get(name)
            hint = (
                "it needs one of the event families " + ", ".join(known.family.split("|")) + " in the config's events"
                if known and known.family
                else f"known events: {', '.join(self.events)}"
            )
            raise SpecError(f"event {name!r} is not enabled in config {self.cfg.name!r}; {hint}")
        return self.events[name]

    def enabled(self, state: State, name: str, args: Mapping[tuple, Any]) -> bool:
        guard, _, _ = apply(self.event(name), state, args, self.cfg, INT_OPS)
        return bool(guard)

    def step(self, state: State, name: str, args: Mapping[tuple, Any]) -> StepResult:
        result = self.try_step(state, name, args)
        if result is None:
            raise Disabled(f"{name}({nested(args)}) is not enabled in this state")
        return result

    def try_step(self, state: State, name: str, args: Mapping[tuple, Any]) -> StepResult | None:
        """The step, or None where its guard does not hold: one evaluation of the event,
        where enabled() then step() would take two (the engine's run on asks at every step)."""
        guard, writes, effect = apply(self.event(name), state, args, self.cfg, INT_OPS)
        if not guard:
            return None
        nxt = dict(state)
        nxt.update(writes)
        return StepResult(
            nxt,
            {k: bool(v) for k, v in effect.checks.items()},
            effect.observed,
            {k: bool(v) for k, v in effect.asserts.items()},
        )

    def state_properties(self, state: State) -> dict[str, bool]:
        from vllm_contract.spec.properties import PROPERTIES
        from vllm_contract.spec.state import View

        view = View(self.cfg, state)
        return {
            p.name: bool(p.state_holds(view, self.cfg, INT_OPS))
            for p in PROPERTIES.values()
            if p.kind == "state" and p.applies(self.cfg)
        }
