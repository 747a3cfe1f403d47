"""(b) A random walk on the interpreter: the fuzzer's sampler, time per violation."""

from __future__ import annotations

import random

from vllm_contract.bench.peers.common import CLOCK, WALK_FINDS, WALK_LENGTH
from vllm_contract.model.interpreter import Interpreter
from vllm_contract.model.probe import violated_by, walk
from vllm_contract.model.sampler import Limits
from vllm_contract.spec.config import Config


def random_walk(cfg: Config, prop: str, limit: float, seed: int = 1) -> dict:
    it, test, lim = Interpreter(cfg), violated_by(cfg, prop), Limits()
    started = CLOCK()
    deadline = started + limit
    tried = finds = steps = 0
    first = first_len = None
    while CLOCK() < deadline and finds < WALK_FINDS:
        got = walk(it, cfg, test, random.Random(seed * 1_000_003 + tried), WALK_LENGTH, None, lim)
        tried += 1
        steps += len(got.steps)
        if got.violated:
            finds += 1
            if first is None:
                first, first_len = CLOCK() - started, len(got.steps)
    elapsed = CLOCK() - started
    return {
        "first": first,
        "len": first_len,
        "finds": finds,
        "walks": tried,
        "steps": steps,
        "per_find": elapsed / finds if finds else None,
        "elapsed": elapsed,
    }
