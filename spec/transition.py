"""An event applied to a state: its guard, its writes and its effect, with the checks of
the properties that vLLM's asserts define (spec/properties.py) added to the event's own."""

from __future__ import annotations

from typing import Mapping

from vllm_contract.spec.config import Config
from vllm_contract.spec.events import ArgView, Event, domain_guard
from vllm_contract.spec.ops import Ops
from vllm_contract.spec.properties import checks_with_asserts
from vllm_contract.spec.state import Next, View


def apply(event: Event, state: Mapping, args: Mapping, cfg: Config, ops: Ops):
    """Run an event: returns (guard, writes, effect). The guard includes argument
    domains; effect.checks includes the checks of assert-defined properties."""
    concrete = not getattr(ops, "symbolic", True)
    s = View(cfg, state, keep_accessors=concrete)
    a = ArgView(event, cfg, args)
    nxt = Next(cfg, state, keep_accessors=concrete)
    effect = event.fn(s, a, nxt, cfg, ops)
    guard = ops.all(domain_guard(event, args, cfg, ops), effect.guard)
    effect.checks = checks_with_asserts(effect.checks, effect.asserts, ops)
    return guard, nxt.writes, effect
