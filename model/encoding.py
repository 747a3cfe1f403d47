"""A configuration's transition system as Z3 formulas.

The spec's events are run once on symbolic template variables (current state, next
state, arguments, an action selector); each unrolled step gets fresh variables and a
copy of the template by substitution (done in C++, so deep unrollings stay cheap to
build). Encoding choices follow ../shared/docs/z3-encoding-notes.md: Int not BitVec,
fresh variables per step linked by equalities, one solver queried with assumptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import z3
from vllm_contract.model.interpreter import state_keys
from vllm_contract.model.z3ops import Z3_OPS
from vllm_contract.spec.catalog import INIT, events_for
from vllm_contract.spec.config import Config
from vllm_contract.spec.events import Event
from vllm_contract.spec.properties import ASSERTS, PROPERTIES
from vllm_contract.spec.state import View
from vllm_contract.spec.transition import apply
from vllm_contract.spec.vocabulary import decls_for, keys_of
from z3.z3 import _to_expr_ref  # wraps a C-level result; no public equivalent


def _name(key: tuple) -> str:
    return key[0] + "".join(f"[{i}]" for i in key[1:])


def _const(name: str, sort: type):
    return z3.Bool(name) if sort is bool else z3.Int(name)


def _as_bool(term):
    return z3.BoolVal(term) if isinstance(term, bool) else term


@dataclass
class StepVars:
    state: dict  # key -> const of state t
    act: Any
    args: dict  # event name -> {key: const}


class Encoding:
    def __init__(self, cfg: Config):
        self.cfg = cfg.validate()
        self.events: tuple[Event, ...] = events_for(cfg)
        self.keys = state_keys(cfg)
        self.sort = {k: d.sort for d in decls_for(cfg) for k in keys_of(d, cfg)}
        self._steps: dict[int, StepVars] = {}
        self._state_templates: dict = {}  # state-formula builder -> formula on the template state
        self._renamings: dict = {}  # ("step" | "state", t) -> the substitution's C arrays

        cur = {k: _const("s." + _name(k), self.sort[k]) for k in self.keys}
        nxt = {k: _const("n." + _name(k), self.sort[k]) for k in self.keys}
        act = z3.Int("act")
        args = {e.name: self._arg_consts(e, "a") for e in self.events}
        self._template_vars = StepVars(cur, act, args)
        self._next_template = nxt

        # -- the transition relation ------------------------------------------------
        ops = Z3_OPS
        enabled: list = []
        merged: dict[tuple, list] = {}
        bad: dict[str, list] = {p: [] for p in PROPERTIES if PROPERTIES[p].kind == "transition"}
        fires: dict[str, list] = {name: [] for name in ASSERTS}
        self._guards = {}
        for index, event in enumerate(self.events):
            guard, writes, effect = apply(event, cur, args[event.name], cfg, ops)
            self._guards[event.name] = _as_bool(guard)
            chosen = act == index
            enabled.append(z3.And(chosen, _as_bool(guard)))
            for key, value in writes.items():
                merged.setdefault(key, []).append((chosen, value))
            for prop, ok in effect.checks.items():
                if ok is not True:
                    bad[prop].append(z3.And(chosen, z3.Not(_as_bool(ok))))
            for name, ok in effect.asserts.items():
                if ok is not True:
                    fires[name].append(z3.And(chosen, z3.Not(_as_bool(ok))))
        frame = []
        for key in self.keys:
            value = cur[key]
            for chosen, written in reversed(merged.get(key, [])):
                value = z3.If(chosen, written, value)
            frame.append(nxt[key] == value)
        self._trans = z3.And(z3.Or(*enabled), *frame)
        self._bad = {p: (z3.Or(*terms) if terms else z3.BoolVal(False)) for p, terms in bad.items()}
        self._fires = {name: z3.Or(*terms) for name, terms in fires.items() if terms}
        self._fatal_ok = z3.Not(z3.Or(*self._fires.values())) if self._fires else z3.BoolVal(True)
        self._state_holds = {
            p.name: _as_bool(p.state_holds(View(cfg, cur), cfg, Z3_OPS))
            for p in PROPERTIES.values()
            if p.kind == "state" and p.applies(cfg)
        }

        # -- initial states -------------------------------------------------------------
        self.init_args = self._arg_consts(INIT, "init")
        blank = {k: None for k in self.keys}
        guard, writes, _ = apply(INIT, blank, self.init_args, cfg, Z3_OPS)
        self._init_writes = writes
        self._init_guard = _as_bool(guard)

    # ----------------------------------------------------------------- variables
    def _arg_consts(self, event: Event, prefix: str) -> dict:
        return {key: _const(f"{prefix}.{event.name}.{_name(key)}", arg.sort) for arg, key in event.arg_keys(self.cfg)}

    def step(self, t: int) -> StepVars:
        """Fresh variables of state t, and of the action and arguments leaving it."""
        if t not in self._steps:
            state = {k: _const(f"{_name(k)}@{t}", self.sort[k]) for k in self.keys}
            args = {
                e.name: {key: _const(f"{e.name}.{_name(key)}@{t}", arg.sort) for arg, key in e.arg_keys(self.cfg)}
                for e in self.events
            }
            self._steps[t] = StepVars(state, z3.Int(f"act@{t}"), args)
        return self._steps[t]

    def _pairs(self, t: int) -> list:
        here, there, tv = self.step(t), self.step(t + 1), self._template_vars
        pairs = [(tv.state[k], here.state[k]) for k in self.keys]
        pairs += [(self._next_template[k], there.state[k]) for k in self.keys]
        pairs.append((tv.act, here.act))
        for e in self.events:
            pairs += [(tv.args[e.name][k], here.args[e.name][k]) for k in tv.args[e.name]]
        return pairs

    def _state_pairs(self, t: int) -> list:
        here, tv = self.step(t), self._template_vars
        return [(tv.state[k], here.state[k]) for k in self.keys]

    def _copy(self, template, kind: str, t: int):
        """The template with its variables renamed to step t's: z3.substitute without its
        per-call sort checks on hundreds of pairs (they are checked once, here), which
        cost more than the substitution itself."""
        key = (kind, t)
        if key not in self._renamings:
            pairs = self._pairs(t) if kind == "step" else self._state_pairs(t)
            assert all(a.sort().eq(b.sort()) for a, b in pairs)
            sources, targets = (z3.Ast * len(pairs))(), (z3.Ast * len(pairs))()
            for i, (a, b) in enumerate(pairs):
                sources[i], targets[i] = a.as_ast(), b.as_ast()
            self._renamings[key] = (len(pairs), sources, targets)
        count, sources, targets = self._renamings[key]
        ctx = template.ctx
        return _to_expr_ref(z3.Z3_substitute(ctx.ref(), template.as_ast(), count, sources, targets), ctx)

    # ------------------------------------------------------------------ formulas
    def initial(self):
        """State 0 is an initial state (the init event's picks are its own variables)."""
        s0 = self.step(0).state
        return z3.And(self._init_guard, *[s0[k] == v for k, v in self._init_writes.items()])

    def transition(self, t: int):
        return self._copy(self._trans, "step", t)

    def guard(self, name: str, t: int):
        """The named event's guard in state t with step t's arguments (enabled, if chosen)."""
        return self._copy(self._guards[name], "step", t)

    def bad(self, prop: str, t: int):
        """Transition t (state t -> t+1) violates a transition property."""
        return self._copy(self._bad[prop], "step", t)

    def fatal_ok(self, t: int):
        """Transition t trips none of vLLM's engine-killing asserts."""
        return self._copy(self._fatal_ok, "step", t)

    def fires(self, name: str, t: int):
        """Transition t trips the named vLLM assert."""
        if name not in self._fires:
            return z3.BoolVal(False)
        return self._copy(self._fires[name], "step", t)

    def holds(self, prop: str, t: int):
        """State t satisfies a state property."""
        return self._copy(self._state_holds[prop], "state", t)

    def state_formula(self, build, t: int):
        """A formula over a View of state t (for reachability targets and lemmas); built
        once on the template state, then copied to each t by substitution."""
        if build not in self._state_templates:
            self._state_templates[build] = _as_bool(build(View(self.cfg, self._template_vars.state), self.cfg, Z3_OPS))
        return self._copy(self._state_templates[build], "state", t)

    def action_is(self, t: int, name: str):
        index = [e.name for e in self.events].index(name)
        return self.step(t).act == index

    def event_index(self) -> list[str]:
        return [e.name for e in self.events]
