"""Solver work in worker processes: one fresh process per configuration, stopped with its parent.

Z3's answers depend on what its context saw before, so two configurations sharing a
process would make the traces depend on scheduling: every task runs in a fresh process,
forked from a server that has only imported the code (`max_tasks_per_child=1`).

Stopping. Ctrl-C or SIGTERM in the parent stops the run at once (`stop_pool` ends the
workers; nothing waits for a configuration in progress). A SIGINT that reaches a worker
while Z3 searches is turned into an interrupt of the solver (`watch_sigint`: Z3 would
otherwise swallow it). And if the parent is killed outright, the fork server and every
worker get SIGKILL from the kernel (Linux PR_SET_PDEATHSIG), so no solver runs on.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import threading
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any, Callable, Iterable

PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `signum` to this process when its parent ends (Linux only;
    elsewhere nothing happens)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _worker_start() -> None:
    die_with_parent()


def isolated_pool(
    jobs: int, preload: Iterable[str] = ("vllm_contract.model.check",), fresh: bool = True
) -> ProcessPoolExecutor:
    """A pool whose every task runs in a fresh process forked from a preloaded server
    (`fresh=False`: its workers take task after task, for work whose result cannot depend
    on what a process ran before, such as the interpreter's). The server is made to die
    with this process too (model/forkserver_guard.py is preloaded first: importing it sets
    the server's death signal)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["vllm_contract.model.forkserver_guard", *preload])
    return ProcessPoolExecutor(
        max_workers=max(jobs, 1),
        mp_context=context,
        max_tasks_per_child=1 if fresh else None,
        initializer=_worker_start,
    )


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:  # first: the pool's manager thread then sees a broken pool and ends
        with contextlib.suppress(Exception):
            process.terminate()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(2)
    pool.shutdown(wait=True, cancel_futures=True)


def run_isolated(
    fn: Callable,
    tasks: list[tuple],
    jobs: int,
    preload: Iterable[str],
    on_result: Callable[[int, Any], None],
    fresh: bool = True,
) -> list:
    """fn(*task) for every task in fresh processes (`fresh=False`: on `jobs` workers that
    each run many); on_result(index, result) as each ends (in the order they finish).
    Returns the results in task order. An exception of a task, an interrupt or a worker
    killed outright stops every worker and is raised."""
    pool = isolated_pool(jobs, preload, fresh)
    results: dict[int, Any] = {}
    try:
        futures: dict[Future, int] = {pool.submit(fn, *task): i for i, task in enumerate(tasks)}
        for future in as_completed(futures):
            i = futures[future]
            results[i] = future.result()
            on_result(i, results[i])
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)
    return [results[i] for i in range(len(tasks))]


_watching = False
_sigint_seen = threading.Event()


def sigint_seen() -> bool:
    """Whether this process got SIGINT since watch_sigint started watching: a Z3 call
    the interrupt cut short raises its own error ("canceled"), which is the signal's doing."""
    return _sigint_seen.is_set()


def watch_sigint() -> None:
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
                _sigint_seen.set()
                z3.main_ctx().interrupt()

    threading.Thread(target=watch, name="sigint-watch", daemon=True).start()
    _watching = True
