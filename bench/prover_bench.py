"""The prover's and the suites' costs, measured, with ratios side by side in one run.

    vllm-contract bench prover [--quick] [--cell-timeout 20] [--small]

1. `make prove` (the whole default matrix, two workers): wall time, and per result the
   time of each shortest counterexample and each unbounded proof, against the targets
   recalibrated for this model (15 s, 0.5 s, 0.5 s).
2. Solve time against depth (4..20) and requests (1..3): BMC exhausting a proved
   property, and k-induction proving it, on the core contract (V1, no optional events).
3. Integer sizes: a 9118-token prompt with an 8192-token budget against 3 and 2, for a
   shortest counterexample (with minimisation) and for a proof.
4. The generated suites on vLLM's real scheduler (both arms), against 60 s.
Timings vary by about +-20% run to run on a shared 2-core machine. --small runs each part
at a size of seconds (two configurations, depth 4, one repeat, one generated module): a
check that the benchmark runs (tests/test_bench.py), not a measurement.
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

import z3
from rich.console import Console
from rich.table import Table
from vllm_contract.model.bmc import Bmc, Goal
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.induction import KInduction
from vllm_contract.model.solvers import SolverUnknown
from vllm_contract.spec.config import Config
from vllm_contract.spec.invariants import lemmas_for

ROOT = Path(__file__).resolve().parent.parent

console = Console(width=120, highlight=False)
PY = sys.executable


def _lemmas(cfg, props):
    return [(lemma.name, lemma.holds) for lemma in lemmas_for(cfg, props)]


SMALL_CONFIGS = ["v1-over-delivery@0.32.0", "v1@0.32.0"]  # one violated, one proved
SMALL_SUITE = "generated_tests/cases/h1_preempt_keeps_placeholders/test_h1_preempt__counter_nonnegative.py"


def matrix(configs: list[str] | None = None) -> dict:
    """make prove cold (a cache of its own, empty): the whole default matrix, or `configs`."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        command = [PY, "-m", "vllm_contract", "prove", *(configs or []), "--out", f"{tmp}/prove"]
        proc = subprocess.run([*command, "--cache", f"{tmp}/cache"], cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - started
        if proc.returncode not in (0, 1):
            raise SystemExit(f"make prove failed (exit {proc.returncode}): {proc.stderr[-500:]}")
        summary = json.loads((Path(tmp) / "prove" / "summary.json").read_text())
    ces = [r["first_seconds"] for r in summary["results"] if r["verdict"] == "violated"]
    with_classes = [r["seconds"] for r in summary["results"] if r["verdict"] == "violated"]
    proofs = {}
    for r in summary["results"]:
        if r["verdict"] == "proved":
            proofs[r["config"]] = r["seconds"]  # one induction run proves a config's properties
    table = Table(title="1. make prove: the default matrix (2 workers)")
    for col in ("measure", "value", "target", "ratio"):
        table.add_column(col, justify="right" if col != "measure" else "left")
    rows = [
        ("whole matrix, wall", wall, 15.0),
        ("shortest counterexample (minimised, replayed), median", statistics.median(ces), 0.5),
        ("shortest counterexample (minimised, replayed), max", max(ces), 0.5),
        ("  ... plus its further violation classes, median", statistics.median(with_classes), None),
        ("unbounded proof (all properties of a config), median", statistics.median(proofs.values()), 0.5),
        ("unbounded proof (all properties of a config), max", max(proofs.values()), 0.5),
    ]
    for name, value, target in rows:
        if target is None:
            table.add_row(name, f"{value:.3f} s", "-", "-")
        else:
            table.add_row(name, f"{value:.3f} s", f"{target:.2f} s", f"{value / target:.1f}x")
    table.add_row(
        "verdicts as expected",
        f"{sum(r['match'] for r in summary['results'])}/{len(summary['results'])}",
        "all",
        "exit 0" if proc.returncode == 0 else f"exit {proc.returncode}",
    )
    console.print(table)
    slowest = sorted(summary["results"], key=lambda r: -r["seconds"])[:5]
    console.print(
        "slowest results: " + "; ".join(f"{r['config']}/{r['property']} {r['seconds']:.2f}s" for r in slowest)
    )
    console.print("proofs: " + "; ".join(f"{name} {seconds:.3f}s" for name, seconds in proofs.items()))
    worst = sorted(
        ((r["first_seconds"], r["config"], r["property"]) for r in summary["results"] if r["verdict"] == "violated"),
        reverse=True,
    )[:5]
    console.print("slowest shortest counterexamples: " + "; ".join(f"{c}/{p} {t:.3f}s" for t, c, p in worst))
    return summary


def exhaust(cfg: Config, prop: str, depth: int, timeout_ms: int) -> str:
    bmc = Bmc(Encoding(cfg), timeout_ms=timeout_ms)
    started = time.perf_counter()
    try:
        found = bmc.shortest(Goal.violation(prop), depth)
    except SolverUnknown:
        return f">{timeout_ms / 1000:.0f} s"
    took = time.perf_counter() - started
    return ("CE! " if found else "") + f"{took:.2f}"


def depth_table(depths, requests, timeout_ms: int) -> None:
    table = Table(title="2. seconds to exhaust BMC (no counterexample) for predicates-agree, V1 core contract")
    table.add_column("requests")
    for d in depths:
        table.add_column(f"depth {d}", justify="right")
    table.add_column("k-induction", justify="right")
    for r in requests:
        cfg = Config(name=f"core-{r}", runner="v1", requests=r)
        cells = []
        blown = False
        for d in depths:
            if blown:
                cells.append("-")
                continue
            cell = exhaust(cfg, "predicates-agree", d, timeout_ms)
            blown = cell.startswith(">")
            cells.append(cell)
        started = time.perf_counter()
        props = ["predicates-agree", "counter-nonnegative"]
        result = KInduction(Encoding(cfg)).prove(props, _lemmas(cfg, props))
        cells.append(f"{result.status} k={result.k} {time.perf_counter() - started:.3f}")
        table.add_row(str(r), *cells)
    console.print(table)


def sizes_table(repeats: int = 5) -> None:
    table = Table(title="3. integer sizes: the same checks with a 9118-token prompt / 8192 budget, and 3 / 2")
    for col in ("check", "3 / 2", "9118 / 8192", "ratio"):
        table.add_column(col, justify="right" if col != "check" else "left")

    def ce(prompt, budget):
        # 1-token blocks: a failed block must fit in the prompt, and 3 tokens hold no 16-token block
        cfg = Config(
            name="sz",
            runner="v2",
            requests=1,
            spec_tokens=1,
            events=frozenset({"kvfail"}),
            prompt_lens=(prompt,),
            max_budget=budget,
            block_size=1,
        )
        started = time.perf_counter()
        trace = Bmc(Encoding(cfg)).shortest(Goal.violation("counter-nonnegative"), 12)
        return time.perf_counter() - started, trace.depth

    def proof(prompt, budget):
        cfg = Config(
            name="sz",
            runner="v1",
            requests=2,
            spec_tokens=1,
            events=frozenset({"preempt", "preempt-drop", "reset", "abort"}),
            prompt_lens=(prompt, prompt),
            max_budget=budget,
        )
        started = time.perf_counter()
        props = ["predicates-agree", "counter-nonnegative"]
        result = KInduction(Encoding(cfg)).prove(props, _lemmas(cfg, props))
        assert result.status == "proved", result
        return time.perf_counter() - started, result.k

    for name, fn in (("V2 KV-failure counterexample (shortest, minimised)", ce), ("V1 proof (k-induction)", proof)):
        small, small_depth = min((fn(3, 2) for _ in range(repeats)), key=lambda x: x[0])
        large, large_depth = min((fn(9118, 8192) for _ in range(repeats)), key=lambda x: x[0])
        table.add_row(
            name,
            f"{small:.3f} s (depth {small_depth})",
            f"{large:.3f} s (depth {large_depth})",
            f"{large / small:.2f}x",
        )
    console.print(table)
    console.print(
        f"(best of {repeats} each, this machine varies by +-30% run to run; depth is the counterexample's length "
        "or the induction's k)"
    )


def suites_table(suites: list[str] | None = None) -> int:
    """pytest on the generated suites (or `suites`) on vLLM's scheduler, timed; its exit status."""
    table = Table(title="4. the generated suites on vLLM's real AsyncScheduler (both arms)")
    for col in ("run", "seconds", "target", "ratio", "result"):
        table.add_column(col, justify="right" if col != "run" else "left")
    env = dict(os.environ, VLLM_CACHE_ROOT=str(ROOT / ".vllm_cache"))
    started = time.perf_counter()
    proc = subprocess.run(
        [
            PY,
            "-m",
            "pytest",
            "-q",
            *(suites or ["generated_tests"]),
            "-p",
            "no:cacheprovider",
            "--target=vllm,vllm-clamp",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    took = time.perf_counter() - started
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr.strip()[-200:]
    shown = f"pytest {' '.join(suites or ['generated_tests'])} --target=vllm,vllm-clamp"
    table.add_row(shown, f"{took:.1f}", "60", f"{took / 60:.2f}x", last)
    console.print(table)
    return proc.returncode


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="depths 4..12 and requests 1..2 only")
    parser.add_argument("--cell-timeout", type=float, default=20.0, help="seconds per BMC cell")
    parser.add_argument("--small", action="store_true", help="each part at a size of seconds (checks that it runs)")
    args = parser.parse_args(argv)
    console.print(f"z3 {z3.get_version_string()}, {os.cpu_count()} cores")
    matrix(SMALL_CONFIGS if args.small else None)
    depths = [4] if args.small else [4, 8, 12] if args.quick else [4, 8, 12, 16, 20]
    requests = [1] if args.small else [1, 2] if args.quick else [1, 2, 3]
    depth_table(depths, requests, int(args.cell_timeout * 1000))
    sizes_table(1 if args.small else 5)
    return 1 if suites_table([SMALL_SUITE] if args.small else None) else 0


if __name__ == "__main__":
    sys.exit(main())
