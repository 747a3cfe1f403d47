"""Random traces the model allows: the argument sampler of every event, and random walks.

A trace is built by sampling, at each step, an enabled event and random arguments
(checked with a trial step on the interpreter), so every trace is one the spec allows.
It ends where a vLLM assert fires in the model (the engine would be dead), when nothing
is enabled, or at the length limit. The fuzzer (targets/fuzz/differential.py), the random probes in
front of the BMC (model/probe.py), the review's short fuzz and the benchmarks all draw
from here.

What a target cannot take on is the target's business, passed in as a `Draw`: a pick
it cannot realise is drawn again as something it can (`redraw_accepted`), a state
beyond its contract ends the trace (`beyond`); the counts of both are kept in the Draw.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from vllm_contract.model.interpreter import Disabled, Interpreter, args_for
from vllm_contract.spec.config import Config
from vllm_contract.spec.engine import shares_prefix
from vllm_contract.spec.vocabulary import Status


@dataclass
class Limits:
    max_prompt: int = 40
    max_budget: int = 48
    max_update: int = 12


@dataclass
class Draw:
    """What the target the traces are for cannot take (None: anything the model allows).

    redraw_accepted(cfg, state, trial) -> per request, True where an accepted-draft pick
        must be drawn as 0 (the target's drafts are placeholders there);
    beyond(cfg, state) -> why the state is beyond the target's contract, or None.
    """

    redraw_accepted: Callable[[Config, Mapping, Any], list[bool]] | None = None
    beyond: Callable[[Config, Mapping], str | None] | None = None
    redrawn: Counter = field(default_factory=Counter)


ANY = Draw()


def running_last(cfg: Config, s: Mapping) -> int | None:
    running = [r for r in range(cfg.requests) if s[("status", r)] == Status.RUNNING]
    if not running:
        return None
    return max(running, key=lambda r: s[("running_rank", r)])


def _try(it: Interpreter, s, name: str, args: dict):
    try:
        return it.step(s, name, args)
    except Disabled:
        return None


def propose(
    it: Interpreter, cfg: Config, s: Mapping, name: str, rng: random.Random, lim: Limits, draw: Draw = ANY
) -> tuple[dict, Any] | None:
    """Random enabled (flat) arguments for an event in state s, with the step result."""
    ev = it.event(name)
    R = range(cfg.requests)
    if name == "schedule":
        hi = cfg.max_budget or lim.max_budget
        named: dict[str, Any] = {"budget": rng.choice([rng.randint(1, hi), rng.randint(1, 8)])}
        faults = cfg.faults
        if "stale-slot-read" in faults:
            trial = _try(it, s, name, args_for(ev, cfg, named))
            if trial is None:
                return None
            pos = trial.state[("queue_len",)] - 1
            named["stale_read"] = [bool(trial.state[("q_admitted", pos, r)]) and rng.random() < 0.5 for r in R]
        trial = _try(it, s, name, args_for(ev, cfg, named))
        if trial is None:
            return None
        pos = trial.state[("queue_len",)] - 1
        if cfg.drafts:
            named["accepted"] = [
                rng.randint(0, trial.state[("q_spec", pos, r)]) if trial.state[("q_sampled", pos, r)] else 0 for r in R
            ]
            if draw.redraw_accepted is not None:
                for r, placeholder in enumerate(draw.redraw_accepted(cfg, s, trial)):
                    if placeholder and named["accepted"][r]:
                        named["accepted"][r] = 0
                        draw.redrawn["accepted>0 on placeholder drafts, drawn as 0"] += 1
        if "over-delivery" in faults:
            named["extra"] = [(rng.choice([0, 0, 1, 2]) if trial.state[("q_sampled", pos, r)] else 0) for r in R]
        args = args_for(ev, cfg, named)
        res = _try(it, s, name, args)
        return (args, res) if res is not None else None
    if name == "deliver":
        named = {}
        if cfg.has("kvfail") and rng.random() < 0.3:
            failures = _kv_failures(cfg, s)
            if failures:
                r, first, stop = rng.choice(failures)
                named["kv_fail_req"] = r
                named["kv_fail_block"] = rng.randrange(first, stop)
        if "lost-sample" in cfg.faults:  # only a sampled row can be lost
            named["lost"] = [bool(s[("q_sampled", 0, r)]) and rng.random() < 0.2 for r in R]
        if "under-drain" in cfg.faults:  # the rewritten count stays positive: short < scheduled
            heads = [s[("q_scheduled", 0, r)] for r in R]
            named["short"] = [rng.randrange(n) if n and rng.random() < 0.3 else 0 for n in heads]
        trial = _try(it, s, name, args_for(ev, cfg, named))
        if trial is None:
            return None
        stops = []
        for r in R:
            appended = trial.state[("num_tokens", r)] - s[("num_tokens", r)]
            stops.append(rng.randint(1, appended) if appended > 0 and rng.random() < 0.2 else 0)
        named["stop"] = stops
        args = args_for(ev, cfg, named)
        res = _try(it, s, name, args)
        return (args, res) if res is not None else None
    if name == "preempt":
        victim = running_last(cfg, s)
        if victim is None:
            return None
        named = {"req": victim}
        if cfg.has("preempt") and cfg.has("preempt-drop"):
            named["drop"] = rng.random() < 0.5
    elif name == "reset_prefix_cache":
        named = {}
    elif name == "stream_update":
        cands = [
            r for r in R if s[("resumable", r)] and s[("status", r)] != Status.FINISHED and not s[("pending_update", r)]
        ]
        if not cands:
            return None
        named = {"req": rng.choice(cands), "new_tokens": rng.randint(1, lim.max_update)}
    elif name == "abort":
        cands = [r for r in R if s[("status", r)] != Status.FINISHED]
        if not cands:
            return None
        named = {"req": rng.choice(cands)}
    else:
        raise ValueError(f"no argument sampler for event {name!r}")
    args = args_for(ev, cfg, named)
    res = _try(it, s, name, args)
    return (args, res) if res is not None else None


def _kv_failures(cfg: Config, s: Mapping) -> list[tuple[int, int, int]]:
    """(request, first block, block after the last) a KV-load failure may name in state s:
    a request whose admission is the oldest step in flight, a block below what it computed
    before that step, within its prompt; under prefix caching past its hit and short of its
    last prompt token (spec/deliver.py)."""
    out = []
    B = cfg.block_size
    for r in range(cfg.requests):
        n = s[("q_scheduled", 0, r)]
        if s[("status", r)] == Status.RUNNING and s[("q_admitted", 0, r)] and n:
            room = min(s[("num_computed_tokens", r)] - n, s[("num_prompt_tokens", r)])
            stop = -(-room // B) if room > 0 else 0
            first = 0
            if cfg.has("prefix-cache"):
                first = s[("hit_tokens", r)] // B
                stop = min(stop, (s[("num_prompt_tokens", r)] - 1) // B)
            if stop > first:
                out.append((r, first, stop))
    return out


WEIGHTS = {"schedule": 4, "deliver": 4, "preempt": 1.5, "reset_prefix_cache": 1, "stream_update": 2, "abort": 0.15}


def random_init(cfg: Config, rng: random.Random, lim: Limits) -> dict:
    if cfg.prompt_lens is not None:
        lens = list(cfg.prompt_lens)
    else:
        top = lim.max_prompt if cfg.max_model_len is None else min(lim.max_prompt, cfg.max_model_len - 1)
        lens = [rng.choice([rng.randint(1, top), rng.randint(1, min(6, top))]) for _ in range(cfg.requests)]
    init: dict[str, Any] = {"prompt_len": lens}
    if cfg.has("stream"):
        init["resumable"] = [rng.random() < 0.7 for _ in range(cfg.requests)]
    if cfg.k_symbolic:
        top = cfg.spec_tokens_max if cfg.spec_tokens_max is not None else 3
        init["spec_tokens"] = rng.randint(0, top)
    if shares_prefix(cfg):  # whole blocks or not, up to the longest prompt; none now and then
        longest = max(lens)
        init["shared_prefix"] = rng.choice([0, rng.randint(0, longest), cfg.block_size * rng.randint(1, 3)])
    return init


def random_trace(cfg: Config, rng: random.Random, length: int, lim: Limits | None = None, draw: Draw = ANY):
    """(init, [(event, flat args)], ended_by) from the model's enabled events."""
    lim = lim or Limits()
    it = Interpreter(cfg)
    init = random_init(cfg, rng, lim)
    s = it.initial(**init)
    steps: list[tuple[str, dict]] = []
    names = list(it.events)
    for _ in range(length):
        # every enabled event with random arguments, then a weighted choice
        options = []
        for name in names:
            got = propose(it, cfg, s, name, rng, lim, draw)
            if got is not None:
                options.append((name, got))
        if not options:
            return init, steps, "nothing enabled"
        weights = [WEIGHTS.get(name, 1) for name, _ in options]
        name, picked = rng.choices(options, weights)[0]
        steps.append((name, picked[0]))
        res = picked[1]
        s = res.state
        if res.fired:
            return init, steps, f"fatal: {','.join(res.fired)}"
        if draw.beyond is not None:
            beyond = draw.beyond(cfg, s)
            if beyond:
                return init, steps, f"excluded: {beyond}"
    return init, steps, "length"
