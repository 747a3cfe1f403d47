"""The key step of "any number of requests": every concrete step is a step of the abstraction.

A configuration with `rest=True` is one focal request against an abstract rest: what
the other requests do to it is a free pick of each event (spec/config.py). A proof
there covers every request of every N if every step of the concrete model, seen from
any one request r, is a step of the abstraction from r's projection, with picks the
concrete step determines (the *witness*: the budget the others took before r's turn,
whether they keep the engine busy, ...). This file checks exactly that, with 2 and 3
requests: on the interpreter over random traces, and in Z3 for every state and every
argument (unsat = no concrete step escapes). The checks of a step must agree too: a
transition property or an assert of the concrete step is the conjunction (firing: the
disjunction) of the focal ones.

Negative control: an abstraction that forgets one thing another request can do (take
budget before the focal one's turn) must fail both checks.
"""

from __future__ import annotations

import random

import pytest
import z3
from vllm_contract.model.encoding import _as_bool
from vllm_contract.model.interpreter import Interpreter, args_for
from vllm_contract.model.sampler import Limits, random_trace
from vllm_contract.model.z3ops import Z3_OPS
from vllm_contract.spec import deliver, engine, schedule
from vllm_contract.spec.catalog import BY_NAME
from vllm_contract.spec.config import Config
from vllm_contract.spec.events import Arg
from vllm_contract.spec.ops import INT_OPS
from vllm_contract.spec.state import View
from vllm_contract.spec.transition import apply
from vllm_contract.spec.vocabulary import decls_for, keys_of

# what the abstraction does not keep: orders, ranks and slot numbers only decide what
# the others do to the focal request, which is a pick there
NOT_PROJECTED = {
    "running_rank",
    "waiting_rank",
    "next_running_rank",
    "waiting_front",
    "waiting_back",
    "q_order",
    "v2_slot",
    "v2_free",
    "v2_num_free",
    "v2_left_prefill_len",
    "v2_left_num_computed",
    "v2_left_total_len",
    # what the prefix cache holds of each request's sequence, and what the prompts share,
    # only decide the hits; with an abstract rest a hit is a pick
    "cached_tokens",
    "shared_prefix",
}

ALL = frozenset({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"})
PREFIX = ALL - {"stream"} | {"prefix-cache"}
CONFIGS = [
    Config("v1-all", runner="v1", events=ALL, spec_tokens=None),
    Config("v2-all", runner="v2", events=ALL, spec_tokens=None),
    Config("v2-live-thr", runner="v2-live", events=ALL, spec_tokens=None, long_prefill_threshold=3),
    Config(
        "v2-faults", runner="v2", events=ALL, spec_tokens=None, faults=frozenset({"stale-slot-read", "over-delivery"})
    ),
    Config("v2-pp2", runner="v2", events=ALL, spec_tokens=None, pp=2),
    Config("v1-033-clamp", runner="v1", events=ALL, spec_tokens=None, profile="vllm-0.33.0", clamp=True),
    # 0.29.0's waiting queues: a blocked request the loop reaches moves to skipped_waiting
    Config("v1-029", runner="v1", events=ALL, spec_tokens=None, profile="vllm-0.29.0"),
    # block size 4: hits, shared blocks and failures on them within short prompts
    Config("v1-prefix", runner="v1", events=PREFIX, spec_tokens=None, block_size=4, profile="vllm-0.29.0"),
    Config("v2-prefix-033", runner="v2", events=PREFIX, spec_tokens=None, block_size=4, profile="vllm-0.33.0"),
]


def abstract_of(cfg: Config) -> Config:
    return cfg.with_(name=cfg.name + "-rest", requests=1, rest=True)


def projection(cfg: Config, r: int) -> dict[tuple, tuple]:
    """Request r's view of a concrete state: its variables as request 0's, the globals."""
    out = {}
    for decl in decls_for(cfg):
        if decl.name in NOT_PROJECTED:
            continue
        for key in keys_of(decl, cfg):
            idx = list(key[1:])
            if "req" in decl.over:
                at = decl.over.index("req")
                if idx[at] != r:
                    continue
                idx[at] = 0
            out[key] = (key[0], *idx)
    return out


def witness_args(cfg: Config, event: str, args: dict, state, observed: dict, r: int, ops=INT_OPS) -> dict:
    """The abstract event's arguments that reproduce the concrete step for request r."""
    abstract = abstract_of(cfg)
    out = {}
    for arg, key in BY_NAME[event].arg_keys(abstract):
        if arg.name.startswith("rest_"):
            continue
        if arg.over == ("req",):
            out[key] = args[(arg.name, r)]
        elif arg.name == "req":
            out[key] = ops.ite(args[key] == r, 0, 1)
        elif arg.name == "kv_fail_req":
            # another request's failure on a block r shares is, to r, "another request's"
            shares = _sharers(cfg, state, args, ops)[r] if cfg.has("prefix-cache") else False
            out[key] = ops.ite(args[key] == r, 0, ops.ite(shares, abstract.requests, -1))
        else:
            out[key] = args[key]
    others = [q for q in range(cfg.requests) if q != r]
    if event == "schedule":
        for name, value in observed["rest"][r].items():
            out[(name,)] = value
        if "stale-slot-read" in cfg.faults:
            for field in ("prefill_len", "num_computed", "total_len"):
                out[("rest_left_" + field,)] = observed["v2_rows"][r]["left"][field]
    elif event == "deliver":
        out[("rest_busy",)] = engine.has_requests(View(cfg, state), cfg, ops, only=others)
    return out


def _sharers(cfg: Config, state, args, ops) -> list:
    from vllm_contract.spec.deliver import failure_sharers
    from vllm_contract.spec.events import ArgView

    return failure_sharers(View(cfg, state), ArgView(BY_NAME["deliver"], cfg, args), cfg, ops, [])


def abstract_state(cfg: Config, concrete: dict, r: int, filler: dict) -> dict:
    state = dict(filler)
    for ckey, akey in projection(cfg, r).items():
        state[akey] = concrete[ckey]
    return state


# ------------------------------------------------------------------ on the interpreter


def check_trace(cfg: Config, init: dict, steps: list) -> int:
    """Replay a concrete trace. At every live step and for every request, the abstract
    step from its projection, with the witness, must be enabled and land on the
    projection of the concrete successor, and each property the concrete step violates
    must be violated by some request's abstract step; a step whose vLLM assert fires
    must fire it in some request's abstract step. Returns the steps checked."""
    concrete, abstract = Interpreter(cfg), Interpreter(abstract_of(cfg))
    known = {arg.name for arg in BY_NAME["init"].args(abstract_of(cfg))}
    filler = abstract.initial(**{k: v[:1] if isinstance(v, list) else v for k, v in init.items() if k in known})
    state = concrete.initial(**init)
    checked = 0
    for event, named in steps:
        flat_already = all(isinstance(k, tuple) for k in named)
        args = dict(named) if flat_already else args_for(concrete.event(event), cfg, named)
        result = concrete.step(state, event, args)
        seen_violations = set()
        for r in range(cfg.requests):
            mine = abstract_state(cfg, state, r, filler)
            wargs = witness_args(cfg, event, args, state, result.observed, r)
            if not abstract.enabled(mine, event, wargs):
                assert result.fired, f"{cfg.name}: step {checked} {event} {named}: no abstract step for r{r}"
                continue
            step = abstract.step(mine, event, wargs)
            seen_violations |= set(step.failed())
            if result.fired:
                continue
            for ckey, akey in projection(cfg, r).items():
                assert step.state[akey] == result.state[ckey], (
                    f"{cfg.name}: step {checked} {event} {named}: r{r} {ckey} concrete {result.state[ckey]} "
                    f"abstract {step.state[akey]}"
                )
        missed = set(result.failed()) - seen_violations
        if result.fired and "scheduled-tokens-positive" in seen_violations:
            missed = set()  # see simulation_counterexample: the proofs claim that property too
        assert not missed, f"{cfg.name}: step {checked} {event}: no request's abstract step violates {missed}"
        checked += 1
        if result.fired:
            break
        state = result.state
    return checked


@pytest.mark.parametrize("requests", [2, pytest.param(3, marks=pytest.mark.sweep)])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_every_concrete_step_is_an_abstract_step_on_random_traces(cfg, requests):
    cfg = cfg.with_(requests=requests)
    rng = random.Random(f"{cfg.name}-{requests}")
    checked = 0
    for _ in range(8):
        init, steps, _ = random_trace(cfg, rng, 30, Limits())
        checked += check_trace(cfg, init, steps)
    assert checked > 100  # the check says nothing about traces that do not run


# ------------------------------------------------------------------ in Z3


def _consts(cfg: Config, prefix: str) -> dict:
    sort = {int: z3.IntSort(), bool: z3.BoolSort()}
    return {
        k: z3.Const(f"{prefix}{'.'.join(map(str, k))}", sort[d.sort]) for d in decls_for(cfg) for k in keys_of(d, cfg)
    }


def _args(event, cfg: Config, prefix: str) -> dict:
    sort = {int: z3.IntSort(), bool: z3.BoolSort()}
    return {key: z3.Const(f"{prefix}{'.'.join(map(str, key))}", sort[arg.sort]) for arg, key in event.arg_keys(cfg)}


def _any_cached(s, cfg, ops, cache_now, r):
    """What the cache holds of a request's sequence, for the simulation query: any amount.
    The concrete steps checked are then a superset of the real ones (every hit of whole
    blocks below num_tokens), which the abstraction must still reproduce."""
    return z3.FreshInt("held")


def _blocks_as_linear(side: list):
    """vllm_contract.spec.ops.whole_blocks for the simulation query: tokens rounded down to a block as a
    fresh count k with k * B <= tokens < (k + 1) * B (its definition, linear) instead of an
    integer division, which leaves Z3 searching the query for many minutes."""

    def whole_blocks(ops, tokens, block_size):
        if not getattr(ops, "symbolic", False) or isinstance(tokens, int):
            return tokens // block_size * block_size
        k = z3.FreshInt("blocks")
        side.append(z3.And(k * block_size <= tokens, tokens < (k + 1) * block_size))
        return k * block_size

    return whole_blocks


def simulation_counterexample(cfg: Config, event_name: str) -> z3.ModelRef | None:
    """A concrete state and arguments whose step has no matching abstract step for some
    request (None: every concrete step of this event is simulated)."""
    abstract = abstract_of(cfg)
    event = BY_NAME[event_name]
    state = _consts(cfg, "s.")
    args = _args(event, cfg, "a.")
    side: list = []
    with pytest.MonkeyPatch.context() as patch:
        for module in (schedule, deliver):
            patch.setattr(module, "whole_blocks", _blocks_as_linear(side))
        patch.setattr(schedule, "_cached_for", _any_cached)
        guard, writes, effect = apply(event, state, args, cfg, Z3_OPS)
    post = dict(state)
    post.update(writes)
    filler = _consts(abstract, "f.")
    alive = z3.And(*[_as_bool(ok) for ok in effect.asserts.values()])
    escapes = []  # a live step some request's abstract step does not reproduce
    violated_by = {p: [] for p in effect.checks}  # an abstract step that violates p
    for r in range(cfg.requests):
        mine = {**filler, **{akey: state[ckey] for ckey, akey in projection(cfg, r).items()}}
        wargs = witness_args(cfg, event_name, args, state, effect.observed, r, Z3_OPS)
        a_guard, a_writes, a_effect = apply(event, mine, wargs, abstract, Z3_OPS)
        a_guard = _as_bool(a_guard)
        a_post = dict(mine)
        a_post.update(a_writes)
        escapes.append(z3.Not(a_guard))
        escapes += [a_post[akey] != post[ckey] for ckey, akey in projection(cfg, r).items()]
        for p, ok in a_effect.checks.items():
            violated_by.setdefault(p, []).append(z3.And(a_guard, z3.Not(_as_bool(ok))))
    unseen = [
        z3.And(z3.Not(_as_bool(ok)), z3.Not(z3.Or(*violated_by.get(p, [z3.BoolVal(False)]))))
        for p, ok in effect.checks.items()
    ]
    # a fatal step: every violation is seen by some request's abstract step, or an
    # earlier request's negative token count (which broke a later one's witness) makes
    # the abstraction violate scheduled-tokens-positive -- the proofs claim that too
    counts_caught = z3.Or(*violated_by.get("scheduled-tokens-positive", [z3.BoolVal(False)]))
    fatal_missed = z3.And(z3.Not(alive), z3.Or(*unseen), z3.Not(counts_caught))
    solver = z3.Solver()
    solver.set("timeout", 120_000)
    solver.add(*side, _as_bool(guard), z3.Or(z3.And(alive, z3.Or(*escapes, *unseen)), fatal_missed))
    result = solver.check()
    assert result != z3.unknown, f"{cfg.name} {event_name}: {solver.reason_unknown()}"
    return solver.model() if result == z3.sat else None


@pytest.mark.parametrize("requests", [2, pytest.param(3, marks=pytest.mark.sweep)])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_every_concrete_step_is_an_abstract_step_in_z3(cfg, requests):
    cfg = cfg.with_(requests=requests)
    for event in ("schedule", "deliver", "preempt", "reset_prefix_cache", "stream_update", "abort"):
        if BY_NAME[event].enabled_in(cfg):
            assert simulation_counterexample(cfg, event) is None, f"{cfg.name}/{requests}: {event} escapes"


# ------------------------------------------------------------------ negative control


@pytest.fixture
def forgetful(monkeypatch):
    """An abstraction that forgets that other requests can take budget before the focal
    one: its pick is pinned to 0."""
    original = schedule.rest_args

    def rest_args(cfg, *names):
        return [
            Arg(a.name, a.sort, a.doc, a.over, a.lo, 0) if a.name == "rest_before" else a for a in original(cfg, *names)
        ]

    monkeypatch.setattr(schedule, "rest_args", rest_args)


def test_a_forgetful_abstraction_fails_both_checks(forgetful):
    cfg = CONFIGS[0].with_(requests=2)
    assert simulation_counterexample(cfg, "schedule") is not None
    rng = random.Random(0)
    with pytest.raises(AssertionError, match="no abstract step"):
        for _ in range(20):
            init, steps, _ = random_trace(cfg, rng, 30, Limits())
            check_trace(cfg, init, steps)
