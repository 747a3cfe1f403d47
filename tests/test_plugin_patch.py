"""tpu-inference's own Continue Decode patch of vLLM's scheduler, run by the vllm targets.

The Continue Decode arms are played on the loaded release's scheduler with the plugin's
patch applied (adapter/plugin_patch.py, the file from the pinned wheel): these tests
check that the patch is undone after each call, that it is what makes those arms agree
with the model (withheld, they diverge), and that an arm whose plugin tree is missing
fails with what to do.
"""

from __future__ import annotations

import pytest
from vllm_contract.adapter import current as vllm_env
from vllm_contract.adapter import plugin_patch
from vllm_contract.codegen.generate import CASES, generated_cases
from vllm_contract.spec.errors import CouldNotRun
from vllm_contract.spec.plugin_runners.tpu_inference import CONTINUE_DECODE_PATCH
from vllm_contract.targets import plugin_fetch
from vllm_contract.targets.harness import Divergence, replay_case
from vllm_contract.targets.vllm_target import VllmTarget

pytestmark = pytest.mark.vllm

PROFILE = vllm_env.tree().profile


def _tree():
    folder, why = plugin_fetch.tree(CONTINUE_DECODE_PATCH.plugin)
    if folder is None:
        pytest.fail(why)  # make test fetches it (make plugin-trees): never a skip
    return folder


def _continue_decode_cases():
    """The generated Continue Decode cases with an arm on the loaded release."""
    found = [
        case
        for _, case in generated_cases(CASES)
        if case.config["runner"].startswith("tpu-cd-") and any(o["profile"] == PROFILE for o, _ in case.arms.values())
    ]
    if not found:
        # tpu-inference's scenarios are paired with some releases only (spec/plugin_runners/)
        pytest.skip(f"no Continue Decode scenario is checked against {PROFILE}")
    return found


def _scheduler_attributes():
    return [(cls, dict(vars(cls))) for cls in plugin_patch._scheduler_classes()]


def test_the_patch_holds_inside_its_block_and_is_undone_after():
    before = _scheduler_attributes()
    scheduler = vllm_env.load().AsyncScheduler.__mro__[1]
    with plugin_patch.applied(CONTINUE_DECODE_PATCH, _tree()):
        assert getattr(scheduler, "_continue_decode_patched", False)
        assert vars(scheduler)["_update_request_with_output"] is not before[1][1]["_update_request_with_output"]
    assert _scheduler_attributes() == before
    with pytest.raises(KeyError):  # undone on the way out of a failure too
        with plugin_patch.applied(CONTINUE_DECODE_PATCH, _tree()):
            raise KeyError("a failure inside the block")
    assert _scheduler_attributes() == before


def test_continue_decode_arms_agree_with_the_model_only_under_the_plugins_patch(monkeypatch):
    """Every Continue Decode case replays on the release's scheduler under the patch and
    leaves its classes as they were; with the patch withheld from the scheduler's calls
    after construction (the negative control), the cases where the plugin's arithmetic
    matters diverge."""
    cases = _continue_decode_cases()
    target = VllmTarget()
    before = _scheduler_attributes()
    for case in cases:
        assert replay_case(case, target)
    assert _scheduler_attributes() == before

    played = VllmTarget.step

    def step_without_patch(self, *args, **kwargs):
        tree, self.plugin_tree = self.plugin_tree, None
        try:
            return played(self, *args, **kwargs)
        finally:
            self.plugin_tree = tree

    monkeypatch.setattr(VllmTarget, "step", step_without_patch)
    diverged = []
    for case in cases:
        try:
            replay_case(case, target)
        except Divergence:
            diverged.append(case.name)
    assert any("stop__safe_frontier" in name for name in diverged), diverged
    assert any("healthy_path" in name for name in diverged), diverged


def test_a_continue_decode_arm_without_the_plugins_tree_fails_with_what_to_do(monkeypatch):
    case = _continue_decode_cases()[0]
    monkeypatch.setattr(plugin_fetch, "tree", lambda name: (None, "tpu-inference 0.32.0 is not fetched: run it"))
    with pytest.raises(CouldNotRun, match="tpu-cd-.* runs vLLM's scheduler under tpu-inference's own patch: .*fetch"):
        replay_case(case, VllmTarget())
