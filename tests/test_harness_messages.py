"""What a reviewer reads when a generated case fails: the message must tell a fix from a
deleted assert, the replay line must reproduce the tree that failed, and vLLM's own
traceback is one environment variable away."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from vllm_contract.targets.harness import Divergence, replay_case, replay_command
from vllm_contract.targets.protocol import Outcome
from vllm_contract.targets.reference import ReferenceTarget

ROOT = Path(__file__).resolve().parent.parent
CASE_FILE = ROOT / "generated_tests/cases/vllm_0_29_0/test_v2_kvfail__counter_nonnegative.py"


def load_case():
    spec = importlib.util.spec_from_file_location("kvfail_case", CASE_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASE


class OnlyArm(ReferenceTarget):
    """The reference interpreter, playing one arm only (vLLM 0.32.0, no clamp)."""

    replay_option = "--vllm=/some/checkout"

    def accepts(self, cfg):
        if cfg.profile != "vllm-0.32.0" or cfg.clamp:
            return "one arm only"
        return None


class AssertRemoved(OnlyArm):
    """vLLM with the counter assert deleted: the state is the model's, nothing fires."""

    def __init__(self):
        super().__init__()
        self.name = "assert-removed"

    def step(self, event, args, model=None):
        outcome = super().step(event, args, model)
        return Outcome(fired=None, detail=outcome.detail)


class BugFixed(OnlyArm):
    """vLLM with the stray token fixed at its source: the runner returns nothing for the
    recompute, so the counter never goes negative (and nothing fires)."""

    def __init__(self):
        super().__init__()
        self.name = "bug-fixed"

    def step(self, event, args, model=None):
        outcome = super().step(event, args, model)
        if outcome.fired:
            key = ("num_output_placeholders", 0)
            self.state = dict(self.state)
            self.state[key] = 0
            self.state[("num_tokens", 0)] -= 1
        return Outcome(fired=None)


def test_a_deleted_assert_and_a_fix_read_differently():
    case = load_case()
    with pytest.raises(Divergence) as removed:
        replay_case(case, AssertRemoved())
    with pytest.raises(Divergence) as fixed:
        replay_case(case, BugFixed())
    removed_text, fixed_text = str(removed.value), str(fixed.value)
    assert "`assert request.num_output_placeholders >= 0`" in removed_text
    assert "num_output_placeholders[r0] model -1 / target -1" in removed_text
    assert "was removed or moved, not the bug fixed" in removed_text
    assert "num_output_placeholders[r0] model -1 / target 0" in fixed_text
    assert "no longer takes this path" in fixed_text
    assert "removed" not in fixed_text


def test_the_replay_line_names_the_tree_that_failed():
    case = load_case()
    with pytest.raises(Divergence) as info:
        replay_case(case, AssertRemoved())
    line = replay_command(case, AssertRemoved())
    assert line.endswith("--target=assert-removed --vllm=/some/checkout")
    assert f"replay: {line}" in str(info.value)


@pytest.mark.vllm
def test_show_vllm_traceback_prints_vllms_own_traceback(monkeypatch, capsys):
    """SHOW_VLLM_TRACEBACK=1 prints vLLM's traceback when its assert fires, even in a
    replay that passes because the case expects that assert (the over-delivery crash,
    on every release's counter assert)."""
    from vllm_contract.adapter import current as vllm_env
    from vllm_contract.targets.vllm_target import VllmTarget

    case_file = ROOT / "generated_tests/cases/vllm_0_29_0/test_v1_over_delivery__counter_nonnegative.py"
    spec = importlib.util.spec_from_file_location("over_delivery_case", case_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    target = VllmTarget(clamp=False)
    file, line = vllm_env.statement_site("assert request.num_output_placeholders >= 0")
    monkeypatch.delenv("SHOW_VLLM_TRACEBACK", raising=False)
    assert replay_case(module.CASE, target) == [vllm_env.tree().profile]
    assert "Traceback" not in capsys.readouterr().err  # quiet unless asked
    monkeypatch.setenv("SHOW_VLLM_TRACEBACK", "1")
    assert replay_case(module.CASE, target) == [vllm_env.tree().profile]
    said = capsys.readouterr()
    assert f"raised at {file}:{line} `assert request.num_output_placeholders >= 0`" in said.out
    assert "Traceback (most recent call last)" in said.err
