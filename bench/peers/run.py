"""One case per job, the jobs of the matrix, the report and the command line."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import z3
from rich.console import Console
from rich.table import Table
from vllm_contract.bench.peers.bfs import bfs, pick_values, proved_init
from vllm_contract.bench.peers.bmc import project
from vllm_contract.bench.peers.common import (
    BMC_REPEAT,
    PROBE_SEEDS,
    RACE_SEEDS,
    RESULTS,
    ROOT,
    SMALL,
    WALK_FINDS,
    WALK_LENGTH,
    concrete,
    instance,
)
from vllm_contract.bench.peers.hypothesis_search import hypothesis_search
from vllm_contract.bench.peers.walk import random_walk
from vllm_contract.model.bmc import Bmc
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.interpreter import nested
from vllm_contract.model.probe import CAP as RACE_CAP
from vllm_contract.model.probe import SECONDS as PROBE_S


def run_case(job) -> dict:
    kind, cfg, prop, limit = job
    out = {"kind": kind, "config": cfg.name, "property": prop, "skip": concrete(cfg)}
    if kind == "proved":
        inst, out["instance"] = instance(cfg)
        out["skip"] = None if inst is not None else out["instance"]
        if inst is not None:
            init, extra = proved_init(inst)
            out["bfs"] = bfs(inst, None, init, pick_values(inst, None, extra), limit)
        return out
    out["project"] = project(cfg, prop)
    if out["skip"] is not None:
        return out
    out["walk"] = random_walk(cfg, prop, limit)
    out["hyp"] = hypothesis_search(cfg, prop, limit)
    trace = out["project"]["trace"]
    if trace is not None:
        out["bfs"] = bfs(cfg, prop, nested(trace.init), pick_values(cfg, trace), limit)
    out["project"]["trace"] = None  # not needed past here (and not picklable cheaply)
    return out


SMALL_RUN = ["v1-over-delivery@0.32.0"]  # --small: one violated case, one second per peer


def jobs(only: list[str] | None, limit: float, proved: bool) -> list:
    """The cases: each violated property a walk can see (the peers are walks and searches
    over steps; bounded-progress needs the engine run on, the BMC's alone), and each
    proved configuration's BFS."""
    from vllm_contract.model.probe import walkable
    from vllm_contract.spec.matrix import by_name

    out = []
    for cfg in by_name(only):
        for prop, verdict in cfg.expect.items():
            if verdict == "violated" and not walkable(prop):
                print(f"{cfg.name} {prop}: no walk sees a progress property; left out", file=sys.stderr)
            elif verdict == "violated":
                out.append(("violated", cfg, prop, limit))
        if proved and any(v == "proved" for v in cfg.expect.values()):
            out.append(("proved", cfg, None, limit))
    return out


# ------------------------------------------------------------------ report


def sec(x) -> str:
    return "-" if x is None else f"{x:.3f}" if x < 10 else f"{x:.1f}"


def ratio(a, b) -> str:
    if a is None or b is None:
        return "-"
    return f"{a / b:.2f}x" if a / b < 10 else f"{a / b:.0f}x"


def report(results: list, limit: float, console: Console) -> None:
    violated = [r for r in results if r["kind"] == "violated"]
    table = Table(
        title=f"Violated cases: seconds to the first violation and to a shortest trace "
        f"(limit {limit:g} s per peer per case)",
        show_lines=False,
    )
    cols = [
        "case",
        "d",
        "BMC 1st",
        "BMC min",
        "probe>BMC",
        "race",
        "walk 1st (len)",
        "walk s/viol",
        "BMC/walk",
        "probe>BMC/walk",
        "race/walk",
        "Hyp find",
        "shrink",
        "Hyp len",
        "BFS s",
        "BFS states",
        "BFS d",
    ]
    for name in cols:
        table.add_column(name, justify="left" if name == "case" else "right", no_wrap=True)

    def against(mine, ref):
        # below 1: the project's first counterexample came before the walk's (expected) one
        return ratio(mine, ref) if ref else "<" + ratio(mine, limit)

    for r in violated:
        p = r["project"]
        case = f"{r['config']} {r['property']}"
        if r["skip"]:
            table.add_row(case, str(p["depth"]), sec(p["plain"]), sec(p["shortest"]), *["skip"] * (len(cols) - 4))
            continue
        w, h, b = r["walk"], r["hyp"], r.get("bfs")
        walk_first = f"{sec(w['first'])} ({w['len']})" if w["first"] is not None else "not found"
        per = w["per_find"]
        if h["found"]:
            hyp_len = str(h["len"]) + (" >" if p["depth"] is not None and h["len"] > p["depth"] else "")
            hyp = (sec(h["find"]), sec(h["shrink"]) + ("+" if h["shrink_cut"] else ""), hyp_len)
        else:
            hyp = ("not found" if h["outcome"] == "limit" else h["outcome"], "-", "-")
        if b is None:
            bfs_cells = ("-", "-", "-")
        else:
            bfs_cells = (
                sec(b["seconds"]) if b["found"] else f">{limit:g}" if b["status"] == "limit" else "none",
                f"{b['states']:,}",
                str(b["depth"]) + ("" if b["found"] else "+"),
            )
        table.add_row(
            case,
            str(p["depth"]),
            sec(p["plain"]),
            sec(p["shortest"]),
            f"{sec(p['with_probe'])} ({p['probe_hits']}/{PROBE_SEEDS})",
            f"{sec(p['race'])} ({p['race_hits']}/{RACE_SEEDS})",
            walk_first,
            sec(per) if per is not None else f">{limit:g}",
            against(p["plain"], per),
            against(p["with_probe"], per),
            against(p["race"], per),
            *hyp,
            *bfs_cells,
        )
    console.print(table)
    console.print(
        f"d: the shortest counterexample's depth. BMC 1st (best of {BMC_REPEAT}): encoding + BMC to its first "
        "counterexample (already of the shortest length), not minimised; BMC min: the same with its picks "
        "minimised and replayed (make prove's trace). "
        f"probe>BMC: model/probe.py's probe() for {PROBE_S:g} s, then the BMC if it found nothing: mean over "
        f"{PROBE_SEEDS} seeds (how many found it). race: make prove's search (model/check.py "
        f"search_violation: random walks in a thread beside the BMC, capped at {RACE_CAP:g} CPU s), wall "
        f"seconds to the first counterexample of either, mean over {RACE_SEEDS} seeds (how many times the "
        "walks came first). "
        f"walk: the fuzzer's sampler, fresh seeds, length {WALK_LENGTH}: the first violation (its length), and "
        f"the seconds per violation over up to {WALK_FINDS} of them, the walk's expected time to a first one. "
        "X/walk: that time against the walk's seconds per violation (below 1: the project first; '<': the "
        "walk found none in the limit). "
        "Hyp: Hypothesis stateful (the same sampler, drawn by Hypothesis), seconds to find and to shrink "
        "('+': shrinking cut at the limit), and the shrunk length ('>': longer than the shortest). "
        f"BFS: explicit-state breadth-first search at the shortest trace's prompt lengths and picks (plus the "
        f"{SMALL} smallest of each unbounded pick): seconds, distinct states, depth of the violation "
        "('+': none found to that depth)."
    )
    proved = [r for r in results if r["kind"] == "proved"]
    if proved:
        ptable = Table(title=f"Proved configurations: how far BFS gets in {limit:g} s (small fixed parameters)")
        for name in ("configuration", "instance run", "states", "complete depth", "frontier", "status"):
            ptable.add_column(name, justify="left" if name == "configuration" else "right")
        for r in proved:
            if r["skip"]:
                ptable.add_row(r["config"], "-", "-", "-", "-", "skip: " + r["skip"])
                continue
            b = r["bfs"]
            ptable.add_row(
                r["config"],
                r["instance"] or "as is",
                f"{b['states']:,}",
                str(b["depth"]),
                f"{b.get('frontier', 0):,}",
                b["status"],
            )
        console.print(ptable)
    console.print(summary(results, limit))


def summary(results: list, limit: float) -> str:
    """The paragraph the README quotes, computed from this run."""
    rows = [r for r in results if r["kind"] == "violated" and not r["skip"]]
    if not rows:
        return "no concrete violated case ran"
    n = len(rows)
    walk_found = [r for r in rows if r["walk"]["per_find"] is not None]
    walk_first = [r for r in walk_found if r["walk"]["per_find"] < r["project"]["plain"]]
    never = [r for r in rows if r["walk"]["per_find"] is None]
    ratios = [r["project"]["with_probe"] / r["walk"]["per_find"] for r in walk_found]
    race_ratios = [r["project"]["race"] / r["walk"]["per_find"] for r in walk_found]
    plain_ratios = [r["project"]["plain"] / r["walk"]["per_find"] for r in walk_found]
    hyp_found = [r for r in rows if r["hyp"]["found"]]
    hyp_longer = [r for r in hyp_found if r["project"]["depth"] is not None and r["hyp"]["len"] > r["project"]["depth"]]
    bfs_rows = [r for r in rows if r.get("bfs")]
    bfs_found = [r for r in bfs_rows if r["bfs"]["found"]]
    bfs_same = [r for r in bfs_found if r["bfs"]["depth"] == r["project"]["depth"]]
    bmc_plain = [r["project"]["plain"] for r in rows]
    bmc_min = [r["project"]["shortest"] for r in rows]
    proved = [r for r in results if r["kind"] == "proved" and not r["skip"]]
    walk_behind = [r["project"]["plain"] / r["walk"]["per_find"] for r in walk_first]
    bmc_ahead = [r["walk"]["per_find"] / r["project"]["plain"] for r in walk_found if r not in walk_first]
    never_bmc = [r["project"]["plain"] for r in never]
    text = (
        f"On the {n} violated cases of the matrix (CPU seconds), the BMC reaches its first counterexample, "
        f"which is already a shortest one, in {statistics.median(bmc_plain):.2f} s median "
        f"({max(bmc_plain):.2f} s max), and the minimised, replayed trace in {statistics.median(bmc_min):.2f} s "
        f"median ({max(bmc_min):.2f} s max). A random walk on the interpreter (the fuzzer's sampler) needs less "
        f"time per violation than the BMC needs for its first in {len(walk_first)} of {n} cases"
        + (f" (the BMC up to {max(walk_behind):.1f}x behind)" if walk_behind else "")
        + (f"; where the BMC is first it is up to {max(bmc_ahead):.0f}x ahead" if bmc_ahead else "")
        + (
            f"; the walk finds nothing in {limit:g} s in {len(never)} cases "
            f"({', '.join(sorted({r['config'] + ' ' + r['property'] for r in never}))}), which the BMC answers in "
            f"{max(never_bmc):.2f} s at most"
            if never
            else ""
        )
        + f". Against the walk's time per violation, the first counterexample is within 2x in "
        f"{sum(x <= 2 for x in plain_ratios)} of {len(plain_ratios)} cases with the BMC alone, in "
        f"{sum(x <= 2 for x in ratios)} with a {PROBE_S:g} s probe before it (worst {max(ratios, default=0):.1f}x), "
        f"and in {sum(x <= 2 for x in race_ratios)} with make prove's race of walks beside it "
        f"(worst {max(race_ratios, default=0):.1f}x). "
        f"Hypothesis (stateful, the same sampler) finds {len(hyp_found)} of {n} within {limit:g} s; after "
        f"shrinking, {len(hyp_longer)} of its traces are still longer than the shortest. An explicit-state BFS "
        f"at the counterexample's own prompt lengths and picks finds {len(bfs_found)} of {len(bfs_rows)} "
        f"({len(bfs_same)} at the BMC's depth, as it must), but only because those parameters are given to it"
    )
    if proved:
        depths = [r["bfs"]["depth"] for r in proved]
        states = [r["bfs"]["states"] for r in proved]
        exhausted = [r for r in proved if r["bfs"]["status"] == "exhausted"]
        text += (
            f"; on the {len(proved)} proved configurations, BFS at small fixed parameters explores "
            f"{min(states):,}-{max(states):,} states and completes depth {min(depths)}-{max(depths)} in "
            f"{limit:g} s"
            + (
                f" ({len(exhausted)} exhausted: a finite space at those parameters, which is "
                "still no proof for other sizes)"
                if exhausted
                else ""
            )
            + ", where k-induction proves every depth and every prompt length."
        )
    else:
        text += "."
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="bench/peers.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--limit", type=float, default=20.0, help="seconds per peer per case (default 20)")
    ap.add_argument("--jobs", type=int, default=1, help="cases run in parallel (default 1: cleanest timings)")
    ap.add_argument("--only", action="append", help="configuration or scenario (repeatable)")
    ap.add_argument("--no-proved", action="store_true", help="skip the BFS runs on proved configurations")
    ap.add_argument(
        "--out", default=None, help=f"results file (default {RESULTS.relative_to(ROOT)}; none with --small)"
    )
    ap.add_argument(
        "--small",
        action="store_true",
        help="seconds, not minutes: a check that it runs (tests/test_bench.py)",
    )
    ns = ap.parse_args(argv)
    if ns.small:
        ns.only, ns.limit, ns.no_proved = ns.only or SMALL_RUN, min(ns.limit, 1.0), True
    todo = jobs(ns.only, ns.limit, not ns.no_proved)
    for kind, cfg, prop, _ in todo:
        why = concrete(cfg)
        if why and kind == "violated":
            print(f"skip the concrete peers for {cfg.name} {prop}: {why}", file=sys.stderr, flush=True)
        elif why:
            inst, label = instance(cfg)
            print(
                f"{cfg.name} is {why.split(':')[0]}: BFS runs "
                + (f"its concrete instance {label}" if inst else f"nothing: {label}"),
                file=sys.stderr,
                flush=True,
            )
    Bmc(Encoding(todo[0][1])) if todo else None  # warm z3 up once, so the first case is not charged for it
    results: list = []
    load_before = f"{os.getloadavg()[0]:.1f}"
    started = time.perf_counter()

    def progress(r: dict) -> None:
        results.append(r)
        bits = []
        if "project" in r:
            bits.append(f"bmc {r['project']['plain']:.2f}s d={r['project']['depth']}")
        if "walk" in r:
            bits.append(f"walk {sec(r['walk']['per_find'])}s/viol")
        if "hyp" in r:
            bits.append(f"hyp {sec(r['hyp']['find'])}+{sec(r['hyp']['shrink'])}s len={r['hyp']['len']}")
        if r.get("bfs"):
            bits.append(f"bfs {r['bfs']['status']} d={r['bfs']['depth']} {r['bfs']['states']:,} states")
        print(
            f"[{len(results)}/{len(todo)} {time.perf_counter() - started:.0f}s] {r['config']} "
            f"{r['property'] or '(proved)'}: " + ", ".join(bits or ["skipped"]),
            file=sys.stderr,
            flush=True,
        )

    if ns.jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(ns.jobs) as pool:
            for r in pool.imap_unordered(run_case, todo):
                progress(r)
    else:
        for job in todo:
            progress(run_case(job))
    order = {(k, c.name, p): i for i, (k, c, p, _) in enumerate(todo)}
    results.sort(key=lambda r: order[(r["kind"], r["config"], r["property"])])
    console = Console(width=260, highlight=False, record=True)
    console.print(
        f"z3 {z3.get_version_string()}, {os.cpu_count()} cores, {ns.jobs} job(s), "
        f"whole run {time.perf_counter() - started:.0f} s, load average {load_before} before, "
        f"{os.getloadavg()[0]:.1f} after (above the job count: other work shared the cores)"
    )
    report(results, ns.limit, console)
    if ns.out or not ns.small:
        out = Path(ns.out or RESULTS)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(console.export_text())
        print(f"written {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
