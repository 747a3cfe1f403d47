"""A campaign's tasks on workers: local processes (`LocalPool`) or Ray (targets/fuzz/campaign_ray.py).

`run` keeps a pool's `size` workers busy. A worker holds one release (one vLLM tree per
process), so it is started for the release with the most work left per worker, and
retired when its release has none; a task goes to a worker of its release. A worker
that dies loses only its task in flight: the task goes back to the queue and another
worker takes it; a task that has ended RETRIES + 1 workers is counted as could not run,
with that cause. Every finished task is handed to `on_done` as it comes (the command
checkpoints it), so a run stopped by Ctrl-C, SIGTERM or a crash loses only the tasks in
flight, and `done` / `cases` given at the start (a resumed campaign) are not run again.

Local workers are forked from one process per release that has imported and
preflighted it (`zygote`, started through adapter/child.py as targets/fuzz/zygote_child.py
with the socket it talks on): vLLM's import (about 10 s) is paid once per release and
not per worker, the workers share its memory, and a dead worker is replaced at once.
Each worker talks to this process over a socket of its own, whose end of file says it
died. Every process here dies with its parent (PR_SET_PDEATHSIG) and ignores Ctrl-C,
which is this process's to handle: it ends them.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from multiprocessing import reduction
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for
from typing import Any, Callable

from vllm_contract.adapter import child
from vllm_contract.model.workers import die_with_parent
from vllm_contract.spec.errors import TargetUnavailable, TreeError
from vllm_contract.spec.heartbeat import Heartbeat
from vllm_contract.targets.fuzz.campaign import RETRIES, Campaign, CaseKey, Shard, Worker, case_keys, groups
from vllm_contract.targets.fuzz.differential import DIVERGED, NOT_PLAYED


@dataclass(eq=False)
class Handle:
    """One worker as the loop sees it: its release and its task in flight."""

    release: str
    number: int
    task: tuple | None = None
    pid: int | None = None
    conn: Connection | None = None
    actor: Any = None  # Ray's actor handle
    doomed: bool = False  # kill() asked before the worker was connected


@dataclass
class Event:
    kind: str  # ready, done, died, broken
    handle: Handle | None
    payload: Any = None
    task: tuple | None = None  # done, died: the worker's task


# ------------------------------------------------------------------ local processes


class LocalPool:
    """Workers on this machine, forked from a process per release that loaded it."""

    def __init__(self, size: int, keep_loaded: bool = False):
        self.size = size
        self.keep_loaded = keep_loaded  # keep each release's process after its work (several campaigns, tests)
        self.zygotes: dict[str, _Zygote] = {}
        self.handles: list[Handle] = []
        self.started = 0

    @property
    def how(self) -> str:
        return f"{self.size} local worker(s)"

    def live(self) -> list[Handle]:
        return list(self.handles)

    def start(self, release: str) -> Handle:
        zygote = self.zygotes.get(release)
        if zygote is None:
            ours, theirs = multiprocessing.Pipe()
            fd = theirs.fileno()
            args = [release, "--fd", str(fd), "--coordinator", str(os.getpid())]
            process = child.start(ZYGOTE, args, child.environment(), os.getcwd(), pass_fds=(fd,), stderr=None)
            theirs.close()
            zygote = self.zygotes[release] = _Zygote(release, process, ours)
        self.started += 1
        handle = Handle(release, self.started)
        zygote.waiting.append(handle)
        if zygote.ready:
            zygote.ctrl.send("fork")
        self.handles.append(handle)
        return handle

    def submit(self, handle: Handle, task: tuple) -> None:
        handle.task = task
        if handle.conn is not None:
            handle.conn.send(task)

    def wait(self, timeout: float) -> list[Event]:
        owners: dict[Any, Any] = {z.ctrl: z for z in self.zygotes.values()}
        owners.update({h.conn: h for h in self.handles if h.conn is not None})
        events: list[Event] = []
        for conn in wait_for(list(owners), timeout):
            owner = owners[conn]
            events += self._zygote_said(owner) if isinstance(owner, _Zygote) else self._worker_said(owner)
        return events

    def _zygote_said(self, zygote: "_Zygote") -> list[Event]:
        try:
            kind, payload = zygote.ctrl.recv()
        except (EOFError, OSError):  # the release's process died: its unborn workers with it
            self._forget(zygote)
            if not zygote.ready:  # it never imported the release: no worker would ever run
                return [
                    Event(
                        "broken",
                        None,
                        f"{zygote.release}: the process importing it ended "
                        f"(exit code {zygote.process.poll()}) before it could take work",
                    )
                ]
            dead = [h for h in self.handles if h in zygote.waiting]
            for handle in dead:
                self.handles.remove(handle)
            return [Event("died", h, f"the process holding {zygote.release} ended", h.task) for h in dead]
        if kind == "ready":
            zygote.ready = True
            for _ in zygote.waiting:
                zygote.ctrl.send("fork")
            return [Event("ready", None, (zygote.release, payload))]
        if kind == "broken":
            return [Event("broken", None, payload)]
        # "forked": the new worker's end of its socket follows
        fd = reduction.recv_handle(zygote.ctrl)
        handle = zygote.waiting.pop(0)
        handle.pid, handle.conn = payload, Connection(fd)
        if handle.task is not None:
            handle.conn.send(handle.task)
        if handle.doomed:
            self.kill(handle)
        return []

    def _worker_said(self, handle: Handle) -> list[Event]:
        try:
            kind, payload = handle.conn.recv()
        except (EOFError, OSError):
            self._drop(handle)
            return [Event("died", handle, f"worker process {handle.pid} ended", handle.task)]
        if kind == "broken":
            return [Event("broken", handle, payload)]
        task, handle.task = handle.task, None
        return [Event("done", handle, payload, task)]

    def retire(self, handle: Handle) -> None:
        """Stop a worker (idle: it exits; busy: it is killed); the release's process goes with its last one."""
        if handle.task is not None:
            self.kill(handle)
        elif handle.conn is not None:
            try:
                handle.conn.send(None)
            except OSError:
                pass
        self._drop(handle)

    def kill(self, handle: Handle) -> None:
        """End a worker outright (SIGKILL), as a crash would."""
        if handle.pid is None:
            handle.doomed = True
            return
        try:
            os.kill(handle.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _drop(self, handle: Handle) -> None:
        if handle in self.handles:
            self.handles.remove(handle)
        if handle.conn is not None:
            handle.conn.close()
            handle.conn = None
        zygote = self.zygotes.get(handle.release)
        if zygote is not None and handle in zygote.waiting:
            zygote.waiting.remove(handle)

    def _forget(self, zygote: "_Zygote") -> None:
        """End a release's process: told by the end of its socket, it exits as a process
        should (multiprocessing's finalizers run: no leaked semaphore reported); killed
        only if it has not within 10 s, or at once while it is still importing the release
        (it reads its socket only once that is done, and has nothing to clean up)."""
        self.zygotes.pop(zygote.release, None)
        zygote.ctrl.close()
        try:
            zygote.process.wait(10 if zygote.ready else 0)
        except subprocess.TimeoutExpired:
            zygote.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                zygote.process.wait(5)

    def idle_release(self, release: str) -> None:
        """No more work for this release: its process goes (if no worker of it is left)."""
        zygote = self.zygotes.get(release)
        if self.keep_loaded:
            return
        if zygote is not None and not any(h.release == release for h in self.handles):
            self._forget(zygote)

    def close(self) -> None:
        for handle in list(self.handles):
            self.kill(handle)
            self._drop(handle)
        for zygote in list(self.zygotes.values()):
            self._forget(zygote)


ZYGOTE = "vllm_contract.targets.fuzz.zygote_child"


@dataclass(eq=False)
class _Zygote:
    release: str
    process: subprocess.Popen
    ctrl: Connection
    ready: bool = False
    waiting: list[Handle] = field(default_factory=list)  # started, not yet forked


def zygote(release: str, ctrl: Connection, coordinator: int) -> None:
    """A process that loads one release and forks a worker for each "fork" it is sent,
    handing the coordinator that worker's end of a new socket. The workers are
    multiprocessing's fork processes: each runs its own exit handlers (a semaphore one
    made is released, not reported as leaked), and they are reaped here as they end."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker = Worker(release)
    try:
        line = worker.prepare()
    except TargetUnavailable as exc:
        ctrl.send(("broken", str(exc)))
        return
    ctrl.send(("ready", line))
    forking = multiprocessing.get_context("fork")
    while True:
        try:
            if not ctrl.poll(1.0):
                multiprocessing.active_children()  # reaps the workers that ended
                continue
            request = ctrl.recv()
        except (EOFError, OSError):
            return
        if request != "fork":
            return
        ours, theirs = multiprocessing.Pipe()
        process = forking.Process(target=_serve, args=(worker, theirs, (ctrl, ours)), name=f"fuzz-{release}-worker")
        process.start()
        theirs.close()
        ctrl.send(("forked", process.pid))
        reduction.send_handle(ctrl, ours.fileno(), coordinator)
        ours.close()


def _serve(worker: Worker, conn: Connection, inherited: tuple = ()) -> None:
    """A worker's loop: a task in, its result out, until told to stop. `inherited`: the
    release process's sockets, which a worker closes (its own end is all it talks on)."""
    die_with_parent()
    for other in inherited:
        other.close()
    import torch

    torch.set_num_threads(1)  # a worker is one core's worth: N workers, N cores
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        try:
            reply = ("done", worker.run(task))
        except TargetUnavailable as exc:
            reply = ("broken", str(exc))
        conn.send(reply)


# ------------------------------------------------------------------ the loop


def _release(task: tuple) -> str:
    return task[2].release


def describe(task: tuple) -> str:
    return ("shard " if task[0] == "shard" else "case of ") + task[2].describe()


def unplayed(shard: Shard, cause: str) -> dict:
    """A shard none of whose traces could be played: each a row, could not run, with the cause."""
    rows = [[i, 0, "not run", f"{NOT_PLAYED}: {cause}"] for i in range(shard.start, shard.stop)]
    return {"profile": None, "rows": rows, "runner": {}, "redrawn": {}}


@dataclass
class Progress:
    """What the progress line says: traces and shards done, divergences so far, the rate;
    before any worker is ready, that the workers are loading their release."""

    shards: int
    of: int
    traces: int = 0
    divergent: int = 0
    retried: int = 0
    fresh: int = 0  # traces run by this run (a resumed campaign's earlier ones left out of the rate)
    ready: bool = False
    started: float = field(default_factory=time.monotonic)

    def add(self, result: dict) -> None:
        self.shards += 1
        rows = result.get("rows", [])
        self.traces += len(rows)
        self.fresh += len(rows)
        self.divergent += sum(1 for row in rows if row[3].startswith(DIVERGED + ": "))

    def line(self, workers: int) -> str:
        if not self.ready:
            return (
                f"   ... {self.shards:,}/{self.of:,} shards; {workers} worker(s) loading vLLM "
                f"({time.monotonic() - self.started:.0f} s so far; about 10-30 s)"
            )
        rate = self.fresh / max(time.monotonic() - self.started, 1e-9)
        return (
            f"   ... {self.shards:,}/{self.of:,} shards, {self.traces:,} traces, {rate:.1f} traces/s, "
            f"{self.divergent} divergent so far, {workers} worker(s)"
            + (f", {self.retried} task(s) retried" if self.retried else "")
        )


class Queue:
    """The tasks not handed out yet, per release: those to run again first, then the
    release's shards in order, drawn as they are handed out (a campaign never lists its
    shards: memory does not grow with its size), then its cases. Shards in `done` (a
    resumed campaign) are skipped as they come up."""

    def __init__(self, campaign: Campaign, done):
        self.campaign, self.done = campaign, done
        self.next = {r: campaign.release_numbers(r).start for r in campaign.releases}
        self.ahead: Counter = Counter()  # done shards not yet reached, per release
        for number in done:
            self.ahead[campaign.shard(number).release] += 1
        self.again: dict[str, deque] = {r: deque() for r in campaign.releases}
        self.cases: dict[str, deque] = {r: deque() for r in campaign.releases}

    def pending(self, release: str) -> int:
        left = self.campaign.release_numbers(release).stop - self.next[release] - self.ahead[release]
        return len(self.again[release]) + left + len(self.cases[release])

    def __bool__(self) -> bool:
        return any(self.pending(r) for r in self.campaign.releases)

    def order(self, release: str) -> int:
        """Which release comes first when the work left per worker is even: one with a task
        to run again, then the campaign's order."""
        return -1 if self.again[release] else self.campaign.releases.index(release)

    def take(self, release: str) -> tuple | None:
        if self.again[release]:
            return self.again[release].popleft()
        stop = self.campaign.release_numbers(release).stop
        while self.next[release] < stop:
            number = self.next[release]
            self.next[release] += 1
            if number in self.done:
                self.ahead[release] -= 1
                continue
            return ("shard", self.campaign, self.campaign.shard(number))
        return self.cases[release].popleft() if self.cases[release] else None

    def again_first(self, task: tuple) -> None:
        self.again[_release(task)].appendleft(task)

    def add_case(self, task: tuple) -> None:
        self.cases[_release(task)].append(task)


def run(
    campaign: Campaign,
    pool,
    done: dict[int, dict],
    cases: dict[CaseKey, dict],
    on_done: Callable[[tuple, dict], None] = lambda task, result: None,
    say: Callable[[str], None] = print,
    on_dispatch: Callable[[Handle, tuple], None] = lambda handle, task: None,
    every: float = 2.0,
    timing: dict | None = None,
    records: list[dict] | None = None,
) -> list[dict]:
    """Run every shard not in `done` and then every case not in `cases` (filled in as
    tasks finish); `records` gets what the timings file keeps, one record per finished
    task, and `timing` "ready", the seconds until the first worker could take work (both
    kept when the run is stopped); returns the records.
    Raises TreeError when a release cannot be loaded or driven, KeyboardInterrupt
    (Terminated) as it came; the workers are stopped on every way out."""
    queue = Queue(campaign, done)
    queued: set[CaseKey] = set()
    deaths: Counter = Counter()
    records = [] if records is None else records
    announced: set[str] = set()
    raised: set[str] = set()  # each error's traceback is printed once
    timing = {} if timing is None else timing
    progress = Progress(shards=len(done), of=campaign.shard_count)
    for result in done.values():
        progress.traces += len(result.get("rows", []))
        progress.divergent += sum(1 for row in result["rows"] if row[3].startswith(DIVERGED + ": "))
    left = {g: len(campaign.group_numbers(g)) for g in groups(campaign)}  # shards not done, per group
    for number in done:
        left[campaign.shard(number).group] -= 1

    def add_cases(only) -> None:
        for key in case_keys(campaign, done, only):
            if key not in cases and key not in queued:
                queued.add(key)
                queue.add_case(("case", campaign, key))

    def finish(task: tuple, result: dict) -> None:
        if task[0] == "shard":
            done[task[2].number] = result
            progress.add(result)
            left[task[2].group] -= 1
            if not left[task[2].group]:
                add_cases([task[2].group])
        else:
            cases[task[2]] = result
        on_done(task, result)

    add_cases([g for g, n in left.items() if not n])
    heartbeat = Heartbeat(say, every)
    try:
        while queue or any(h.task is not None for h in pool.live()):
            _schedule(pool, queue, on_dispatch)
            for event in pool.wait(0.5):
                if event.kind == "ready":
                    release, line = event.payload
                    if release not in announced:
                        announced.add(release)
                        say(f"fuzzing {line}")
                    if "ready" not in timing:
                        timing["ready"] = time.monotonic() - progress.started
                        progress.started, progress.fresh, progress.ready = time.monotonic(), 0, True
                elif event.kind == "broken":
                    raise TreeError(event.payload)
                elif event.kind == "done":
                    task, reply = event.task, event.payload
                    result = reply["result"]
                    if "error" in result:
                        said = "" if result["error"] in raised else "\n" + result["traceback"]
                        raised.add(result["error"])
                        say(f"   {describe(task)}: the worker raised {result['error']}{said}")
                        if task[0] == "shard":
                            result = unplayed(task[2], f"the worker raised {result['error']}")
                        else:
                            result = {"reproduced": False, "error": f"the worker raised {result['error']}"}
                    records.append(_record(task, reply, deaths[_key(task)] + 1, result))
                    finish(task, result)
                elif event.kind == "died" and event.task is not None:
                    task = event.task
                    deaths[_key(task)] += 1
                    progress.retried += 1
                    if deaths[_key(task)] > RETRIES:
                        cause = f"its worker died {deaths[_key(task)]} times running it"
                        say(f"   {describe(task)}: {event.payload}; {cause}, counted as could not run")
                        finish(task, unplayed(task[2], cause) if task[0] == "shard" else {"error": cause})
                    else:
                        say(f"   {describe(task)}: {event.payload}; it runs again on another worker")
                        queue.again_first(task)
            heartbeat(lambda: progress.line(len(pool.live())))
    finally:
        for handle in pool.live():
            pool.retire(handle)
        for release in campaign.releases:
            pool.idle_release(release)
    return records


def _key(task: tuple) -> tuple:
    return (task[0], task[2])


def _record(task: tuple, reply: dict, attempt: int, result: dict) -> dict:
    what = task[2]
    record = {
        "task": describe(task),
        "seconds": round(reply["seconds"], 3),
        "cpu": round(reply["cpu"], 3),
        "host": reply["host"],
        "pid": reply["pid"],
        "attempt": attempt,
        "traces": len(result.get("rows", [])),
    }
    if "node" in reply:
        record["node"] = reply["node"]
    if isinstance(what, Shard):
        record["shard"] = what.number
    return record


def _schedule(pool, queue: Queue, on_dispatch) -> None:
    """Retire idle workers whose release has no queued task, start workers for the
    releases with the most queued work per worker, and give each idle worker a task of its release."""
    pending = Counter({r: queue.pending(r) for r in queue.campaign.releases})
    for handle in pool.live():
        if handle.task is None and not pending[handle.release]:
            pool.retire(handle)
            pool.idle_release(handle.release)
    while len(pool.live()) < pool.size:
        idle = Counter(h.release for h in pool.live() if h.task is None)
        workers = Counter(h.release for h in pool.live())
        wanting = [r for r in pending if pending[r] > idle[r]]
        if not wanting:
            break
        release = max(wanting, key=lambda r: ((pending[r] - idle[r]) / (workers[r] + 1), -queue.order(r)))
        pool.start(release)
    for handle in pool.live():
        if handle.task is not None:
            continue
        task = queue.take(handle.release)
        if task is None:
            continue
        pool.submit(handle, task)
        on_dispatch(handle, task)


def default_workers() -> int:
    """One worker per core, at most 8 (each holds a vLLM, about 0.6 GB)."""
    return max(1, min(os.cpu_count() or 1, 8))
