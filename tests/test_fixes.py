"""Negative controls of the fixes' proofs: each fix minus its key line must fail.

The step-reservation guard is one line in the model (keep at most the step's
reservation): without it, each scenario the guard is proved on has a counterexample to
the very properties proved there. The V2 recompute fix has four parts: without the
scheduler's prefill-chunk decision the runner disagrees (spec/matrix.py keeps that as
the configuration v2-rollback-live); without the rollback it is the 0.32.0/0.33.0
runner; without the scheduler's release of a skipped step (release_skipped) the
placeholders leak and the runner is told nothing, so the skipped token stays in its
history; without the runner's drop (v2-rollback) the token stays although the scheduler
says it skipped it (spec/matrix.py: v2-rollback-no-release, v2-rollback-no-drop).
"""

from __future__ import annotations

import pytest
from vllm_contract.model.bmc import Bmc, Goal
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.interpreter import Interpreter
from vllm_contract.model.trace import confirm
from vllm_contract.spec.matrix import by_name


def counterexample(cfg, prop, depth=10):
    for requests in (1, 2):
        instance = cfg.with_(rest=False, requests=requests, expect={}, spec_tokens=cfg.spec_tokens or 2)
        trace = Bmc(Encoding(instance)).shortest(Goal.violation(prop), depth)
        if trace is not None:
            confirm(Interpreter(instance), trace, trace.solver_states)
            return trace
    return None


@pytest.mark.parametrize(
    "scenario,prop",
    [
        ("guard-v1-faults@0.32.0", "counter-nonnegative"),
        ("guard-v2-faults@0.33.0", "no-token-while-prefilling"),
        ("guard-v2-faults@0.32.0", "counter-nonnegative"),
    ],
)
def test_the_guard_minus_its_line_fails_what_it_proves(scenario, prop):
    (cfg,) = by_name([scenario])
    assert cfg.expect[prop] == "proved"
    assert counterexample(cfg.with_(guard="none"), prop) is not None


def test_the_guard_drops_under_a_fault_and_never_on_a_healthy_path():
    (healthy,) = by_name(["guard-healthy@0.33.0"])
    (faulty,) = by_name(["guard-drops@0.33.0"])
    assert healthy.expect["never-drops"] == "proved" and faulty.expect["never-drops"] == "violated"
    trace = counterexample(faulty, "never-drops")
    assert trace is not None and trace.mechanisms == ["over-delivery"]


def test_the_recompute_fix_without_the_schedulers_decision_disagrees():
    (fixed,) = by_name(["v2-rollback-kvfail@0.32.0"])
    (half,) = by_name(["v2-rollback-live@0.32.0"])
    assert fixed.expect["predicates-agree"] == "proved"
    assert half.runner == "v2-rollback-live" and half.expect["predicates-agree"] == "violated"
    trace = counterexample(half, "predicates-agree")
    assert trace is not None and "kv-load-failure" in trace.mechanisms


@pytest.mark.parametrize(
    "scenario,minus,prop",
    [
        ("v2-rollback-history@0.32.0", {"release_skipped": False}, "placeholder-accounting"),
        ("v2-rollback-history@0.32.0", {"release_skipped": False}, "history-agrees"),
        ("v2-rollback-history@0.33.0", {"runner": "v2-rollback"}, "history-agrees"),
        ("v2-rollback-history-prefix@0.32.0", {"runner": "v2-rollback"}, "history-agrees"),
    ],
)
def test_the_whole_recompute_fix_minus_either_half_fails_what_it_proves(scenario, minus, prop):
    (cfg,) = by_name([scenario])
    assert cfg.expect[prop] == "proved" and cfg.release_skipped and cfg.run.drops_skipped
    trace = counterexample(cfg.with_(**minus), prop)
    assert trace is not None and "kv-load-failure" in trace.mechanisms


def _case(name: str, release: str):
    from vllm_contract.fixes.arms import load_cases

    label = f"vllm-{release}+guard"
    return next(c for c in load_cases() if c.name == name and label in c.arms)


GUARD = {"clamp": False, "guard": "step-reservation"}


@pytest.mark.parametrize(
    ("name", "release", "acts"),
    [
        # the guard prevents an assert where no counter differs until it fires
        ("seed_cc__predicates_agree", "0.32.0", True),
        # the guard's arm ends before the token it cuts is delivered; the run-on delivers it
        ("plugin_tpu_cd4__healthy_path", "0.32.0", True),
        # ... and here the run-on delivers nothing the guard would cut: only a step the
        # arm never plays differs
        ("plugin_tpu_cd2__healthy_path", "0.32.0", False),
        ("v2__healthy_path", "0.33.0", False),
    ],
)
def test_the_fix_acts_where_its_arms_test_can_tell_it_from_the_release(name, release, acts):
    """fix-check's control: the arms where the fix acts fail on the release as it is, all
    others hold; `acts` is what the arm's test can see, not every difference of the runs."""
    from vllm_contract.fixes.arms import fix_acts

    profile = {"profile": f"vllm-{release}"}
    case = _case(name, release)
    assert fix_acts(case, {**profile, **GUARD}, {**profile, **GUARD, "guard": "none"}) is acts
