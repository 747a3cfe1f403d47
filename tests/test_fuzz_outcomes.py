"""What a fuzz campaign counts and keeps, on targets that need no vLLM.

A trace the target could not play is its own outcome; every kind of divergence becomes a
shrunk case that `vllm-contract generate --trace` takes; a resumed campaign runs only
what was not done. The campaign on vLLM's workers, local and on Ray: test_fuzz_campaign.py.
"""

from __future__ import annotations

import json

from codegen import generate
from model.interpreter import flat
from spec.errors import ExitStatus, TargetUnavailable
from targets.campaign import Campaign, merge, run_shard
from targets.campaign_run import Event, Handle
from targets.fuzz_presets import PRESETS
from targets.reference import ReferenceTarget
from vllm_contract.cli import main as cli
from vllm_contract.commands.fuzz import execute


class CannotBuild:
    """A target that cannot build any engine (a tree missing a piece, say)."""

    name = "cannot-build"

    def reset(self, cfg, init):
        raise TargetUnavailable("this tree cannot build an engine with 2 draft tokens")

    def step(self, event, args, model):  # pragma: no cover - never reached
        raise AssertionError("stepped a target that could not be built")


def test_traces_the_target_cannot_play_are_counted_apart_with_their_cause():
    campaign = Campaign(seed=1, cases=4, length=6, releases=("0.32.0",), presets=(next(iter(PRESETS)),))
    (shard,) = campaign.shards()
    done = {shard.number: run_shard(campaign, shard, CannotBuild(), "vllm-0.32.0")}
    results = merge(campaign, done, {})
    (group,) = results["groups"]
    assert group["traces"] == 4
    assert group["could_not_run"] == {"this tree cannot build an engine with 2 draft tokens": 4}
    assert group["divergent"] == 0 and not results["divergences"]  # never a divergence, never a clean replay
    assert results["totals"]["could_not_run"] == 4 and results["complete"]


# ------------------------------------------------------------------ a divergence becomes a case


class Drifts(ReferenceTarget):
    """The model's own interpreter, except that it reports one token too many computed
    for a request past 5: a target that diverges the way a real difference would."""

    name = "drifts"

    def reset(self, cfg, init):
        super().reset(cfg, init if all(isinstance(k, tuple) for k in init) else flat(init))  # as the harness hands it

    def project(self):
        state = dict(self.state)
        for key, value in self.state.items():
            if key[0] == "num_computed_tokens" and value > 5:
                state[key] = value + 1
        return state


class InlinePool:
    """The campaign loop's pool protocol, run in this process on a target given (no vLLM)."""

    how = "this process"

    def __init__(self, target, size: int = 1):
        self.size, self.target, self.handles, self.started = size, target, [], 0

    def live(self):
        return list(self.handles)

    def start(self, release):
        from targets.campaign import Worker

        self.started += 1
        handle = Handle(release, self.started)
        handle.actor = Worker(release)
        handle.actor.profile, handle.actor.factory = f"vllm-{release}", lambda runner: self.target
        self.handles.append(handle)
        handle.ready = False
        return handle

    def submit(self, handle, task):
        handle.task = task

    def wait(self, timeout):
        events = []
        for handle in self.handles:
            if not handle.ready:
                handle.ready = True
                events.append(Event("ready", None, (handle.release, "the reference, drifting")))
            if handle.task is not None:
                task, handle.task = handle.task, None
                events.append(Event("done", handle, handle.actor.run(task), task))
        return events

    def retire(self, handle):
        self.handles.remove(handle)

    def idle_release(self, release):
        pass

    def close(self):
        self.handles.clear()


CAMPAIGN = Campaign(seed=3, cases=6, length=14, releases=("0.32.0",), presets=("v1-core",), shard_size=4)


def test_every_kind_of_divergence_becomes_a_shrunk_case_that_generate_takes(tmp_path, monkeypatch, capsys):
    out = tmp_path / "fuzz"
    assert execute(CAMPAIGN, InlinePool(Drifts()), out, say=lambda line: None) == ExitStatus.FINDING
    results = json.loads((out / "results.json").read_text())
    (group,) = results["groups"]
    assert group["divergent"] > 0 and results["complete"]
    assert len(results["divergences"]) == len(group["kinds"])  # one case per kind, from its first trace
    for found in results["divergences"]:
        first = next(row for row in group["rows"] if row[0] == found["first"])
        assert first[3] == f"diverged: {found['signature']}" and found["case"]
        assert found["case_steps"] <= first[1]  # shrunk, never longer
        assert found["replay"].startswith("vllm-contract fuzz --releases 0.32.0 --presets v1-core --runner model")
        assert f"--seed 3 --length 14 --index {found['first']}" in found["replay"]
    # the first case as generate --trace takes it: a module of kind divergence, with every arm predicted
    monkeypatch.setattr(generate, "CASES", tmp_path / "cases")
    monkeypatch.setattr(generate, "USER_TRACES", tmp_path / "traces")
    itf = out / results["divergences"][0]["case"]
    meta = json.loads(itf.read_text())["#meta"]
    assert meta["kind"] == "divergence" and meta["config"]["name"] == "v1-core" and meta["replay"]
    assert cli(["generate", "--from", str(tmp_path / "no-prover-result"), "--trace", str(itf)]) == 0
    (module,) = (tmp_path / "cases").rglob("test_user__fuzz_0_32_0_v1_core_model_*.py")
    text = module.read_text()
    assert "kind='divergence'" in text and "checks the target against the model after every step" in text
    capsys.readouterr()


def test_a_resumed_campaign_runs_only_what_was_not_done(tmp_path):
    out = tmp_path / "fuzz"
    assert execute(CAMPAIGN, InlinePool(Drifts()), out, say=lambda line: None) == ExitStatus.FINDING
    whole = (out / "results.json").read_bytes()
    (out / "shards" / "00001.json").unlink()  # as if the run had been stopped before it finished
    ran = []
    pool = InlinePool(Drifts())
    on_dispatch = lambda handle, task: ran.append(task[2])  # noqa: E731
    assert execute(CAMPAIGN, pool, out, resume=True, on_dispatch=on_dispatch, say=lambda line: None) == 1
    assert [t.number for t in ran] == [1] and (out / "results.json").read_bytes() == whole


def test_the_merged_result_does_not_depend_on_the_shard_size(tmp_path):
    from dataclasses import replace

    quiet = lambda line: None  # noqa: E731
    assert execute(CAMPAIGN, InlinePool(Drifts()), tmp_path / "four", say=quiet) == ExitStatus.FINDING
    one = replace(CAMPAIGN, shard_size=1)
    assert execute(one, InlinePool(Drifts()), tmp_path / "one", say=quiet) == ExitStatus.FINDING
    for name in ("results.json", "summary.txt", "cases/fuzz-0.32.0-v1-core-model-0.itf.json"):
        assert (tmp_path / "four" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
