"""`make prove`: run the configuration matrix and compare every verdict with spec/.

    python -m model.prove [CONFIG ...] [--jobs N] [--out build/prove] [--max-depth D] [--timeout S]

Prints a row per property as configurations finish, writes the counterexamples and
witnesses as ITF JSON and `summary.json` under --out. `summary.json` records which
configurations were run and whether that was the whole matrix, so a partial run never
passes for a full one (codegen replaces only the cases of the configurations run).

--out is only ever replaced when it is empty or a previous result of ours: it holds
nothing but the files its `.model-prove` marker lists (or, written before the marker,
nothing but `summary.json` and `traces/`). Anything else is refused before any solving
starts, and so is a folder that cannot be written.
The results are written to a staging folder beside it (`<out>.<pid>.XXXX`) that is
swapped in with one atomic exchange, so a reader sees the old results or the new ones,
never a mix. SIGINT or SIGTERM, to this process or only to a solver worker, stops the
run and is never recorded as a verdict: nothing is written, the staging folder is
removed, exit 130 (SIGTERM: 143; a worker killed outright: 1). Staging folders a run
killed with SIGKILL left behind are removed at the next start.

--timeout (default 60 s) limits each solver query; one that runs past it is a failure
that names the query (configuration, property, proof or search step) and the limit.

Exit 0 when every verdict matches its expectation and every configuration has its
witness; 1 on any deviation, `unknown` (a timeout included) or vacuous configuration;
2 on bad input (one line, nothing written); 130/143 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from rich.console import Console

from model.bmc import SolverInterrupted
from model.check import MAX_DEPTH, TIMEOUT_S, ConfigReport, check_config, row_dict
from model.itf import write
from spec.config import SpecError

console = Console(highlight=False, width=150)  # CI logs are not terminals: do not wrap at 80

VERDICT_STYLE = {"proved": "green", "violated": "yellow", "bounded": "magenta", "unknown": "red"}
MARKER = ".model-prove"  # in every folder this tool writes, listing its files: only those are replaced
NOTE = "written by `python -m model.prove`, which replaces this folder only while it holds just these files"


class UsageError(SpecError):
    """A command-line argument is malformed (one line, exit 2)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an exception so the same cleanup as for Ctrl-C runs."""


# ------------------------------------------------------------------ input


def import_matrix():
    """spec/matrix.py, with a malformed entry reported as one line. An unknown keyword
    or a missing argument fails while the module is imported, before any validation,
    as a TypeError; say where it is and what the fields are."""
    try:
        import spec.matrix as matrix
    except TypeError as exc:
        tb, line = exc.__traceback__, None
        while tb is not None:  # the entry's line: where the module body made the call
            code = tb.tb_frame.f_code
            if code.co_filename.endswith(os.path.join("spec", "matrix.py")) and code.co_name == "<module>":
                line = tb.tb_lineno
            tb = tb.tb_next
        from dataclasses import fields

        from spec.config import Config

        names = ", ".join(f.name for f in fields(Config))
        where = f"spec/matrix.py line {line}" if line else "spec/matrix.py"
        raise SpecError(f"{where}: a matrix entry is malformed ({exc}); the fields are: {names}") from None
    return matrix


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line (UsageError), not usage + exit."""

    def error(self, message):
        raise UsageError(f"{message} (see --help)")


def whole(low: int = 1):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {value}")
        return value

    return parse


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


# ------------------------------------------------------------------ the output folder


def write_marker(folder: Path, files: list[str]) -> None:
    (folder / MARKER).write_text(json.dumps({"note": NOTE, "files": sorted(files)}, indent=1) + "\n")


def marked_files(folder: Path) -> set[str] | None:
    """The files our marker lists (None: no readable marker of ours)."""
    try:
        record = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    files = record.get("files") if isinstance(record, dict) else None
    return set(files) if isinstance(files, list) and all(isinstance(f, str) for f in files) else None


def foreign_entry(folder: Path) -> str | None:
    """The first entry of `folder` that this tool did not write (None: all ours, or empty).
    With our marker: anything it does not list. Without (results from before the marker):
    anything but summary.json and a traces/ tree of .itf.json files, and summary.json
    must be there."""
    entries = sorted(folder.rglob("*"))
    if not entries:
        return None
    listed = marked_files(folder)
    if listed is None:
        names = {e.name for e in folder.iterdir()}
        if "summary.json" not in names:
            return str(entries[0].relative_to(folder))
    for entry in entries:
        rel = entry.relative_to(folder).as_posix()
        if entry.is_symlink():
            return rel
        if entry.is_dir():
            continue
        if listed is not None:
            if rel != MARKER and rel not in listed:
                return rel
        elif rel != "summary.json" and not (rel.startswith("traces/") and rel.endswith(".itf.json")):
            return rel
    return None


def check_out(out: Path) -> None:
    """Refuse an --out this tool must not replace (raises UsageError)."""
    shown = str(out) or "."
    here = Path.cwd().resolve()
    target = out.resolve()
    if target == here or target in here.parents:
        raise UsageError(
            f"--out {shown}: that is the current folder or holds it; "
            "name a folder of its own for the results (default build/prove)"
        )
    if out.is_symlink():
        raise UsageError(f"--out {shown}: is a symbolic link; name a real folder (default build/prove)")
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"--out {shown}: is a file, not a folder; name a folder (default build/prove)")
        try:
            foreign = foreign_entry(out)
        except OSError as exc:
            raise UsageError(f"--out {shown}: cannot be read ({exc.strerror})") from None
        if foreign is not None:
            raise UsageError(
                f"--out {shown}: holds {foreign}, which model.prove did not write; refusing to replace "
                "the folder (name a new or empty folder, or one a previous run wrote)"
            )
        if not os.access(out, os.W_OK | os.X_OK):
            raise UsageError(
                f"--out {shown}: not writable, so the old results could not be replaced; choose another --out"
            )


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(out: Path) -> list[Path]:
    """Remove the staging folders (`<out>.<pid>.XXXX`, `<out>.<pid>.old-XXXX`) that a
    run killed beyond cleanup left beside `out`, when that run's process is gone and the
    folder holds only what we write; also `<out>.XXXXXXXX` from before the pid was in
    the name. If `out` itself is missing (killed mid-swap), the old results go back."""
    parent, name = out.parent, out.name
    pattern = re.compile(rf"{re.escape(name)}\.(?:(\d+)\.(old-)?)?[a-z0-9_]+")
    removed = []
    try:
        candidates = sorted(parent.iterdir()) if parent.is_dir() else []
    except OSError:
        return removed
    for entry in candidates:
        match = pattern.fullmatch(entry.name)
        if not match or entry.is_symlink() or not entry.is_dir():
            continue
        pid, old = match.group(1), match.group(2)
        if pid is None and len(entry.name) != len(name) + 9:  # mkdtemp's 8 characters
            continue
        if pid is not None and _pid_alive(int(pid)):
            continue  # a run in progress (parallel runs are fine)
        try:
            if foreign_entry(entry) is not None:
                continue
            if old and not out.exists():
                os.rename(entry, out)
            else:
                shutil.rmtree(entry)
            removed.append(entry)
        except OSError:
            continue
    return removed


@contextlib.contextmanager
def signals_blocked():
    """SIGINT and SIGTERM wait until the block ends (a swap is never cut in half)."""
    sigs = {signal.SIGINT, signal.SIGTERM}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _exchange(a: Path, b: Path) -> bool:
    """Linux renameat2(RENAME_EXCHANGE): swap two paths in one step. False where the
    system or the file system does not offer it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def swap_in(staging: Path, target: Path, old_prefix: str) -> None:
    """Make `staging` the new `target`: readers see the old folder or the new one, never
    a mix. With RENAME_EXCHANGE that is one step; otherwise two renames with SIGINT and
    SIGTERM held back (the old folder gets a name clean_stale recognises)."""
    with signals_blocked():
        if not target.exists():
            os.rename(staging, target)
            return
        if _exchange(staging, target):
            old = staging  # now holds the previous contents
        else:
            old = Path(tempfile.mkdtemp(prefix=old_prefix, dir=target.parent))
            os.rename(target, old)  # onto an empty folder: replaces it
            os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def interrupts():
    """SIGTERM raises Terminated (a KeyboardInterrupt), so `finally` blocks run for
    SIGTERM as they do for Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def prepare_out(out: Path) -> Path:
    """Check --out and create the staging folder next to it, before any solving: a
    folder that cannot be written is found now, not after the matrix ran."""
    check_out(out)
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create {parent} ({exc.strerror}); choose another --out") from None
    clean_stale(out)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f"{out.name}.{os.getpid()}.", dir=parent))
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write in {parent} ({exc.strerror}); choose another --out") from None
    try:
        write_marker(staging, [])  # first: a staging folder with our marker is ours to clean
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise UsageError(f"--out {out}: cannot write in {parent} ({exc.strerror}); choose another --out") from None
    return staging


# ------------------------------------------------------------------ the run


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


def _print_header() -> None:
    console.print(
        f"{'config':<30} {'property':<28} {'verdict':<12} {'expected':<12} {'scope':<22} {'depth':>5} {'time':>7}  note"
    )


def _print_row(row) -> None:
    mark = "" if row.ok else "  [bold red]<- MISMATCH[/]"
    style = VERDICT_STYLE.get(row.verdict.split(":")[0], "white")
    depth = "-" if row.depth is None else str(row.depth)
    note = row.note if len(row.note) < 60 else row.note[:57] + "..."
    if row.verdict == "violated" and row.mechanisms:
        note = "via " + ", ".join(row.mechanisms) + (f"; +{len(row.classes)} class(es)" if row.classes else "")
        if row.reaction:
            note = ("CRASH, " if row.reaction.startswith("crash") else "silent, ") + note
    console.print(
        f"{row.config:<30} {row.property:<28} [{style}]{row.verdict:<12}[/] {row.expected:<12} "
        f"{scope_text(row.scope):<22} {depth:>5} {row.seconds:>6.2f}s  {note}{mark}"
    )


def isolated_pool(jobs: int) -> ProcessPoolExecutor:
    """Workers that check each configuration in a fresh process. Z3's answers depend on
    what its context saw before, so sharing a process would make the traces depend on
    scheduling; children fork from a server that has only imported the code."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["model.check"])
    return ProcessPoolExecutor(max_workers=max(jobs, 1), mp_context=context, max_tasks_per_child=1)


_watching = False


def _watch_sigint() -> None:
    """Make SIGINT always stop a solver worker. Z3 catches SIGINT itself while it
    searches, and when that search completes anyway the signal is simply gone (the run
    would go on). So Z3's handler is switched off, and a thread woken by the signal
    (signal.set_wakeup_fd: Python's C handler writes to it even while the main thread
    is inside Z3) interrupts the solver; Python then raises KeyboardInterrupt."""
    global _watching
    if _watching or threading.current_thread() is not threading.main_thread():
        return
    import z3

    z3.set_param("ctrl_c", False)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)

    def watch():
        while True:
            data = os.read(read_end, 64)
            if not data:
                return
            if signal.SIGINT in data:
                z3.main_ctx().interrupt()

    threading.Thread(target=watch, name="sigint-watch", daemon=True).start()
    _watching = True


def worker_check(cfg, max_depth: int, timeout_s: float) -> ConfigReport:
    """check_config in a solver worker: an interrupt is raised as SolverInterrupted, never
    turned into a verdict, and the main process stops the run."""
    _watch_sigint()
    try:
        return check_config(cfg, max_depth, timeout_s)
    except KeyboardInterrupt:
        raise SolverInterrupted(f"{cfg.name}: interrupted") from None


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now (an interrupted run must stop
    promptly, not wait for the configurations in progress)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:  # first: the pool's manager thread then sees a broken pool and ends
        with contextlib.suppress(Exception):
            process.terminate()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(2)
    pool.shutdown(wait=True, cancel_futures=True)


def _cost(cfg) -> int:
    """A rough guess of a configuration's solve time, for scheduling only."""
    return cfg.requests**2 * (2 + len(cfg.events) + len(cfg.faults)) * cfg.queue_depth


def _run(configs: list, jobs: int, max_depth: int, timeout_s: float = TIMEOUT_S) -> tuple[list, dict, dict]:
    reports: dict[str, ConfigReport] = {}
    console.print(
        f"checking {len(configs)} configuration(s) on {max(jobs, 1)} worker(s); "
        "rows appear as each configuration finishes"
    )
    _print_header()
    pool = isolated_pool(jobs)
    try:
        # heaviest first, so the workers finish together (results print as they come)
        heavy_first = sorted(configs, key=_cost, reverse=True)
        futures = {pool.submit(worker_check, cfg, max_depth, timeout_s): cfg for cfg in heavy_first}
        for future in as_completed(futures):
            cfg = futures[future]
            reports[cfg.name] = future.result()  # a worker's interrupt is raised here
            for row in reports[cfg.name].rows:
                _print_row(row)
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)
    ordered = [reports[c.name] for c in configs]
    rows = [row for rep in ordered for row in rep.rows]
    documents = {path: doc for rep in ordered for path, doc in rep.documents.items()}
    witnesses = {c.name: reports[c.name].witness for c in configs}
    return rows, documents, witnesses


def select(names: list[str]) -> tuple[list, bool]:
    """The configurations to run and whether they are the whole matrix. A name given
    twice is run once (and said so); an unknown one raises SpecError."""
    matrix = import_matrix()
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        print(f"note: {', '.join(twice)} named more than once; each configuration runs once", file=sys.stderr)
    configs = matrix.by_name(list(dict.fromkeys(names)))
    everything = {c.name for c in matrix.MATRIX}  # names only: other entries need not be valid
    return configs, {c.name for c in configs} == everything


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m model.prove", description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", help="configuration names from spec/matrix.py (default: all)")
    parser.add_argument("--jobs", type=whole(), default=min(2, os.cpu_count() or 1))
    parser.add_argument(
        "--out", default="build/prove", help="result folder; replaced only if empty or written by an earlier run"
    )
    parser.add_argument("--max-depth", type=whole(), default=MAX_DEPTH)
    parser.add_argument(
        "--timeout",
        type=seconds,
        default=TIMEOUT_S,
        help=f"seconds per solver query (default {TIMEOUT_S:g}); a query that runs past "
        "it is reported as a timeout, never as a pass",
    )
    staging = None
    try:
        with interrupts():
            try:
                args = parser.parse_args(argv)
                configs, complete = select(args.configs)  # bad input fails before any work
                out = Path(args.out)
                staging = prepare_out(out)
            except SpecError as exc:
                print(f"error: {exc}", file=sys.stderr)  # one line, unwrapped
                return 2
            started = time.perf_counter()
            rows, documents, witnesses = _run(configs, args.jobs, args.max_depth, args.timeout)
            total = time.perf_counter() - started

            summary = {
                "seconds": round(total, 3),
                "configs": [c.name for c in configs],  # what was run: codegen replaces only these
                "complete": complete,  # the whole matrix?
                "results": [row_dict(r) for r in rows],
                "witnesses": witnesses,
            }
            try:
                write_marker(staging, ["summary.json", *documents])  # before them: a killed write is still ours
                for rel, doc in documents.items():
                    write(staging / rel, doc)
                (staging / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
                swap_in(staging, out, f"{out.name}.{os.getpid()}.old-")
            except OSError as exc:  # a full disk, a folder removed under us: say so, keep the old results
                print(f"error: writing the results failed ({exc}); {out} left as it was", file=sys.stderr)
                return 1
    except Terminated:
        print("terminated (SIGTERM): nothing written", file=sys.stderr)
        return 143
    except (KeyboardInterrupt, SolverInterrupted) as exc:
        where = " in a solver worker" if isinstance(exc, SolverInterrupted) else ""
        print(f"interrupted{where}: stopped, nothing written", file=sys.stderr)
        return 130
    except BrokenProcessPool:
        print(
            "error: a solver worker ended abruptly (killed by a signal, or out of memory): stopped, nothing written",
            file=sys.stderr,
        )
        return 1
    finally:
        if staging is not None and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)

    mismatches = [r for r in rows if not r.ok]
    undecided = [name for name, w in witnesses.items() if not w.get("reached") and w.get("unknown")]
    vacuous = [name for name, w in witnesses.items() if not w.get("reached") and not w.get("unknown")]
    reached = len(witnesses) - len(vacuous) - len(undecided)
    scope = "" if complete else f" (a partial run: {len(configs)} configuration(s) of the matrix)"
    console.print(
        f"\n{len(rows)} verdicts, {len(rows) - len(mismatches)} as expected, "
        f"{reached}/{len(witnesses)} witnesses reached, {total:.1f}s; wrote {out}/summary.json{scope}"
    )
    for r in mismatches:
        console.print(
            f"[bold red]deviation:[/] {r.config} / {r.property}: expected {r.expected}, got {r.verdict}"
            + (f" ({r.note})" if r.note else "")
            + (f"; trace {out}/{r.trace}" if r.trace else "")
        )
    for name in undecided:
        console.print(f"[bold red]witness undecided:[/] {name}: {witnesses[name].get('note')}")
    for name in vacuous:
        console.print(f"[bold red]vacuous:[/] {name}: {witnesses[name].get('note')}")
    return 0 if not mismatches and not vacuous and not undecided else 1


if __name__ == "__main__":
    sys.exit(main())
