"""A campaign's workers on Ray: one actor per worker, holding one release (imported only with --ray).

`RayPool` is LocalPool's counterpart for targets/fuzz/campaign_run.py. `--ray local` starts a
Ray instance on this machine (no dashboard, Ray's own logs quiet, no usage report) and
shuts it down at the end; `--ray ADDRESS` joins a cluster, whose nodes must each have
this project installed and the releases' trees fetched (`make venv vllm-trees`), at the
same paths. An actor that dies, or whose node does, is Ray's RayActorError: its task in
flight goes back to the queue (campaign_run.run). Each result says which node ran it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import sys
import threading
import time

import ray
from ray.exceptions import RayActorError
from vllm_contract.spec.errors import ExitStatus, TargetUnavailable
from vllm_contract.targets.fuzz.campaign import Worker
from vllm_contract.targets.fuzz.campaign_run import Event, Handle


@ray.remote(num_cpus=1, max_restarts=0)
class FuzzActor:
    """A Worker in a Ray actor: prepare() once, then run() per task."""

    def __init__(self, release: str):
        self.worker = Worker(release)

    def prepare(self):
        try:
            return ("ready", self.worker.prepare())
        except TargetUnavailable as exc:
            return ("broken", str(exc))

    def run(self, task):
        import torch

        torch.set_num_threads(1)
        try:
            reply = self.worker.run(task)
        except TargetUnavailable as exc:
            return ("broken", str(exc))
        reply["node"] = ray.get_runtime_context().get_node_id()
        return ("done", reply)


JOIN_WITHIN_S = 60  # joining a cluster that answers takes seconds; past this, something else listens there


def connect(address: str, workers: int | None) -> tuple[int, bool]:
    """Start (`local`) or join (an address) a Ray instance; (workers, whether we started it).
    Joining is bounded, and ended by Ctrl-C or SIGTERM (`_bounded`)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    local = address == "local"
    with contextlib.nullcontext() if local else _bounded(address, JOIN_WITHIN_S):
        ray.init(
            address="local" if local else address,
            num_cpus=workers if local else None,
            include_dashboard=False,
            logging_level=logging.ERROR,
            log_to_driver=False,
        )
    if workers is None:
        workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    return workers, local


@contextlib.contextmanager
def _bounded(address: str, seconds: float):
    """While the block joins a Ray cluster: end the process with one line of ours when it
    has not joined within `seconds`, or at Ctrl-C or SIGTERM. ray.init waits in Ray's C++
    code, where no Python signal handler runs (Ray's own SIGTERM handler included), so a
    thread watches: the interpreter's C handler still writes each signal's number to the
    wakeup fd, and the thread ends the process from there (nothing is written yet to clean up)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    joined = threading.Event()

    def end(status: int, line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        os._exit(status)

    def watch() -> None:
        deadline = time.monotonic() + seconds
        while not joined.is_set():
            ready, _, _ = select.select([wake_read], [], [], max(0.0, deadline - time.monotonic()))
            if joined.is_set():
                return
            if not ready:
                end(
                    ExitStatus.COULD_NOT_RUN,
                    f"error: --ray {address}: Ray did not join the cluster there within {seconds:g} s (something "
                    f"else may listen at that port); check it with `ray status --address {address}`; nothing was run",
                )
            for number in os.read(wake_read, 64):
                if number == signal.SIGTERM:
                    end(ExitStatus.TERMINATED, f"terminated (SIGTERM) while joining the Ray cluster at {address}")
                if number == signal.SIGINT:
                    end(ExitStatus.INTERRUPTED, f"interrupted while joining the Ray cluster at {address}")

    previous = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    if handlers[signal.SIGTERM] == signal.SIG_DFL:  # only a Python-level handler writes to the wakeup fd
        signal.signal(signal.SIGTERM, lambda number, frame: None)
    watcher = threading.Thread(target=watch, name="ray join watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        joined.set()
        signal.set_wakeup_fd(previous)
        os.write(wake_write, b"\0")  # wakes the watcher, which sees `joined`
        watcher.join()
        for sig, handler in handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
        os.close(wake_read)
        os.close(wake_write)


class RayPool:
    """Workers as Ray actors, one CPU each, placed by Ray over the cluster's nodes."""

    def __init__(self, address: str, size: int | None = None):
        self.size, self.owned = connect(address, size)
        self.address = address
        self.handles: list[Handle] = []
        self.refs: dict = {}  # ObjectRef -> (handle, "prepare" | "run")
        self.started = 0

    @property
    def how(self) -> str:
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        return f"Ray ({self.address}), {self.size} actor(s) on {nodes} node(s)"

    def live(self) -> list[Handle]:
        return list(self.handles)

    def start(self, release: str) -> Handle:
        self.started += 1
        handle = Handle(release, self.started, actor=FuzzActor.remote(release))
        self.refs[handle.actor.prepare.remote()] = (handle, "prepare")
        self.handles.append(handle)
        return handle

    def submit(self, handle: Handle, task: tuple) -> None:
        handle.task = task
        self.refs[handle.actor.run.remote(task)] = (handle, "run")

    def wait(self, timeout: float) -> list[Event]:
        if not self.refs:
            return []
        ready, _ = ray.wait(list(self.refs), num_returns=1, timeout=timeout)
        if ready:
            more, _ = ray.wait([r for r in self.refs if r not in ready], num_returns=len(self.refs) - 1, timeout=0)
            ready += more
        events = []
        for ref in ready:
            handle, what = self.refs.pop(ref)
            try:
                kind, payload = ray.get(ref)
            except RayActorError as exc:
                if handle in self.handles:
                    self.handles.remove(handle)
                    events.append(Event("died", handle, f"Ray actor ended ({type(exc).__name__})", handle.task))
                continue
            if kind == "ready":
                events.append(Event("ready", None, (handle.release, payload)))
            elif kind == "broken":
                events.append(Event("broken", handle, payload))
            else:
                task, handle.task = handle.task, None
                events.append(Event("done", handle, payload, task))
        return events

    def retire(self, handle: Handle) -> None:
        self.kill(handle)
        if handle in self.handles:
            self.handles.remove(handle)

    def kill(self, handle: Handle) -> None:
        ray.kill(handle.actor, no_restart=True)

    def idle_release(self, release: str) -> None:
        pass

    def close(self) -> None:
        for handle in list(self.handles):
            self.retire(handle)
        self.refs.clear()
        if self.owned:
            ray.shutdown()
