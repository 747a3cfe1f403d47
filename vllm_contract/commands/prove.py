"""Run the configuration matrix of spec/matrix.py and compare every verdict with its expectation.

Prints a row per property as configurations finish and writes, under --out, the
counterexamples and witnesses as ITF JSON and summary.json. --out is replaced whole and
only when it is a previous result of ours (vllm_contract/outfolder.py); SIGINT or
SIGTERM, to this process or only to a solver worker, stops the run and is never
recorded as a verdict: nothing is written. --timeout limits each solver query; one that
runs past it is reported as a timeout (unknown), naming the query and the limit.

Each configuration's report is cached (model/cache.py, under --cache): a configuration
none of whose inputs changed is not proved again. --fresh proves everything and
refreshes the cache.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from rich.console import Console

from vllm_contract.outfolder import OutFolder, Terminated, interrupts
from vllm_contract.parsing import seconds, whole
from vllm_contract.spec.errors import CouldNotRun, ExitStatus

NAME = "prove"
HELP = "check the configuration matrix: proofs, shortest counterexamples, witnesses"
STATUSES = {
    ExitStatus.OK: "every verdict is the expected one and every configuration has its witness",
    ExitStatus.FINDING: "a verdict deviates from its expectation, or a configuration is vacuous",
    ExitStatus.BAD_INPUT: "bad input (an unknown configuration, an --out that is not ours): nothing done",
    ExitStatus.COULD_NOT_RUN: "a solver said unknown or timed out, a witness is undecided, a worker died, "
    "or the results could not be written",
    ExitStatus.INTERRUPTED: "interrupted: nothing written",
    ExitStatus.TERMINATED: "terminated: nothing written",
}
LEGACY_MARKER = ".model-prove"  # what model.prove wrote before the command existed

console = Console(highlight=False, width=150, soft_wrap=True)  # CI logs are not terminals: a row is one line
VERDICT_STYLE = {"proved": "green", "violated": "yellow", "bounded": "magenta", "unknown": "red", "frontier": "yellow"}


def add_arguments(parser) -> None:
    from vllm_contract.model.cache import CACHE_ENV, DEFAULT_DIR, default_folder
    from vllm_contract.model.check import MAX_DEPTH, TIMEOUT_S

    parser.add_argument("configs", nargs="*", help="configuration or scenario names from spec/matrix.py (default: all)")
    parser.add_argument("--jobs", type=whole(), default=min(2, os.cpu_count() or 1), help="solver processes")
    parser.add_argument(
        "--out", default="build/prove", help="result folder; replaced only if empty or written by an earlier run"
    )
    parser.add_argument(
        "--cache",
        default=str(default_folder()),
        help=f"where each configuration's report is kept between runs (default ${CACHE_ENV} or {DEFAULT_DIR}; "
        "safe to delete)",
    )
    parser.add_argument(
        "--fresh", action="store_true", help="prove every configuration again, whatever the cache holds"
    )
    parser.add_argument("--max-depth", type=whole(), default=MAX_DEPTH, help="deepest counterexample search")
    parser.add_argument(
        "--no-walks",
        dest="walks",
        action="store_false",
        help="no random walks beside each expected counterexample search: the same verdicts and traces, a "
        "later first counterexample, less CPU (what make test runs: it waits for the whole matrix)",
    )
    parser.add_argument(
        "--timeout",
        type=seconds,
        default=TIMEOUT_S,
        help=f"seconds per solver query (default {TIMEOUT_S:g}); a query that runs past it is reported as a "
        "timeout, never as a pass",
    )


def out_folder(path) -> OutFolder:
    return OutFolder(path, "vllm-contract prove", legacy_markers=(LEGACY_MARKER,), bare=("summary.json", "traces/"))


def scope_text(scope: dict) -> str:
    """A verdict's parameter space, short: `N=any K=any pp=1`, `N=2 K=0..1 pp=1`."""

    def part(value) -> str:
        if value == "any" or value is None:
            return "any"
        values = list(value)
        if len(values) > 2 and values == list(range(values[0], values[-1] + 1)):
            return f"{values[0]}..{values[-1]}"
        return ",".join(str(v) for v in values) or "-"

    if not scope:
        return ""
    text = f"N={part(scope.get('requests'))} K={part(scope.get('spec_tokens'))} pp={part(scope.get('pp'))}"
    if "violated_at" in scope:
        text += " !K=" + str(scope["violated_at"].get("spec_tokens"))
    return text


def print_header() -> None:
    console.print(
        f"{'config':<30} {'property':<28} {'verdict':<12} {'expected':<12} {'scope':<22} {'depth':>5} {'time':>7}  note"
    )


def print_row(row) -> None:
    mark = "" if row.ok else "  [bold red]<- MISMATCH[/]"
    style = VERDICT_STYLE.get(row.verdict.kind.value, "white")
    depth = "-" if row.depth is None else str(row.depth)
    note = row.note if len(row.note) < 60 else row.note[:57] + "..."
    if str(row.verdict) == "violated" and row.mechanisms:
        note = "via " + ", ".join(row.mechanisms) + (f"; +{len(row.classes)} class(es)" if row.classes else "")
        if row.fired is not None:
            note = f"{row.fired.reaction.label}, " + note
    verdict = str(row.verdict)
    console.print(
        f"{row.config:<30} {row.property:<28} [{style}]{verdict:<12}[/] {row.expected:<12} "
        f"{scope_text(row.scope):<22} {depth:>5} {row.seconds:>6.2f}s  {note}{mark}"
    )


def run(args) -> int:
    from vllm_contract.model import prove
    from vllm_contract.model.cache import ProverCache
    from vllm_contract.model.itf import write
    from vllm_contract.model.solvers import SolverInterrupted

    folder = None
    try:
        with interrupts():
            configs, complete = prove.select(args.configs)  # bad input fails before any work
            folder = out_folder(args.out)
            folder.begin()
            started = time.perf_counter()
            console.print(
                f"checking {len(configs)} configuration(s) on {max(args.jobs, 1)} worker(s); "
                "rows appear as each configuration finishes"
            )
            print_header()

            def show(report) -> None:
                for row in report.rows:
                    print_row(row)

            cache = ProverCache(Path(args.cache), args.max_depth, args.timeout, read=not args.fresh)
            result = prove.run_matrix(configs, args.jobs, args.max_depth, args.timeout, show, cache, args.walks)
            total = time.perf_counter() - started
            summary = prove.summary(configs, complete, result, total)
            try:
                for rel in result.documents:
                    folder.adopt(rel)  # listed before written: a killed write is still ours
                folder.adopt("summary.json")
                for rel, doc in result.documents.items():
                    write(folder.staging / rel, doc)
                import json

                (folder.staging / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
                folder.commit()
            except OSError as exc:  # a full disk, a folder removed under us: say so, keep the old results
                raise CouldNotRun(f"writing the results failed ({exc}); {args.out} left as it was") from None
    except Terminated:
        print("terminated (SIGTERM): nothing written", file=sys.stderr)
        return ExitStatus.TERMINATED
    except (KeyboardInterrupt, SolverInterrupted) as exc:
        where = " in a solver worker" if isinstance(exc, SolverInterrupted) else ""
        print(f"interrupted{where}: stopped, nothing written", file=sys.stderr)
        return ExitStatus.INTERRUPTED
    except BrokenProcessPool:
        print(
            "error: a solver worker ended abruptly (killed by a signal, or out of memory): stopped, nothing written",
            file=sys.stderr,
        )
        return ExitStatus.COULD_NOT_RUN
    finally:
        if folder is not None:
            folder.abort()

    return report_outcome(result, summary, complete, configs, args.out, total, args.cache)


def report_outcome(result, summary: dict, complete: bool, configs: list, out, total: float, cache_dir=None) -> int:
    rows, witnesses = result.rows, result.witnesses
    deviations = [r for r in rows if not r.ok and r.verdict.decided]
    undecided_rows = [r for r in rows if not r.ok and not r.verdict.decided]
    undecided = [name for name, w in witnesses.items() if not w.get("reached") and w.get("unknown")]
    vacuous = [name for name, w in witnesses.items() if not w.get("reached") and not w.get("unknown")]
    reached = len(witnesses) - len(vacuous) - len(undecided)
    scope = "" if complete else f" (a partial run: {len(configs)} configuration(s) of the matrix)"
    ok = len(rows) - len(deviations) - len(undecided_rows)
    console.print(
        f"\n{len(rows)} verdicts, {ok} as expected, "
        f"{reached}/{len(witnesses)} witnesses reached, {total:.1f}s; wrote {out}/summary.json{scope}"
    )
    if result.cached:
        console.print(
            f"{len(result.cached)} of {len(configs)} configuration(s) unchanged since they were proved: "
            f"taken from {cache_dir} (--fresh proves them again)"
        )
    if result.recomputed:
        shown = ", ".join(result.recomputed[:5]) + (" ..." if len(result.recomputed) > 5 else "")
        console.print(f"note: {len(result.recomputed)} damaged cache entr(ies) proved again: {shown}")
    if result.unkept:
        name, why = result.unkept[0]
        more = f" and {len(result.unkept) - 1} more" if len(result.unkept) > 1 else ""
        console.print(
            f"note: the cache could not keep {name}{more} ({why}); the results above are whole, the next run "
            f"proves them again: remove what stands in the way under {cache_dir}"
        )
    for r in deviations + undecided_rows:
        label = "deviation" if r.verdict.decided else "could not decide"
        console.print(
            f"[bold red]{label}:[/] {r.config} / {r.property}: expected {r.expected}, got {r.verdict}"
            + (f" ({r.note})" if r.note else "")
            + (f"; trace {out}/{r.trace}" if r.trace else "")
        )
    for name in undecided:
        console.print(f"[bold red]witness undecided:[/] {name}: {witnesses[name].get('note')}")
    for name in vacuous:
        console.print(f"[bold red]vacuous:[/] {name}: {witnesses[name].get('note')}")
    if deviations or vacuous:
        return ExitStatus.FINDING
    if undecided_rows or undecided:
        return ExitStatus.COULD_NOT_RUN
    return ExitStatus.OK
