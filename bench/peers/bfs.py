"""(d) Explicit-state breadth-first search at the counterexample's own parameters."""

from __future__ import annotations

import itertools

from vllm_contract.bench.peers.common import CLOCK, SMALL
from vllm_contract.model.interpreter import Disabled, Interpreter
from vllm_contract.model.probe import violated_by
from vllm_contract.spec.catalog import INIT
from vllm_contract.spec.config import Config


def pick_values(cfg: Config, trace=None, extra: dict | None = None) -> dict:
    """Candidate values of each event argument (by name): a bounded integer takes its
    whole domain, a bool both values, an unbounded integer its SMALL smallest values
    plus those the trace uses (and `extra`)."""
    values: dict = {}
    if trace is not None:
        for step in trace.steps:
            for key, value in step.args.items():
                if not isinstance(value, bool):
                    values.setdefault(key[0], set()).add(value)
    for name, more in (extra or {}).items():
        values.setdefault(name, set()).update(more)
    return values


def domain(arg, values: dict) -> list:
    if arg.sort is bool:
        return [False, True]
    lo = arg.lo if arg.lo is not None else 0
    if arg.hi is not None:
        return list(range(lo, arg.hi + 1))
    return sorted({lo + i for i in range(SMALL)} | {v for v in values.get(arg.name, ()) if v >= lo})


def successors(it: Interpreter, cfg: Config, s: dict, values: dict):
    """Every (event, args, step result) from s with arguments from the candidate values.
    Picks that only matter for a sampled request (accepted drafts, over-delivery) or an
    appended token (a stop) are enumerated after a trial step with them at 0, which is
    always allowed when the rest is: the guard pins them to 0 where they do not apply, so
    enumerating them blindly would only be rejected."""
    for name, event in it.events.items():
        arg_keys = event.arg_keys(cfg)
        late_names = {"accepted", "extra"} if name == "schedule" else {"stop"} if name == "deliver" else set()
        early = [(a, k) for a, k in arg_keys if a.name not in late_names]
        late = [(a, k) for a, k in arg_keys if a.name in late_names]
        for combo in itertools.product(*[domain(a, values) for a, _ in early]):
            base = {k: v for (_, k), v in zip(early, combo)}
            base.update({k: a.fallback() for a, k in late})
            try:
                trial = it.step(s, name, base)
            except Disabled:
                continue
            yield name, base, trial
            if not late:
                continue
            options = []
            for a, k in late:
                r = k[1]
                if name == "schedule":
                    pos = s[("queue_len",)]
                    if not trial.state[("q_sampled", pos, r)]:
                        options.append([0])
                    elif a.name == "accepted":
                        options.append(list(range(0, trial.state[("q_spec", pos, r)] + 1)))
                    else:
                        options.append(domain(a, values))
                else:  # a stop lands on an appended token, or there is none
                    appended = trial.state[("num_tokens", r)] - s[("num_tokens", r)]
                    options.append([0] + [v for v in domain(a, values) if 1 <= v <= appended])
            for lcombo in itertools.product(*options):
                if not any(lcombo):
                    continue  # the trial itself
                args = dict(base)
                args.update({k: v for (_, k), v in zip(late, lcombo)})
                try:
                    yield name, args, it.step(s, name, args)
                except Disabled:
                    continue


def bfs(cfg: Config, prop: str | None, init: dict, values: dict, limit: float) -> dict:
    """Breadth-first over the states reachable with these picks; stops at the first
    violation of prop (None: never), when the states run out, or at the limit."""
    it = Interpreter(cfg)
    test = violated_by(cfg, prop) if prop else (lambda res: False)
    started = CLOCK()
    s0 = it.initial(**init)

    def key(s):
        return tuple(s[k] for k in it.keys)

    seen = {key(s0)}
    frontier, depth, edges = [s0], 0, 0
    while frontier:
        layer = []
        for s in frontier:
            if CLOCK() - started > limit:
                return {
                    "found": False,
                    "status": "limit",
                    "depth": depth,
                    "states": len(seen),
                    "edges": edges,
                    "seconds": CLOCK() - started,
                    "frontier": len(frontier),
                }
            for _name, _args, res in successors(it, cfg, s, values):
                edges += 1
                if test(res):
                    return {
                        "found": True,
                        "status": "found",
                        "depth": depth + 1,
                        "states": len(seen),
                        "edges": edges,
                        "seconds": CLOCK() - started,
                    }
                if res.fired:
                    continue
                k = key(res.state)
                if k not in seen:
                    seen.add(k)
                    layer.append(res.state)
        depth += 1
        frontier = layer
    return {
        "found": False,
        "status": "exhausted",
        "depth": depth,
        "states": len(seen),
        "edges": edges,
        "seconds": CLOCK() - started,
    }


def proved_init(cfg: Config) -> tuple[dict, dict]:
    """Small fixed parameters for a proved configuration: prompts of 3 tokens (one more
    than a KV block when KV-load failures are on, so one can happen), resumable
    sessions, and budgets 1..3 plus a whole prompt."""
    length = cfg.block_size + 1 if cfg.has("kvfail") else 3
    lens = list(cfg.prompt_lens) if cfg.prompt_lens is not None else [length] * cfg.requests
    init: dict = {}
    for arg, _key in INIT.arg_keys(cfg):
        if arg.name == "prompt_len":
            init.setdefault("prompt_len", lens)
        elif arg.sort is bool:
            init.setdefault(arg.name, []).append(True)
        else:
            init.setdefault(arg.name, []).append(arg.lo or 0)
    return init, {"budget": set(lens)}
