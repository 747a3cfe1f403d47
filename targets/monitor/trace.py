"""A monitor's window as a trace the model replays: the requests involved, each event's picks, vLLM's values.

The model starts from its initial state, every request of the trace added and waiting, so
a window becomes a trace of the *involved* requests, replayed from their add_request:
the violating request, the request whose KV load failed under it, and, when at most four
requests ran in the window since its admission, all of them (the model's concrete
instances have at most four). Every engine step from the first that schedules one of them
is a step of the trace, in the engine's order; a step's budget is what those requests got
when others shared it (the model gives each request what it wants, up to the budget), the
budget vLLM had when none did. A delivery's picks are what the runner returned (the
accepted drafts, tokens beyond them as the over-delivery fault, an empty row the model's
runner samples as the lost-sample fault), the KV-load failure (the
request admitted in the failing step that holds the first invalid block, and that block's
index) and, for a request that stopped, the appended token that stopped it (from its
num_tokens after the stop and the model's before it: the replay runs as the trace is
built).

The states hold what vLLM showed, never the model's: after every step the in-flight steps
(queue_len, q_scheduled, q_spec, q_admitted, and q_sampled once every step in flight has
come back), and the involved requests' counters in the last state vLLM reached. `vllm-contract
explain --trace` compares them with the replay; what the window could not reconstruct is in
`#meta.monitor.notes` (docs/monitor.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_contract.adapter import objects
from vllm_contract.model import itf
from vllm_contract.model.interpreter import Disabled, Interpreter, args_for
from vllm_contract.model.trace import Replayed, judge
from vllm_contract.spec import expectations
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.properties import ASSERTS
from vllm_contract.targets.monitor import writer as monitor_writer
from vllm_contract.targets.monitor.records import Delivered, FrontEnd, Pending, Scheduled

if TYPE_CHECKING:  # the monitor calls this module; the type alone comes back
    from vllm_contract.targets.monitor.core import Monitor

MAX_REQUESTS = 4  # spec/config.py: a concrete instance has 1..4 requests
# the counters of vLLM's Request the states record (the spec's names; the target's list)
REQUEST_FIELDS = tuple(v for v in objects.REQUEST_VARS if v not in ("num_prompt_tokens", "num_spec_tokens"))


@dataclass
class Window:
    rids: list[str]  # model index -> vLLM request id
    record: dict  # the configuration the engine ran, as a spec record
    cfg: Config | None  # None: the record is outside the model (problems say why)
    problems: list[str]
    init: dict
    steps: list[tuple[str, dict]]
    states: list[dict]
    outside: dict[int, int]  # step number -> requests outside the trace that step scheduled
    notes: list[str]
    replay: Replayed


# ------------------------------------------------------------------ which requests


def involved(mon: Monitor, rid: str) -> tuple[list[str], list[str]]:
    """The requests of the trace, in the order vLLM admitted them, and what was left out."""
    notes = []
    records = list(mon.window)
    mine = mon.admitted.get(rid)
    if mine is None or mine.seq <= mon.evicted:
        notes.append(
            f"request {rid} was admitted before the window's first event (the window keeps "
            f"{mon.settings.window} events): the trace cannot start at its add_request; raise "
            "VLLM_CONTRACT_MONITOR_WINDOW"
        )
    wanted = [rid]
    for x in records:
        if isinstance(x, Delivered) and x.kv and x.kv[0] and rid in x.step.counts and x.kv[0] not in wanted:
            wanted.append(x.kv[0])  # the request whose failed load reached it
    start = mine.seq if mine is not None else mon.evicted
    seen: list[str] = []
    for x in records:
        if isinstance(x, Scheduled) and x.seq > start:
            seen += [q for q in x.counts if q not in seen and q != rid]
    replayable = [q for q in seen if q in mon.admitted and mon.admitted[q].seq > mon.evicted]
    lost = [q for q in seen if q not in replayable]
    if len(set(wanted) | set(replayable)) <= MAX_REQUESTS:
        wanted += [q for q in replayable if q not in wanted]
    else:
        others = len(set(replayable) - set(wanted))
        notes.append(
            f"{others} other request(s) ran beside it: the trace keeps the {len(wanted)} involved "
            "(the model's concrete instances have at most 4); a step they shared has the budget they got"
        )
    if lost and len(wanted) < MAX_REQUESTS:
        notes.append(f"{len(lost)} request(s) admitted before the window ran beside it: left out")
    wanted = [q for q in wanted if q in mon.admitted][:MAX_REQUESTS]
    wanted.sort(key=lambda q: mon.admitted[q].seq)
    return wanted, notes


# ------------------------------------------------------------------ the configuration


def engine_config(
    mon: Monitor, rids: list[str], events: set[str], faults: set[str], guarded: bool = False
) -> tuple[dict, list[str]]:
    """The spec record of the configuration the engine ran, for these requests and the
    events seen; what of it lies outside the model."""
    shape = objects.shape(mon.sched)
    notes = []
    admitted = [mon.admitted[q] for q in rids]
    stream = any(a.resumable for a in admitted) or "stream" in events
    if stream:
        events = events | {"stream"}
    if shape["prefix_caching"]:
        if stream:
            notes.append("prefix caching with streaming sessions is outside the model: the trace runs without it")
        else:
            events = events | {"prefix-cache"}
    K = mon.spec_tokens
    pp = shape["pp"]
    near = 2 * (1 + K) * (pp + 1)  # a request this close to a length the engine stops at
    record: dict[str, Any] = {
        "name": f"monitor@{mon.release}",
        "runner": shape["runner"],
        "events": sorted(events),
        "faults": sorted(faults),
        "profile": f"vllm-{mon.release}",
        "clamp": False,
        **({"guard": "step-reservation"} if guarded else {}),
        "requests": len(rids),
        "pp": pp,
        "spec_tokens": K,
        "max_budget": None,
        "prompt_lens": None,
        "long_prefill_threshold": shape["long_prefill_threshold"],
        "block_size": shape["block_size"],
    }
    if not stream:
        longest = max(objects.num_tokens(a.request) for a in admitted)
        if longest + near >= shape["max_model_len"]:
            record["max_model_len"] = shape["max_model_len"]
        limits = {a.max_tokens for a in admitted}
        outputs = max(objects.num_tokens(a.request) - a.prompt_len for a in admitted)
        if len(limits) == 1 and None not in limits and outputs + near >= min(limits):
            record["max_tokens"] = int(next(iter(limits)))
        elif None not in limits and any(
            objects.num_tokens(a.request) - a.prompt_len + near >= a.max_tokens for a in admitted
        ):
            notes.append("the requests' max_tokens differ: the model has one; their length stops are stop picks")
    return record, notes


# ------------------------------------------------------------------ the trace


def _shared_prefix(prompts: list) -> int:
    first = prompts[0]
    n = min(len(p) for p in prompts)
    for i in range(n):
        if any(p[i] != first[i] for p in prompts[1:]):
            return i
    return n


def _recorded_queue(flight: list[Scheduled], rids: list[str], depth: int) -> dict:
    """queue_len and the in-flight step variables as vLLM's records show them."""
    state: dict[str, Any] = {"queue_len": len(flight)}
    for name in ("q_scheduled", "q_spec", "q_admitted"):
        state[name] = [[False if name == "q_admitted" else 0 for _ in rids] for _ in range(depth)]
    known = all(rec.lens is not None for rec in flight)
    if known:
        state["q_sampled"] = [[0 for _ in rids] for _ in range(depth)]
    for i, rec in enumerate(flight[:depth]):
        for r, rid in enumerate(rids):
            if rid not in rec.counts:
                continue
            state["q_scheduled"][i][r] = rec.counts[rid]
            state["q_spec"][i][r] = rec.drafts(rid)
            state["q_admitted"][i][r] = rid in rec.admitted
            if known:
                state["q_sampled"][i][r] = rec.returned(rid) or 0
    return state


def build(
    mon: Monitor, rid: str, pending: Pending | None, when: str, fires: str = "", until: Scheduled | None = None
) -> Window:
    """The window as a trace of the requests involved in rid's violation (module docstring);
    `until`: it ends with that schedule (a runner-side violation the delivery showed)."""
    rids, notes = involved(mon, rid)
    index = {q: r for r, q in enumerate(rids)}
    start = min(mon.admitted[q].seq for q in rids)
    records = [x for x in mon.window if x.seq > start]

    # the events of the trace, in the engine's order, and what they need of the configuration
    chosen: list = []
    included: set[int] = set()
    events: set[str] = set()
    faults: set[str] = set()
    for x in records:
        if isinstance(x, Scheduled):
            if not included and not (x.counts.keys() & index.keys()) and not x.failed:
                continue  # before the first step that schedules one of them
            included.add(id(x))
            chosen.append(x)
            for q in rids:
                returned, ks = x.returned(q), x.drafts(q)
                if returned and returned > 1 + ks:
                    faults.add("over-delivery")
        elif isinstance(x, Delivered):
            if id(x.step) in included:
                chosen.append(x)
                if x.step.short and x.step.short.keys() & index.keys():
                    faults.add("under-drain")
                if any(q in x.step.counts and q not in x.step.chunks and x.step.returned(q) == 0 for q in rids):
                    faults.add("lost-sample")  # a reserved row came back empty: lost, or the runner discarded
                if x.kv is not None and x.kv[0] in index:
                    events.add("kvfail")
                elif x.kv is not None:
                    why = x.kv[1] if x.kv[0] is None else f"loaded by {x.kv[0]}, outside the trace"
                    notes.append(f"a KV-load failure the trace cannot name ({why})")
        elif isinstance(x, FrontEnd):
            if x.event == "reset_prefix_cache":
                chosen.append(x)
                events.add("reset")
            elif x.rid in index:
                chosen.append(x)
                events.add(
                    {"preempt": "preempt-drop" if x.value else "preempt", "abort": "abort", "stream_update": "stream"}[
                        x.event
                    ]
                )
        if x is until:
            break
    # the engine ran the guard's drops before the last step: the trace is of a guarded engine
    last = chosen[-1] if chosen else None
    guarded = any(
        isinstance(x, Delivered) and x.seq in mon.dropped_at and not (x is last and when == "before") for x in chosen
    )
    record, config_notes = engine_config(mon, rids, events, faults, guarded)
    notes += config_notes
    problems = []
    try:
        cfg: Config | None = expectations.from_record(record)
    except SpecError as exc:
        cfg, problems = None, [str(exc)]

    adm = [mon.admitted[q] for q in rids]
    init: dict[str, Any] = {"prompt_len": [a.prompt_len for a in adm]}
    if "stream" in record["events"]:
        init["resumable"] = [a.resumable for a in adm]
    if "prefix-cache" in record["events"] and len(rids) > 1:
        init["shared_prefix"] = _shared_prefix([objects.prompt_tokens(a.request) for a in adm])

    it = Interpreter(cfg) if cfg is not None else None
    state = None  # the model's state as the picks are chosen (a stop pick needs the tokens before it)
    if it is not None:
        try:
            state = it.initial(**init)
        except (Disabled, SpecError):
            state = None
    depth = record["pp"] + 1
    flight: list[Scheduled] = []
    steps: list[tuple[str, dict]] = []
    states: list[dict] = [{"num_prompt_tokens": init["prompt_len"], **_recorded_queue([], rids, depth)}]
    flights: list[list[Scheduled]] = [[]]  # the steps in flight at each state
    lost: set[int] = set()  # schedules (id) whose delivery lost a sample of the model's runner
    outside: dict[int, int] = {}
    for x in chosen:
        if isinstance(x, Scheduled):
            mine = sum(x.counts.get(q, 0) for q in rids)
            others = sum(1 for q in x.counts if q not in index)
            picks: dict[str, Any] = {"budget": x.budget if not others else (mine or x.budget)}
            picks["accepted"] = [min(max((x.returned(q) or 0) - 1, 0), x.drafts(q)) for q in rids]
            picks["extra"] = [max((x.returned(q) or 0) - 1 - x.drafts(q), 0) for q in rids]
            event = "schedule"
            if others:
                outside[len(steps) + 1] = others
            flight.append(x)
        elif isinstance(x, Delivered):
            rec = x.step
            picks = {"stop": [0 for _ in rids]}
            if x.kv is not None and x.kv[0] in index:
                picks["kv_fail_req"], picks["kv_fail_block"] = index[x.kv[0]], x.kv[1]
            picks["short"] = [(rec.short or {}).get(q, 0) for q in rids]
            # an empty row where the model's runner sampled: the output lost it (fault lost-sample);
            # where the model's runner discarded too, nothing is lost
            picks["lost"] = [
                state is not None
                and rec.returned(q) == 0
                and q in rec.counts
                and bool(state.get(("q_sampled", 0, r), 0))
                for r, q in enumerate(rids)
            ]
            if any(picks["lost"]):
                lost.add(id(rec))
            picks["stop"] = _stops(it, cfg, state, x, picks, rids, index)
            event = "deliver"
            if rec in flight:
                flight.remove(rec)
        else:
            event = x.event
            picks = {}
            if x.event in ("preempt", "abort", "stream_update"):
                picks["req"] = index[x.rid]
            if x.event == "preempt":
                picks["drop"] = bool(x.value)
            if x.event == "stream_update":
                picks["new_tokens"] = x.value
        named = _fit(cfg, event, picks) if cfg is not None else picks
        steps.append((event, named))
        # a schedule an assert ended shows nothing of itself
        states.append({} if getattr(x, "failed", False) else _recorded_queue(flight, rids, depth))
        flights.append(list(flight))
        if state is not None:
            try:
                state = it.step(state, event, args_for(it.event(event), cfg, named)).state
            except (Disabled, SpecError):
                state = None

    if lost:
        # what the runner sampled for a row that reached the scheduler empty is unknown to it:
        # q_sampled is not recorded while such a step is in flight
        for recorded, in_flight in zip(states, flights):
            if any(id(rec) in lost for rec in in_flight):
                recorded.pop("q_sampled", None)
        notes.append(
            "a step's output reached the scheduler without a token the model's runner sampled (fault lost-sample): "
            "what the runner sampled there is not recorded"
        )
    if when == "at the assert" and fires and cfg is not None:
        _stop_that_fires(it, init, steps, cfg, rids, chosen[-1], fires)
    # vLLM's own counters of these requests, in the last state it reached (none after an
    # assert: update_from_output stopped half way, in no state the model has; none when
    # the trace ends before now)
    if when != "at the assert" and until is None:
        last = len(states) - 1 if when != "before" else len(states) - 2
        for name in REQUEST_FIELDS:
            states[last][name] = [_field(mon, q, name) for q in rids]
        states[last]["status"] = [mon.status_of(objects.status(_request(mon, q))) for q in rids]
    replay = judge(it, cfg, init, steps, states)
    return Window(rids, record, cfg, problems, init, steps, states, outside, notes, replay)


def _stop_that_fires(it, init, steps, cfg, rids, last, fires: str) -> None:
    """An assert ended update_from_output before the monitor saw who stopped: the stop
    picks of the last delivery under which the model fires the same assert (a stop can
    only be one of the tokens the runner returned), written into the trace when found."""
    from itertools import product

    if not isinstance(last, Delivered) or not steps or steps[-1][0] != "deliver" or "stop" not in steps[-1][1]:
        return
    try:
        before = _replayed_states(it, init, steps[:-1], cfg)[-1]
    except (Disabled, SpecError):
        return
    for stops in product(*[range((last.step.returned(q) or 0) + 1) for q in rids]):
        named = dict(steps[-1][1], stop=list(stops))
        try:
            result = it.step(before, "deliver", args_for(it.event("deliver"), cfg, named))
        except (Disabled, SpecError):
            continue
        if fires in result.fired:
            steps[-1] = ("deliver", named)
            return


def _replayed_states(it: Interpreter, init: dict, steps: list, cfg: Config) -> list:
    state = it.initial(**init)
    out = [state]
    for event, named in steps:
        state = it.step(state, event, args_for(it.event(event), cfg, named)).state
        out.append(state)
    return out


def _stops(it, cfg, state, x: Delivered, picks: dict, rids: list[str], index: dict) -> list[int]:
    """The delivery's stop picks: for each request that stopped in it, the appended token
    that stopped it, chosen so that the model's state after the step shows vLLM's values
    (num_tokens, computed, placeholders, status) for every request that stopped; without
    a replay, or when none matches, the tokens it gained (at most what the runner returned)."""
    from itertools import product

    ended = {index[q]: after for q, after in x.ended.items() if q in index}
    returned = [x.step.returned(q) or 0 for q in rids]
    guess = [0 for _ in rids]
    for r, after in ended.items():
        gained = after[0] - state[("num_tokens", r)] if state is not None else returned[r]
        guess[r] = gained if 1 <= gained <= returned[r] else returned[r]
    if not ended or state is None or cfg is None:
        return guess
    options = [range(1, returned[r] + 1) if r in ended else [0] for r in range(len(rids))]
    for stops in product(*options):
        named = _fit(cfg, "deliver", dict(picks, stop=list(stops)))
        try:
            after = it.step(state, "deliver", args_for(it.event("deliver"), cfg, named)).state
        except (Disabled, SpecError):
            continue
        keys = ("num_tokens", "num_computed_tokens", "num_output_placeholders", "status")
        if all(tuple(after[(k, r)] for k in keys) == seen for r, seen in ended.items()):
            return list(stops)
    return guess


def _fit(cfg: Config, event: str, picks: dict) -> dict:
    """The picks the event takes under the configuration (the others are left out)."""
    from vllm_contract.spec.catalog import BY_NAME

    names = {a.name for a in BY_NAME[event].args(cfg)}
    return {k: v for k, v in picks.items() if k in names}


def _request(mon: Monitor, rid: str):
    request = objects.requests(mon.sched).get(rid)
    return request if request is not None else mon.admitted[rid].request


def _field(mon: Monitor, rid: str, name: str):
    value = objects.REQUEST_VARS[name](_request(mon, rid))
    return bool(value) if isinstance(value, bool) else int(value)


# ------------------------------------------------------------------ writing


def reaction(mon: Monitor, window: Window, when: str, fires: str) -> str:
    if when == "hang":
        return "no assert fires and the engine runs on without ever scheduling it: a hang"
    if fires:
        return f"vLLM's assert `{ASSERTS[fires].statement}` fires " + ("next" if when == "before" else "now")
    if mon.settings.drop and when == "before":
        return "the monitor drops what the step did not reserve, as the step-reservation guard does"
    return "no assert fires: the violation is silent"


def write(
    mon: Monitor,
    prop: str,
    rid: str,
    pending: Pending | None,
    when: str,
    fires: str = "",
    window: Window | None = None,
    hang: dict | None = None,
) -> tuple[Path, str]:
    """Write the window of rid's violation (built here unless given); returns the file and
    the line to log. `hang`: the monitor's record of a hang (when "hang"): the request, why,
    the count that holds it, the bound and how long it went unscheduled."""
    if window is None:
        # the runner's decision is the schedule step's: the trace ends where the model sees it
        until = pending.record.step if pending is not None and prop == "predicates-agree" else None
        window = build(mon, rid, pending, when, fires, until)
    replay = window.replay
    if window.cfg is None:
        model = f"its configuration is outside the model ({window.problems[0]})"
    elif replay.left_at is not None:
        model = f"it leaves the model at step {replay.left_at}"
    elif replay.differs:
        model = f"the model replays it with other values ({replay.differs})"
    elif prop in replay.violated or fires in replay.fired:
        model = "the model reproduces it" + (
            f" (run on, the model leaves r{window.rids.index(rid)} behind too)" if when == "hang" else ""
        )
    else:
        model = f"the model replays it without violating {prop}"
    meta = {
        "source": "vllm-contract monitor (targets/monitor/core.py), from a running vLLM scheduler",
        "description": f"the monitor saw {prop} violated by {rid} on vLLM {mon.release}",
        "kind": "violation",
        "violated": prop,
        "violated_at_step": len(window.steps),
        "monitor": {
            "release": mon.release,
            "engine_event": mon.seq,
            "request": rid,
            "requests": window.rids,
            "when": when,
            "fires": fires,
            "drop": mon.settings.drop,
            "window": mon.settings.window,
            "outside": {str(k): v for k, v in window.outside.items()},
            "notes": window.notes + window.problems,
            "model": model,
            # what code ran: vLLM's version, the hashes of the files the model covers, plugins,
            # scheduler methods from elsewhere (explain --trace says where a tree departs)
            "code": mon.code,
            **({"hang": hang} if hang else {}),
        },
    }
    document = itf.recorded(window.record, window.init, window.steps, window.states, meta)
    path = mon.settings.folder / monitor_writer.trace_name(mon.release, prop, len(mon.written) + 1)
    # the text now (the window goes on changing), the file off the engine's step
    monitor_writer.submit(path, itf.text(document), mon.log)
    tail = (
        f"writing {monitor_writer.shown(path)} ({len(window.steps)} steps, {len(window.rids)} request(s); {model}); "
        f"`vllm-contract explain --trace {monitor_writer.shown(path)}` says which mechanism it is, or where it "
        "leaves the model"
    )
    if when == "hang":  # the monitor's HANG line says the rest
        return path, tail
    line = (
        f"vllm-contract monitor: {prop} violated by request {rid} at engine event {mon.seq} on vLLM "
        f"{mon.release}; {reaction(mon, window, when, fires)}; {tail}"
    )
    return path, line


__all__ = ["Window", "build", "engine_config", "involved", "write"]
