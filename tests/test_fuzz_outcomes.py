"""What a fuzz campaign counts and keeps, on targets that need no vLLM.

A trace the target could not play is its own outcome; every kind of divergence becomes a
shrunk case that `vllm-contract generate --trace` takes; a resumed campaign runs only
what was not done. The campaign on vLLM's workers, local and on Ray: test_fuzz_campaign.py.
"""

from __future__ import annotations

import json

import pytest
from vllm_contract.codegen import generate
from vllm_contract.model.interpreter import flat
from vllm_contract.spec.errors import ExitStatus, TargetUnavailable
from vllm_contract.spec.properties import ASSERTS
from vllm_contract.targets.fuzz.campaign import Campaign, _fatal_end, merge, run_shard
from vllm_contract.targets.fuzz.campaign_run import Event, Handle
from vllm_contract.targets.fuzz.presets import PRESETS
from vllm_contract.targets.harness import Divergence, replay
from vllm_contract.targets.reference import ReferenceTarget

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
        from vllm_contract.targets.fuzz.campaign import Worker

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


# ------------------------------------------------------------------ a huge campaign, signals, two at once


class StopAfter:
    """on_dispatch: Ctrl-C once `n` tasks have been handed out; keeps their shards."""

    def __init__(self, n: int):
        self.n, self.handed = n, []

    def __call__(self, handle, task):
        self.handed.append(task[2])
        if len(self.handed) == self.n:
            raise KeyboardInterrupt


def test_a_campaign_of_a_billion_traces_a_preset_starts_at_once_in_little_memory(tmp_path):
    """Nothing is planned up front (tens of millions of shards): the header comes before
    any work, memory does not depend on the campaign's size, Ctrl-C writes a PARTIAL
    result whose missing traces are ranges, and --resume goes on after the shards done."""
    import time
    import tracemalloc

    huge = Campaign(seed=3, cases=10**9, length=6, releases=("0.32.0",), presets=tuple(PRESETS)[:3], shard_size=2)
    out, said = tmp_path / "fuzz", []
    stop = StopAfter(3)
    tracemalloc.start()
    started = time.monotonic()
    try:
        assert execute(huge, InlinePool(Drifts()), out, on_dispatch=stop, say=said.append) == ExitStatus.INTERRUPTED
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 60
    assert said[0].startswith("3,000,000,000 trace(s)") and "1,500,000,000 shard(s)" in said[0]
    assert peak < 20 * 2**20, f"{peak / 2**20:.0f} MiB traced"
    results = json.loads((out / "results.json").read_text())
    assert not results["complete"] and results["totals"]["traces"] == 4  # two shards of two finished
    assert results["groups"][0]["missing"] == [[4, 10**9 - 1]]
    assert [g.get("missing") for g in results["groups"][1:]] == [[[0, 10**9 - 1]]] * 2
    assert (out / "summary.txt").read_text().startswith("fuzz campaign: PARTIAL (stopped by Ctrl-C): 4 of 3000000000")
    again = StopAfter(1)
    assert execute(huge, InlinePool(Drifts()), out, resume=True, on_dispatch=again, say=said.append) == 130
    assert [s.number for s in stop.handed] == [0, 1, 2] and [s.number for s in again.handed] == [2]


class InterruptedWhileRetiring(InlinePool):
    """Ctrl-C arrives as the run retires its workers, after the last task (a slow exit)."""

    def idle_release(self, release):
        raise KeyboardInterrupt


def test_a_signal_after_the_last_task_leaves_a_complete_result_and_says_so(tmp_path, capsys):
    out = tmp_path / "fuzz"
    assert execute(CAMPAIGN, InterruptedWhileRetiring(Drifts()), out, say=lambda line: None) == ExitStatus.FINDING
    err = capsys.readouterr().err
    assert "Ctrl-C came after the last task" in err and "PARTIAL" not in err
    assert json.loads((out / "results.json").read_text())["complete"]
    assert (out / "summary.txt").read_text().startswith("fuzz campaign: complete")


def test_a_second_campaign_into_the_same_out_is_refused_while_the_first_runs(tmp_path, capsys):
    """One lock beside --out, with the owner's pid; a lock its owner left when it died is taken over."""
    import subprocess
    import sys

    out = tmp_path / "fuzz"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from vllm_contract.outfolder import exclusive\n"
            "with exclusive(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        assert cli(["fuzz", "--presets", "v1-core", "--cases", "1", "--out", str(out)]) == ExitStatus.BAD_INPUT
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"another run (pid {holder.pid}) is writing there now" in err
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    lock = tmp_path / ".fuzz.lock"
    assert lock.read_text() == f"{holder.pid}\n"  # left behind by a killed owner: taken over
    assert execute(CAMPAIGN, InlinePool(Drifts()), out, say=lambda line: None) == ExitStatus.FINDING
    assert not lock.exists()


@pytest.mark.slow
def test_sigterm_ends_a_campaign_still_joining_a_ray_cluster(tmp_path):
    """Something listens at the address but is no Ray head: Ray's join waits in its C++
    code, where no Python handler runs; SIGTERM still ends the run at once, with one line."""
    import signal
    import socket
    import subprocess
    import sys
    import threading
    import time

    server = socket.socket()
    server.bind(("0.0.0.0", 0))  # Ray rewrites 127.0.0.1 to this machine's address
    server.listen(16)
    held: list = []
    threading.Thread(target=lambda: [held.append(server.accept()) for _ in range(8)], daemon=True).start()
    port = server.getsockname()[1]
    command = [sys.executable, "-m", "vllm_contract", "fuzz", "--ray", f"127.0.0.1:{port}", "--cases", "1"]
    run = subprocess.Popen(
        [*command, "--out", str(tmp_path / "fuzz")], stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while len(held) < 2 and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # our reachability check, then Ray's own connection
        assert len(held) >= 2 and run.poll() is None, "Ray never tried the address"
        time.sleep(1)
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=10)
    finally:
        if run.poll() is None:
            run.kill()
        run.wait()
        server.close()
    assert run.returncode == ExitStatus.TERMINATED
    assert err.strip().splitlines()[-1] == f"terminated (SIGTERM) while joining the Ray cluster at 127.0.0.1:{port}"


# ------------------------------------------------------------------ a runner's assert on a scheduler-only target

# finding 12's trace (v2-over-delivery-logits, the clamp arm): the V2 runner's logits assert
# ends it at step 6, in code a scheduler-only target does not run
LOGITS_INIT = {"prompt_len": [1, 1]}
LOGITS_STEPS = [
    ("schedule", {"budget": 2, "accepted": [0, 0], "extra": [0, 2]}),
    ("schedule", {"budget": 4, "accepted": [0, 1], "extra": [0, 1]}),
    ("deliver", {}),
    ("schedule", {"budget": 1, "accepted": [0, 0], "extra": [0, 0]}),
    ("deliver", {"stop": [1, 0]}),
    ("schedule", {"budget": 1, "accepted": [0, 1], "extra": [0, 0]}),
]


class SchedulerOnly(ReferenceTarget):
    """The model's interpreter seen as vLLM's scheduler alone: a runner's assert never fires."""

    observes_runner_asserts = False

    def step(self, event, args, model=None):
        outcome = super().step(event, args, model)
        if outcome.fired and ASSERTS[outcome.fired].site != "scheduler":
            outcome.fired = None
        return outcome


def _logits_cfg():
    from vllm_contract.spec.matrix import MATRIX

    return next(c for c in MATRIX if c.name == "v2-over-delivery-logits@0.34.0")


def test_a_runner_assert_ends_the_trace_where_the_target_does_not_run_the_runner():
    result = replay(_logits_cfg(), LOGITS_INIT, LOGITS_STEPS, SchedulerOnly())
    assert result.steps_run == 6 and result.fired is None
    # the model itself fires it at that step: the reference, which runs everything, agrees
    assert replay(_logits_cfg(), LOGITS_INIT, LOGITS_STEPS, ReferenceTarget()).fired == "logits-covered"


def test_a_target_that_runs_the_runner_and_does_not_fire_its_assert_diverges():
    class RunnerSilent(SchedulerOnly):
        observes_runner_asserts = True

    with pytest.raises(Divergence, match="logits-covered"):
        replay(_logits_cfg(), LOGITS_INIT, LOGITS_STEPS, RunnerSilent())


def test_a_campaign_counts_a_runner_assert_as_the_models_alone_where_the_model_decides_the_runner():
    assert _fatal_end("logits-covered", "real") == "logits-covered"
    assert _fatal_end("logits-covered", "model").startswith("logits-covered (the model's alone")
    assert _fatal_end("placeholders-nonnegative", "model") == "placeholders-nonnegative"


def test_a_v1_preset_is_no_trace_of_a_release_without_the_v1_runner():
    """`--releases all` takes in 0.34.0, which has no V1 runner: its V1 presets are left out
    of the campaign and said to be (they were counted as could not run, exit 3), and every
    shard still belongs to its group."""
    from vllm_contract.targets.fuzz.campaign import _left_out_lines, groups

    campaign = Campaign(
        seed=1, cases=3, length=5, releases=("0.33.0", "0.34.0"), presets=("v1-core", "v2-core"), shard_size=2
    )
    assert campaign.left_out == [("0.34.0", "v1-core")]
    assert groups(campaign) == [
        ("0.33.0", "v1-core", "model"),
        ("0.33.0", "v2-core", "model"),
        ("0.34.0", "v2-core", "model"),
    ]
    assert campaign.traces == 9 and campaign.shard_count == 6
    shards = list(campaign.shards())
    assert [(s.release, s.preset) for s in shards if s.release == "0.34.0"] == [("0.34.0", "v2-core")] * 2
    assert all(campaign.shard(n).release == "0.34.0" for n in campaign.release_numbers("0.34.0"))
    assert _left_out_lines(campaign) == [
        "left out: 1 V1 preset(s) on 0.34.0 (vLLM 0.34.0 has no V1 model runner): v1-core"
    ]
    only_v1 = Campaign(seed=1, cases=3, length=5, releases=("0.32.0", "0.33.0"), presets=("v1-core",))
    assert only_v1.left_out == [] and only_v1.traces == 6


def test_an_assert_vllm_has_no_statement_for_is_the_models_alone():
    """running-tokens-positive is the model's own end (no statement in vLLM): a campaign says
    so, as for a runner's assert on the scheduler-only target, and names the ones vLLM has."""
    assert _fatal_end("running-tokens-positive", "real").startswith("running-tokens-positive (the model's alone")
    assert _fatal_end("running-tokens-positive", "model").endswith("vLLM has no such assert)")
    assert _fatal_end("admission-tokens-positive", "real") == "admission-tokens-positive"
