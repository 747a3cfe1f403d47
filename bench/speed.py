"""What make prove and make test cost, as ratios side by side in one run.

    vllm-contract bench speed [--seeds 5] [--walk-limit 2] [--stages] [--configs CFG ...] [--out FILE]

1. make prove cold (an empty cache) against warm (nothing changed): wall time of the
   whole command, the ratio (target: warm <= 0.1 of cold); a cold run without the random
   walks (--no-walks, as make test runs it); whether the three summaries and their
   traces are equal but for timings (they must be).
2. Every violated case of the matrix: seconds to the first counterexample as make prove
   finds it (model/check.py search_violation: the random walks, then the BMC) against a
   plain random walk (model/probe.py's Walker alone, up to --walk-limit seconds), each the
   mean over --seeds seeds with everything built inside the clock (target: <= 2x). A walk
   that finds nothing within the limit counts as the limit: the ratio is then an upper
   bound (shown with "<"). A property no walk can see (bounded-progress) is timed for
   the BMC alone and kept out of the comparison. --configs runs only those configurations
   (a small run, for tests).
3. With --stages: the pytest stage of make test for 0.32.0 on one process and on
   pytest-xdist's workers, and the stages after it as make test runs them (one process
   per release, two side by side) and one xdist stage after another (minutes each).
The machine's load average is printed before and after: timings on a shared 2-core
machine vary by about +-20%.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from vllm_contract.model.results import without_timings

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
console = Console(width=160, highlight=False)


def _prove(out: Path, cache: Path, *extra: str, configs: list[str] | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [PY, "-m", "vllm_contract", "prove", *(configs or []), "--out", str(out), "--cache", str(cache), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode not in (0, 1):
        raise SystemExit(f"make prove failed (exit {done.returncode}): {done.stderr[-500:]}")
    return time.perf_counter() - started


def cold_and_warm(configs: list[str] | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cold = _prove(tmp / "cold", tmp / "cache", configs=configs)
        warm = _prove(tmp / "warm", tmp / "cache", configs=configs)
        # as make test runs it
        no_walks = _prove(tmp / "no-walks", tmp / "cache-no-walks", "--no-walks", configs=configs)
        names = ("cold", "warm", "no-walks")
        results = {name: without_timings(json.loads((tmp / name / "summary.json").read_text())) for name in names}
        traces = {
            name: {p.relative_to(tmp / name).as_posix(): p.read_bytes() for p in (tmp / name).rglob("*.itf.json")}
            for name in names
        }
        equal = all(results[n] == results["cold"] and traces[n] == traces["cold"] for n in names)
        return {
            "cold": cold,
            "warm": warm,
            "no_walks": no_walks,
            "equal": equal,
            "verdicts": len(results["cold"]["results"]),
        }


def _walk_first(cfg, prop: str, seed: int, limit: float) -> float | None:
    from vllm_contract.model.check import concrete_instances
    from vllm_contract.model.probe import Walker

    started = time.perf_counter()
    walker = Walker(concrete_instances(cfg)[0], prop, seed)
    while time.perf_counter() - started < limit:
        if walker.run(0.02) is not None:
            return time.perf_counter() - started
    return None


def first_counterexamples(seeds: int, limit: float, configs: list[str] | None = None) -> list[dict]:
    """Each violated case: make prove's first counterexample against a plain walk. A
    property no walk can see (bounded-progress: model/probe.py walkable) is the BMC's
    alone: timed, and kept out of the comparison."""
    from vllm_contract.model.check import MAX_DEPTH, TIMEOUT_S, search_violation
    from vllm_contract.model.probe import walkable
    from vllm_contract.spec.matrix import by_name

    rows = []
    for cfg in by_name(configs):
        for prop, expected in sorted(cfg.expect.items()):
            if expected != "violated":
                continue
            if not walkable(prop):
                started = time.perf_counter()
                for _seed in range(seeds):
                    search_violation(cfg, prop, min(MAX_DEPTH, cfg.search_depth or MAX_DEPTH), int(TIMEOUT_S * 1000))
                seconds = (time.perf_counter() - started) / seeds
                rows.append({"case": f"{cfg.name} {prop}", "prove": seconds, "walk": None, "seeds": seeds})
                console.print(f"  {rows[-1]['case']:<60} prove {seconds:.3f}s (no walk sees it)", style="dim")
                continue
            prove_times, walk_times, by = [], [], []
            for seed in range(seeds):
                started = time.perf_counter()
                found = search_violation(
                    cfg, prop, min(MAX_DEPTH, cfg.search_depth or MAX_DEPTH), int(TIMEOUT_S * 1000), seed=seed
                )
                prove_times.append(
                    found.found_seconds if found.found_seconds is not None else time.perf_counter() - started
                )
                by.append(found.found_by)
                walk_times.append(_walk_first(cfg, prop, seed, limit))
            walked = [t if t is not None else limit for t in walk_times]
            rows.append(
                {
                    "case": f"{cfg.name} {prop}",
                    "prove": statistics.mean(prove_times),
                    "walk": statistics.mean(walked),
                    "walk_found": sum(t is not None for t in walk_times),
                    "by_walk": by.count("walk"),
                    "seeds": seeds,
                }
            )
            row = rows[-1]
            row["ratio"] = row["prove"] / row["walk"]
            row["bound"] = row["walk_found"] < seeds  # the walk's mean is a lower bound
            console.print(
                f"  {row['case']:<60} prove {row['prove']:.3f}s walk {row['walk']:.3f}s ({row['walk_found']}/{seeds})",
                style="dim",
            )
    return rows


def _timed(label: str, argv: list[str], env: dict) -> dict:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env)
    out = {"seconds": time.perf_counter() - started, "exit": done.returncode}
    console.print(f"  {label}: {out['seconds']:.0f} s, exit {done.returncode}")
    return out


def stages() -> dict:
    """make test's pytest stages: 0.32.0 in one process and on two xdist workers; the
    later releases as make test runs them (one process each, two side by side) and as
    one xdist stage after another (as make test ran them before)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as make runs it
    env["VLLM_CACHE_ROOT"] = str(ROOT / ".vllm_cache")
    out = {"0.32.0": {}, "later": {}}
    for label, args in (("one process", ["-n", "0"]), ("xdist -n 2", ["-n", "2", "--dist", "worksteal"])):
        out["0.32.0"][label] = _timed(
            f"pytest --vllm=0.32.0 {' '.join(args)}", [PY, "-m", "pytest", "--vllm=0.32.0", *args], env
        )
    lanes = ["make", "--no-print-directory", "test-later", "LANES=2"]  # as make test runs them
    out["later"]["two lanes, one process each"] = _timed(" ".join(lanes), lanes, env)
    in_turn = [*lanes[:3], "LANES=1", "STAGE_WORKERS=-n 2 --dist worksteal"]
    out["later"]["one xdist stage each, in turn"] = _timed(" ".join(in_turn), in_turn, env)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm-contract bench speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds per violated case (default 5)")
    parser.add_argument("--walk-limit", type=float, default=2.0, help="seconds a plain walk may take per seed")
    parser.add_argument("--stages", action="store_true", help="also time make test's pytest stages both ways")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables here")
    parser.add_argument(
        "--configs", nargs="+", default=None, help="only these configurations (a small run; default: the matrix)"
    )
    parser.add_argument(
        "--small",
        action="store_true",
        help="one configuration, one seed (a check that it runs)",
    )
    args = parser.parse_args(argv)
    if args.small:
        args.configs, args.seeds, args.walk_limit = args.configs or ["under-drain@0.32.0"], 1, min(args.walk_limit, 0.2)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    prove = cold_and_warm(args.configs)
    console.print("first counterexamples (this takes minutes):")
    cases = first_counterexamples(args.seeds, args.walk_limit, args.configs)
    timed = stages() if args.stages else None
    load_after = os.getloadavg()[0]

    record = Console(width=160, highlight=False, record=True, file=open(os.devnull, "w"))
    record.print(
        f"{os.cpu_count()} cores, load average {load_before:.1f} before, {load_after:.1f} after; "
        f"whole run {time.perf_counter() - started:.0f} s"
    )
    ratio = prove["warm"] / prove["cold"]
    table = Table(title="make prove: cold (empty cache) and warm (nothing changed); cold without the walks (make test)")
    for col in (
        "verdicts",
        "cold s",
        "warm s",
        "warm / cold",
        "target",
        "cold --no-walks s",
        "summaries equal but timings",
    ):
        table.add_column(col, justify="right")
    table.add_row(
        str(prove["verdicts"]),
        f"{prove['cold']:.2f}",
        f"{prove['warm']:.2f}",
        f"{ratio:.3f}",
        "<= 0.1",
        f"{prove['no_walks']:.2f}",
        "yes" if prove["equal"] else "NO",
    )
    record.print(table)
    table = Table(title=f"first counterexample: make prove against a random walk (mean of {args.seeds} seeds)")
    for col in ("case", "make prove s", "found by the walks", "walk s", "walk found", "prove / walk"):
        table.add_column(col, justify="right" if col != "case" else "left")
    missed, alone = [], [row for row in cases if row["walk"] is None]
    cases = [row for row in cases if row["walk"] is not None]
    for row in cases:
        shown = ("<" if row["bound"] else "") + f"{row['ratio']:.2f}x"
        if row["ratio"] > 2 and not row["bound"]:
            missed.append(row["case"])
            shown += " MISSED"
        table.add_row(
            row["case"],
            f"{row['prove']:.3f}",
            f"{row['by_walk']}/{row['seeds']}",
            f"{row['walk']:.3f}",
            f"{row['walk_found']}/{row['seeds']}",
            shown,
        )
    record.print(table)
    within = len(cases) - len(missed)
    record.print(
        f"{within} of {len(cases)} violated cases within 2x of the random walk"
        + (f"; missed: {', '.join(missed)}" if missed else "")
    )
    if alone:
        record.print(
            f"{len(alone)} violated case(s) of a property no walk sees (the engine must be run on), the BMC's "
            "alone: " + ", ".join(f"{row['case']} {row['prove']:.3f}s" for row in alone)
        )
    if timed:
        for stage, title in (
            ("0.32.0", "make test's 0.32.0 pytest stage"),
            ("later", "make test's stages after 0.32.0 (make test-later)"),
        ):
            table = Table(title=title)
            for col in ("run", "seconds", "exit", "ratio to the first"):
                table.add_column(col, justify="right")
            base = next(iter(timed[stage].values()))["seconds"]
            for label, r in timed[stage].items():
                table.add_row(label, f"{r['seconds']:.0f}", str(r["exit"]), f"{r['seconds'] / base:.2f}")
            record.print(table)
    text = record.export_text()
    print(text)
    if args.out:
        args.out.write_text(text)
    failed_stage = timed and any(r["exit"] != 0 for stage in timed.values() for r in stage.values())
    return 1 if (missed or ratio > 0.1 or not prove["equal"] or failed_stage) else 0
