"""What a fuzz campaign gains from workers: one fixed campaign on 1 and 2 local workers and on a two-node Ray cluster.

The campaign (every preset, 20 traces each of at most 40 steps, the known differences
masked, the engine loop compared, shards of 10) runs three times on this machine:
on one local worker, on two, and on a Ray cluster of two nodes of one CPU each
(ray.cluster_utils.Cluster, one actor a node: the simulated two-node cluster). Each run
is timed from its first worker ready (vLLM's import, once per process, apart; it is
shown on its own) to its last task; the merged results must be the same bytes, or the
benchmark fails. The host's load average is printed before and after: the machine is
shared, and the wall-clock rates follow it; traces per CPU second of the workers do not,
and say whether a worker does the same work per trace wherever it runs.

    vllm-contract bench fuzz-scaling [--vllm 0.32.0] [--cases 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter

from vllm_contract.targets.fuzz.campaign import Campaign, dump, merge
from vllm_contract.targets.fuzz.campaign_run import LocalPool, run
from vllm_contract.targets.fuzz.presets import KNOWN, PRESETS


def campaign(release: str, cases: int, presets: tuple[str, ...] = tuple(PRESETS)) -> Campaign:
    return Campaign(
        seed=11,
        cases=cases,
        length=40,
        releases=(release,),
        presets=presets,
        known=tuple(KNOWN),
        engine=True,
        shard_size=10,
    )


def measure(plan: Campaign, pool) -> dict:
    """One run of the campaign on the pool: its merged result and its times."""
    done, cases, timing, records = {}, {}, {}, []
    started = time.monotonic()
    try:
        run(plan, pool, done, cases, say=lambda line: None, timing=timing, records=records)
    finally:
        pool.close()
    wall = time.monotonic() - started
    working = wall - timing.get("ready", 0.0)
    traces = sum(r["traces"] for r in records)
    per_worker = Counter((r["host"], r["pid"]) for r in records)
    return {
        "cpu": sum(r["cpu"] for r in records),
        "split": "/".join(str(n) for n in sorted(per_worker.values(), reverse=True)),
        "merged": dump(merge(plan, done, cases)),
        "wall": wall,
        "working": working,
        "ready": timing.get("ready", 0.0),
        "rate": traces / working,
        "traces": traces,
        "workers": len(per_worker),
        "nodes": len({r.get("node", r["host"]) for r in records}),
    }


def two_node_ray(plan: Campaign) -> dict:
    import ray
    from ray.cluster_utils import Cluster
    from vllm_contract.targets.fuzz.campaign_ray import RayPool

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        return measure(plan, RayPool(cluster.address, 2))
    finally:
        ray.shutdown()
        cluster.shutdown()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm", default="0.32.0", help="the release fuzzed (default 0.32.0)")
    ap.add_argument("--cases", type=int, default=20, help="traces per preset (default 20)")
    ap.add_argument("--out", default=None, help="also write the report to this file")
    ap.add_argument(
        "--small",
        action="store_true",
        help="two traces of one preset, the same three runs (a check that it runs)",
    )
    ns = ap.parse_args(argv)
    if ns.small:
        ns.cases = min(ns.cases, 2)
    plan = campaign(ns.vllm, ns.cases, tuple(PRESETS)[:1] if ns.small else tuple(PRESETS))
    load_before = os.getloadavg()
    runs = {
        "1 local worker": measure(plan, LocalPool(1)),
        "2 local workers": measure(plan, LocalPool(2)),
        "Ray, 2 nodes x 1 CPU (simulated)": two_node_ray(plan),
    }
    load_after = os.getloadavg()
    base = runs["1 local worker"]
    same = all(r["merged"] == base["merged"] for r in runs.values())
    lines = [
        f"fuzz campaign scaling on {os.cpu_count()} core(s), vLLM {ns.vllm}: {plan.traces} traces "
        f"({ns.cases} per preset x {len(plan.presets)} presets, at most {plan.length} steps, shards of "
        f"{plan.shard_size}), measured {time.strftime('%Y-%m-%d')}",
        f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}",
        "",
        "| run | workers that ran (tasks each) | nodes | first worker ready | traces/s (from then) | speed-up "
        "| wall | cores the workers got | traces per worker CPU second |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in runs.items():
        lines.append(
            f"| {name} | {r['workers']} ({r['split']}) | {r['nodes']} | {r['ready']:.1f} s | {r['rate']:.2f} "
            f"| {r['rate'] / base['rate']:.2f}x | {r['wall']:.1f} s | {r['cpu'] / r['working']:.2f} "
            f"| {r['traces'] / r['cpu']:.2f} |"
        )
    lines += ["", "merged results: " + ("the same bytes in every run" if same else "DIFFER between runs")]
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if ns.out:
        with open(ns.out, "w") as fh:
            fh.write(report)
    return 0 if same else 1
