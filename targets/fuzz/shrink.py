"""Shrinking a divergent trace: fewer steps, smaller numbers, the same kind of divergence."""

from __future__ import annotations

from vllm_contract.model.interpreter import Disabled, Interpreter
from vllm_contract.model.shrink import greedy
from vllm_contract.spec.config import Config


def _revalidate(cfg: Config, init, steps):
    """Keep a candidate trace only if the model allows it, re-deriving the args keys."""
    it = Interpreter(cfg)
    try:
        s = it.initial(**init)
        for name, args in steps:
            s = it.step(s, name, args).state
    except Disabled:
        return False
    return True


def shrink(cfg: Config, init, steps, target, ignore, sig, replay_one, signature, budget: int = 400):
    """Greedy: delete steps, then shrink prompt lengths and budgets, keeping the signature
    `sig` of the divergence `replay_one(cfg, init, steps, target, ignore)` returns."""

    def same(i, st):
        if not _revalidate(cfg, i, st):
            return False
        exc = replay_one(cfg, i, st, target, ignore)
        return exc is not None and signature(exc) == sig

    steps = list(steps)
    # cut the tail after the divergence
    exc = replay_one(cfg, init, steps, target, ignore)
    if exc is not None and exc.step >= 0:
        steps = steps[: exc.step + 1]
    return greedy(init, steps, lambda i, st: same(i, st), budget, cfg.requests)
