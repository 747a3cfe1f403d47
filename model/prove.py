"""The configuration matrix checked: every configuration in a fresh solver process, one summary.

`vllm-contract prove` (vllm_contract/commands/prove.py) is the command; this module
selects the configurations, runs them (model/workers.py) and builds summary.json, which
records which configurations were run and whether that was the whole matrix (so a
partial run never passes for a full one: codegen replaces only the cases of the
configurations run), and the key of the sources it was computed from
(model/results.py), so a summary older than the code is refused downstream.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Callable

from vllm_contract.model.cache import ProverCache
from vllm_contract.model.check import MAX_DEPTH, TIMEOUT_S, ConfigReport, check_config
from vllm_contract.model.results import VerdictRow, sources_key
from vllm_contract.model.solvers import SolverInterrupted
from vllm_contract.model.workers import run_isolated, sigint_seen, watch_sigint
from vllm_contract.spec.errors import SpecError


def import_matrix():
    """spec/matrix.py, with a malformed entry reported as one line. An unknown keyword
    or a missing argument fails while the module is imported, before any validation,
    as a TypeError; say where it is and what the fields are."""
    try:
        import vllm_contract.spec.matrix as matrix
    except TypeError as exc:
        tb, line = exc.__traceback__, None
        while tb is not None:  # the entry's line: where the module body made the call
            code = tb.tb_frame.f_code
            if code.co_filename.endswith(os.path.join("spec", "matrix.py")) and code.co_name == "<module>":
                line = tb.tb_lineno
            tb = tb.tb_next
        from dataclasses import fields

        from vllm_contract.spec.config import Config

        names = ", ".join(f.name for f in fields(Config))
        where = f"spec/matrix.py line {line}" if line else "spec/matrix.py"
        raise SpecError(f"{where}: a matrix entry is malformed ({exc}); the fields are: {names}") from None
    return matrix


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


def worker_check(cfg, max_depth: int, timeout_s: float, walks: bool = True) -> ConfigReport:
    """check_config in a solver worker: an interrupt is raised as SolverInterrupted, never
    turned into a verdict, and the main process stops the run."""
    watch_sigint()
    try:
        return check_config(cfg, max_depth, timeout_s, walks)
    except KeyboardInterrupt:
        raise SolverInterrupted(f"{cfg.name}: interrupted") from None
    except Exception as exc:
        # Z3 cut short by the interrupt raises before Python's KeyboardInterrupt, or a
        # KeyboardInterrupt at the ctypes boundary comes wrapped (ctypes.ArgumentError)
        if sigint_seen() or _interrupt_in(exc):
            raise SolverInterrupted(f"{cfg.name}: interrupted") from None
        raise


def _interrupt_in(exc: BaseException | None) -> bool:
    """Whether a KeyboardInterrupt is in an exception's chain, or named by a ctypes
    argument error ("argument 1: KeyboardInterrupt: ")."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, KeyboardInterrupt) or (
            type(exc).__name__ == "ArgumentError" and "KeyboardInterrupt" in str(exc)
        ):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def cost(cfg) -> int:
    """A rough guess of a configuration's solve time, for scheduling only."""
    return cfg.requests**2 * (2 + len(cfg.events) + len(cfg.faults)) * cfg.queue_depth


@dataclass
class MatrixRun:
    rows: list[VerdictRow]
    documents: dict  # relative path -> ITF text
    witnesses: dict  # config -> witness record
    cached: list = field(default_factory=list)  # configurations taken from the cache
    recomputed: list = field(default_factory=list)  # damaged cache entries, proved again
    unkept: list = field(default_factory=list)  # (configuration, why) whose cache entry could not be written


def run_matrix(
    configs: list,
    jobs: int,
    max_depth: int = MAX_DEPTH,
    timeout_s: float = TIMEOUT_S,
    on_report: Callable[[ConfigReport], None] = lambda report: None,
    cache: ProverCache | None = None,
    walks: bool = True,
) -> MatrixRun:
    """check_config for every configuration the cache does not hold (heaviest first so
    the workers finish together); on_report as each one ends, cached ones first. `walks`
    only times first counterexamples, so it is not part of the cache's key."""
    by_name: dict = {}
    if cache is not None:
        for cfg in configs:
            report = cache.get(cfg)
            if report is not None:
                by_name[cfg.name] = report
                on_report(report)
    heavy_first = sorted((c for c in configs if c.name not in by_name), key=cost, reverse=True)

    def done(i: int, report: ConfigReport) -> None:
        if cache is not None:
            cache.put(heavy_first[i], report)  # as each ends: an interrupted run keeps what it finished
        on_report(report)

    if heavy_first:
        reports = run_isolated(
            worker_check,
            [(cfg, max_depth, timeout_s, walks) for cfg in heavy_first],
            jobs,
            ["vllm_contract.model.check"],
            done,
        )
        by_name.update({cfg.name: report for cfg, report in zip(heavy_first, reports)})
    ordered = [by_name[c.name] for c in configs]
    return MatrixRun(
        rows=[row for rep in ordered for row in rep.rows],
        documents={path: doc for rep in ordered for path, doc in rep.documents.items()},
        witnesses={c.name: by_name[c.name].witness for c in configs},
        cached=list(cache.hits) if cache is not None else [],
        recomputed=list(cache.recomputed) if cache is not None else [],
        unkept=list(cache.unkept) if cache is not None else [],
    )


def summary(configs: list, complete: bool, run: MatrixRun, seconds: float) -> dict:
    """summary.json: what was run, its results and witnesses, and the sources' key."""
    import z3

    return {
        "seconds": round(seconds, 3),
        "configs": [c.name for c in configs],  # what was run: codegen replaces only these
        "complete": complete,  # the whole matrix?
        "key": {"sources": sources_key(), "z3": z3.get_version_string()},
        "results": [row.to_json() for row in run.rows],
        "witnesses": run.witnesses,
    }
