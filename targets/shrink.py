"""Shrinking a divergent trace: fewer steps, smaller numbers, the same kind of divergence."""

from __future__ import annotations

from model.interpreter import Disabled, Interpreter
from spec.config import Config


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


NEUTRAL = {
    "stop": 0,
    "kv_fail_req": -1,
    "kv_fail_block": 0,
    "accepted": 0,
    "extra": 0,
    "stale_read": False,
    "drop": False,
}


def shrink(cfg: Config, init, steps, target, ignore, sig, replay_one, signature, budget: int = 400):
    """Greedy: delete steps, then shrink prompt lengths and budgets, keeping the signature
    `sig` of the divergence `replay_one(cfg, init, steps, target, ignore)` returns."""
    tries = 0

    def same(i, st):
        nonlocal tries
        tries += 1
        if not _revalidate(cfg, i, st):
            return False
        exc = replay_one(cfg, i, st, target, ignore)
        return exc is not None and signature(exc) == sig

    steps = list(steps)
    # cut the tail after the divergence
    exc = replay_one(cfg, init, steps, target, ignore)
    if exc is not None and exc.step >= 0:
        steps = steps[: exc.step + 1]
    changed = True
    while changed and tries < budget:
        changed = False
        for width in (1, 2):  # single steps, then pairs (a schedule and its delivery)
            i = len(steps) - width
            while i >= 0 and tries < budget:
                cand = steps[:i] + steps[i + width :]
                if same(init, cand):
                    steps = cand
                    changed = True
                i -= 1
        for r in range(cfg.requests):
            while tries < budget and init["prompt_len"][r] > 1:
                cand_init = dict(init)
                cand_init["prompt_len"] = list(init["prompt_len"])
                cand_init["prompt_len"][r] = max(1, init["prompt_len"][r] // 2)
                if same(cand_init, steps):
                    init = cand_init
                    changed = True
                else:
                    cand_init["prompt_len"][r] = init["prompt_len"][r] - 1
                    if same(cand_init, steps):
                        init = cand_init
                        changed = True
                    else:
                        break
        for j, (name, args) in enumerate(steps):
            # neutral picks: no stop, no KV failure, no fault, no accepted draft
            for key in [k for k in args if k[0] in NEUTRAL]:
                if tries >= budget or args[key] == NEUTRAL[key[0]]:
                    continue
                cand_args = dict(args)
                cand_args[key] = NEUTRAL[key[0]]
                cand = steps[:j] + [(name, cand_args)] + steps[j + 1 :]
                if same(init, cand):
                    steps, args = cand, cand_args
                    changed = True
            for key in [k for k in args if k[0] in ("budget", "new_tokens")]:
                while tries < budget and args[key] > 1:
                    cand_args = dict(args)
                    cand_args[key] = args[key] - 1
                    cand = steps[:j] + [(name, cand_args)] + steps[j + 1 :]
                    if same(init, cand):
                        steps, args = cand, cand_args
                        changed = True
                    else:
                        break
    return init, steps
