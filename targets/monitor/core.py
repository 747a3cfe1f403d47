"""The online contract monitor: what a running vLLM scheduler did, recorded and checked at every step.

`MonitoredAsyncScheduler` (targets/monitor/scheduler.py) calls a `Monitor` from its hooks;
the Monitor keeps a window of the last N events in the model's vocabulary (schedule with
its budget, scheduled tokens and drafts; deliver with what the runner returned, KV-load
failures and stops; preemption, reset, abort, streaming updates), each request's
admission, and checks the contract on vLLM's own Request objects. On the first violation
(or just before one of vLLM's asserts would fire) it writes the window as an ITF trace
(targets/monitor/trace.py) and logs one line.

A hang is named when it happens: a request that a count holds (stale output with nothing
in flight to drain it, a running request with nothing left to schedule and nothing in
flight, a request in no queue the scheduler serves) and that has gone unscheduled for more
than the model's progress bound (model/hang.py engine_bound: 2 * (pp + 1) + 2 engine
steps) gets one warning that says HANG, the request, the count and the bound, and a trace;
each request once, at most MAX_HANG_WARNINGS lines per process. The screens that find such
a request cost nothing on a step where every running request is scheduled and nothing was
preempted (docs/monitor.md).

The checks cost little because each step first runs a screen that is necessary for a
violation at that step and reads only what the step touched (docs/monitor.md says why
each screen is complete); a request the screen flags is then checked with the spec's own
definitions (spec/properties.py), evaluated on a state built from vLLM's objects. Nothing
here imports vLLM: the scheduler class hands in the status mapping and the logger.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from itertools import compress
from operator import not_
from pathlib import Path
from typing import Any, Callable

from vllm_contract.adapter import objects
from vllm_contract.adapter.objects import computed as _COMPUTED
from vllm_contract.adapter.objects import is_prefill_chunk as _IS_CHUNK
from vllm_contract.adapter.objects import placeholders as _PLACEHOLDERS
from vllm_contract.model import hang
from vllm_contract.spec.config import Config
from vllm_contract.spec.ops import INT_OPS
from vllm_contract.spec.profiles import release_profile
from vllm_contract.spec.properties import ASSERTS, PROPERTIES
from vllm_contract.spec.state import View
from vllm_contract.spec.vocabulary import Status
from vllm_contract.targets.monitor import trace as monitor_trace
from vllm_contract.targets.monitor.records import Admitted, Delivered, FrontEnd, Pending, Scheduled

ENV_FOLDER = "VLLM_CONTRACT_MONITOR_DIR"
ENV_WINDOW = "VLLM_CONTRACT_MONITOR_WINDOW"
ENV_DROP = "VLLM_CONTRACT_MONITOR_DROP"
ENV_TRACES = "VLLM_CONTRACT_MONITOR_TRACES"
ENV_UNSUPPORTED = "VLLM_CONTRACT_MONITOR_UNSUPPORTED"
MAX_WINDOW = 1_000_000  # events kept at most: about 1.7 KiB each (docs/monitor.md), so 1.7 GiB
MAX_TRACES = 1_000  # traces one process writes at most
MAX_HANG_WARNINGS = 8  # hang lines one process logs at most (each request once); later hangs are counted

# the state properties checked on vLLM's objects, by the spec's own definitions; the
# transition ones the scheduler can see are checked here at the delivery of their step
# the counters of a request the state checks read besides its status (spec/vocabulary.py names)
SPEC_COUNTERS = (
    "num_tokens",
    "num_computed_tokens",
    "num_output_placeholders",
    "num_stale_output_tokens",
    "drop_stale_output",
)
STATE_CHECKS = ("counter-nonnegative", "placeholder-accounting", "computed-nonnegative", "stale-drains")
# which property a trace is named after when a step violates several: the one an assert
# reports, then the delivery's own, then the runner's (which the model places at the
# step the runner ran, an earlier one)
ORDER = (
    "counter-nonnegative",
    "no-token-while-prefilling",
    "placeholder-accounting",
    "computed-nonnegative",
    "stale-drains",
    "predicates-agree",
)

_NONE: frozenset = frozenset()


class SettingsError(ValueError):
    """A monitor setting in the environment that cannot be read: one line naming it."""


@dataclass(frozen=True)
class Settings:
    """Where traces go, how many events the window keeps, whether to drop as the
    step-reservation guard does, how many traces one process writes at most."""

    folder: Path = Path("vllm-contract-monitor")
    window: int = 1024
    drop: bool = False
    max_traces: int = 4
    unsupported: str = "refuse"  # on a vLLM it cannot monitor: refuse to start, or "warn" and run unmonitored

    @staticmethod
    def from_env(environ=os.environ) -> "Settings":
        def whole(name: str, default: int, least: int, most: int) -> int:
            """ASCII digits only (a full-width ６４ is refused, not read as 64), within bounds."""
            raw = environ.get(name, "")
            if raw == "":
                return default
            text = raw.strip()
            if not (text.isascii() and text.isdigit() and len(text) <= len(str(most)) and least <= int(text) <= most):
                raise SettingsError(f"{name}={raw!r}: expected a whole number from {least} to {most:,} (digits 0-9)")
            return int(text)

        drop = environ.get(ENV_DROP, "0").strip().lower()
        if drop not in ("", "0", "1", "true", "false", "yes", "no"):
            raise SettingsError(f"{ENV_DROP}={drop!r}: expected 1 (drop as the step-reservation guard does) or 0")
        unsupported = environ.get(ENV_UNSUPPORTED, "").strip().lower() or Settings.unsupported
        if unsupported not in ("refuse", "warn"):
            raise SettingsError(
                f"{ENV_UNSUPPORTED}={unsupported!r}: expected refuse (a vLLM the monitor cannot read stops "
                "the engine from starting) or warn (it runs unmonitored, with a warning)"
            )
        return Settings(
            unsupported=unsupported,
            folder=Path(environ.get(ENV_FOLDER) or Settings.folder),
            window=whole(ENV_WINDOW, Settings.window, 8, MAX_WINDOW),
            drop=drop in ("1", "true", "yes"),
            max_traces=whole(ENV_TRACES, Settings.max_traces, 0, MAX_TRACES),
        )


# ------------------------------------------------------------------ the monitor


class Monitor:
    """Recording and checking for one scheduler (adapter/hooked.py calls its hooks; it reads
    vLLM's objects through adapter/objects.py). `log` takes one line."""

    def __init__(self, scheduler, settings: Settings, release: str, log: Callable[[str], None]):
        self.sched = scheduler
        self.settings = settings
        self.release = release
        self.log = log
        self.seq = 0
        self.window: deque = deque(maxlen=settings.window)
        self.evicted = 0  # seq of the last event the window let go (0: none yet)
        self.in_flight: deque[Scheduled] = deque()
        self.admitted: dict[str, Admitted] = {}
        self.bumped: dict[str, int] = {}  # request id -> seq of its last preemption or resumable stop
        self.stale: set[str] = set()  # requests with stale output: stale-drains is checked each step
        self.sessions: set[str] = set()  # resumable requests
        self.watch: set[str] = set()  # requests found in violation: checked exactly at every delivery
        self.found: dict[str, int] = {}  # property -> violations seen
        self.written: list[Path] = []
        self.dropped = 0
        self.dropped_at: set[int] = set()  # deliveries (seq) in which the drop mode cut a row
        self._resetting: list[str] | None = None
        self.spec_tokens = objects.shape(scheduler)["spec_tokens"]
        self.rolls_back = release_profile(release).stop_rolls_back
        self.depth = objects.pipeline_depth(scheduler)
        self.runner = objects.shape(scheduler)["runner"]
        self.row_index = objects.row_indexer()
        # hangs: engine steps seen (schedules and deliveries), the model's progress bound for
        # this engine's depth, requests a count holds (id -> the step since which), those named
        self.steps = 0
        self.bound = hang.engine_bound(Config("monitor", runner=self.runner, requests=1, pp=self.depth - 1))
        self.suspects: dict[str, int] = {}
        self.hung: dict[str, dict] = {}
        self.hang_lines = 0
        self.code = objects.code_record(scheduler)  # what code runs (explain --trace reads it)

    @staticmethod
    def status_of(status) -> int:
        """vLLM's RequestStatus -> spec.vocabulary.Status (one the contract leaves out: waiting)."""
        return objects.status_code(status, Status.WAITING)

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def _keep(self, record) -> None:
        """Append to the window, remembering the last event it lets go."""
        window = self.window
        if len(window) == window.maxlen:
            self.evicted = window[0].seq
        window.append(record)

    # ---------------------------------------------------------------- front end
    def added(self, request) -> None:
        """Before add_request: a new request's admission, or a session's next input."""
        rid = objects.req_id(request)
        if rid in objects.requests(self.sched):
            self._keep(FrontEnd(self._next(), "stream_update", rid, objects.prompt_length(request)))
            return
        adm = Admitted(rid, self._next(), request)
        self.admitted[rid] = adm
        if adm.resumable:
            self.sessions.add(rid)
        if len(self.admitted) > 4 * self.settings.window:
            self._forget()

    def _forget(self) -> None:
        """Drop admissions the window no longer reaches, of requests vLLM no longer holds."""
        held = objects.requests(self.sched)
        for rid in [r for r, a in self.admitted.items() if a.seq <= self.evicted and r not in held]:
            del self.admitted[rid]
            self.sessions.discard(rid)

    def preempted(self, request, drop: bool) -> None:
        """After _preempt_request: its steps in flight are of an earlier epoch now."""
        rid = objects.req_id(request)
        self.bumped[rid] = self.seq + 1
        if objects.stale(request) > 0:
            self.stale.add(rid)
        if not objects.in_a_queue(self.sched, request):  # nothing would ever visit it again
            self._suspect(rid)
        if self._resetting is not None:
            self._resetting.append(rid)
        else:
            self._keep(FrontEnd(self._next(), "preempt", rid, bool(drop)))

    def resetting(self) -> None:
        self._resetting = []

    def reset_done(self) -> None:
        preempted, self._resetting = self._resetting or [], None
        self._keep(FrontEnd(self._next(), "reset_prefix_cache", None, preempted))

    def aborted(self, rids) -> None:
        seq = self._next()
        for rid in rids:
            self._keep(FrontEnd(seq, "abort", rid))

    # ---------------------------------------------------------------- schedule
    def scheduled(self, so) -> None:
        """After _update_after_schedule: the step as the model's schedule event sees it."""
        counts = dict(objects.scheduled(so))
        drafts = objects.scheduled_drafts(so)
        spec = dict(drafts) if drafts else None
        # every request of the step is in Scheduler.running now (admissions appended); a
        # running request it left out keeps an older flag, and is not in counts
        running = objects.running(self.sched)
        chunks = set(map(objects.req_id, compress(running, map(_IS_CHUNK, running))))
        if chunks:
            chunks.intersection_update(counts)
        admitted = objects.admitted(so)
        self.steps += 1
        rec = Scheduled(self._next(), id(so), objects.budget(self.sched), counts, spec, chunks, admitted, self.steps)
        self._keep(rec)
        self.in_flight.append(rec)
        if len(counts) < len(running):  # a running request left out: is a count holding it?
            self._left_out(running, counts)
        if self.suspects:
            self._check_hangs(counts)

    # ---------------------------------------------------------------- deliver
    def _take(self, so) -> Scheduled | None:
        key = id(so)
        flight = self.in_flight
        if flight and flight[0].so_id == key:  # the engine delivers the oldest step
            return flight.popleft()
        for i, rec in enumerate(flight):
            if rec.so_id == key:
                del self.in_flight[i]
                return rec
        return None

    def delivering(self, so, mro) -> tuple[Pending | None, dict[int, tuple[str, int]]]:
        """Before update_from_output: record what the runner returned and run the screens.
        Returns what delivered() needs, with the requests the screens flagged, and, in drop
        mode, the rows to cut (row index -> (request id, tokens kept)): a live row beyond its
        step's reservation, which the model, replaying the window, is asked about first."""
        pending = self._delivering(so, mro)
        overflow = self.live_overflow(pending, mro) if pending and pending.suspects else {}
        if overflow:
            self.before_delivery(pending, overflow)
        if overflow and self.settings.drop:
            self.dropped_at.add(pending.record.seq)
            return pending, overflow
        return pending, {}

    def dropped_tokens(self, req_id: str, row: list, reserved: int) -> None:
        """The drop mode cut a row to its reservation: counted, as the guard counts."""
        self.dropped += len(row) - reserved
        self.sched.guard_dropped[req_id] += len(row) - reserved

    def _delivering(self, so, mro) -> Pending | None:
        self.steps += 1
        rec = self._take(so)
        if rec is None:
            return None
        now = objects.scheduled(so)
        if now != rec.counts:
            rec.short = {rid: n - now.get(rid, 0) for rid, n in rec.counts.items() if now.get(rid, 0) != n}
        ids = objects.output_req_ids(mro)
        rows = objects.output_rows(mro)
        lens = list(map(len, rows)) if rows else [0] * len(ids)
        rec.ids, rec.lens = ids, lens
        record = Delivered(self._next(), rec)
        self._keep(record)
        suspects: set[str] = set()
        index = self.row_index(mro)
        for rid in rec.chunks:  # a prefill chunk's step returned tokens
            i = index.get(rid)
            if i is not None and lens[i]:
                suspects.add(rid)
        if 0 in lens:  # a step that reserved returned nothing
            for i in compress(range(len(lens)), map(not_, lens)):
                rid = ids[i]
                if rid in rec.counts and rid not in rec.chunks:
                    suspects.add(rid)
        if lens and max(lens) > 1:  # more than the sampled token and the step's drafts
            if rec.spec:
                suspects.update(rid for rid, n in zip(ids, lens) if n > 1 + rec.drafts(rid))
            else:
                suspects.update(rid for rid, n in zip(ids, lens) if n > 1)
        invalid, failed_receive = objects.failed_blocks(mro)
        if invalid or failed_receive:
            record.kv = self._kv_failure(rec, invalid)
            suspects.update(rec.counts)
        counts = rec.counts
        watched = set()
        if self.watch or self.stale or self.sessions:
            watched = {rid for rid in (self.watch | self.stale | self.sessions) if rid in counts}
        before = {}
        held = objects.requests(self.sched)
        for rid in suspects | watched:
            request = held.get(rid)
            if request is not None:
                before[rid] = (
                    objects.num_tokens(request),
                    objects.stale(request),
                    objects.placeholders(request),
                    objects.status(request),
                )
        finished = objects.finished_ids(self.sched)
        return Pending(record, suspects, before, set(finished) if finished else _NONE)

    def _kv_failure(self, rec: Scheduled, invalid: set) -> tuple:
        """The request whose load failed (admitted in that step, holding the first invalid
        block) and the block's index among its blocks: the model's kv_fail_req / block."""
        if not invalid:
            return (None, "a failed receive (failed_recving), which the model leaves out")
        held = objects.requests(self.sched)
        found = []
        for rid in rec.counts:
            if rid not in rec.admitted or rid not in held:
                continue
            blocks = objects.block_ids(self.sched, rid)
            for i, block in enumerate(blocks):
                if block in invalid:
                    found.append((rid, i))
                    break
        if not found:
            return (None, f"invalid block(s) {sorted(invalid)} of no request admitted in that step")
        return found[0]

    def live_overflow(self, pending: Pending, mro) -> dict[int, tuple[str, int]]:
        """Rows of live requests that carry more tokens than their step reserved (row
        index -> (request id, reserved)): what the step-reservation guard cuts."""
        rec = pending.record.step
        out = {}
        for rid in pending.suspects:
            seen = pending.before.get(rid)
            if seen is None or seen[1] != 0 or rid not in rec.counts:
                continue
            i = self.row_index(mro).get(rid)
            if i is not None and rec.lens[i] > rec.reserved(rid):
                out[i] = (rid, rec.reserved(rid))
        return out

    def delivered(self, pending: Pending, mro) -> None:
        """After update_from_output: who stopped, then the checks on vLLM's state."""
        record, rec = pending.record, pending.record.step
        finished = objects.finished_ids(self.sched)
        held = objects.requests(self.sched)
        for rid in (finished - pending.finished_before) if finished else ():
            adm = self.admitted.get(rid)
            if adm is not None:
                record.ended[rid] = self._after(adm.request)
        for rid in self.sessions & pending.before.keys():  # a session stops into a waiting state
            request = held.get(rid)
            if request is None or self.status_of(pending.before[rid][3]) != Status.RUNNING:
                continue
            if self.status_of(objects.status(request)) in (Status.WAITING, Status.WAITING_FOR_STREAMING_REQ):
                record.ended[rid] = self._after(request)
                if self.rolls_back:  # the safe-frontier rollback starts an epoch (spec/deliver.py)
                    self.bumped[rid] = record.seq
        check = set(pending.suspects) | {rid for rid in self.watch if rid in rec.counts}
        check.update(rid for rid in record.ended if rid in self.sessions)  # a stop that trims keeps placeholders
        if self.spec_tokens or record.kv is not None:  # a rejection or a cut can lower c and P
            present = [r for r in map(held.get, rec.ids) if r is not None]
            if present and (min(map(_PLACEHOLDERS, present)) < 0 or min(map(_COMPUTED, present)) < 0):
                check.update(objects.req_id(r) for r in present if _PLACEHOLDERS(r) < 0 or _COMPUTED(r) < 0)
        for rid in list(self.stale):
            request = held.get(rid)
            if request is None or objects.stale(request) <= 0:
                self.stale.discard(rid)
            else:
                check.add(rid)
        for rid in sorted(check):
            broken = self.violations(rid, pending)
            held_back = [p for p in broken if PROPERTIES[p].hangs]
            if held_back:  # a hang is named once the bound has passed unscheduled (_check_hangs)
                self._suspect(rid)
                broken = [p for p in broken if p not in held_back]
            if broken:
                self.watch.add(rid)
                self.violated(broken, rid, pending, "after")
        if self.suspects and not self.in_flight and not objects.has_requests(self.sched):
            self._asleep()

    def _after(self, request) -> tuple:
        return (
            objects.num_tokens(request),
            _COMPUTED(request),
            _PLACEHOLDERS(request),
            self.status_of(objects.status(request)),
        )

    # ---------------------------------------------------------------- hangs
    def _left_out(self, running: list, counts: dict) -> None:
        """Running requests this step left out with nothing in flight and nothing to schedule
        (or placeholders left over): a count may hold them."""
        for request in running:
            rid = objects.req_id(request)
            if rid in counts or rid in self.suspects or rid in self.hung:
                continue  # scheduled now, or watched already
            if self._draining(rid) == 0 and (objects.owed(request) <= 0 or _PLACEHOLDERS(request) > 0):
                self._suspect(rid)

    def _suspect(self, rid: str) -> None:
        """A count may hold rid: watched from the engine step it was last scheduled at (the
        window's last schedule of it; this step when the window holds none)."""
        if rid in self.suspects or rid in self.hung:
            return
        since = self.steps
        for x in reversed(self.window):
            if isinstance(x, Scheduled) and rid in x.counts:
                since = x.step
                break
        self.suspects[rid] = since

    def _draining(self, rid: str) -> int:
        """Tokens of the request's steps in flight, as the monitor recorded them."""
        return sum(rec.counts.get(rid, 0) for rec in self.in_flight)

    def holds(self, request) -> tuple[str, str] | None:
        """What keeps a request from ever being scheduled, on vLLM's own counts: (why code of
        model/hang.py, the count in words), or None when nothing does."""
        status = self.status_of(objects.status(request))
        if status not in (Status.WAITING, Status.RUNNING, Status.PREEMPTED):
            return None
        rid = objects.req_id(request)
        draining = self._draining(rid)
        stale = objects.stale(request)
        if stale > draining and not objects.request_counters(request)["drop_stale_output"]:
            return "stale", (
                f"num_stale_output_tokens {stale} > {draining} token(s) its steps in flight drain, so schedule() "
                "skips it and no delivery is left to clear it"
            )
        if status == Status.RUNNING and draining == 0:
            owed = objects.owed(request)
            placeholders = _PLACEHOLDERS(request)
            if placeholders > 0:
                return "leaked", (
                    f"running with num_output_placeholders {placeholders} and nothing in flight to resolve them "
                    f"(num_computed_tokens {_COMPUTED(request)}, num_tokens {objects.num_tokens(request)}): the "
                    "scheduler counts a step that will never come back, and the max_tokens skip passes it over"
                )
            if owed <= 0:
                return "idle", (
                    f"running with num_tokens {objects.num_tokens(request)} + drafts + num_output_placeholders "
                    f"{placeholders} - num_computed_tokens {_COMPUTED(request)} = {owed} to schedule and nothing "
                    "in flight: the running loop skips it"
                )
        if not objects.in_a_queue(self.sched, request):
            return "unqueued", f"status {Status.NAMES[status]}, in neither Scheduler.running nor a waiting queue"
        return None

    def _check_hangs(self, counts: dict) -> None:
        """Suspects scheduled again are cleared; one unscheduled past the bound that a count
        still holds is a hang."""
        held = objects.requests(self.sched)
        for rid, since in list(self.suspects.items()):
            request = held.get(rid)
            if rid in counts or request is None:
                del self.suspects[rid]
                continue
            if self.steps - since <= self.bound:
                continue
            found = self.holds(request)
            if found is None:
                del self.suspects[rid]
                continue
            self._hang(rid, request, since, *found)

    def _asleep(self) -> None:
        """has_requests() is false and nothing is in flight: EngineCore stops stepping and
        waits for input, and every suspect still held is left waiting (a lost wake-up)."""
        held = objects.requests(self.sched)
        for rid, since in list(self.suspects.items()):
            request = held.get(rid)
            if request is None or self.status_of(objects.status(request)) not in (
                Status.WAITING,
                Status.RUNNING,
                Status.PREEMPTED,
            ):
                del self.suspects[rid]
                continue
            _, words = self.holds(request) or ("", "")
            self._hang(
                rid,
                request,
                since,
                "asleep",
                "has_requests() is false while it waits, so EngineCore stops stepping and waits for new input"
                + (f" ({words})" if words else ""),
            )

    def _hang(self, rid: str, request, since: int, why: str, words: str) -> Path | None:
        """A hang seen: counted; for the first MAX_HANG_WARNINGS, one warning line (HANG, the
        request, the count, the bound) and, within the trace limit, the window as a trace."""
        self.suspects.pop(rid, None)
        unscheduled = self.steps - since
        record = {"request": rid, "why": why, "holds": words, "bound": self.bound, "unscheduled_steps": unscheduled}
        self.hung[rid] = record
        self.found["bounded-progress"] = self.found.get("bounded-progress", 0) + 1
        if self.hang_lines >= MAX_HANG_WARNINGS:
            return None
        self.hang_lines += 1
        when = (
            f"past the bound of {self.bound} (2 * (pp + 1) + 2 on this engine)"
            if unscheduled > self.bound
            else f"and the engine stops stepping before the bound of {self.bound} (2 * (pp + 1) + 2 on this engine)"
        )
        lead = (
            f"vllm-contract monitor: HANG: request {rid} on vLLM {self.release} has not been scheduled for "
            f"{unscheduled} engine steps, {when}, and nothing will schedule it: {words}"
        )
        if len(self.written) >= self.settings.max_traces:
            self.log(f"{lead}; no trace (VLLM_CONTRACT_MONITOR_TRACES={self.settings.max_traces} written)")
            return None
        try:
            path, words_line = monitor_trace.write(self, "bounded-progress", rid, None, "hang", hang=record)
        except Exception as exc:  # the engine goes on: say why there is no file
            self.log(f"{lead}; the trace could not be written ({exc})")
            return None
        self.written.append(path)
        self.log(f"{lead}; {words_line}")
        return path

    # ---------------------------------------------------------------- checks
    def violations(self, rid: str, pending: Pending | None) -> list[str]:
        """The properties request rid violates now: the spec's state properties on a state
        built from vLLM's Request and the steps in flight, and, for the step just
        delivered, no-token-while-prefilling and predicates-agree."""
        request = objects.requests(self.sched).get(rid)
        if request is None:
            adm = self.admitted.get(rid)
            request = adm.request if adm is not None else None
        if request is None:
            return []
        cfg, view = self.state_of(request)
        broken = [name for name in STATE_CHECKS if not PROPERTIES[name].holds(view, cfg, INT_OPS)]
        if pending is not None and rid in pending.record.step.counts:
            rec = pending.record.step
            returned = rec.returned(rid) or 0
            seen = pending.before.get(rid)
            live = seen is not None and seen[1] == 0 and not pending.record.kv_touches(rid)
            if rid in rec.chunks and returned and live and objects.num_tokens(request) > seen[0]:
                broken.append("no-token-while-prefilling")
            if bool(returned) == (rid in rec.chunks):
                broken.append("predicates-agree")
        return [name for name in ORDER if name in broken]

    def state_of(self, request) -> tuple[Config, View]:
        """Request r's state as the spec names it (one request, the steps in flight, its
        epoch): the View the spec's state properties read."""
        rid = objects.req_id(request)
        depth = self.depth
        cfg = Config("monitor", runner=self.runner, requests=1, pp=depth - 1)
        counters = objects.request_counters(request)
        values: dict[tuple, Any] = {
            ("status", 0): self.status_of(objects.status(request)),
            **{(name, 0): counters[name] for name in SPEC_COUNTERS},
            ("epoch", 0): 1,
        }
        flight = list(self.in_flight)
        values[("queue_len",)] = min(len(flight), depth)
        epoch_start = self.bumped.get(rid, 0)
        for i in range(depth):
            rec = flight[i] if i < len(flight) else None
            scheduled = rec.counts.get(rid, 0) if rec is not None else 0
            values[("q_scheduled", i, 0)] = scheduled
            values[("q_reserved", i, 0)] = rec.reserved(rid) if scheduled else 0
            values[("q_epoch", i, 0)] = 1 if scheduled and rec.seq > epoch_start else 0
        return cfg, View(cfg, values)

    # ---------------------------------------------------------------- violations
    def before_delivery(self, pending: Pending, overflow: dict) -> None:
        """Live rows beyond their step's reservation, before update_from_output: the model,
        replaying the window through this delivery, says whether one of vLLM's asserts
        fires now (the trace is written first) and, in drop mode, what the delivery would
        have violated had the monitor not dropped."""
        rid = overflow[min(overflow)][0]
        try:
            window = monitor_trace.build(self, rid, pending, "before")
        except Exception as exc:  # a window the builder cannot read: the assert, if any, is caught after
            self.log(f"vllm-contract monitor: the window of {rid} could not be replayed ({exc})")
            return
        fires = window.replay.fired[0] if window.replay.fired else ""
        broken = [ASSERTS[fires].property] if fires else []
        if self.settings.drop:
            broken += [p for p in ORDER if p in window.replay.violated and p not in broken]
        if broken:
            self.watch.add(rid)
            self.violated(broken, rid, pending, "before", fires, window)

    def assert_fired(self, exc: BaseException, pending: Pending | None) -> None:
        """One of vLLM's asserts fired in update_from_output: unless the trace was written
        just before, write it now (the exception then goes on as vLLM raised it)."""
        if pending is None or pending.written:
            return
        name = objects.assert_name(objects.assert_site(exc))
        prop = ASSERTS[name].property if name else "counter-nonnegative"
        rec = pending.record.step
        held = objects.requests(self.sched)
        negative = [q for q in rec.counts if q in held and _PLACEHOLDERS(held[q]) < 0]
        rid = (negative or sorted(pending.suspects) or list(rec.counts))[0]
        self.violated([prop], rid, pending, "at the assert", name or "")

    def schedule_failed(self, exc: BaseException) -> None:
        """One of vLLM's asserts fired inside schedule(): the step is recorded as far as it
        is known (its budget), the trace written, and the exception goes on."""
        rec = Scheduled(self._next(), 0, objects.budget(self.sched), {}, None, set(), set())
        rec.failed = True
        self._keep(rec)
        self.assert_outside_delivery(exc)

    def assert_outside_delivery(self, exc: BaseException) -> None:
        """An assert of schedule() or add_request: the request it was handling (read from
        vLLM's frame), the trace of the window ending with that event."""
        name = objects.assert_name(objects.assert_site(exc))
        prop = ASSERTS[name].property if name else "scheduled-tokens-positive"
        rid = objects.request_in(exc) or next(iter(objects.requests(self.sched)), None)
        if rid is not None and rid in self.admitted:
            self.violated([prop], rid, None, "at the assert", name or "")

    def violated(
        self, broken: list[str], rid: str, pending: Pending | None, when: str, fires: str = "", window=None
    ) -> Path | None:
        """A violation seen: count it; write the window as a trace (the first of each
        property, up to the setting's number) and log one line."""
        prop = broken[0]
        self.found[prop] = self.found.get(prop, 0) + 1
        if self.found[prop] > 1 or len(self.written) >= self.settings.max_traces:
            if fires and pending is not None:
                self.log(
                    f"vllm-contract monitor: vLLM's assert {fires} fires at {rid} ({prop}); traces: {self.written}"
                )
            return None
        try:
            path, words = monitor_trace.write(self, prop, rid, pending, when, fires, window)
        except Exception as exc:  # the engine goes on (or dies of its own assert): say why there is no file
            self.log(f"vllm-contract monitor: {prop} violated by {rid}; the trace could not be written ({exc})")
            return None
        self.written.append(path)
        if pending is not None:
            pending.written = True
        self.log(words)
        return path
