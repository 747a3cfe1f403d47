"""A fuzz campaign on vLLM's workers: the same bytes whatever runs it, no trace lost, resumed as if never stopped.

Every campaign here is 2 presets x 2 traces on 0.32.0, in shards of one trace. The
local tests share one pool: vLLM is imported once, by the process its workers are
forked from. The Ray test starts a two-node cluster on this machine
(ray.cluster_utils.Cluster, one CPU a node, one actor a CPU); Ray is installed by
`make venv`, and a run without it fails here, never skips.
"""

from __future__ import annotations

import json

import pytest
from vllm_contract.spec.errors import ExitStatus
from vllm_contract.targets.fuzz.campaign import Campaign
from vllm_contract.targets.fuzz.campaign_run import LocalPool

from tests.test_bad_inputs import default_sigint
from vllm_contract.commands.fuzz import execute

pytestmark = pytest.mark.vllm

CAMPAIGN = Campaign(seed=5, cases=2, length=30, releases=("0.32.0",), presets=("v1-core", "v2-kvfail"), shard_size=1)
MERGED = ("results.json", "summary.txt")  # the same bytes whatever ran them; timings.json is not


def quiet(line: str) -> None:
    pass


def merged(out) -> dict[str, bytes]:
    files = {name: (out / name).read_bytes() for name in MERGED}
    files.update(
        {p.name: p.read_bytes() for p in sorted((out / "cases").glob("*"))} if (out / "cases").is_dir() else {}
    )
    return files


def tasks(out) -> list[dict]:
    return json.loads((out / "timings.json").read_text())["tasks"]


@pytest.fixture(scope="module")
def pool():
    pool = LocalPool(1, keep_loaded=True)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def one_worker(pool, tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzz") / "one-worker"
    pool.size = 1
    assert execute(CAMPAIGN, pool, out, say=quiet) == ExitStatus.OK
    return out


def test_one_worker_and_two_give_the_same_bytes(pool, one_worker, tmp_path):
    results = json.loads((one_worker / "results.json").read_text())
    assert results["complete"] and results["totals"]["traces"] == 4
    pool.size = 2
    assert execute(CAMPAIGN, pool, tmp_path / "two", say=quiet) == ExitStatus.OK
    assert merged(tmp_path / "two") == merged(one_worker)
    assert len({t["pid"] for t in tasks(tmp_path / "two")}) == 2  # both workers ran shards


def test_a_worker_killed_mid_shard_loses_no_trace(pool, one_worker, tmp_path):
    """The second shard handed out is killed with its worker (SIGKILL, at once): it runs
    again on another worker, and the result is the one no worker died for."""
    pool.size = 2
    handed = []

    def kill_second(handle, task):
        handed.append(task)
        if len(handed) == 2:
            pool.kill(handle)

    said = []
    assert execute(CAMPAIGN, pool, tmp_path / "killed", on_dispatch=kill_second, say=said.append) == ExitStatus.OK
    assert merged(tmp_path / "killed") == merged(one_worker)
    retried = [t for t in tasks(tmp_path / "killed") if t["attempt"] == 2]
    assert [t["shard"] for t in retried] == [handed[1][2].number], said
    assert any("it runs again on another worker" in line for line in said)


def test_an_interrupted_campaign_is_partial_and_resumes_to_the_same_bytes(pool, one_worker, tmp_path):
    pool.size = 1
    out, handed = tmp_path / "stopped", []

    def stop_at_third(handle, task):
        handed.append(task)
        if len(handed) == 3:
            raise KeyboardInterrupt

    assert execute(CAMPAIGN, pool, out, on_dispatch=stop_at_third, say=quiet) == ExitStatus.INTERRUPTED
    partial = json.loads((out / "results.json").read_text())
    assert not partial["complete"] and partial["totals"]["traces"] < 4
    assert (out / "summary.txt").read_text().startswith("fuzz campaign: PARTIAL (stopped by Ctrl-C)")
    assert execute(CAMPAIGN, pool, out, resume=True, say=quiet) == ExitStatus.OK
    assert merged(out) == merged(one_worker)


@pytest.mark.ray
def test_a_two_node_ray_cluster_gives_the_same_bytes(one_worker, tmp_path, monkeypatch):
    try:
        import ray
        from ray.cluster_utils import Cluster
        from vllm_contract.targets.fuzz.campaign_ray import RayPool
    except ImportError:
        pytest.fail("Ray is not installed: run `make venv` (it installs vllm-contract[ray])", pytrace=False)
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")  # no usage report from this machine
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        pool = RayPool(cluster.address, 2)  # joins it, as --ray ADDRESS does
        try:
            assert execute(CAMPAIGN, pool, tmp_path / "ray", say=quiet) == ExitStatus.OK
        finally:
            pool.close()
        assert len({t["node"] for t in tasks(tmp_path / "ray")}) == 2  # each node's actor ran shards
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert merged(tmp_path / "ray") == merged(one_worker)


def test_a_billion_traces_a_preset_say_so_at_once_and_ctrl_c_leaves_a_partial_result(tmp_path):
    """`fuzz --cases 1000000000 --yes`, as a user runs it: the header before any work,
    progress while the workers load vLLM, a small process, and Ctrl-C then writes a
    PARTIAL result (none of the traces run yet) that --resume goes on with."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "fuzz"
    started = time.monotonic()
    run = subprocess.Popen(
        [sys.executable, "-m", "vllm_contract", "fuzz", "--cases", "1000000000", "--yes", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # Ctrl-C as the terminal sends it, to this run alone
        preexec_fn=default_sigint,  # a Ctrl-C reaches it even where the run inherited SIGINT ignored
    )
    try:
        header = run.stdout.readline()
        said_at = time.monotonic() - started
        progress = run.stdout.readline()
        rss = next(int(line.split()[1]) for line in open(f"/proc/{run.pid}/status") if line.startswith("VmRSS"))
        run.send_signal(signal.SIGINT)
        rest, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
        run.wait()
    assert header.startswith("38,000,000,000 trace(s)") and said_at < 10, (header, said_at)
    assert progress.startswith("   ... 0/1,520,000,000 shards"), progress
    assert rss < 300_000, f"{rss} kB"  # the coordinator: the workers' vLLM is in processes of their own
    assert run.returncode == ExitStatus.INTERRUPTED, err
    assert err.strip().splitlines() == [f"interrupted: {out} holds a PARTIAL result; --resume goes on"]
    assert (out / "summary.txt").read_text().startswith("fuzz campaign: PARTIAL (stopped by Ctrl-C)")
    assert json.loads((out / "campaign.json").read_text())["campaign"]["cases"] == 10**9
