"""targets/kernel.py: the kernel target replays V2 traces and checks the kernels' decisions."""

from __future__ import annotations

import random

import pytest
import vllm_contract.kernels  # noqa: F401 - settles TRITON_INTERPRET first
from vllm_contract.kernels import discard
from vllm_contract.model.interpreter import Interpreter, flat
from vllm_contract.model.run import Played, Run
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import TargetUnavailable
from vllm_contract.targets import kernel as kernel_target
from vllm_contract.targets.kernel import KernelTarget

# the Triton kernels (interpreted on CPU): left out of make test-fast
pytestmark = pytest.mark.kernel


def random_args(event, cfg: Config, rng: random.Random) -> dict[tuple, object]:
    """Random picks within each argument's declared domain, small and often 0."""
    out = {}
    for arg, key in event.arg_keys(cfg):
        if arg.sort is bool:
            out[key] = rng.random() < 0.3
            continue
        lo = arg.lo if arg.lo is not None else 0
        hi = arg.hi if arg.hi is not None else lo + 6
        out[key] = lo if rng.random() < 0.4 else rng.randint(lo, hi)
    return out


def walk(cfg: Config, seed: int, steps: int = 14):
    """A random enabled trace, fed to a KernelTarget and to a separate model; yields
    (event, model StepResult, target Outcome) per step."""
    rng = random.Random(seed)
    model = Interpreter(cfg)
    prompt = [rng.randint(1, 7) for _ in range(cfg.requests)]
    state = model.initial(prompt_len=prompt)
    target = KernelTarget()
    target.reset(cfg, flat({"prompt_len": prompt}))
    for number in range(1, steps + 1):
        options = []
        for name, event in model.events.items():
            tries = [random_args(event, cfg, rng) for _ in range(6)]
            tries.append({key: arg.lo if arg.lo is not None else arg.fallback() for arg, key in event.arg_keys(cfg)})
            enabled = [args for args in tries if model.enabled(state, name, args)]
            if enabled:
                options.append((name, enabled[0]))
        if not options:
            return
        name, args = rng.choice(options)
        result = model.step(state, name, args)
        yield name, result, target.step(name, args, Played(number, name, args, state, result))
        if result.fired:
            return  # a fatal assert ends the trace
        state = result.state


CONFIGS = [
    Config(name="v2-preempt", runner="v2", requests=2, events=frozenset({"preempt"})),
    Config(
        name="v2-kvfail-stale",
        runner="v2",
        requests=2,
        events=frozenset({"kvfail"}),
        faults=frozenset({"stale-slot-read"}),
    ),
    Config(name="v2-spec", runner="v2", requests=3, spec_tokens=2, events=frozenset({"preempt", "abort"})),
    Config(
        name="v2live-stale",
        runner="v2-live",
        requests=2,
        events=frozenset({"preempt", "reset"}),
        faults=frozenset({"stale-slot-read"}),
    ),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_kernel_agrees_with_model_on_random_traces(cfg):
    """No mismatch, and the configured kernel disagrees with the reservation exactly
    where the model's own predicates-agree check fails."""
    mine = cfg.run.kernel
    schedules = 0
    for seed in range(3):
        for name, result, outcome in walk(cfg, seed):
            assert not outcome.mismatches, outcome.detail
            assert outcome.fired is None
            if name != "schedule":
                continue
            schedules += 1
            disagrees = bool(outcome.facts[f"{mine}_disagrees"])
            assert disagrees == (not result.checks["predicates-agree"]), outcome.facts
            rows = outcome.facts["kernel_rows"]
            assert [r["model_discard"] for r in rows] == [r[f"{mine}_discard"] for r in rows]
    assert schedules >= 6


def test_stale_slot_read_makes_both_kernels_sample_a_chunk():
    """A lost add_request leaves slot lengths at 0: both kernels sample a 1-token chunk
    of a 4-token prompt that the scheduler reserved nothing for."""
    cfg = CONFIGS[1]
    target = KernelTarget()
    target.reset(cfg, flat({"prompt_len": [4, 4]}))
    run = Run(cfg, {"prompt_len": [4, 4]}, [("schedule", {"budget": 1, "stale_read": [True, False]})])
    (played,) = run
    outcome = target.step("schedule", played.args, played)
    assert outcome.mismatches == []
    assert outcome.facts["snapshot_disagrees"] == [0] and outcome.facts["live_disagrees"] == [0]
    (row,) = outcome.facts["kernel_rows"]
    assert (row["seq_len"], row["prefill_len"], row["total_len"], row["reserved"]) == (1, 0, 0, 0)
    assert "snapshot disagrees with the reservation for req(s) [0]" in outcome.detail
    assert target.project() == {}


def _row(req, slot, computed, query, prefill, total, reserved, discard_, drafts=0, accepted=0):
    return {
        "req": req,
        "slot": slot,
        "num_computed": computed,
        "query_len": query,
        "num_draft": drafts,
        "prefill_len": prefill,
        "total_len": total,
        "reserved": reserved,
        "discard": discard_,
        "accepted": accepted,
        "scheduled": True,
    }


def test_reports_where_live_fixes_snapshot():
    """prefill_len <= seq_len < total_len: snapshot samples, live discards."""
    cfg = Config(name="x", runner="v2", requests=2)
    rows = [
        _row(0, 1, 5, 1, 6, 9, reserved=0, discard_=False),  # the split case
        _row(1, 0, 3, 2, 4, 5, reserved=1, discard_=False, drafts=1),
    ]
    observed = kernel_target.evaluate(rows, cfg)
    assert observed["mismatches"] == []
    assert observed["snapshot_disagrees"] == [0] and observed["live_disagrees"] == []
    assert [(r["snapshot_discard"], r["live_discard"]) for r in observed["kernel_rows"]] == [
        (False, True),
        (False, False),
    ]


def test_reports_int32_wraparound_as_a_mismatch():
    """g + n past INT32_MAX wraps in vLLM's int32 add: the kernel discards, the model does not."""
    cfg = Config(name="x", runner="v2", requests=1)
    observed = kernel_target.evaluate([_row(0, 0, 2**31 - 1, 1, 0, 0, reserved=1, discard_=False)], cfg)
    (problem,) = observed["mismatches"]
    assert "snapshot kernel discards but the model samples" in problem


def test_catches_a_kernel_that_decides_wrongly(monkeypatch):
    cfg = CONFIGS[0]

    def off_by_one(num_sampled, seq_lens, cu, idx, per_slot, **kw):
        return discard.get_num_sampled_and_rejected_snapshot(num_sampled, seq_lens - 1, cu, idx, per_slot, **kw)

    monkeypatch.setitem(discard.LAUNCHERS, "snapshot", off_by_one)
    found = [o.detail for seed in range(3) for _, _, o in walk(cfg, seed) if o.mismatches]
    assert found and "snapshot kernel discards but the model samples" in found[0]


def test_catches_a_kernel_that_reads_the_wrong_slot(monkeypatch):
    cfg = CONFIGS[0]

    def slot_zero(num_sampled, seq_lens, cu, idx, per_slot, **kw):
        return discard.get_num_sampled_and_rejected_snapshot(num_sampled, seq_lens, cu, idx * 0, per_slot, **kw)

    monkeypatch.setitem(discard.LAUNCHERS, "snapshot", slot_zero)
    found = [m for seed in range(3) for _, _, o in walk(cfg, seed) for m in o.mismatches]
    assert any("reads a slot no scheduled request holds" in m for m in found), found


def test_needs_a_v2_config():
    with pytest.raises(TargetUnavailable, match="runner 'v1'"):
        KernelTarget().reset(Config(name="v1", runner="v1"), flat({"prompt_len": [3, 3]}))
