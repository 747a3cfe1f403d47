"""Platform plugins' runners (spec/plugin_runners/): each proof with its negative control, and
the Continue Decode hazards (a non-final one-token chunk, a stop in the window, a resume)
shown or ruled out where the matrix says so."""

from __future__ import annotations

import dataclasses

import pytest
from vllm_contract.model.bmc import Bmc, Goal
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.induction import KInduction
from vllm_contract.model.interpreter import Interpreter
from vllm_contract.model.trace import confirm
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.invariants import lemmas_for
from vllm_contract.spec.matrix import by_name
from vllm_contract.spec.plugin_runners import PLUGINS, SOURCES
from vllm_contract.spec.runner_variants import NEVER_RULE, RUNNERS

ALL = frozenset({"preempt", "preempt-drop", "reset", "stream", "abort"})


def prove(cfg, props):
    lemmas = [(lemma.name, lemma.holds) for lemma in lemmas_for(cfg, props)]  # as make prove does
    return KInduction(Encoding(cfg)).prove(props, lemmas)


def counterexample(cfg, prop, depth=10):
    trace = Bmc(Encoding(cfg)).shortest(Goal.violation(prop), depth)
    assert trace is not None, f"{cfg.name}: no counterexample for {prop} within {depth} steps"
    confirm(Interpreter(cfg), trace, trace.solver_states)  # replayed concretely
    return trace


def test_every_plugin_module_is_found_with_its_runners_and_scenarios():
    assert {m.SOURCE.name for m in PLUGINS} == set(SOURCES) >= {"tpu-inference", "vllm-ascend", "vllm-metal"}
    checked = set()
    for module in PLUGINS:
        assert bool(module.RUNNERS) != bool(getattr(module, "OUTSIDE", "")), module.__name__
        if module.RUNNERS:
            checked.add(module.SOURCE.name)
        for runner in module.RUNNERS:
            assert RUNNERS[runner.name] is runner and runner.plugin == module.SOURCE.name
    names = [c.name for c in by_name(["plugin-*"])]
    assert names and all(n.startswith("plugin-") for n in names)
    assert {c.run.plugin for c in by_name(["plugin-*"])} == checked
    assert set(SOURCES) - checked == {"tt-xla"}  # recorded as outside the contract, with its cited reason


def test_a_plugin_module_gives_runners_or_says_why_the_contract_has_none(monkeypatch):
    from types import ModuleType

    from vllm_contract.spec import plugin_runners

    neither = ModuleType("vllm_contract.spec.plugin_runners.bare")
    neither.SOURCE = SOURCES["tt-xla"]
    neither.RUNNERS = ()
    neither.scenarios = lambda m: ()
    with pytest.raises(SpecError, match="RUNNERS .* or, for a plugin the contract has nothing to check in, OUTSIDE"):
        plugin_runners._checked(neither)
    neither.OUTSIDE = "a reason"
    assert plugin_runners._checked(neither) is neither
    both = ModuleType("vllm_contract.spec.plugin_runners.both")
    both.SOURCE, both.RUNNERS, both.OUTSIDE = SOURCES["vllm-gaudi"], (RUNNERS["gaudi-hpu"],), "x"
    both.scenarios = neither.scenarios
    with pytest.raises(SpecError, match="not both"):
        plugin_runners._checked(both)


def test_a_prefix_selects_configurations_and_an_unmatched_one_is_refused():
    assert [c.name for c in by_name(["plugin-metal*"])] == ["plugin-metal@0.32.0", "plugin-metal@0.33.0"]
    with pytest.raises(SpecError, match="unknown configuration"):
        by_name(["no-such-plugin*"])


def test_tpu_proves_agreement_and_dropping_its_keep_rule_refutes_it(monkeypatch):
    tpu = Config(name="tpu", runner="tpu-inference", requests=2, spec_tokens=1, events=ALL)
    assert prove(tpu, ["predicates-agree", "no-token-while-prefilling"]).status == "proved"
    # the same runner without the guard c + n >= num_tokens: it samples every step
    bare = dataclasses.replace(RUNNERS["tpu-inference"], name="tpu-no-keep-rule", rule=NEVER_RULE)
    monkeypatch.setitem(RUNNERS, bare.name, dataclasses.replace(bare, honours_reservation=False))
    weak = tpu.with_(name="tpu-bare", runner=bare.name, requests=1, events=frozenset())
    assert counterexample(weak, "predicates-agree").depth == 1
    assert counterexample(weak, "no-token-while-prefilling").depth == 3


def test_tpu_tokens_hold_while_a_request_is_never_left_out_and_break_when_it_is():
    """Hazard (c): with one request and no preemption every step schedules it, so the [0]
    of each step is replaced at the next (no counterexample within 10 steps); a preemption
    lets it re-enter with the scheduler's count below the runner's list, and the
    replacement pops an entry the trim removed."""
    alone = Config(name="tpu-alone", runner="tpu-inference", requests=1, spec_tokens=0, events=frozenset({"abort"}))
    assert Bmc(Encoding(alone)).shortest(Goal.violation("runner-tokens-agree"), 10) is None
    trace = counterexample(alone.with_(name="tpu-preempt", events=frozenset({"preempt"})), "runner-tokens-agree")
    assert "preempt" in [s.event for s in trace.steps]
    # with a second request a reset preempts it with its first step in flight: the pop crashes
    two = alone.with_(name="tpu-reset", requests=2, events=frozenset({"reset"}))
    crash = counterexample(two, "runner-tokens-agree")
    assert crash.fired[-1] == ["tpu-substitute-pops-empty"], crash.fired
    assert [s.event for s in crash.steps] == ["schedule", "reset_prefix_cache", "schedule"]


def test_ascend_prefill_class_holds_without_resumes_and_breaks_after_a_preemption():
    """vllm-ascend's prompt-bounded class: without a resume no step within 10 feeds more
    than one known token from past the prompt; a preempted request re-prefills its outputs
    in a chunk the class calls decode."""
    plain = Config(name="ascend", runner="ascend-v1", requests=1, spec_tokens=0, events=frozenset({"abort"}))
    assert Bmc(Encoding(plain)).shortest(Goal.violation("prefill-view-agrees"), 10) is None
    trace = counterexample(plain.with_(name="ascend-preempt", events=frozenset({"preempt"})), "prefill-view-agrees")
    assert "preempt" in [s.event for s in trace.steps]


def test_continue_decode_needs_a_one_token_chunk_to_sample_unreserved():
    """Hazard (a): the shortest crash schedules a non-final one-token prefill chunk, which
    the decode-only class samples; with one-token prompts no chunk exists and no trace
    within 8 steps drives the counter below 0."""
    cd = Config(name="cd", runner="tpu-cd-3", requests=1, spec_tokens=0, prompt_lens=(4,))
    trace = counterexample(cd, "counter-nonnegative")
    first = trace.steps[0]
    assert first.event == "schedule" and trace.states[1]["num_computed_tokens", 0] == 1  # one token of four
    short = cd.with_(name="cd-short", prompt_lens=(1,))
    assert Bmc(Encoding(short)).shortest(Goal.violation("counter-nonnegative"), 8) is None


def test_continue_decode_stop_inside_the_window_breaks_the_frontier_from_three_steps():
    """Hazard (b): a resumable stop after the first of n returned tokens leaves the frontier
    c - P short by n - 1: below 0 for n = 3 (the assert), not within 8 steps for n = 2."""
    two = Config(name="cd2", runner="tpu-cd-2", requests=1, spec_tokens=0, events=frozenset({"stream"}))
    assert Bmc(Encoding(two)).shortest(Goal.violation("safe-frontier-nonnegative"), 8) is None
    trace = counterexample(two.with_(name="cd3", runner="tpu-cd-3"), "safe-frontier-nonnegative")
    assert trace.fired and trace.fired[-1] == ["safe-frontier-nonnegative"]


def test_gaudi_lays_a_completing_prompts_token_on_the_unfinished_chunk_ahead_of_it(monkeypatch):
    """vllm-gaudi before #359: in the shortest trace the long-prefill threshold cuts the
    first prompt and the second completes in the same step; the only token goes to the
    first row (reserved nothing), the second row (reserved one) gets none. Negative
    controls: the same rule without the positional assignment, and the same runner
    without a threshold (the cut prompt is then the step's last row), break nothing
    within 6 steps."""
    gaudi = Config(name="gaudi", runner="gaudi-hpu", spec_tokens=0, long_prefill_threshold=2)
    trace = counterexample(gaudi, "predicates-agree")
    assert trace.depth == 1
    first = trace.states[1]
    assert first["is_prefill_chunk", 0] and not first["is_prefill_chunk", 1]
    assert [first["num_output_placeholders", r] for r in (0, 1)] == [0, 1]  # reserved for the second only
    leak = counterexample(gaudi, "placeholder-accounting")
    assert leak.states[-1]["num_output_placeholders", 1] == 1  # its step delivered, the reservation kept
    per_row = dataclasses.replace(RUNNERS["gaudi-hpu"], name="gaudi-per-row", positional_outputs=False)
    monkeypatch.setitem(RUNNERS, per_row.name, per_row)
    for control in (gaudi.with_(name="gaudi-per-row", runner=per_row.name), gaudi.with_(long_prefill_threshold=0)):
        for prop in ("predicates-agree", "placeholder-accounting"):
            assert Bmc(Encoding(control)).shortest(Goal.violation(prop), 6) is None, (control.name, prop)


def test_gaudi_positions_are_refused_beyond_two_requests():
    with pytest.raises(SpecError, match="by position"):
        Config(name="gaudi3", runner="gaudi-hpu", requests=3, spec_tokens=0).validate()
