"""The contract monitor end to end, on vLLM's real scheduler and real V2 model runner.

The workload is finding 1 (a KV-load failure on V2 recomputes a prompt the V2 runner
already counts as computed): the events of the v2-kvfail counterexample, played by the
real-runner target (targets/real_runner: the tree's own GPUModelRunner on CPU with a
stub forward pass) with MonitoredAsyncScheduler as the scheduler class. The runner, not
the model, decides what each step returns. What the monitor writes must become a case
(codegen.generate --trace) that reproduces on this release's scheduler: on 0.32.0 the
counter assert kills the engine and the step-reservation guard's arm runs clean; on
0.33.0 vLLM appends the stray token without a word and only the monitor says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vllm_contract.adapter import current as vllm_env
from vllm_contract.codegen.cases import build
from vllm_contract.codegen.generate import adopt
from vllm_contract.report.explain_trace import explain_trace
from vllm_contract.spec import profiles
from vllm_contract.spec.errors import ExitStatus
from vllm_contract.spec.verdicts import Reaction
from vllm_contract.targets.harness import replay_case
from vllm_contract.targets.monitor import writer as monitor_writer
from vllm_contract.targets.monitor.core import ENV_FOLDER
from vllm_contract.targets.vllm_target import VllmTarget

pytestmark = pytest.mark.vllm

PROFILE = vllm_env.tree().profile
REPO = Path(__file__).resolve().parent.parent
WORKLOAD = REPO / "generated_tests/cases/vllm_0_29_0/test_v2_kvfail__counter_nonnegative.py"
# the releases it runs on, and whether the counter assert kills the engine there (0.33.0 on:
# the decrement is skipped at P = 0 and the stray token appended silently)
CRASHES = {f"vllm-{r}": profiles.of(f"vllm-{r}").asserts_counter_at_zero for r in ("0.32.0", "0.33.0", "0.34.0")}


def _case(path: Path):
    import importlib

    return importlib.import_module(".".join(path.relative_to(REPO).with_suffix("").parts)).CASE


@pytest.mark.skipif(PROFILE not in CRASHES, reason="the real V2 runner end to end runs on 0.32.0, 0.33.0 and 0.34.0")
def test_the_monitor_turns_finding_1_on_the_real_v2_runner_into_a_case(tmp_path, monkeypatch):
    from vllm_contract.targets.real_runner.target import RealRunnerTarget

    crash = CRASHES[PROFILE]
    folder = tmp_path / "monitor"
    monkeypatch.setenv(ENV_FOLDER, str(folder))
    workload = _case(WORKLOAD)
    target = RealRunnerTarget(monitor=True)
    assert PROFILE in replay_case(workload, target)  # the real runner did what the model says
    # the runner, not the model, returned the stray token: the recompute chunk sampled one
    assert any(r.get("runner_returns") and not r.get("mismatches") for r in target.log)

    assert monitor_writer.flush(), "the monitor's trace was not written within 10 s"
    # the first trace is the case's; where vLLM goes on silently, the engine run on after the
    # case (the harness's run-on) can write more (the stray token breaks placeholder-accounting)
    files = sorted(folder.glob("*.itf.json"), key=lambda f: int(f.name.removesuffix(".itf.json").rsplit("-", 1)[1]))
    assert files and files[0].name.endswith("-1.itf.json"), [f.name for f in files]
    assert len(files) == 1 or not crash, [f.name for f in files]  # an assert ends the engine at the first
    files = files[:1]
    meta = json.loads(files[0].read_text())["#meta"]
    assert meta["monitor"]["release"] == PROFILE.removeprefix("vllm-")
    assert meta["config"]["runner"] == "v2"
    if crash:  # written just before vLLM's assert killed the step
        assert meta["violated"] == "counter-nonnegative"
        assert meta["monitor"]["fires"] == "placeholders-nonnegative"
    else:  # vLLM appended the token and went on; only the monitor noticed
        assert meta["violated"] == "no-token-while-prefilling" and meta["monitor"]["fires"] == ""
    answer = explain_trace(files[0])
    assert answer.status == ExitStatus.OK and answer.mechanisms == ["kv-load-failure"]

    # codegen.generate --trace: the recording, shrunk, becomes a committed-style case
    (copied,) = adopt(files, None, user_dir=tmp_path / "traces")
    source = build(copied, None, user=True)
    case = source.case
    assert case.kind == "violation" and source.cfg.profile == PROFILE
    plain, guarded = case.arms[PROFILE][1], case.arms[f"{PROFILE}+guard"][1]
    assert plain.reaction == (Reaction.CRASH if crash else Reaction.SILENT)
    if crash:
        assert plain.fired[0] == "placeholders-nonnegative"
    # the guard drops the stray token: the case's property holds and nothing fires (the
    # runner-side disagreement it does not fix stays among the arm's other properties)
    assert not guarded.fired and not guarded.violations and guarded.dropped > 0, guarded
    # on vLLM's own scheduler: the unpatched arm as recorded (the assert, or the silent
    # token), and the guard's arm clean, the stray token dropped
    assert PROFILE in replay_case(case, VllmTarget())
    assert f"{PROFILE}+guard" in replay_case(case, VllmTarget(guard=True))
