"""What `make explain` costs over the whole matrix, for three kinds of counters, in one run.

    vllm-contract bench explain [--jobs 2] [--out FILE]

Each counter set is explained on every configuration of spec/matrix.py by the command, as
an operator runs it (a fresh process per solved configuration, those with the same model
answered once). The table gives the wall time against the target (30 s on 2
cores), the answers, and where the CPU seconds go: the configurations that spent their
whole budget (unknown), the ones that did not, and the ones that shared an answer. The
last row is what an operator who names the release that crashed waits for (--release).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
SMALL_CONFIG = "v2-kvfail@0.32.0"  # --small: the seed's counters on the configuration that reaches them
PY = sys.executable
TARGET_S = 30.0
SEED = "placeholders=-1 new_tokens=1 computed=8448 num_tokens=9119 prompt=9118 output=1 prefill_chunk=True"
RUNS = {  # label: (counters, the command's other arguments)
    "the seed's crash": (SEED, []),
    "two tokens delivered to a decode (over-delivery)": ("placeholders=-1 new_tokens=2 prefill_chunk=False", []),
    "placeholders=-3, nothing delivered, prefilling": ("placeholders=-3 new_tokens=0 prefill_chunk=True", []),
    "the seed's crash, --release 0.32.0 (the operator's release only)": (SEED, ["--release", "0.32.0"]),
}


def measure(counters: str, extra: list[str], jobs: int, out: Path) -> dict:
    """The command as an operator runs it: wall time, its answers (--json) and the
    seconds per configuration from its progress lines."""
    from vllm_contract.model.explain import BUDGET_S

    started = time.perf_counter()
    done = subprocess.run(
        [PY, "-m", "vllm_contract", "explain", counters, "--json", "--jobs", str(jobs), "--out", str(out), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"explain failed (exit {done.returncode}): {done.stderr[-500:]}")
    answers = json.loads(done.stdout)["answers"]
    seconds = [float(m.group(1)) for m in re.finditer(r"^\[.*\s([0-9.]+) s$", done.stderr, re.MULTILINE)]
    shared = len(re.findall(r"^\[.* the model of \S+$", done.stderr, re.MULTILINE))
    spent = [t for t in seconds if t >= 0.95 * BUDGET_S]
    return {
        "wall": wall,
        "configs": len(answers),
        "verdicts": {v: sum(1 for a in answers if a["verdict"] == v) for v in ("reached", "unreachable", "unknown")},
        "shared": shared,
        "cpu": sum(seconds),
        "budget_spent": (len(spent), sum(spent)),
        "reached_by": [a["config"] for a in answers if a["verdict"] == "reached"],
    }


def host_speed() -> float:
    """Seconds for 10^7 additions in pure Python: how fast this host is today (shared 2-core
    hosts vary by more than 1.5x), to read a run's times and its budget-bound answers by."""
    started, total = time.perf_counter(), 0
    for i in range(10**7):
        total += i
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm-contract bench explain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    parser.add_argument(
        "--small",
        action="store_true",
        help="one counter set on one configuration (a check that it runs)",
    )
    args = parser.parse_args(argv)
    runs = (
        {k: (c, [*extra, "--configs", SMALL_CONFIG]) for k, (c, extra) in list(RUNS.items())[:1]}
        if args.small
        else RUNS
    )
    console = Console(width=160, highlight=False)
    load_before = os.getloadavg()[0]
    speed = host_speed()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, (counters, extra)) in enumerate(runs.items()):
            console.print(f"explaining {label} ...")
            rows[label] = measure(counters, extra, args.jobs, Path(tmp) / str(i))
    load_after = os.getloadavg()[0]

    record = Console(width=160, highlight=False, record=True, file=open(os.devnull, "w"))
    record.print(
        f"{os.cpu_count()} cores, {args.jobs} worker(s), load average {load_before:.1f} before, "
        f"{load_after:.1f} after; "
        f"this host's speed: 10^7 Python additions in {speed:.2f} s (the budget is seconds, so answers at its edge "
        "depend on it)"
    )
    table = Table(title=f"explain (target for the whole matrix: {TARGET_S:g} s wall on 2 cores)")
    for col in (
        "counters",
        "configs",
        "reached / unreachable / unknown",
        "shared",
        "wall s",
        "target",
        "solver CPU s",
        "budget spent (unknown): configs, CPU s",
    ):
        table.add_column(col, justify="left" if col == "counters" else "right")
    missed = []
    for label, r in rows.items():
        v = r["verdicts"]
        met = r["wall"] <= TARGET_S
        if not met:
            missed.append(label)
        table.add_row(
            label,
            str(r["configs"]),
            f"{v['reached']} / {v['unreachable']} / {v['unknown']}",
            str(r["shared"]),
            f"{r['wall']:.1f}",
            "met" if met else "NOT MET",
            f"{r['cpu']:.1f}",
            f"{r['budget_spent'][0]}, {r['budget_spent'][1]:.1f}",
        )
    record.print(table)
    for label, r in rows.items():
        names = r["reached_by"]
        record.print(f"{label}: reached by {', '.join(names[:6]) or 'none'}" + (" ..." if len(names) > 6 else ""))
    text = record.export_text()
    print(text)
    if args.out:
        args.out.write_text(text)
    return 1 if missed else 0
