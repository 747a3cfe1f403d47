"""The real-runner target: vLLM's scheduler and vLLM's own V1/V2 model runner, together.

Each trace is replayed with targets.harness.replay (the model and the target compared
after every step, the runner's projection included: what each step returns, V2 slots,
V1 cached states). The explicit asserts pin what the loaded release's real runner did
(`--vllm=0.32.0|0.33.0`), including what the model does not state yet (positions and
input ids), and each of ours: the faults, the v2-live patch, the drafter, the preemption
record, and the exclusions the fuzzer makes.
"""

from __future__ import annotations

import random

import pytest
from vllm_contract.adapter import construct as vllm_factory
from vllm_contract.adapter import current as vllm_env
from vllm_contract.bench.runner_measure import conditions, observe
from vllm_contract.model.interpreter import Interpreter, args_for, nested
from vllm_contract.model.run import Run
from vllm_contract.model.sampler import random_trace
from vllm_contract.spec import profiles
from vllm_contract.spec.config import Config
from vllm_contract.targets import real_runner as rr
from vllm_contract.targets.fuzz.differential import draw_for
from vllm_contract.targets.fuzz.presets import KNOWN, PRESETS, ignore_known
from vllm_contract.targets.harness import Divergence, replay
from vllm_contract.targets.vllm_target import VllmTarget

# a vLLM tree the run cannot load stops it (the plugin's preflight), never a skip
pytestmark = pytest.mark.vllm

PROFILE = vllm_env.tree().profile
RELEASE = PROFILE.removeprefix("vllm-")
ASSERTS_AT_ZERO = profiles.of(PROFILE).asserts_counter_at_zero
F = frozenset
S, D = "schedule", "deliver"


def C(name, **kw):
    kw.setdefault("profile", PROFILE)
    return Config(name, **kw)


@pytest.fixture(scope="module")
def target():
    return rr.RealRunnerTarget()


def runner_log(target, step):
    """The target's observations of the step-th step (1-based), schedule steps only."""
    return target.log[step - 1]


# ------------------------------------------------------------------ healthy paths


@pytest.mark.parametrize("runner", ["v1", "v2", "v2-live"])
def test_chunked_prefill_decode_and_stop_agree_with_the_model(target, runner):
    cfg = C("healthy", runner=runner, requests=2)
    steps = [
        (S, {"budget": 12}),
        (S, {"budget": 12}),
        (D, {"stop": [0, 0]}),
        (S, {"budget": 30}),
        (D, {"stop": [0, 0]}),
        (S, {"budget": 30}),
        (D, {"stop": [1, 0]}),
        (S, {"budget": 30}),
        (D, {"stop": [0, 1]}),
        (S, {"budget": 30}),
        (D, {"stop": [0, 0]}),
        (D, {"stop": [0, 0]}),
    ]
    result = replay(cfg, {"prompt_len": [20, 9]}, steps, target)
    assert result.fired is None
    # the runner, not the model, decided: the first chunk of r0 was discarded, r1's was sampled
    assert target.log[0]["runner_returns"] == {0: 0}
    assert target.log[1]["runner_returns"] == {0: 1, 1: 0}
    assert all(seen["start"] == seen["sched_start"] for step in target.log for seen in step["runner"].values())


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_spec_decode_acceptance_is_the_rejection_samplers(target, runner):
    """The drafter's proposal is ours (the trace's `accepted` first drafts are the tokens
    the forward pass predicts); how many come back is vLLM's rejection sampler's."""
    cfg = C("spec", runner=runner, requests=1, spec_tokens=2)
    steps = [
        (S, {"budget": 8, "accepted": [0]}),
        (S, {"budget": 8, "accepted": [0]}),
        (D, {"stop": [0]}),
        (S, {"budget": 8, "accepted": [2]}),
        (D, {"stop": [0]}),
        (S, {"budget": 8, "accepted": [1]}),
        (D, {"stop": [0]}),
    ]
    replay(cfg, {"prompt_len": [5]}, steps, target)
    assert [step["runner_returns"] for step in target.log] == [{0: 1}, {0: 1}, {0: 3}, {0: 2}]


# ------------------------------------------------------------------ findings on real code


KVFAIL_V2 = [
    (S, {"budget": 1, "accepted": [0]}),
    (S, {"budget": 1, "accepted": [0]}),
    (D, {"stop": [0], "kv_fail_req": 0, "kv_fail_block": 0}),
    (S, {"budget": 14, "accepted": [0]}),
    (D, {"stop": [0]}),
    (S, {"budget": 1, "accepted": [0]}),
    (D, {"stop": [0]}),
]


@pytest.mark.parametrize("runner", ["v2", "v2-live"])
def test_v2_kvfail_re_prefill_is_sampled_at_stale_positions(target, runner):
    """Findings 1 and 2 on vLLM's own runner: the recompute chunk is sampled (0.29.0-0.32.0:
    the counter assert fires at step 7; 0.33.0: the token is appended silently), and it runs
    at positions 2..15 taken from the slot's stale GPU count, not the scheduler's 0..13."""
    cfg = C("v2-kvfail", runner=runner, requests=1, spec_tokens=1, events=F({"kvfail"}))
    result = replay(cfg, {"prompt_len": [16]}, KVFAIL_V2, target)
    assert result.fired == ("placeholders-nonnegative" if ASSERTS_AT_ZERO else None)
    recompute = runner_log(target, 3)["runner"]["r0"]
    assert (recompute["sched_start"], recompute["sched_length"]) == (0, 14)
    assert (recompute["start"], recompute["length"]) == (2, 14)
    assert runner_log(target, 3)["runner_returns"] == {0: 1}  # a token for a step reserved nothing


def test_v1_kvfail_feeds_placeholders_and_overwrites_a_prompt_position(target):
    """V1 follows the scheduler's positions, but its token ids do not: the recompute's
    last position gets the previously sampled token over a prompt token, and a later
    chunk feeds -1 where the runner only ever held an async placeholder."""
    cfg = C("v1-kvfail", runner="v1", requests=1, events=F({"kvfail"}), block_size=4)
    steps = [
        (S, {"budget": 1}),
        (S, {"budget": 6}),
        (D, {"stop": [0], "kv_fail_req": 0, "kv_fail_block": 0}),
        (S, {"budget": 2}),
        (D, {"stop": [0]}),
        (S, {"budget": 4}),
    ]
    replay(cfg, {"prompt_len": [5]}, steps, target)
    recompute, later = runner_log(target, 3)["runner"]["r0"], runner_log(target, 4)["runner"]["r0"]
    assert (recompute["start"], recompute["fed_ids"], recompute["wrong_at"]) == (0, [5, 11], [(1, 11, 5)])
    assert (later["start"], later["fed_ids"], later["placeholder_at"]) == (2, [5, 5, 5, -1], [5])


class _Predicted:
    """A model step result carrying only the runner rows the target checks its claims on."""

    def __init__(self, **rows):
        self.observed = rows


def test_the_model_runner_claims_are_checked_and_can_fail(target):
    """The target compares what the model says the runner computes with what it computed
    (targets/real_runner.py _runner_claims): on the generated no-placeholder-input trace
    the two agree, and a model that claimed otherwise, either way, is reported."""
    cfg = C("v1-kvfail", runner="v1", requests=1, spec_tokens=0, events=F({"kvfail"}))
    steps = [
        (S, {"budget": 16}),
        (S, {"budget": 1}),
        (D, {"stop": [0], "kv_fail_req": 0, "kv_fail_block": 0}),
        (S, {"budget": 18}),
    ]
    replay(cfg, {"prompt_len": [16]}, steps, target)  # agrees at every step, or it raises
    fed = runner_log(target, 3)["runner"]
    assert fed["r0"]["placeholder_at"]  # the recompute reads -1 where the model says it does
    assert target._runner_claims(_Predicted(v1_rows=[{"placeholder_input": True}]), fed) == []
    assert target._runner_claims(_Predicted(v1_rows=[{"placeholder_input": False}]), fed)
    v2 = C("v2-kvfail", runner="v2", requests=1, spec_tokens=1, events=F({"kvfail"}))
    replay(v2, {"prompt_len": [16]}, KVFAIL_V2, target)
    start = runner_log(target, 3)["runner"]["r0"]["start"]
    seen = runner_log(target, 3)["runner"]
    assert target._runner_claims(_Predicted(v2_rows=[{"num_computed": start}]), seen) == []
    assert target._runner_claims(_Predicted(v2_rows=[{"num_computed": start - 2}]), seen)


def test_v1_with_drafts_continues_from_its_own_count_after_a_kv_failure(target):
    """With async spec decoding, V1 corrects its GPU count from the previous step's and
    ignores the scheduler's rollback: the recompute runs at 17, not 0."""
    cfg = C("kvfail-2drafts", runner="v1", requests=1, spec_tokens=2, events=F({"kvfail"}))
    steps = [
        (S, {"budget": 16, "accepted": [0]}),
        (S, {"budget": 3, "accepted": [0]}),
        (D, {"stop": [0], "kv_fail_req": 0, "kv_fail_block": 0}),
        (S, {"budget": 1, "accepted": [0]}),
    ]
    replay(cfg, {"prompt_len": [16]}, steps, target)
    seen = runner_log(target, 3)["runner"]["r0"]
    assert (seen["sched_start"], seen["start"]) == (0, 17)


# ------------------------------------------------------------------ ours: faults and patches


def test_stale_slot_read_drops_the_adds_device_writes(target):
    cfg = C("stale", runner="v2", requests=1, faults=F({"stale-slot-read"}))
    steps = [(S, {"budget": 5, "stale_read": [True]})]
    replay(cfg, {"prompt_len": [25]}, steps, target)
    states = target.runner.req_states
    slot = states.req_id_to_index["r0"]
    # the slot reads as it started (zeros): prefill_len 0, so the 5-token chunk is sampled
    assert int(states.prefill_len.gpu[slot]) == 0 and target.log[0]["runner_returns"] == {0: 1}
    # post_update advanced the leftovers: total_len 0 + 1 sampled, num_computed 0 + 5
    assert (int(states.total_len.gpu[slot]), int(states.num_computed_tokens.gpu[slot])) == (1, 5)


def test_over_delivery_appends_to_the_runners_output():
    clamped = rr.RealRunnerTarget(clamp=True)
    cfg = C("over", runner="v1", requests=1, faults=F({"over-delivery"}), clamp=True)
    replay(cfg, {"prompt_len": [3]}, [(S, {"budget": 8, "extra": [2]})], clamped)
    assert clamped.log[0]["runner_returns"] == {0: 3}  # the runner sampled 1; 2 appended by the fault


def test_v2_live_hands_the_real_kernel_total_len(target, monkeypatch):
    """The patch: the discard kernel's prefill_len argument becomes the slot's total_len."""
    import torch
    from vllm.v1.worker.gpu.sample import sampler as sampler_module

    target.reset(C("live", runner="v2-live", requests=1), {"prompt_len": [4]})
    handed = []
    monkeypatch.setattr(sampler_module, "get_num_sampled_and_rejected", lambda *args: handed.append(args[-1]))
    states = target.runner.req_states
    with target._live():
        one = torch.zeros(1, dtype=torch.int32)
        sampler_module.get_num_sampled_and_rejected(one, one, one, one, states.prefill_len.gpu)
    assert handed == [states.total_len.gpu]


def test_unrealisable_accept_of_a_padded_draft_is_refused(target):
    """A padded admission's drafts are -1 placeholders: the trace's accepted=1 cannot
    happen on real code (the generated case that picks it skips with this reason)."""
    cfg = C("pad", runner="v1", requests=2, spec_tokens=2)
    steps = [(S, {"budget": 16, "accepted": [0, 0]}), (S, {"budget": 6, "accepted": [0, 1]})]
    with pytest.raises(rr.UnrealisablePick, match="placeholders"):
        replay(cfg, {"prompt_len": [16, 1]}, steps, target)


def test_the_fuzzer_never_accepts_drafts_the_runner_makes_placeholders():
    draw = draw_for("real")
    for name in ("v1-spec", "v2-spec", "v1-pad-thr"):
        cfg = PRESETS[name].with_(profile=PROFILE)
        for seed in range(20):
            init, steps, _ = random_trace(cfg, random.Random(seed), 30, draw=draw)
            for played in Run(cfg, init, steps):
                if played.event == S:
                    for r, placeholder in enumerate(rr.drafts_are_placeholders(cfg, played.before, played.result)):
                        assert not (placeholder and played.args.get(("accepted", r), 0))


# ------------------------------------------------------------------ the preemption record


PREEMPT_RESUME = [
    (S, {"budget": 2}),
    (S, {"budget": 3}),
    (D, {"stop": [0, 0]}),
    ("preempt", {"req": 1, "drop": True}),
    (S, {"budget": 3}),
]
PREEMPT = F({"preempt", "preempt-drop"})


def test_a_victim_resumed_by_the_next_step_replays_on_v1(target):
    cfg = C("preempt", runner="v1", events=PREEMPT)
    replay(cfg, {"prompt_len": [1, 1]}, PREEMPT_RESUME, target)


def test_without_the_preemption_record_v1_raises_keyerror():
    """What the record prevents: the scheduler still lists the victim as scheduled in the
    previous step, sends no all_token_ids, and V1's _update_states raises KeyError."""

    class Bare(rr.RealRunnerTarget):
        _preempt = VllmTarget._preempt

    cfg = C("preempt", runner="v1", events=PREEMPT)
    with pytest.raises(Divergence) as info:
        replay(cfg, {"prompt_len": [1, 1]}, PREEMPT_RESUME, Bare())
    assert "KeyError" in str(info.value) and "gpu_model_runner.py" in str(info.value)


# ------------------------------------------------------------------ beyond the runner's contract


STREAM_KVFAIL = [
    ("stream_update", {"req": 1, "new_tokens": 5}),
    (S, {"budget": 2, "accepted": [0, 0]}),
    (S, {"budget": 27, "accepted": [1, 0]}),
    (D, {"stop": [0, 0], "kv_fail_req": 1, "kv_fail_block": 2}),
    (S, {"budget": 8, "accepted": [0, 0]}),
    (D, {"stop": [2, 1], "kv_fail_req": -1}),
    (S, {"budget": 1, "accepted": [0, 0]}),
]
V2_ALL = PRESETS["v2-all"]


@pytest.mark.skipif(
    profiles.of(PROFILE).session_keep != "computed", reason="L > T needs a session update that keeps c tokens"
)
def test_prompt_beyond_tokens_kills_the_v2_worker(target):
    """0.32.0: a stop below the prompt and the session update leave L > T; V2's
    add_request asserts prefill_len >= prompt_len. The fuzzer ends a trace there."""
    cfg = V2_ALL.with_(profile=PROFILE)
    it = Interpreter(cfg)
    init = {"prompt_len": [1, 26], "resumable": [True, True]}
    state = it.initial(**init)
    for event, named in STREAM_KVFAIL[:-1]:
        state = it.step(state, event, args_for(it.event(event), cfg, named)).state
    assert rr.beyond_runner_contract(cfg, state) == "prompt-beyond-tokens"
    with pytest.raises(Divergence, match=r"prefill_len \d+ < prompt_len \d+"):
        replay(cfg, init, STREAM_KVFAIL, target)


# ------------------------------------------------------------------ own config, measurements


def test_the_runner_has_its_own_config(target):
    cfg = C("own", runner="v1", requests=1, spec_tokens=1)
    target.reset(cfg, {"prompt_len": [4]})
    vllm_factory.set_budget(target.sched, 3)
    assert target.runner.max_num_tokens == vllm_factory.MAX_MODEL_LEN
    assert target.runner_config is not target.sched.vllm_config
    assert target.sched.scheduler_config.async_scheduling and target.runner.use_async_scheduling


def test_measured_conditions_hold_on_random_traces(target, sweep):
    """The conditions bench/runner_measure.py states (positions, input ids), on a
    few traces per preset (one in make test, six in make test-all); `positions-agree` is
    the one that fails (the finding). The spec's own runner properties are among them
    (spec-positions-agree, spec-no-placeholder-input): the model predicts them step by
    step as measured."""
    results = {}
    for name in ("v1-kvfail", "v2-kvfail", "v1-spec", "v2-spec", "v2-stale-slot"):
        cfg = PRESETS[name].with_(profile=PROFILE)
        seeds = range(6 if sweep else 1)
        traces = [random_trace(cfg, random.Random(seed), 30, draw=draw_for("real")) for seed in seeds]
        for init, steps, _ in traces:
            for o in observe(cfg, init, [(e, nested(a)) for e, a in steps], target, name):
                for c in conditions():
                    if c.applies(o):
                        results.setdefault(c.name, []).append(c.holds(o))
    failing = {name for name, held in results.items() if not all(held)}
    assert failing <= {"positions-agree"}, failing
    assert results["spec-positions-agree"] and results["spec-no-placeholder-input"]


def test_v1_runner_raises_when_scheduled_from_position_minus_one(target):
    """Finding 9 on vLLM's own V1 runner (the real-runner sweep, v1-all-over-clamp seed
    1100367): a KV-load recompute, then two rejected drafts take the request's computed
    count to -1; the next step asks the runner for position -1 and its _prepare_inputs
    raises IndexError. The fuzzer's `runner-negative-position` exclusion is exactly this."""
    cfg = C(
        "kvfail-2drafts",
        runner="v1",
        requests=2,
        spec_tokens=2,
        block_size=4,
        clamp=True,
        faults=F({"over-delivery"}),
        events=F({"preempt", "reset", "stream", "kvfail"}),
    )
    z = {"extra": [0, 0]}
    steps = [
        (S, {"budget": 5, "accepted": [0, 0], **z}),
        (S, {"budget": 7, "accepted": [1, 0], **z}),
        (D, {"stop": [0, 0], "kv_fail_req": -1, "kv_fail_block": 0}),
        (S, {"budget": 6, "accepted": [0, 0], **z}),
        (D, {"stop": [2, 0], "kv_fail_req": 1, "kv_fail_block": 0}),
        (S, {"budget": 1, "accepted": [0, 0], **z}),
        (D, {"stop": [0, 0], "kv_fail_req": -1, "kv_fail_block": 0}),
        (S, {"budget": 1, "accepted": [0, 0], **z}),
    ]
    with pytest.raises(Divergence) as caught:
        replay(cfg, {"prompt_len": [5, 4], "resumable": [True, True]}, steps, target)
    error = caught.value.diff[("error",)][1]
    assert "IndexError" in error and "gpu_model_runner.py" in error and caught.value.step == len(steps) - 1
    # the exclusion masks exactly this: the same trace replays with it, and it does not
    # mask an IndexError where nothing was scheduled from a negative position
    replay(
        cfg,
        {"prompt_len": [5, 4], "resumable": [True, True]},
        steps,
        target,
        ignore=ignore_known(["runner-negative-position"], runner="real"),
    )
    assert not KNOWN["runner-negative-position"].matches(
        ("error",), None, error, {("queue_len",): 1, ("q_scheduled", 0, 0): 1, ("num_computed_tokens", 0): 1}, "real"
    )
