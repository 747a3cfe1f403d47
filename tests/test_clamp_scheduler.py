"""The clamp as a real scheduler class (adapter/clamp_scheduler.py).

The seed PR's two tests, by intent: an over-delivery for a prefill chunk no longer
asserts and its token is not appended; a healthy decode delivery consumes its
placeholder and is never dropped. Plus: it loads through vLLM's scheduler_cls, it
warns once per process, and the target's clamp arm agrees with the model's clamp.
Runs on the loaded vLLM release (`--vllm`); where 0.32.0 and 0.33.0 differ without the
clamp, each test says which does what.
"""

from __future__ import annotations

import importlib
import logging

import pytest
from vllm_contract.adapter import construct as vllm_factory
from vllm_contract.adapter import current as vllm_env
from vllm_contract.adapter import objects
from vllm_contract.spec import profiles
from vllm_contract.spec.config import Config
from vllm_contract.targets.harness import replay
from vllm_contract.targets.vllm_target import VllmTarget, assert_site

# a vLLM tree the run cannot load stops it (the plugin's preflight), never a skip
pytestmark = pytest.mark.vllm

# loaded before the clamp's module imports vLLM itself: load() points vLLM at the real
# Triton first (imported the other way round, `pytest tests/test_clamp_scheduler.py` found
# the tree incoherent: vllm.config had bound HAS_TRITON = False)
V = vllm_env.load()
clamp_scheduler = importlib.import_module("vllm_contract.adapter.clamp_scheduler")
ClampAsyncScheduler = clamp_scheduler.ClampAsyncScheduler
PROFILE = vllm_env.tree().profile
RELEASE = PROFILE.removeprefix("vllm-")
ASSERTS_AT_ZERO = profiles.of(PROFILE).asserts_counter_at_zero
COUNTER_SITE = vllm_env.statement_site("assert request.num_output_placeholders >= 0")
# vLLM's V1 runner where the tree has it (the seed PR's arms), else its only runner
CFG = Config("clamp-unit", runner="v1" if objects.has_v1_runner() else "v2", requests=1, profile=PROFILE)


def fresh(clamp: bool, prompt_len: int):
    sched = vllm_factory.new_scheduler(CFG, vllm_factory.scheduler_class(CFG, clamp=clamp))
    req = vllm_factory.make_request(0, prompt_len, CFG.block_size)
    sched.add_request(req)
    return sched, req


def schedule(sched, budget: int):
    vllm_factory.set_budget(sched, budget)
    return sched.schedule()


def deliver(sched, out, tokens: list[int]):
    ids = list(objects.scheduled(out))
    return sched.update_from_output(out, objects.runner_output(ids, [list(tokens) for _ in ids]))


# ------------------------------------------------------------------- loading


def test_loads_by_qualified_name_through_scheduler_cls():
    config = vllm_factory.vllm_config(vllm_factory.Shape.of(CFG, vllm_factory.CLAMP_SCHEDULER_CLS))
    assert config.scheduler_config.scheduler_cls == vllm_factory.CLAMP_SCHEDULER_CLS
    assert config.scheduler_config.get_scheduler_cls() is ClampAsyncScheduler
    assert isinstance(vllm_factory.new_scheduler(CFG, vllm_factory.CLAMP_SCHEDULER_CLS), ClampAsyncScheduler)


def test_loads_as_a_class_through_scheduler_cls():
    sc = V.SchedulerConfig(
        max_num_seqs=1,
        max_num_batched_tokens=64,
        max_model_len=64,
        is_encoder_decoder=False,
        scheduler_cls=ClampAsyncScheduler,
    )
    assert sc.get_scheduler_cls() is ClampAsyncScheduler
    assert issubclass(ClampAsyncScheduler, V.AsyncScheduler)


def test_plain_arm_is_vllms_async_scheduler():
    sched = vllm_factory.new_scheduler(CFG)
    assert type(sched) is V.AsyncScheduler


# ------------------------------------------------------------------- the seed's tests


def test_prefill_chunk_over_delivery_without_clamp():
    """Negative control: unpatched 0.32.0 dies at async_scheduler.py:71; 0.33.0 skips
    the decrement at P = 0 and appends the chunk's token silently."""
    sched, req = fresh(clamp=False, prompt_len=100)
    out = schedule(sched, 64)
    assert req.is_prefill_chunk and req.num_output_placeholders == 0
    if ASSERTS_AT_ZERO:
        with pytest.raises(AssertionError) as info:
            deliver(sched, out, [vllm_factory.SAMPLED_ID])
        assert assert_site(info.value)[:2] == COUNTER_SITE
        assert req.num_output_placeholders == -1
    else:
        deliver(sched, out, [vllm_factory.SAMPLED_ID])
        assert req.num_output_placeholders == 0 and req.num_output_tokens == 1


def test_prefill_chunk_over_delivery_is_dropped_with_clamp():
    sched, req = fresh(clamp=True, prompt_len=100)
    out = schedule(sched, 64)
    assert req.is_prefill_chunk and req.num_output_placeholders == 0
    deliver(sched, out, [vllm_factory.SAMPLED_ID])  # no AssertionError
    assert req.num_output_placeholders == 0
    assert req.num_tokens == 100 and req.num_output_tokens == 0  # not appended
    assert sched.clamp_dropped["r0"] == 1
    # the request carries on normally: final chunk, then decode
    out = schedule(sched, 64)
    assert out.num_scheduled_tokens == {"r0": 36}
    assert req.num_output_placeholders == 1
    deliver(sched, out, [vllm_factory.SAMPLED_ID])
    assert req.num_output_tokens == 1 and req.num_output_placeholders == 0
    assert sched.clamp_dropped["r0"] == 1


def test_healthy_decode_delivery_consumes_placeholder_never_dropped():
    sched, req = fresh(clamp=True, prompt_len=5)
    first = schedule(sched, 64)  # whole prompt: reserves 1
    second = schedule(sched, 64)  # decode, before the first output is back
    assert req.num_output_placeholders == 2
    deliver(sched, first, [vllm_factory.SAMPLED_ID])
    assert req.num_output_placeholders == 1 and req.num_output_tokens == 1
    for _ in range(5):
        nxt = schedule(sched, 64)
        deliver(sched, second, [vllm_factory.SAMPLED_ID])
        second = nxt
    assert req.num_output_tokens == 6
    assert req.num_output_placeholders == 1
    assert sched.clamp_dropped.get("r0", 0) == 0


def test_stale_delivery_is_not_clamped():
    """A stale (deliver-mode) output after a preemption is appended as in 0.32.0;
    the clamp applies to live deliveries only."""
    sched, req = fresh(clamp=True, prompt_len=5)
    first = schedule(sched, 64)
    sched.running.remove(req)
    sched._preempt_request(req, 0.0, drop_stale_output=False)
    assert req.num_output_placeholders == 0 and req.num_stale_output_tokens == 5
    deliver(sched, first, [vllm_factory.SAMPLED_ID])
    assert req.num_output_tokens == 1
    assert sched.clamp_dropped.get("r0", 0) == 0


# ------------------------------------------------------------------- logging


def test_warns_once_per_process_and_logs_each_drop(monkeypatch):
    monkeypatch.setattr(clamp_scheduler, "_warned", False)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger = clamp_scheduler.logger
    handler = Keep(level=logging.DEBUG)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        for _ in range(2):
            sched, req = fresh(clamp=True, prompt_len=100)
            out = schedule(sched, 64)
            deliver(sched, out, [vllm_factory.SAMPLED_ID, vllm_factory.SAMPLED_ID])
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    warnings = [r for r in records if r.levelno == logging.WARNING]
    debugs = [r for r in records if r.levelno == logging.DEBUG]
    assert len(warnings) == 1
    assert len(debugs) == 2
    assert debugs[0].args == ("r0", 2, 0, 2)  # request id, delivered, reserved, dropped


# ------------------------------------------------------------------- the clamp arm


def test_clamp_arm_matches_the_model_on_the_seed_trigger():
    cfg = Config(
        "seed-clamp", profile=PROFILE, runner="v2", requests=1, clamp=True, faults=frozenset({"stale-slot-read"})
    )
    steps = [
        ("schedule", {"budget": 64, "stale_read": [True]}),
        ("schedule", {"budget": 64}),
        ("deliver", {}),
        ("schedule", {"budget": 64}),
        ("deliver", {}),
        ("schedule", {"budget": 64}),
        ("deliver", {}),
    ]
    target = VllmTarget()  # follows cfg.clamp
    result = replay(cfg, {"prompt_len": [200]}, steps, target)
    assert result.fired is None
    assert result.target_state[("clamp_dropped", 0)] == 2
    assert isinstance(target.sched, ClampAsyncScheduler)


def test_clamp_does_not_cover_an_over_delivery_within_the_total_reservation():
    """The clamp compares a delivery with the request's total placeholders, not with
    what its step reserved. r1's 3-token over-delivery for a 1-token step fits under
    the 4 placeholders of two steps, so nothing is dropped; the next step's two
    rejected drafts (sched:2124-2128, guarded by P > 0, not P >= rejected) take P to
    -1, the clamp keeps 0 tokens, and the assert at async_scheduler.py:71 still fires.
    Model and vLLM agree."""
    cfg = Config(
        "clamp-limit",
        profile=PROFILE,
        runner=CFG.runner,
        spec_tokens=2,
        clamp=True,
        faults=frozenset({"over-delivery"}),
    )
    steps = [
        ("schedule", {"budget": 4, "extra": [0, 2]}),
        ("schedule", {"budget": 13}),
        ("deliver", {}),
        ("schedule", {"budget": 1}),
        ("deliver", {}),
    ]
    result = replay(cfg, {"prompt_len": [3, 1]}, steps, VllmTarget())
    # 0.32.0 asserts; 0.33.0 skips the decrement once P <= 0 and leaves P at -1
    assert result.fired == ("placeholders-nonnegative" if ASSERTS_AT_ZERO else None)
    assert result.outcomes[2].facts["sampled"]["r1"] == [vllm_factory.SAMPLED_ID] * 3
