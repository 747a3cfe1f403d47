"""The Z3 encoding and the int interpreter are the same contract.

Random walks run on the interpreter; for every step, the encoding with that state,
action and arguments fixed must (a) be satisfiable exactly when the interpreter's
guard holds, (b) determine the successor the interpreter computed, and (c) agree on
every transition property and state property.
"""

import random

import pytest
import z3
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.interpreter import Interpreter, args_for
from vllm_contract.spec.config import Config
from vllm_contract.spec.properties import PROPERTIES

CONFIGS = [
    Config(
        name="v1-all",
        runner="v1",
        requests=2,
        spec_tokens=1,
        events=frozenset({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
    ),
    Config(
        name="v2-faults",
        runner="v2",
        requests=2,
        spec_tokens=1,
        clamp=True,
        events=frozenset({"preempt", "reset", "kvfail", "abort"}),
        faults=frozenset({"stale-slot-read", "over-delivery"}),
    ),
    Config(
        name="v2-live-pp2",
        runner="v2-live",
        requests=2,
        pp=2,
        long_prefill_threshold=3,
        events=frozenset({"preempt-drop", "stream"}),
    ),
    Config(
        name="h3",
        runner="v1",
        requests=1,
        spec_tokens=2,
        events=frozenset({"reset"}),
        profile="h3-reset-discard-counter",
    ),
]


def random_args(rng, event, cfg):
    named = {}
    for arg in event.args(cfg):
        count = cfg.requests if arg.over == ("req",) else None

        def pick(arg=arg):
            if rng.random() < 0.6:  # defaults keep most events enabled
                return arg.fallback()
            if arg.sort is bool:
                return rng.random() < 0.3
            lo = arg.lo if arg.lo is not None else 0
            hi = arg.hi if arg.hi is not None else lo + 6
            return rng.randint(lo, min(hi, lo + 6))

        named[arg.name] = [pick() for _ in range(count)] if count else pick()
    return args_for(event, cfg, named)


def fixed(enc, t, state, name, args):
    sv = enc.step(t)
    conds = [sv.state[k] == v for k, v in state.items()]
    conds.append(sv.act == enc.event_index().index(name))
    conds += [sv.args[name][k] == v for k, v in args.items()]
    return conds


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_encoding_agrees_with_interpreter_on_random_walks(cfg):
    rng = random.Random(1234)
    it = Interpreter(cfg)
    enc = Encoding(cfg)
    names = list(it.events)
    checked_enabled = checked_disabled = 0
    for _walk in range(6):
        state = it.initial(
            prompt_len=[rng.randint(1, 9) for _ in range(cfg.requests)],
            **({"resumable": [rng.random() < 0.5 for _ in range(cfg.requests)]} if cfg.has("stream") else {}),
        )
        for _ in range(12):
            for _attempt in range(10):  # disabled picks are checked too, then another is drawn
                name = rng.choice(names)
                args = random_args(rng, it.event(name), cfg)
                solver = z3.Solver()
                solver.add(enc.transition(0), *fixed(enc, 0, state, name, args))
                if it.enabled(state, name, args):
                    break
                assert solver.check() == z3.unsat, f"{cfg.name}: Z3 allows a disabled {name}{args}"
                checked_disabled += 1
            else:
                break
            result = it.step(state, name, args)
            assert solver.check() == z3.sat, f"{cfg.name}: Z3 forbids an enabled {name}{args}"
            nxt = enc.step(1).state
            differs = z3.Or(*[nxt[k] != v for k, v in result.state.items()])
            assert solver.check(differs) == z3.unsat, f"{cfg.name}: successor differs after {name}"
            for prop, held in result.checks.items():
                bad = solver.check(enc.bad(prop, 0)) == z3.sat
                assert bad == (not held), f"{cfg.name}: {prop} after {name}: interpreter {held}"
            for prop, p in PROPERTIES.items():
                if p.kind == "state" and p.applies(cfg):
                    s2 = z3.Solver()
                    s2.add(*[enc.step(0).state[k] == v for k, v in result.state.items()])
                    holds = s2.check(z3.Not(enc.holds(prop, 0))) == z3.unsat
                    assert holds == it.state_properties(result.state)[prop]
            state = result.state
            checked_enabled += 1
    assert checked_enabled > 12 and checked_disabled > 5
