"""Shrinking a trace on the model alone: fewer requests, steps and tokens, keeping what it shows.

`greedy` is the loop (targets/fuzz/shrink.py drives it for a fuzz divergence, which must stay
a divergence on the target); `violation` drives it for a counterexample, such as the
window a monitor recorded (targets/monitor/core.py): the same property violated at the last
step, the same assert firing there, through the same mechanisms (model/bmc.py's class).
Picks are named ({"budget": 3, "stop": [0, 1]}); the configuration's request count
shrinks with the requests.
"""

from __future__ import annotations

from typing import Callable

from vllm_contract.model.interpreter import Disabled, Interpreter, args_for, nested
from vllm_contract.model.trace import Step
from vllm_contract.spec.catalog import BY_NAME
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.properties import PROPERTIES

# the value of each pick that adds nothing: no stop, no KV failure, no fault, no accepted draft
NEUTRAL = {
    "stop": 0,
    "kv_fail_req": -1,
    "kv_fail_block": 0,
    "accepted": 0,
    "extra": 0,
    "stale_read": False,
    "drop": False,
}
REQUEST_PICKS = {"req", "kv_fail_req"}  # picks that name a request


def greedy(init: dict, steps: list, keeps: Callable[[dict, list], bool], budget: int, requests: int) -> tuple:
    """Delete steps (single, then pairs), shrink prompt lengths, neutralise picks and
    lower budgets while `keeps(init, steps)` holds; steps are (event, flat args). At most
    `budget` calls of keeps."""
    tries = 0

    def same(i, st):
        nonlocal tries
        tries += 1
        return keeps(i, st)

    steps = list(steps)
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
        for r in range(requests):
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


# ------------------------------------------------------------------ a counterexample


def replayed(cfg: Config, init: dict, steps: list) -> tuple | None:
    """(states, the last step's result, the interpreter) of a trace of (event, flat args);
    None when the model refuses a step or the engine died before the last one."""
    it = Interpreter(cfg)
    try:
        state = it.initial(**init)
        states, result = [state], None
        for event, args in steps:
            if result is not None and result.fired:
                return None
            result = it.step(state, event, args)
            state = result.state
            states.append(state)
    except (Disabled, SpecError):
        return None
    return states, result, it


def shows(cfg: Config, init: dict, steps: list, prop: str) -> tuple | None:
    """What the trace shows at its last step: (the assert that fires, the mechanisms it
    went through) when `prop` is violated there, else None."""
    from vllm_contract.model.bmc import mechanisms_of

    if not steps:
        return None
    done = replayed(cfg, init, steps)
    if done is None:
        return None
    states, result, it = done
    if PROPERTIES[prop].kind == "transition":
        broken = result.checks.get(prop, True) is False
    else:
        broken = not it.state_properties(states[-1]).get(prop, True)
    if not broken:
        return None
    return (tuple(result.fired), tuple(mechanisms_of(cfg, [Step(e, a) for e, a in steps], states)))


def _without(cfg: Config, init: dict, steps: list, r: int) -> tuple | None:
    """The trace with request r left out: its picks dropped, later requests renumbered, a
    front-end step on it removed; None when a KV failure names it."""
    smaller = cfg.with_(requests=cfg.requests - 1)
    if smaller.prompt_lens is not None:
        smaller = smaller.with_(prompt_lens=tuple(n for i, n in enumerate(smaller.prompt_lens) if i != r))
    new_init = {
        k: [v for i, v in enumerate(vals) if i != r] if isinstance(vals, list) else vals for k, vals in init.items()
    }
    if smaller.requests == 1:
        new_init.pop("shared_prefix", None)
    out = []
    for event, named in steps:
        if named.get("req") == r:
            continue
        if named.get("kv_fail_req") == r:
            return None
        fixed = {}
        for key, value in named.items():
            if isinstance(value, list):
                value = [v for i, v in enumerate(value) if i != r]
            elif key in REQUEST_PICKS and isinstance(value, int) and value > r:
                value -= 1
            fixed[key] = value
        out.append((event, fixed))
    return smaller, new_init, out


def violation(cfg: Config, init: dict, steps: list, prop: str, budget: int = 300) -> tuple[Config, dict, list]:
    """The smallest trace greedy finds that still violates `prop` at its last step, with the
    same assert firing there and through the same mechanisms. `init` and the steps' picks
    are named; so are the returned ones. The trace must show the violation to begin with."""
    wanted = shows(cfg, init, _flat_steps(cfg, steps), prop)
    if wanted is None:
        raise ValueError(f"the trace does not violate {prop} at its last step")

    for r in reversed(range(cfg.requests)):  # fewer requests first: every later try is cheaper
        if cfg.requests == 1:
            break
        smaller = _without(cfg, init, steps, r)
        if smaller is not None and shows(smaller[0], smaller[1], _flat_steps(smaller[0], smaller[2]), prop) == wanted:
            cfg, init, steps = smaller

    flat_steps = _flat_steps(cfg, steps)
    init, flat_steps = greedy(init, flat_steps, lambda i, st: shows(cfg, i, st, prop) == wanted, budget, cfg.requests)
    return cfg, init, [(event, nested(args)) for event, args in flat_steps]


def _flat_steps(cfg: Config, steps: list) -> list:
    return [(event, args_for(BY_NAME[event], cfg, named)) for event, named in steps]
