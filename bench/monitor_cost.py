"""What the contract monitor costs a running scheduler: step time with and without it, and its memory.

    vllm-contract bench monitor [--vllm 0.32.0] [--requests 64 256] [--rounds 20] [--steps 40] [--out FILE]

vLLM's real AsyncScheduler (the loaded tree's, on CPU, adapter/construct.py) and the
same scheduler as MonitoredAsyncScheduler (targets/monitor/scheduler.py), each with N
running requests (prompts of --prompt tokens, never stopping), stepped as EngineCore
does with async scheduling: schedule(), and update_from_output() of the oldest step
once two are in flight, the runner's output one sampled token per request. A step's time
is its schedule() plus its update_from_output(), in this thread's CPU time (a busy host's
other processes stay out of it) and on the wall clock. The two schedulers run in
alternating rounds of --steps steps (which one goes first alternates too), so drift on a
shared machine falls on both; the ratio of their CPU-time medians is the cost (target: at
most 1.03).

Then where the monitor's time goes (each hook timed on its own, microseconds per step)
and its memory: the bytes its window, in-flight steps and admissions hold (their own
objects, not vLLM's Requests they point to), once the window is full and again after
four times as many events (bounded by the window: the two must be close).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import deque
from pathlib import Path

from vllm_contract.adapter import objects

TARGET = 1.03


def _scheduler(requests: int, monitor: bool, prompt: int):
    """vLLM's scheduler (the monitor's class, or vLLM's own) with N requests added."""
    from vllm_contract.adapter import construct as vllm_factory
    from vllm_contract.targets.monitor.scheduler import MONITOR_SCHEDULER_CLS

    cls = MONITOR_SCHEDULER_CLS if monitor else None
    sched = vllm_factory.scheduler_of(vllm_factory.Shape(requests, 16, 0, 0, 1, cls, v2=not objects.has_v1_runner()))
    for r in range(requests):
        objects.add_request(sched, vllm_factory.make_request(r, prompt, 16))
    vllm_factory.set_budget(sched, 8192)
    return sched


class Engine:
    """One scheduler stepped as EngineCore steps it (two steps in flight)."""

    def __init__(self, sched):
        from vllm_contract.adapter import construct as vllm_factory

        self.sched = sched
        self.V = vllm_factory.load()
        self.queue: deque = deque()

    def output(self, so):
        ids = list(objects.scheduled(so))
        return objects.runner_output(ids, [[11] for _ in ids])

    def step(self) -> tuple[float, float]:
        """One engine step: the seconds its scheduler calls took, on the wall clock and in
        this thread's CPU time (the runner's output is built outside both clocks)."""
        w0, c0 = time.perf_counter(), time.thread_time()
        so = objects.schedule(self.sched)
        wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
        self.queue.append(so)
        if len(self.queue) == 2:
            old = self.queue.popleft()
            out = self.output(old)
            w0, c0 = time.perf_counter(), time.thread_time()
            objects.deliver(self.sched, old, out)
            wall, cpu = wall + time.perf_counter() - w0, cpu + time.thread_time() - c0
        return wall, cpu


def deep_size(monitor) -> int:
    """Bytes of the monitor's own records and containers (not the vLLM objects they name)."""
    seen: set[int] = set()

    def size(obj) -> int:
        if id(obj) in seen or obj is None or isinstance(obj, (bool, int, float)):
            return 0
        seen.add(id(obj))
        total = sys.getsizeof(obj)
        if isinstance(obj, dict):
            total += sum(size(k) + size(v) for k, v in obj.items())
        elif isinstance(obj, (list, tuple, set, frozenset, deque)):
            total += sum(size(x) for x in obj)
        elif hasattr(obj, "__slots__"):
            for name in obj.__slots__:
                if name == "request":  # vLLM's Request: held anyway while it runs
                    continue
                total += size(getattr(obj, name, None))
        return total

    return size(monitor.window) + size(monitor.in_flight) + size(monitor.admitted)


def measure(requests: int, rounds: int, steps: int, prompt: int, warmup: int) -> dict:
    plain = Engine(_scheduler(requests, False, prompt))
    watched = Engine(_scheduler(requests, True, prompt))
    for engine in (plain, watched):
        for _ in range(warmup):
            engine.step()
    wall: dict[str, list[float]] = {"plain": [], "monitor": []}
    cpu: dict[str, list[float]] = {"plain": [], "monitor": []}
    for r in range(rounds):
        order = ((plain, "plain"), (watched, "monitor")) if r % 2 == 0 else ((watched, "monitor"), (plain, "plain"))
        for engine, name in order:
            for _ in range(steps):
                w, c = engine.step()
                wall[name].append(w)
                cpu[name].append(c)
    monitor = watched.sched.monitor
    assert len(watched.sched.running) == requests and not monitor.written, "the bench's run must stay healthy"
    out = {"requests": requests, "steps": len(wall["plain"]), "engine": watched}
    for clock, times in (("cpu", cpu), ("wall", wall)):
        med = {k: statistics.median(v) for k, v in times.items()}
        mean = {k: statistics.fmean(v) for k, v in times.items()}
        out[clock] = {
            "median_us": {k: v * 1e6 for k, v in med.items()},
            "ratio_median": med["monitor"] / med["plain"],
            "ratio_mean": mean["monitor"] / mean["plain"],
        }
    return out


def where_time_goes(engine: Engine, steps: int) -> dict[str, float]:
    """Microseconds per engine step in each of the monitor's hooks (each wrapped in a timer)."""
    monitor = engine.sched.monitor
    spent: dict[str, float] = {}
    for name in ("scheduled", "delivering", "delivered"):
        real = getattr(monitor, name)

        def timed(*args, _real=real, _name=name):
            t0 = time.thread_time()
            try:
                return _real(*args)
            finally:
                spent.setdefault(_name, []).append(time.thread_time() - t0)

        setattr(monitor, name, timed)
    for _ in range(steps):
        engine.step()
    for name in ("scheduled", "delivering", "delivered"):
        delattr(monitor, name)
    return {k: statistics.median(v) * 1e6 for k, v in spent.items()}


def memory(requests: int, prompt: int, window: int) -> tuple[int, int, int]:
    """The monitor's bytes when its window is full, and after four times as many events."""
    import os

    from vllm_contract.targets.monitor.core import ENV_WINDOW

    saved = os.environ.get(ENV_WINDOW)
    os.environ[ENV_WINDOW] = str(window)
    try:
        engine = Engine(_scheduler(requests, True, prompt))
    finally:
        if saved is None:
            os.environ.pop(ENV_WINDOW, None)
        else:
            os.environ[ENV_WINDOW] = saved
    while len(engine.sched.monitor.window) < window:
        engine.step()
    full = deep_size(engine.sched.monitor)
    for _ in range(2 * window):  # two events per engine step: four windows' worth
        engine.step()
    later = deep_size(engine.sched.monitor)
    return full, later, len(engine.sched.monitor.window)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm", default=None, help="the vLLM tree (default: $VLLM, else 0.32.0)")
    ap.add_argument("--requests", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--steps", type=int, default=40, help="engine steps per round and scheduler")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens of each request")
    ap.add_argument("--window", type=int, default=1024, help="the window (events) the memory is measured at")
    ap.add_argument("--out", default=None, help="also write the report to this file")
    ap.add_argument(
        "--small",
        action="store_true",
        help="8 requests, 2 rounds of 5 steps, a window of 64 (a check that it runs)",
    )
    ns = ap.parse_args(argv)
    if ns.small:
        ns.requests, ns.rounds, ns.steps, ns.warmup, ns.window = [8], 2, 5, 2, 64

    from vllm_contract.adapter import current as vllm_env

    vllm_env.select(ns.vllm)
    vllm_env.load()
    lines = [
        f"bench monitor: vLLM {vllm_env.tree().title}, CPU; AsyncScheduler vs MonitoredAsyncScheduler, "
        f"{ns.rounds} alternating rounds of {ns.steps} engine steps each, prompts of {ns.prompt} tokens, "
        f"budget 8192, one sampled token per request per step",
        f"load average before: {' '.join(f'{x:.2f}' for x in __import__('os').getloadavg())}",
        "",
        "step time: this thread's CPU time (what the monitor adds, whatever else the host runs) and the",
        "wall clock (which a busy host's other processes enter); the target is on the CPU time's medians",
        "",
        f"{'running':>8} {'clock':>5} {'steps':>6} {'plain med us':>13} {'monitor med us':>15} {'ratio (med)':>12} "
        f"{'ratio (mean)':>13}  target <= {TARGET}",
    ]
    missed = False
    breakdowns = []
    for n in ns.requests:
        result = measure(n, ns.rounds, ns.steps, ns.prompt, ns.warmup)
        for clock in ("cpu", "wall"):
            r = result[clock]
            ok = r["ratio_median"] <= TARGET
            if clock == "cpu":
                missed |= not ok
            med = r["median_us"]
            lines.append(
                f"{n:>8} {clock:>5} {result['steps']:>6} {med['plain']:>13.1f} {med['monitor']:>15.1f} "
                f"{r['ratio_median']:>12.4f} {r['ratio_mean']:>13.4f}  "
                + (("met" if ok else "MISSED") if clock == "cpu" else "")
            )
        breakdowns.append((n, where_time_goes(result["engine"], ns.steps * 4)))
    lines += ["", "where the monitor's time goes (CPU microseconds per engine step, median, each hook timed alone):"]
    for n, spent in breakdowns:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in spent.items())
        lines.append(f"  {n:>4} running: {parts}; total {sum(spent.values()):.1f}")
    lines += ["", f"memory of the monitor's own records (window of {ns.window} events):"]
    for n in ns.requests:
        full, later, kept = memory(n, ns.prompt, ns.window)
        bounded = later <= full * 1.1
        missed |= not bounded
        lines.append(
            f"  {n:>4} running: {full / 1024:,.0f} KiB when the window is full ({kept} events), "
            f"{later / 1024:,.0f} KiB after four times as many events: {'bounded' if bounded else 'GROWING'}"
        )
    lines.append(f"load average after: {' '.join(f'{x:.2f}' for x in __import__('os').getloadavg())}")
    text = "\n".join(lines)
    print(text)
    if ns.out:
        Path(ns.out).write_text(text + "\n")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
