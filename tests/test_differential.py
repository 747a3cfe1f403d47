"""Differential fuzzing with Hypothesis: the model and vLLM's scheduler on random traces.

Hypothesis drives the trace generator of model/sampler.py (every draw goes through its
Random, so a failing trace shrinks), over the fuzzer's preset configurations; each
trace is replayed step by step on the loaded vLLM (--vllm), under that release's
profile, comparing every projected variable, the
queue orders and the engine loop's view. A modest number runs in `make test`
(HYPOTHESIS_PROFILE=fuzz for more); `make fuzz` runs the 10,000-trace sweep.
"""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm_contract.adapter import current as vllm_env
from vllm_contract.model.sampler import random_trace
from vllm_contract.targets.fuzz.presets import KNOWN, PRESETS, ignore_known
from vllm_contract.targets.harness import replay
from vllm_contract.targets.vllm_target import VllmTarget

# a vLLM tree the run cannot load stops it (the plugin's preflight), never a skip
pytestmark = pytest.mark.vllm

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "fuzz", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

TARGET = VllmTarget()


@given(
    name=st.sampled_from(sorted(PRESETS)),
    rng=st.randoms(use_true_random=False),
    length=st.integers(min_value=5, max_value=40),
)
def test_model_and_vllm_agree_on_random_traces(name, rng, length):
    cfg = PRESETS[name].with_(profile=vllm_env.tree().profile)
    init, steps, _ = random_trace(cfg, rng, length)
    replay(cfg, init, steps, TARGET, ignore=ignore_known(list(KNOWN)), engine=True)
