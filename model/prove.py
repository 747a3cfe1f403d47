"""`make prove`: run the configuration matrix and compare every verdict with spec/.

    python -m model.prove [CONFIG ...] [--jobs N] [--out build/prove] [--max-depth D]

Prints a row per property as configurations finish, writes the counterexamples and
witnesses as ITF JSON and `summary.json` under --out (into a temporary folder that
replaces the old one only when the run completes). Exit 0 when every verdict matches
its expectation and every configuration has its witness; 1 on any deviation,
`unknown` or vacuous configuration; 2 on bad input (nothing written).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from rich.console import Console

from model.check import MAX_DEPTH, ConfigReport, check_config, row_dict
from model.itf import write
from spec.config import SpecError
from spec.matrix import by_name

console = Console(highlight=False, width=150)  # CI logs are not terminals: do not wrap at 80

VERDICT_STYLE = {"proved": "green", "violated": "yellow", "bounded": "magenta", "unknown": "red"}


def _print_header() -> None:
    console.print(f"{'config':<26} {'property':<27} {'verdict':<9} {'expected':<9} {'depth':>5} {'time':>7}  note")


def _print_row(row) -> None:
    mark = "" if row.ok else "  [bold red]<- MISMATCH[/]"
    style = VERDICT_STYLE.get(row.verdict, "white")
    depth = "-" if row.depth is None else str(row.depth)
    note = row.note if len(row.note) < 60 else row.note[:57] + "..."
    if row.verdict == "violated" and row.mechanisms:
        note = "via " + ", ".join(row.mechanisms) + (f"; +{len(row.classes)} class(es)" if row.classes else "")
    console.print(
        f"{row.config:<26} {row.property:<27} [{style}]{row.verdict:<9}[/] {row.expected:<9} "
        f"{depth:>5} {row.seconds:>6.2f}s  {note}{mark}"
    )


def isolated_pool(jobs: int) -> ProcessPoolExecutor:
    """Workers that check each configuration in a fresh process. Z3's answers depend on
    what its context saw before, so sharing a process would make the traces depend on
    scheduling; children fork from a server that has only imported the code."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["model.check"])
    return ProcessPoolExecutor(max_workers=max(jobs, 1), mp_context=context, max_tasks_per_child=1)


def _cost(cfg) -> int:
    """A rough guess of a configuration's solve time, for scheduling only."""
    return cfg.requests ** 2 * (2 + len(cfg.events) + len(cfg.faults)) * cfg.queue_depth


def _run(config_names: list[str], jobs: int, max_depth: int) -> tuple[list, dict, dict]:
    configs = by_name(config_names)  # raises SpecError on bad input, before any work
    reports: dict[str, ConfigReport] = {}
    console.print(f"checking {len(configs)} configuration(s) on {max(jobs, 1)} worker(s); "
                  "rows appear as each configuration finishes")
    _print_header()
    with isolated_pool(jobs) as pool:
        # heaviest first, so the workers finish together (results print as they come)
        heavy_first = sorted(configs, key=_cost, reverse=True)
        futures = {pool.submit(check_config, cfg, max_depth): cfg for cfg in heavy_first}
        for future in as_completed(futures):
            cfg = futures[future]
            reports[cfg.name] = future.result()
            for row in reports[cfg.name].rows:
                _print_row(row)
    ordered = [reports[c.name] for c in configs]
    rows = [row for rep in ordered for row in rep.rows]
    documents = {path: doc for rep in ordered for path, doc in rep.documents.items()}
    witnesses = {c.name: reports[c.name].witness for c in configs}
    return rows, documents, witnesses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make prove", description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", help="configuration names from spec/matrix.py (default: all)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--out", default="build/prove")
    parser.add_argument("--max-depth", type=int, default=MAX_DEPTH)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    try:
        rows, documents, witnesses = _run(args.configs, args.jobs, args.max_depth)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)  # one line, unwrapped
        return 2
    total = time.perf_counter() - started

    summary = {
        "seconds": round(total, 3),
        "results": [row_dict(r) for r in rows],
        "witnesses": witnesses,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    for rel, doc in documents.items():
        write(staging / rel, doc)
    (staging / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)

    mismatches = [r for r in rows if not r.ok]
    vacuous = [name for name, w in witnesses.items() if not w.get("reached")]
    console.print(
        f"\n{len(rows)} verdicts, {len(rows) - len(mismatches)} as expected, "
        f"{len(witnesses) - len(vacuous)}/{len(witnesses)} witnesses reached, {total:.1f}s; wrote {out}/summary.json"
    )
    for r in mismatches:
        console.print(
            f"[bold red]deviation:[/] {r.config} / {r.property}: expected {r.expected}, got {r.verdict}"
            + (f" ({r.note})" if r.note else "") + (f"; trace {out}/{r.trace}" if r.trace else "")
        )
    for name in vacuous:
        console.print(f"[bold red]vacuous:[/] {name}: {witnesses[name].get('note')}")
    return 0 if not mismatches and not vacuous else 1


if __name__ == "__main__":
    sys.exit(main())
