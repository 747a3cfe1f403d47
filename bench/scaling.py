"""Counterexample searches on bigger instances: time and depth against requests, pp and K.

    vllm-contract bench scaling [--limit 60] [--jobs 2] [--max-depth 16]

Why: the matrix searches for counterexamples with as few requests as a mechanism needs
(one or two), one pipeline stage and one or two draft tokens. That is a choice for
speed, and this shows what it costs to drop it: the same searches with 1-4 requests,
pp 1-3 (in-flight queue 2-4 steps) and K 0-3 draft tokens, one factor at a time from the
matrix's instance, plus the biggest corner. Each search is the project's: BMC to the
shortest counterexample, picks minimised, replayed on the interpreter. The first column
of times is the first satisfiable depth (the counterexample found, already of the
shortest length), the second includes minimising and replaying it.

The configurations come from spec/matrix.py at run time (the representative violated
properties below); a symbolic draft count or an abstract rest is replaced by the
concrete sizes of each row. Each search runs in a process of its own, killed at the
limit: a row that ran out says "> limit" and how deep it had searched. Two searches run
at once by default (2 cores); timings vary by +-30% run to run.
Results: bench/results/scaling.txt.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import z3
from rich.console import Console
from rich.table import Table
from vllm_contract.model.bmc import Bmc, Goal
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.interpreter import Interpreter
from vllm_contract.model.trace import confirm
from vllm_contract.spec.config import Config

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "bench" / "results" / "scaling.txt"
# (configuration, property): the #57562 candidate (a KV-load failure on V2), a V2 runner
# fault (stale slot reads; the matrix runs it with two requests), and the over-delivery
# crash on V1 (pp 1 only)
CASES = (
    ("v2-kvfail@0.32.0", "counter-nonnegative"),
    ("v2-stale-slot@0.32.0", "counter-nonnegative"),
    ("v1-over-delivery@0.32.0", "counter-nonnegative"),
)
REQUESTS, PPS, KS = (1, 2, 3, 4), (1, 2, 3), (0, 1, 2, 3)


CLOCK = time.process_time  # the child's CPU time: the machine is shared, wall time is not the search's


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) a running process has used, from /proc (None: unknown)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class _Reporting(Bmc):
    """The project's BMC, telling the parent after every depth it checks (the limit kills
    the process, so progress is all that is left of a search that ran out)."""

    def __init__(self, enc, timeout_ms, pipe, started):
        super().__init__(enc, timeout_ms)
        self._pipe, self._started = pipe, started

    def _check(self, assumptions, query="BMC search"):
        result = super()._check(assumptions, query)
        if query.startswith("BMC search"):
            depth = int(query.rsplit(" ", 1)[-1])
            self._pipe.send(("depth", depth, str(result), CLOCK() - self._started))
        return result


def _search(cfg: Config, prop: str, max_depth: int, limit: float, pipe) -> None:
    """In the child: encoding, shortest counterexample (minimised), replay."""
    try:
        started = CLOCK()
        # z3's own limit is wall time: well above the CPU limit the parent enforces
        bmc = _Reporting(Encoding(cfg), int(limit * 10_000), pipe, started)
        trace = bmc.shortest(Goal.violation(prop), max_depth)
        if trace is not None:
            confirm(Interpreter(cfg), trace, trace.solver_states)
        pipe.send(("done", trace.depth if trace else None, str(trace.fired_at_end) if trace else "", CLOCK() - started))
    except BaseException as exc:  # reported as the row's result
        pipe.send(("error", f"{type(exc).__name__}: {exc}"[:160]))


def run(cfg: Config, prop: str, max_depth: int, limit: float, log) -> dict:
    """One search in a child process, killed at the limit."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_search, args=(cfg, prop, max_depth, limit, child), daemon=True)
    started = time.perf_counter()
    proc.start()
    child.close()
    out = {"status": "limit", "searched": -1, "first": None, "total": None, "depth": None}
    while True:
        # the limit is the child's CPU time (wall time as a fallback, and 10x as a backstop)
        used = cpu_seconds(proc.pid)
        wall = time.perf_counter() - started
        if (used if used is not None else wall) >= limit or wall >= 10 * limit:
            break  # out of time: the row says how deep it got
        if not parent.poll(0.2):
            continue
        try:
            msg = parent.recv()
        except EOFError:
            out["status"] = "error: the search process died"
            break
        if msg[0] == "depth":
            _, depth, result, at = msg
            out["searched"] = depth
            if result == "sat" and out["first"] is None:
                out["first"] = at
            if depth >= 6 and result != "sat":
                log(f"    {cfg.name} {prop}: depth {depth} {result} at {at:.1f}s")
        elif msg[0] == "done":
            _, depth, reaction, total = msg
            out.update(status="found" if depth is not None else "none", depth=depth, total=total, reaction=reaction)
            break
        else:
            out["status"] = "error: " + msg[1]
            break
    if proc.is_alive():
        proc.kill()
    proc.join()
    out["wall"] = time.perf_counter() - started
    return out


def instances(base: Config) -> list[tuple[str, dict]]:
    """(axis, sizes) of the rows for one case: each factor alone from the matrix's
    instance, then the biggest corner."""
    k0 = base.spec_tokens if base.spec_tokens is not None else 1
    r0 = base.requests if not getattr(base, "rest", False) else 2
    pps = PPS if base.is_v2 else (1,)
    rows = [("requests", {"requests": r, "pp": 1, "spec_tokens": k0}) for r in REQUESTS]
    rows += [("pp", {"requests": r0, "pp": p, "spec_tokens": k0}) for p in pps if p != 1]
    rows += [("K", {"requests": r0, "pp": 1, "spec_tokens": k}) for k in KS if k != k0]
    rows.append(("corner", {"requests": max(REQUESTS), "pp": max(pps), "spec_tokens": max(KS)}))
    if base.is_v2:
        rows.append(("corner", {"requests": 3, "pp": 2, "spec_tokens": 2}))
    return rows


def concrete(base: Config, prop: str, sizes: dict) -> Config:
    changes = dict(
        sizes,
        expect={prop: "violated"},
        name=f"{base.name}[r{sizes['requests']},pp{sizes['pp']},K{sizes['spec_tokens']}]",
    )
    if base.spec_tokens is None:
        changes["spec_tokens_max"] = None
    if getattr(base, "rest", False):
        changes["rest"] = False
    return base.with_(**changes).validate()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="bench/scaling.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--limit", type=float, default=60.0, help="CPU seconds per search (default 60)")
    ap.add_argument("--jobs", type=int, default=2, help="searches at once (default 2)")
    ap.add_argument(
        "--max-depth",
        type=int,
        default=16,
        help="deepest search (default 16: make prove's 12 plus room for a deeper pipeline)",
    )
    ap.add_argument("--out", default=None, help="results file (default bench/results/scaling.txt; none with --small)")
    ap.add_argument(
        "--small",
        action="store_true",
        help="seconds, not minutes: a check that it runs (tests/test_bench.py)",
    )
    ns = ap.parse_args(argv)
    if ns.small:
        ns.limit, ns.max_depth = min(ns.limit, 5.0), min(ns.max_depth, 12)
    from vllm_contract.spec.matrix import by_name

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    todo = []
    for name, prop in CASES[-1:] if ns.small else CASES:
        try:
            base = by_name([name])[0]
        except Exception as exc:  # renamed or removed from the matrix
            log(f"skip {name} {prop}: {exc}")
            continue
        if base.expect.get(prop) != "violated":
            log(f"note: {name} no longer expects {prop} violated ({base.expect.get(prop)}); searched anyway")
        for axis, sizes in instances(base)[:1] if ns.small else instances(base):
            try:
                todo.append((axis, concrete(base, prop, sizes), prop, sizes))
            except Exception as exc:
                log(f"skip {name} {sizes}: {exc}")
    results: dict = {}
    load_before = f"{os.getloadavg()[0]:.1f}"
    started = time.perf_counter()
    lock = threading.Lock()

    def one(job):
        axis, cfg, prop, sizes = job
        res = run(cfg, prop, ns.max_depth, ns.limit, log)
        with lock:
            results[cfg.name] = res
            shown = (
                f"depth {res['depth']} in {res['total']:.2f}s"
                if res["status"] == "found"
                else f"none within {ns.max_depth} ({res['total']:.1f}s)"
                if res["status"] == "none"
                else f"> {ns.limit:g}s (searched to depth {res['searched']})"
                if res["status"] == "limit"
                else res["status"]
            )
            log(f"[{len(results)}/{len(todo)} {time.perf_counter() - started:.0f}s] {cfg.name} {prop}: {shown}")

    with ThreadPoolExecutor(max_workers=max(ns.jobs, 1)) as pool:
        list(pool.map(one, todo))
    console = Console(width=160, highlight=False, record=True)
    console.print(
        f"z3 {z3.get_version_string()}, {os.cpu_count()} cores, {ns.jobs} search(es) at once, "
        f"limit {ns.limit:g} CPU s per search, depth <= {ns.max_depth}, whole run "
        f"{time.perf_counter() - started:.0f} s, load average {load_before} before, "
        f"{os.getloadavg()[0]:.1f} after (above the job count: other work shared the cores)"
    )
    table = Table(title="Shortest counterexamples on bigger instances (BMC, minimised, replayed)")
    for col in ("case", "varied", "requests", "pp", "K", "depth", "first (s)", "shortest (s)", "result"):
        table.add_column(
            col, justify="left" if col in ("case", "varied", "result") else "right", no_wrap=True, min_width=len(col)
        )
    last = None
    for axis, cfg, prop, sizes in todo:
        res = results[cfg.name]
        case = f"{cfg.name.split('[')[0]} {prop}"
        if res["status"] == "found":
            cells = (str(res["depth"]), f"{res['first']:.2f}", f"{res['total']:.2f}", res.get("reaction", ""))
        elif res["status"] == "none":
            cells = ("-", "-", f"{res['total']:.2f}", f"none within {ns.max_depth} steps")
        elif res["status"] == "limit":
            cells = (
                "-",
                f"{res['first']:.2f}" if res["first"] else "-",
                f"> {ns.limit:g}",
                f"out of time (depths 0-{res['searched']} searched)",
            )
        else:
            cells = ("-", "-", "-", res["status"])
        if last is not None and case != last:
            table.add_section()
        table.add_row(
            case if case != last else "",
            axis,
            str(sizes["requests"]),
            str(sizes["pp"]),
            str(sizes["spec_tokens"]),
            *cells,
        )
        last = case
    console.print(table)
    console.print(
        "Times are CPU seconds of the search's process. first: to the first satisfiable depth (encoding included; "
        "the counterexample is "
        "already of the shortest length); shortest: with its picks minimised and the trace replayed on "
        "the interpreter (what make prove reports). pp applies to the V2 runner only (V1 supports async "
        "scheduling only with pp = 1)."
    )
    if ns.out or not ns.small:
        out = Path(ns.out or RESULTS)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(console.export_text())
        log(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
