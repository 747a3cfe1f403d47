"""A child process of tests/test_hang_trees.py: one vLLM tree, a preemption, and whether it hangs.

    python tests/hang_probe.py TREE FOLDER     (prints one JSON object)

One vLLM tree per process (adapter/current.py). The case is the smallest that exercises
what a hang needs: a request's whole prompt scheduled, the request preempted (its output
delivered as stale) while that step is in flight, an empty step (its stale output keeps
it from resuming), the step delivered (the stale share drained). vLLM as released
resumes it; a tree that never drains, counts one token more in flight, or loses the
preempted request from its queues, does not. The case is played on the vLLM target (the
harness runs the engine on by itself after the last step) and again with the contract
monitor as the scheduler class, whose traces go to FOLDER and are explained.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STEPS = (
    ("schedule", {"budget": 2}),
    ("preempt", {"req": 0}),
    ("schedule", {"budget": 1}),
    ("deliver", {"stop": [0]}),
)


def control_case(profile: str):
    """The case above on the tree's profile (V2: every release has it), as the model predicts it."""
    from vllm_contract.codegen.case import Case, predict
    from vllm_contract.spec.config import Config

    cfg = Config("hang-probe", runner="v2", events=frozenset({"preempt"}), requests=1, profile=profile).validate()
    init = {"prompt_len": [2]}
    expect = predict(None, cfg, init, STEPS)
    arm = {"profile": profile, "clamp": False, "guard": "none"}
    return Case("hang_probe", cfg.record(), init, STEPS, "witness", None, {profile: (arm, expect)})


def main(tree: str, folder: str) -> int:
    os.environ["VLLM_CONTRACT_MONITOR_DIR"] = folder
    from vllm_contract.adapter import current as env

    env.select(tree)
    env.load()
    from vllm_contract.report.explain_trace import explain_trace
    from vllm_contract.targets.harness import Divergence, replay_case
    from vllm_contract.targets.monitor import writer as monitor_writer
    from vllm_contract.targets.vllm_target import VllmTarget

    profile = env.tree().profile
    case = control_case(profile)
    out: dict = {"profile": profile, "title": env.tree().title}
    for name, target in (("cases", VllmTarget()), ("monitor", VllmTarget(monitor=True))):
        try:
            replay_case(case, target)
            out[name] = "passed"
        except Divergence as exc:
            out[name] = str(exc)
    out["flushed"] = monitor_writer.flush()
    out["traces"] = []
    for path in sorted(Path(folder).glob("*.itf.json")):
        meta = json.loads(path.read_text())["#meta"]
        answer = explain_trace(path)
        out["traces"].append(
            {
                "file": path.name,
                "violated": meta["violated"],
                "hang": meta["monitor"].get("hang"),
                "status": int(answer.status),
                "headline": answer.headline,
            }
        )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
