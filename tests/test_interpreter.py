"""The reference interpreter on hand-checked scenarios (vLLM line numbers in spec/)."""

import pytest
from vllm_contract.model.interpreter import Disabled, Interpreter, args_for, nested
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.vocabulary import Status


def run(cfg, prompt_len, steps, **init):
    it = Interpreter(cfg)
    state = it.initial(prompt_len=prompt_len, **init)
    results = []
    for name, named in steps:
        res = it.step(state, name, args_for(it.event(name), cfg, named))
        state = res.state
        results.append(res)
    return it, state, results


def req(state, name, r=0):
    return nested(state)[name][r]


def test_chunked_prefill_reserves_only_on_the_final_chunk():
    cfg = Config(name="t", runner="v1", requests=1)
    _, s, res = run(cfg, [5], [("schedule", {"budget": 3}), ("schedule", {"budget": 3})])
    # chunk 1: c=3 < T=5 -> is_prefill_chunk, nothing reserved (async:34-35)
    assert res[0].observed["reserved"] == [0]
    # chunk 2 (final): c=5 == T -> one placeholder (async:45-47)
    assert res[1].observed["reserved"] == [1]
    assert req(s, "num_output_placeholders") == 1
    assert req(s, "num_in_flight_tokens") == 5
    assert req(s, "is_prefill_chunk") is False


def test_healthy_path_balances_to_zero_and_completes():
    cfg = Config(name="t", runner="v2", requests=1)
    steps = [
        ("schedule", {"budget": 2}),
        ("schedule", {"budget": 2}),
        ("deliver", {}),
        ("schedule", {"budget": 2}),
        ("deliver", {}),
        ("schedule", {"budget": 2}),
        ("deliver", {"stop": [1]}),
        # the finished id still has to be shipped: one more (empty) step (sched:2813)
        ("schedule", {"budget": 2}),
        ("deliver", {}),
        ("deliver", {}),
    ]
    it, s, res = run(cfg, [3], steps)
    assert all(all(r.checks.values()) for r in res)
    assert req(s, "status") == Status.FINISHED
    assert req(s, "completed") is True
    assert req(s, "num_tokens") == 5
    assert it.state_properties(s)["placeholder-accounting"] is True


def test_engine_order_delivers_only_when_the_queue_is_full():
    cfg = Config(name="t", runner="v1", requests=1)
    it = Interpreter(cfg)
    s = it.initial(prompt_len=[3])
    s = it.step(s, "schedule", args_for(it.event("schedule"), cfg, {"budget": 1})).state
    assert not it.enabled(s, "deliver", args_for(it.event("deliver"), cfg, {}))  # core:754-759
    assert it.try_step(s, "deliver", args_for(it.event("deliver"), cfg, {})) is None
    with pytest.raises(Disabled):
        it.step(s, "deliver", args_for(it.event("deliver"), cfg, {}))
    second = it.try_step(s, "schedule", args_for(it.event("schedule"), cfg, {"budget": 1}))
    assert second is not None and req(second.state, "num_computed_tokens") == 2  # enabled: the step, applied


def test_only_a_concrete_view_keeps_its_accessors():
    """The interpreter's views keep an indexed variable's accessor after its first read (a
    speed-up); views of Z3 terms must not (the cycle would change when terms are freed,
    and with it the solver's answers)."""
    import dataclasses

    from vllm_contract.model.z3ops import Z3Ops
    from vllm_contract.spec.catalog import INIT
    from vllm_contract.spec.ops import INT_OPS
    from vllm_contract.spec.state import View
    from vllm_contract.spec.transition import apply

    cfg = Config(name="t", runner="v1", requests=1)
    state = Interpreter(cfg).initial(prompt_len=[3])
    kept, plain = View(cfg, state, keep_accessors=True), View(cfg, state)
    assert kept.num_tokens[0] == plain.num_tokens[0] == 3
    assert "num_tokens" in vars(kept) and "num_tokens" not in vars(plain)

    seen = []

    def spy(s, a, nxt, cfg, ops):
        seen.append((ops.symbolic, s._keep_accessors, nxt._keep_accessors))
        return INIT.fn(s, a, nxt, cfg, ops)

    event = dataclasses.replace(INIT, fn=spy)
    args = args_for(INIT, cfg, {"prompt_len": [3]})
    for ops in (INT_OPS, Z3Ops()):
        apply(event, {k: None for k in state}, args, cfg, ops)
    assert seen == [(False, True, True), (True, False, False)]


def test_budget_is_shared_in_running_order_then_admission_order():
    cfg = Config(name="t", runner="v1", requests=2)
    _, s, res = run(cfg, [4, 4], [("schedule", {"budget": 6})])
    assert req(s, "num_computed_tokens", 0) == 4  # admitted first, takes what it needs
    assert req(s, "num_computed_tokens", 1) == 2  # gets the rest (sched:1169)
    assert nested(s)["running_rank"] == [0, 1]


def test_long_prefill_threshold_applies_only_with_company():
    alone = Config(name="t", runner="v1", requests=1, long_prefill_threshold=2)
    _, s, _ = run(alone, [5], [("schedule", {"budget": 8})])
    assert req(s, "num_computed_tokens") == 5  # one request: whole budget (sched:643-649)
    pair = Config(name="t", runner="v1", requests=2, long_prefill_threshold=2)
    _, s, _ = run(pair, [5, 5], [("schedule", {"budget": 8})])
    assert nested(s)["num_computed_tokens"] == [2, 2]


def test_preemption_marks_in_flight_output_stale():
    cfg = Config(name="t", runner="v1", requests=1, events=frozenset({"preempt"}))
    _, s, _ = run(cfg, [2], [("schedule", {"budget": 2}), ("preempt", {"req": 0})])
    assert req(s, "status") == Status.PREEMPTED
    assert req(s, "num_computed_tokens") == 0  # sched:1593
    assert req(s, "num_output_placeholders") == 0  # sched:1607
    assert req(s, "num_stale_output_tokens") == 2  # sched:1606
    assert req(s, "drop_stale_output") is False


def test_deliver_mode_stale_output_blocks_resumption():
    cfg = Config(name="t", runner="v1", requests=1, events=frozenset({"preempt"}))
    _, s, res = run(cfg, [2], [("schedule", {"budget": 2}), ("preempt", {"req": 0}), ("schedule", {"budget": 2})])
    assert res[-1].observed["reserved"] == [0]
    assert req(s, "status") == Status.PREEMPTED  # sched:934-939: skipped


def test_reset_resumes_at_once_and_drops_stale_output():
    cfg = Config(name="t", runner="v1", requests=1, events=frozenset({"reset"}))
    _, s, res = run(
        cfg,
        [2],
        [("schedule", {"budget": 2}), ("reset_prefix_cache", {}), ("schedule", {"budget": 2}), ("deliver", {})],
    )
    assert req(s, "status") == Status.RUNNING
    assert req(s, "num_tokens") == 2  # the stale frame was dropped (sched:2101-2103)
    assert req(s, "num_output_placeholders") == 1
    assert all(res[-1].checks.values())


def test_stale_slot_read_makes_v2_sample_a_prefill_chunk():
    cfg = Config(name="t", runner="v2", requests=1, faults=frozenset({"stale-slot-read"}))
    _, s, res = run(cfg, [5], [("schedule", {"budget": 2, "stale_read": [True]})])
    # the slot reads its zeroed buffers: seq_len 2 >= prefill_len 0 -> sampled
    assert res[0].observed["discard"] == [False]
    assert res[0].checks["predicates-agree"] is False


def test_unclamped_over_delivery_fires_the_assert_and_the_clamp_drops_it():
    steps = [("schedule", {"budget": 1, "extra": [1]}), ("schedule", {"budget": 1}), ("deliver", {})]
    plain = Config(name="t", runner="v1", requests=1, faults=frozenset({"over-delivery"}))
    _, s, res = run(plain, [1], steps)
    assert res[-1].fired == [] and req(s, "num_output_placeholders") == 0  # 2 tokens, 2 placeholders: absorbed
    steps = [("schedule", {"budget": 1, "extra": [2]}), ("schedule", {"budget": 1}), ("deliver", {})]
    _, s, res = run(plain, [1], steps)
    assert res[-1].fired == ["placeholders-nonnegative"]  # async:71
    assert req(s, "num_output_placeholders") == -1
    clamped = plain.with_(clamp=True)
    _, s, res = run(clamped, [1], steps)
    assert res[-1].fired == [] and req(s, "num_output_placeholders") == 0
    assert req(s, "clamp_dropped") == 1
    # 0.33.0 resolves every returned token when P > 0: 3 tokens, 2 placeholders -> -1, fires
    _, s, res = run(plain.with_(profile="vllm-0.33.0"), [1], steps)
    assert res[-1].fired == ["placeholders-nonnegative"] and req(s, "num_output_placeholders") == -1


def test_resumable_stop_rolls_back_to_the_safe_frontier():
    cfg = Config(name="t", runner="v1", requests=1, events=frozenset({"stream"}))
    steps = [("schedule", {"budget": 2}), ("schedule", {"budget": 2}), ("deliver", {"stop": [1]})]
    _, s, res = run(cfg, [2], steps, resumable=[True])
    assert res[-1].checks["safe-frontier-nonnegative"] is True
    assert req(s, "status") == Status.WAITING_FOR_STREAMING_REQ
    assert req(s, "num_computed_tokens") == 2  # c - P = 3 - 1 (sched:2472-2474)
    assert req(s, "num_output_placeholders") == 0
    assert req(s, "drop_stale_output") is True
    _, s2, _ = run(cfg, [2], steps + [("stream_update", {"req": 0, "new_tokens": 4})], resumable=[True])
    assert req(s2, "status") == Status.WAITING
    assert req(s2, "num_tokens") == 6 and req(s2, "num_prompt_tokens") == 6  # sched:1659-1682


def test_unknown_names_get_a_clear_error():
    cfg = Config(name="t", runner="v1", requests=1)
    it = Interpreter(cfg)
    with pytest.raises(SpecError, match="needs one of the event families preempt, preempt-drop"):
        it.event("preempt")
    with pytest.raises(SpecError, match="has no argument"):
        args_for(it.event("schedule"), cfg, {"bugdet": 1})
    with pytest.raises(SpecError, match="stale-slot-read needs a V2 runner"):
        Config(name="x", runner="v1", faults=frozenset({"stale-slot-read"})).validate()
