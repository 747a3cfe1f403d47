"""The scheduler's events: schedule, deliver, preempt, reset, stream update, abort.

Each function mirrors the vLLM 0.32.0 code it cites (paths in spec/vocabulary.py).
The engine loop is EngineCore.step_with_batch_queue ([cite:step-with-batch-queue]): while requests
exist and the queue has room it schedules; it delivers the oldest step only when the
queue is full or nothing is left to schedule. Front-end calls (reset, a streaming
update) and preemption land between engine steps, when the queue has room; aborts are
also applied just before a delivery ([cite:aborts-before-delivery]).
"""

from __future__ import annotations

from spec.clamp import clamp_delivery
from spec.config import Config
from spec.events import Arg, Effect
from spec.ops import Ops
from spec.runners import Shipped, v1_decide, v2_decide
from spec.state import Next, View
from spec.vocabulary import Status

SAMPLED_PER_STEP = 1  # num_sampled_tokens_per_step for generative models ([cite:sampled-per-step])


def has_requests(s: View, cfg: Config, ops: Ops, rest_busy=False, only=None):
    """Scheduler.has_requests(): unfinished requests (running + waiting, minus sessions
    waiting for input, [cite:num-unfinished-requests]) or finished ids not yet shipped to the runner
    ([cite:has-finished-requests]). With an abstract rest, the others' share is a pick;
    `only` restricts the count to some requests (the others of one, for a witness)."""
    reqs = range(cfg.requests) if only is None else only
    unfinished = [
        ops.any(st == Status.WAITING, st == Status.RUNNING, st == Status.PREEMPTED)
        for st in (s.status[r] for r in reqs)
    ]
    return ops.any(rest_busy, *unfinished, *[s.finished_unshipped[r] for r in reqs])


def rest_args(cfg: Config, *names: str) -> list[Arg]:
    """The picks through which an abstract rest acts on the focal request (cfg.rest)."""
    if not cfg.rest:
        return []
    known = {
        "rest_busy": Arg("rest_busy", bool, "rest: the other requests keep has_requests() true"),
        "rest_before": Arg(
            "rest_before", int, "rest: tokens the others are scheduled before this request's turn", lo=0
        ),
        "rest_unfinished": Arg(
            "rest_unfinished", int, "rest: other unfinished requests (long-prefill threshold)", lo=0
        ),
        "rest_prefill": Arg("rest_prefill", bool, "rest: a running request scheduled this step is a prefill chunk"),
        "rest_running": Arg("rest_running", bool, "rest: a running request was scheduled this step"),
        "rest_stopped": Arg("rest_stopped", bool, "rest: an earlier padded admission stopped the waiting loop"),
        # any values at all: what the slot's previous occupant left (a superset of what it can leave)
        "rest_left_prefill_len": Arg(
            "rest_left_prefill_len", int, "rest: prefill_len a previous occupant left in the slot"
        ),
        "rest_left_num_computed": Arg("rest_left_num_computed", int, "rest: num_computed a previous occupant left"),
        "rest_left_total_len": Arg("rest_left_total_len", int, "rest: total_len a previous occupant left"),
    }
    return [known[n] for n in names]


def _other(cfg: Config) -> int:
    """The highest request index an event may name: with an abstract rest, index 1 is
    'another request' (the focal one is left alone)."""
    return cfg.requests if cfg.rest else cfg.requests - 1


def _front_end_slot(s: View, cfg: Config):
    """Between two engine steps the queue is never full ([cite:batch-queue-not-full])."""
    return s.queue_len < cfg.queue_depth


# ----------------------------------------------------------------------------- init


def init_args(cfg: Config) -> tuple[Arg, ...]:
    args = [Arg("prompt_len", int, "prompt tokens of each request", over=("req",), lo=1)]
    if cfg.has("stream"):
        args.append(Arg("resumable", bool, "the request is a streaming-input session", over=("req",)))
    if cfg.k_symbolic:
        args.append(
            Arg("spec_tokens", int, "K, num_speculative_tokens, for the whole trace", lo=0, hi=cfg.spec_tokens_max)
        )
    return tuple(args)


def spec_k(s: View, cfg: Config):
    """K: the configuration's draft count, or the trace's when the configuration leaves
    it open (a constant state variable, so a proof covers every K)."""
    return s.spec_tokens if cfg.k_symbolic else cfg.spec_tokens


def init(a: View, nxt: Next, cfg: Config, ops: Ops) -> Effect:
    """All requests added, in id order, before the first step ([cite:add-request-streaming-update add-request-new])."""
    guard = []
    for r in range(cfg.requests):
        if cfg.prompt_lens is not None:
            guard.append(a.prompt_len[r] == cfg.prompt_lens[r])
        nxt.status[r] = Status.WAITING
        nxt.num_prompt_tokens[r] = a.prompt_len[r]
        nxt.num_tokens[r] = a.prompt_len[r]
        for name in (
            "num_computed_tokens",
            "num_output_placeholders",
            "num_in_flight_tokens",
            "num_stale_output_tokens",
            "num_spec_tokens",
            "running_rank",
            "epoch",
        ):
            getattr(nxt, name)[r] = 0
        nxt.drop_stale_output[r] = False
        nxt.is_prefill_chunk[r] = False
        nxt.completed[r] = False
        nxt.chunked[r] = False
        nxt.finished_unshipped[r] = False
        nxt.waiting_rank[r] = r
        if cfg.has("stream"):
            nxt.resumable[r] = a.resumable[r]
            nxt.pending_update[r] = False
            nxt.pending_update_len[r] = 0
        if cfg.is_v2 and cfg.pp > 1:
            nxt.next_decode_eligible_step[r] = 0
        if cfg.prof.reset == "discard-flag":
            nxt.discard_latest_async_tokens[r] = False
        if cfg.prof.reset == "discard-counter":
            nxt.async_tokens_to_discard[r] = 0
        if cfg.clamp:
            nxt.clamp_dropped[r] = 0
        if cfg.guard != "none":
            nxt.guard_dropped[r] = 0
        if cfg.drops:
            nxt.unreserved[r] = 0
        if cfg.runner == "v1":
            nxt.v1_num_tokens[r] = 0
            nxt.v1_in_batch[r] = False
            nxt.v1_prev_draft_len[r] = 0
            nxt.v1_prev_sampled[r] = False
            nxt.v1_entered_at[r] = 0
        if cfg.is_v2:
            nxt.v2_present[r] = False
            nxt.v2_slot[r] = 0
        for i in range(cfg.queue_depth):
            for name in ("q_scheduled", "q_spec", "q_reserved", "q_sampled", "q_order", "q_epoch"):
                getattr(nxt, name)[i, r] = 0
            nxt.q_admitted[i, r] = False
    if cfg.is_v2:
        for r in range(cfg.requests):
            nxt.v2_prefill_len[r] = 0
            nxt.v2_num_computed[r] = 0
            nxt.v2_total_len[r] = 0
        for slot in range(cfg.slots):
            nxt.v2_left_prefill_len[slot] = 0  # buffers start zeroed ([cite:v2-state-buffers])
            nxt.v2_left_num_computed[slot] = 0
            nxt.v2_left_total_len[slot] = 0
            nxt.v2_free[slot] = slot  # free_indices = list(range(max_num_reqs)) ([cite:v2-free-indices-init])
        nxt.v2_num_free = cfg.slots
    if cfg.is_v2 and cfg.pp > 1:
        nxt.current_step = 0
    if cfg.k_symbolic:
        nxt.spec_tokens = a.spec_tokens
    nxt.next_running_rank = 0
    nxt.waiting_front = 0
    nxt.waiting_back = cfg.requests
    nxt.queue_len = 0
    return Effect(guard=ops.all(*guard))


# ------------------------------------------------------------------------- schedule


def schedule_args(cfg: Config) -> tuple[Arg, ...]:
    args = [Arg("budget", int, "token budget of the step (max_num_scheduled_tokens)", lo=1, hi=cfg.max_budget)]
    if cfg.drafts:
        args.append(Arg("accepted", int, "drafts the runner accepts", over=("req",), lo=0, hi=cfg.spec_tokens))
    if "stale-slot-read" in cfg.faults:
        args.append(Arg("stale_read", bool, "fault: the add_request writes to the slot are lost", over=("req",)))
    if "over-delivery" in cfg.faults:
        args.append(Arg("extra", int, "fault: tokens committed beyond 1 + accepted", over=("req",), lo=0))
    args += rest_args(
        cfg, "rest_busy", "rest_before", "rest_unfinished", "rest_prefill", "rest_running", "rest_stopped"
    )
    if "stale-slot-read" in cfg.faults:
        args += rest_args(cfg, "rest_left_prefill_len", "rest_left_num_computed", "rest_left_total_len")
    return tuple(args)


def schedule(s: View, a: View, nxt: Next, cfg: Config, ops: Ops) -> Effect:
    """Scheduler.schedule() ([cite:schedule-begins schedule-ends-with-update]) with
    AsyncScheduler._update_after_schedule
    ([cite:async-update-after-schedule reserve-placeholders spec-token-placeholders next-decode-eligible]), then
    the runner's execute_model for that output."""
    reqs = range(cfg.requests)
    K = spec_k(s, cfg)
    status = [s.status[r] for r in reqs]
    guard = [s.queue_len < cfg.queue_depth, has_requests(s, cfg, ops, a.rest_busy if cfg.rest else False)]
    checks: list = []
    asserts: list = []
    observed: dict = {}

    stagger = cfg.is_v2 and cfg.pp > 1
    if stagger:
        nxt.current_step = s.current_step + 1  # [cite:schedule-begins]

    # long_prefill_token_threshold applies only with more than one request in the
    # running or waiting queues ([cite:long-prefill-threshold-eligible], [cite:request-counts])
    eligible = ops.count(st != Status.FINISHED for st in status) + (a.rest_unfinished if cfg.rest else 0)
    thr = cfg.long_prefill_threshold

    def cap_long_prefill(x):
        if thr == 0:
            return x
        return ops.ite(
            ops.all(eligible > 1, thr < x), thr, x
        )  # [cite:running-num-new-tokens], [cite:admission-padding]

    remaining = a.budget
    prefill_scheduled = False
    running_scheduled = False
    if cfg.rest:  # the others' share of the step, before the focal request's turn
        guard.append(a.rest_before <= a.budget)
        remaining = a.budget - a.rest_before
        prefill_scheduled, running_scheduled = a.rest_prefill, a.rest_running
    take = [False] * len(reqs)
    n = [0] * len(reqs)
    ks = [0] * len(reqs)
    order = [0] * len(reqs)
    scheduled_count = 0
    # what the others had done when each request's turn came: the abstraction's picks
    # that reproduce this step for that request (tests/test_abstraction.py)
    remaining_at = [a.budget] * len(reqs)
    stopped_at = [False] * len(reqs)

    # ---- RUNNING requests, in Scheduler.running order ([cite:running-loop])
    running = [st == Status.RUNNING for st in status]
    run_pos = [
        ops.count(ops.all(running[q], s.running_rank[q] < s.running_rank[r]) for q in reqs if q != r) for r in reqs
    ]
    for p in range(cfg.requests):
        for r in reqs:
            remaining_at[r] = ops.ite(ops.all(running[r], run_pos[r] == p), remaining, remaining_at[r])
            here = ops.all(running[r], run_pos[r] == p, remaining > 0)
            if stagger:
                here = ops.all(
                    here, ops.not_(nxt.current_step < s.next_decode_eligible_step[r])
                )  # [cite:decode-eligible-skip]
            T, c, P, k0 = s.num_tokens[r], s.num_computed_tokens[r], s.num_output_placeholders[r], s.num_spec_tokens[r]
            want = cap_long_prefill(T + k0 + P - c)  # [cite:running-num-new-tokens]
            count = ops.min(want, remaining)  # [cite:running-budget-cap]
            chosen = ops.all(here, count != 0)  # zero -> continue ([cite:running-zero-skip])
            asserts.append(("running-tokens-positive", ops.implies(chosen, count > 0)))
            spec_room = count + c - T - P  # [cite:spec-tokens-fit]
            spec = ops.ite(ops.all(k0 > 0, spec_room > 0), ops.min(k0, spec_room), 0)
            take[r] = ops.any(take[r], chosen)
            n[r] = ops.ite(chosen, count, n[r])
            ks[r] = ops.ite(chosen, spec, ks[r])
            order[r] = ops.ite(chosen, scheduled_count, order[r])
            scheduled_count = scheduled_count + ops.ite(chosen, 1, 0)
            remaining = remaining - ops.ite(chosen, count, 0)
            prefill_scheduled = ops.any(
                prefill_scheduled, ops.all(chosen, s.is_prefill_chunk[r])
            )  # [cite:prefill-scheduled-flag]
            running_scheduled = ops.any(running_scheduled, chosen)

    # ---- WAITING requests ([cite:waiting-loop]): kv_holding_waiting (c > 0) before waiting,
    #      FCFS within each; blocked sessions and deliverable stale output are skipped
    queued = [
        ops.any(st == Status.WAITING, st == Status.PREEMPTED, st == Status.WAITING_FOR_STREAMING_REQ) for st in status
    ]
    blocked = [
        ops.any(
            status[r]
            == Status.WAITING_FOR_STREAMING_REQ,  # [cite:blocked-waiting-check], [cite:streaming-waits-for-input]
            ops.all(
                s.num_stale_output_tokens[r] > 0, ops.not_(s.drop_stale_output[r])
            ),  # [cite:stale-output-blocks-resume]
        )
        for r in reqs
    ]
    admissible = [ops.all(queued[r], ops.not_(blocked[r])) for r in reqs]
    holding = [s.num_computed_tokens[r] > 0 for r in reqs]  # [cite:enqueue-waiting-kv-holding]

    def waits_before(q, r):
        same_queue = holding[q] == holding[r]
        return ops.any(
            ops.all(holding[q], ops.not_(holding[r])),
            ops.all(same_queue, s.waiting_rank[q] < s.waiting_rank[r]),
        )

    wait_pos = [ops.count(ops.all(admissible[q], waits_before(q, r)) for q in reqs if q != r) for r in reqs]
    flags_after_running = (prefill_scheduled, running_scheduled)
    stopped = a.rest_stopped if cfg.rest else False
    admitted = [False] * len(reqs)
    admit_pos = [0] * len(reqs)
    admitted_count = 0
    for p in range(cfg.requests):
        for r in reqs:
            turn = ops.all(admissible[r], wait_pos[r] == p)
            remaining_at[r] = ops.ite(turn, remaining, remaining_at[r])
            stopped_at[r] = ops.ite(turn, stopped, stopped_at[r])
            here = ops.all(admissible[r], wait_pos[r] == p, remaining > 0, ops.not_(stopped))
            computed = s.num_computed_tokens[
                r
            ]  # c == 0: no prefix-cache hit; else kept ([cite:admission-prefix-lookup admission-keeps-computed])
            want = s.num_tokens[r] - computed  # [cite:admission-num-new-tokens]
            pad = False
            if cfg.drafts:
                pad = ops.all(
                    K > 0,
                    want == 1,
                    ops.not_(prefill_scheduled),
                    ops.any(running_scheduled, computed > 0),
                )  # [cite:admission-padding]
                no_room = ops.all(here, pad, 1 + K > remaining)  # [cite:admission-padding]: break
                stopped = ops.any(stopped, no_room)
                here = ops.all(here, ops.not_(no_room))
                want = ops.ite(pad, 1 + K, want)
            count = ops.min(cap_long_prefill(want), remaining)  # [cite:admission-padding admission-budget-cap]
            asserts.append(
                ("admission-tokens-positive", ops.implies(here, count > 0))
            )  # [cite:admission-tokens-positive]
            if cfg.drafts:
                # the threshold may cut a padded admission below 1 + K ([cite:padding-assert])
                asserts.append(("padding-intact", ops.implies(ops.all(here, pad), count == 1 + K)))
            take[r] = ops.any(take[r], here)
            admitted[r] = ops.any(admitted[r], here)
            admit_pos[r] = ops.ite(here, admitted_count, admit_pos[r])
            n[r] = ops.ite(here, count, n[r])
            ks[r] = ops.ite(ops.all(here, pad), K, ks[r])  # [cite:padding-assert padded-draft-placeholders]
            order[r] = ops.ite(here, scheduled_count, order[r])
            scheduled_count = scheduled_count + ops.ite(here, 1, 0)
            admitted_count = admitted_count + ops.ite(here, 1, 0)
            remaining = remaining - ops.ite(here, count, 0)

    # admission bookkeeping
    # ([cite:running-append admitted-new-or-resumed admission-records-tokens admission-sets-running]): status RUNNING,
    # appended to running
    rank_base = s.next_running_rank
    for r in reqs:
        nxt.status[r] = ops.ite(admitted[r], Status.RUNNING, status[r])
        nxt.running_rank[r] = ops.ite(admitted[r], rank_base + admit_pos[r], s.running_rank[r])
    nxt.next_running_rank = rank_base + admitted_count
    for r in reqs:
        nxt.finished_unshipped[r] = (
            False  # shipped in this output, then cleared ([cite:output-finished-req-ids], [cite:finished-ids-cleared])
        )

    # ---- _update_after_schedule
    # ([cite:update-after-schedule advance-computed-and-in-flight is-prefill-chunk finished-ids-cleared],
    # [cite:async-update-after-schedule reserve-placeholders spec-token-placeholders next-decode-eligible])
    shipped = []
    reserved = [0] * len(reqs)
    for r in reqs:
        c0, P0, T = s.num_computed_tokens[r], s.num_output_placeholders[r], s.num_tokens[r]
        c1 = c0 + n[r]
        chunk = c1 < T + P0  # [cite:is-prefill-chunk]
        reserved[r] = ops.ite(
            ops.all(take[r], ops.not_(chunk)), SAMPLED_PER_STEP + ks[r], 0
        )  # [cite:reserve-placeholders]
        nxt.num_computed_tokens[r] = ops.ite(take[r], c1, c0)  # [cite:advance-computed-and-in-flight]
        nxt.num_in_flight_tokens[r] = s.num_in_flight_tokens[r] + n[r]  # [cite:advance-computed-and-in-flight]
        nxt.is_prefill_chunk[r] = ops.ite(take[r], chunk, s.is_prefill_chunk[r])
        nxt.chunked[r] = ops.any(s.chunked[r], ops.all(take[r], chunk))
        nxt.num_output_placeholders[r] = P0 + reserved[r]
        # drafts cleared when scheduled ([cite:drafts-cleared-when-scheduled]); placeholders for the next step
        # when sampled ([cite:spec-token-placeholders])
        nxt.num_spec_tokens[r] = ops.ite(take[r], ops.ite(chunk, 0, K), s.num_spec_tokens[r])
        if stagger:
            nxt.next_decode_eligible_step[r] = ops.ite(
                ops.all(take[r], ops.not_(chunk)), nxt.current_step + cfg.pp, s.next_decode_eligible_step[r]
            )  # [cite:next-decode-eligible] (decode_stagger = pp_size)
        shipped.append(
            Shipped(
                on=take[r],
                n=n[r],
                ks=ks[r],
                c0=c0,
                prompt_len=s.num_prompt_tokens[r],
                num_tokens=T,
                placeholders=P0,
                as_new=ops.all(admitted[r], status[r] == Status.WAITING),
                as_resumed=ops.all(admitted[r], status[r] == Status.PREEMPTED),
                admit_pos=admit_pos[r],
                chunk=chunk,
            )
        )

    # ---- the runner executes the step ([cite:engine-executes])
    if cfg.runner == "v1":
        discards, observed["v1_rows"] = v1_decide(s, nxt, cfg, ops, shipped)
    else:
        discards, observed["v2_rows"] = v2_decide(s, a, nxt, cfg, ops, shipped, status)
    if cfg.is_v2:
        for r in reqs:
            checks.append(
                (
                    "positions-agree",
                    ops.implies(
                        take[r],
                        observed["v2_rows"][r]["num_computed"]
                        == s.num_computed_tokens[r] - pending_rejections(s, cfg, ops, r),
                    ),
                )
            )
    else:
        for r in reqs:
            checks.append(("no-placeholder-input", ops.not_(observed["v1_rows"][r]["placeholder_input"])))
    observed["discard"] = discards
    observed["reserved"] = reserved
    observed["rest"] = [
        {
            "rest_before": a.budget - remaining_at[r],
            "rest_unfinished": eligible - ops.ite(status[r] != Status.FINISHED, 1, 0),
            "rest_prefill": flags_after_running[0],
            "rest_running": flags_after_running[1],
            "rest_stopped": stopped_at[r],
            "rest_busy": has_requests(s, cfg, ops, only=[q for q in reqs if q != r]),
        }
        for r in reqs
    ]

    for r in reqs:
        sampling = ops.all(take[r], ops.not_(discards[r]))
        accepted = a.accepted[r] if cfg.drafts else 0
        extra = a.extra[r] if "over-delivery" in cfg.faults else 0
        sampled = ops.ite(sampling, SAMPLED_PER_STEP + accepted + extra, 0)
        # picks that do not apply are pinned to 0, so every trace has one spelling
        if cfg.drafts:
            guard.append(accepted <= ops.ite(sampling, ks[r], 0))
        if "over-delivery" in cfg.faults:
            guard.append(ops.implies(ops.not_(sampling), extra == 0))
        if "stale-slot-read" in cfg.faults:
            guard.append(
                ops.implies(ops.not_(ops.any(shipped[r].as_new, shipped[r].as_resumed)), ops.not_(a.stale_read[r]))
            )
        chunk = nxt.is_prefill_chunk[r]
        checks.append(("predicates-agree", ops.implies(take[r], discards[r] == chunk)))
        for i in range(cfg.queue_depth):
            at = s.queue_len == i
            nxt.q_scheduled[i, r] = ops.ite(at, n[r], s.q_scheduled[i, r])
            nxt.q_spec[i, r] = ops.ite(at, ks[r], s.q_spec[i, r])
            nxt.q_reserved[i, r] = ops.ite(at, reserved[r], s.q_reserved[i, r])
            nxt.q_sampled[i, r] = ops.ite(at, sampled, s.q_sampled[i, r])
            nxt.q_order[i, r] = ops.ite(at, order[r], s.q_order[i, r])
            nxt.q_epoch[i, r] = ops.ite(at, ops.ite(take[r], s.epoch[r], 0), s.q_epoch[i, r])
            nxt.q_admitted[i, r] = ops.ite(at, admitted[r], s.q_admitted[i, r])
    nxt.queue_len = s.queue_len + 1  # appendleft ([cite:batch-queue-append])
    return Effect(guard=ops.all(*guard), checks=_merge(ops, checks), asserts=_merge(ops, asserts), observed=observed)


def pending_rejections(s: View, cfg: Config, ops: Ops, r: int):
    """Draft tokens of r's in-flight steps (of its current epoch) that the scheduler has
    still to roll back when their output comes: scheduled drafts minus those the runner
    accepted, i.e. q_spec - (q_sampled - 1) for each step the runner sampled
    ([cite:spec-reject-decrement]). The runner already counts them out; the scheduler's
    num_computed_tokens still includes them until then."""
    return ops.sum(
        ops.ite(
            ops.all(i < s.queue_len, s.q_scheduled[i, r] != 0, s.q_epoch[i, r] == s.epoch[r], s.q_sampled[i, r] > 0),
            s.q_spec[i, r] - (s.q_sampled[i, r] - 1),
            0,
        )
        for i in range(cfg.queue_depth)
    )


def _merge(ops: Ops, checks: list) -> dict:
    out: dict = {}
    for name, cond in checks:
        out.setdefault(name, []).append(cond)
    return {name: ops.all(*conds) for name, conds in out.items()}


# -------------------------------------------------------------------------- deliver


def deliver_args(cfg: Config) -> tuple[Arg, ...]:
    args = [Arg("stop", int, "0, or j: the j-th appended token is a stop token", over=("req",), lo=0)]
    if cfg.has("kvfail"):
        args.append(
            Arg(
                "kv_fail_req",
                int,
                "request whose loaded KV block failed (-1: none)",
                lo=-1,
                hi=cfg.requests - 1,
                default=-1,
            )
        )
        args.append(Arg("kv_fail_block", int, "index of its first invalid block", lo=0))
    args += rest_args(cfg, "rest_busy")
    return tuple(args)


def deliver(s: View, a: View, nxt: Next, cfg: Config, ops: Ops) -> Effect:
    """update_from_output for the oldest step ([cite:update-from-output], "
    "[cite:async-update-request-with-output delivery-decrement-0.32])."""
    reqs = range(cfg.requests)
    full = s.queue_len == cfg.queue_depth
    busy = has_requests(s, cfg, ops, a.rest_busy if cfg.rest else False)
    guard = [s.queue_len > 0, ops.any(full, ops.not_(busy))]  # [cite:engine-defers-delivery batch-queue-pop]
    checks: list = []
    asserts: list = []
    prof = cfg.prof
    session_stops = []

    for r in reqs:
        n, ks = s.q_scheduled[0, r], s.q_spec[0, r]
        reserved, sampled = s.q_reserved[0, r], s.q_sampled[0, r]
        in_step = n != 0
        status = s.status[r]
        c = s.num_computed_tokens[r]
        P = s.num_output_placeholders[r]
        L, T = s.num_prompt_tokens[r], s.num_tokens[r]

        failed = False
        if cfg.has("kvfail"):
            # A sync load's invalid blocks, reported with the step that carried the
            # load (its admission), roll c back to the first invalid block
            # ([cite:kv-load-failure-detected], [cite:kv-failure-computed-before-step kv-failure-truncates-computed]);
            # P and T are not touched. A connector
            # loads whole blocks of the prompt, so the failed block lies within it.
            failed = a.kv_fail_req == r
            cut = a.kv_fail_block * cfg.block_size
            guard.append(
                ops.implies(
                    failed,
                    ops.all(status == Status.RUNNING, s.q_admitted[0, r], cut < c - n, cut + cfg.block_size <= L),
                )
            )
            c = ops.ite(failed, cut, c)

        # in-flight and stale drain, before any skip ([cite:stale-drain]); a finished
        # request is gone from Scheduler.requests ([cite:free-blocks-deletes-request]), so nothing drains
        asserts.append(("delivery-tokens-positive", ops.implies(in_step, n > 0)))  # [cite:delivery-tokens-positive]
        known = status != Status.FINISHED
        nxt.num_in_flight_tokens[r] = s.num_in_flight_tokens[r] - ops.ite(known, n, 0)
        stale = ops.all(in_step, known, s.num_stale_output_tokens[r] > 0)
        S = ops.ite(stale, s.num_stale_output_tokens[r] - n, s.num_stale_output_tokens[r])
        asserts.append(("stale-count-nonnegative", ops.implies(stale, S >= 0)))

        proceed = ops.all(
            in_step,
            ops.not_(failed),  # [cite:skip-failed-kv-load]
            status != Status.FINISHED,  # [cite:skip-finished]
            ops.not_(ops.all(stale, s.drop_stale_output[r])),  # [cite:skip-drop-stale]
        )
        live = ops.not_(stale)

        if cfg.drops:  # what the runner returned beyond this step's reservation
            beyond = ops.ite(ops.all(proceed, live), ops.max(sampled - reserved, 0), 0)
            nxt.unreserved[r] = s.unreserved[r] + beyond
        if cfg.guard == "step-reservation":
            # fixes/step-reservation-guard: keep at most what the scheduler reserved for
            # this step (0 for a prefill chunk), before rejections and the decrement
            truncating = ops.all(proceed, live, sampled > reserved)
            nxt.guard_dropped[r] = s.guard_dropped[r] + ops.ite(truncating, sampled - reserved, 0)
            sampled = ops.ite(truncating, reserved, sampled)

        # spec-decode rejection ([cite:spec-reject-decrement])
        rejecting = ops.all(proceed, ks > 0, sampled > 0, live)
        if prof.reset == "discard-counter":
            rejecting = ops.all(rejecting, s.async_tokens_to_discard[r] == 0)
        rejected = ks - ops.max(sampled - SAMPLED_PER_STEP, 0)
        c = ops.ite(ops.all(rejecting, c > 0), c - rejected, c)
        P = ops.ite(ops.all(rejecting, P > 0), P - rejected, P)

        # _update_request_with_output, only for non-empty output ([cite:update-only-nonempty-output])
        calling = ops.all(proceed, sampled > 0)
        tokens = sampled
        if cfg.clamp:
            tokens, dropped = clamp_delivery(ops, ops.all(calling, live), sampled, P)
            nxt.clamp_dropped[r] = s.clamp_dropped[r] + ops.ite(calling, dropped, 0)
        appending = calling
        if prof.reset == "discard-flag":
            discard_frame = ops.all(calling, s.discard_latest_async_tokens[r])
            nxt.discard_latest_async_tokens[r] = ops.ite(discard_frame, False, s.discard_latest_async_tokens[r])
            appending = ops.all(appending, ops.not_(discard_frame))
        if prof.reset == "discard-counter":
            discard_frame = ops.all(calling, s.async_tokens_to_discard[r] > 0)
            nxt.async_tokens_to_discard[r] = s.async_tokens_to_discard[r] - ops.ite(discard_frame, 1, 0)
            appending = ops.all(appending, ops.not_(discard_frame))

        # append one by one, stop check after each ([cite:append-with-stop-check])
        stop_at = a.stop[r]
        guard.append(stop_at <= ops.ite(appending, tokens, 0))
        appended = ops.ite(appending, ops.ite(stop_at > 0, stop_at, tokens), 0)
        T = T + appended
        stopping = ops.all(appending, stop_at > 0)
        live_append = ops.all(appending, live)
        if prof.delivery_decrement == "after-trim":
            # [cite:delivery-decrement-0.32]: a live delivery consumes the placeholders of the tokens it
            # kept after the stop trim, then the assert
            P = ops.ite(live_append, P - appended, P)
            asserts.append(("placeholders-nonnegative", ops.implies(live_append, P >= 0)))
        else:
            # 0.33.0: at a live stop the trimmed tokens roll num_computed_tokens back;
            # then, only when P > 0, every returned token is resolved, then the assert
            if prof.stop_trim_rolls_back_computed:
                c = ops.ite(ops.all(live_append, stopping), c - (tokens - appended), c)
            decrementing = ops.all(live_append, P > 0)
            P = ops.ite(decrementing, P - tokens, P)
            asserts.append(("placeholders-nonnegative", ops.implies(decrementing, P >= 0)))
        checks.append(("no-token-while-prefilling", ops.implies(ops.all(live_append, appended > 0), reserved > 0)))

        # _handle_stopped_request
        # ([cite:handle-stopped-request resumable-stop-rollback stop-applies-queued-update stopped-session-requeued])
        new_status = status
        spec_drafts = s.num_spec_tokens[r]
        epoch = s.epoch[r]
        drop = s.drop_stale_output[r]
        completed = s.completed[r]
        if cfg.has("stream"):
            session = s.resumable[r]
            if not prof.stale_stop_of_preempted_session:
                # 0.32.0: a stale frame stopping a preempted session re-queues a request
                # that is still queued ([cite:stopped-by-status] with [cite:stopped-session-requeued]); outside the
                # model
                guard.append(ops.implies(ops.all(stopping, session), live))
            session_stop = ops.all(stopping, session)
            if prof.stop_rolls_back:
                frontier = c - P
                asserts.append(("safe-frontier-nonnegative", ops.implies(session_stop, frontier >= 0)))
                c = ops.ite(session_stop, frontier, c)
                drop = ops.ite(session_stop, True, drop)
                S = ops.ite(session_stop, nxt.num_in_flight_tokens[r], S)
                P = ops.ite(session_stop, 0, P)
                epoch = epoch + ops.ite(session_stop, 1, 0)
            spec_drafts = ops.ite(session_stop, 0, spec_drafts)
            # the queued update is applied now ([cite:stop-applies-queued-update],
            # [cite:update-request-as-session session-keep-computed session-appends-update]
            # [cite:session-prompt-len session-to-waiting])
            applying = ops.all(session_stop, s.pending_update[r])
            kept, keep_ok = session_kept(prof, T, c, ops)
            asserts.append(("session-keep-covers-computed", ops.implies(applying, keep_ok)))
            u = s.pending_update_len[r]
            new_L = ops.ite(applying, ops.max(L, kept) + u, L)
            T = ops.ite(applying, kept + u, T)
            L = new_L
            nxt.pending_update[r] = ops.ite(applying, False, s.pending_update[r])
            nxt.pending_update_len[r] = ops.ite(applying, 0, s.pending_update_len[r])
            new_status = ops.ite(
                session_stop,
                ops.ite(applying, Status.WAITING, Status.WAITING_FOR_STREAMING_REQ),
                new_status,
            )
            session_stops.append(session_stop)
            finishing = ops.all(stopping, ops.not_(session))
        else:
            finishing = stopping
        new_status = ops.ite(finishing, Status.FINISHED, new_status)
        completed = ops.any(completed, ops.all(finishing, T - L >= 2))
        nxt.finished_unshipped[r] = ops.any(
            s.finished_unshipped[r], finishing
        )  # _free_request ([cite:free-request-records-finished])

        nxt.num_computed_tokens[r] = c
        nxt.num_output_placeholders[r] = P
        nxt.num_tokens[r] = T
        nxt.num_prompt_tokens[r] = L
        nxt.num_stale_output_tokens[r] = S
        nxt.drop_stale_output[r] = drop
        nxt.num_spec_tokens[r] = spec_drafts
        nxt.epoch[r] = epoch
        nxt.status[r] = new_status
        nxt.completed[r] = completed

    # sessions re-enter the waiting queues in processing order ([cite:stopped-session-requeued])
    if cfg.has("stream"):
        for r in reqs:
            ahead = ops.count(ops.all(session_stops[q], s.q_order[0, q] < s.q_order[0, r]) for q in reqs if q != r)
            nxt.waiting_rank[r] = ops.ite(session_stops[r], s.waiting_back + ahead, s.waiting_rank[r])
        nxt.waiting_back = s.waiting_back + ops.count(session_stops)

    _pop_head(s, nxt, cfg, ops)
    return Effect(guard=ops.all(*guard), checks=_merge(ops, checks), asserts=_merge(ops, asserts))


def session_kept(prof, T, c, ops: Ops):
    """_update_request_as_session: how many tokens of the history a session keeps, and
    the condition of the assert that guards it (True where there is none)."""
    if prof.session_keep == "computed":
        return ops.min(T, c), True  # [cite:session-keep-computed]: output up to num_computed_tokens
    keep_end = T - 1  # 0.33.0: every output token but the last sampled one
    return keep_end, keep_end >= c


def _pop_head(s: View, nxt: Next, cfg: Config, ops: Ops) -> None:
    """batch_queue.pop() of the oldest step ([cite:batch-queue-pop]); unused positions read 0."""
    last = cfg.queue_depth - 1
    for r in range(cfg.requests):
        for name in ("q_scheduled", "q_spec", "q_reserved", "q_sampled", "q_order", "q_epoch", "q_admitted"):
            arr_now, arr_next = getattr(s, name), getattr(nxt, name)
            for i in range(last):
                arr_next[i, r] = arr_now[i + 1, r]
            arr_next[last, r] = False if name == "q_admitted" else 0
    nxt.queue_len = s.queue_len - 1


# -------------------------------------------------------------------------- preempt


def _preempt(s: View, nxt: Next, cfg: Config, ops: Ops, r: int, cond, drop, marks_stale: bool) -> None:
    """_preempt_request "
    "([cite:preempt-request preempt-resets-request preempt-zeroes-placeholders preempt-prepends]) on request r "
    "when cond."""
    nxt.status[r] = ops.ite(cond, Status.PREEMPTED, nxt.status[r])
    nxt.num_computed_tokens[r] = ops.ite(cond, 0, nxt.num_computed_tokens[r])  # [cite:preempt-resets-request]
    nxt.num_spec_tokens[r] = ops.ite(cond, 0, nxt.num_spec_tokens[r])  # [cite:preempt-resets-request]
    nxt.epoch[r] = nxt.epoch[r] + ops.ite(cond, 1, 0)
    if marks_stale:
        S = nxt.num_stale_output_tokens[r]
        nxt.drop_stale_output[r] = ops.ite(
            cond, ops.any(drop, ops.all(nxt.drop_stale_output[r], S > 0)), nxt.drop_stale_output[r]
        )  # [cite:preempt-zeroes-placeholders]
        nxt.num_stale_output_tokens[r] = ops.ite(
            cond, nxt.num_in_flight_tokens[r], S
        )  # [cite:preempt-zeroes-placeholders]
        nxt.num_output_placeholders[r] = ops.ite(
            cond, 0, nxt.num_output_placeholders[r]
        )  # [cite:preempt-zeroes-placeholders]


def preempt_args(cfg: Config) -> tuple[Arg, ...]:
    args = [Arg("req", int, "the preempted request", lo=0, hi=_other(cfg))]
    if cfg.has("preempt") and cfg.has("preempt-drop"):
        args.append(Arg("drop", bool, "drop-stale mode (connector with requires_kv_delivery)"))
    return tuple(args)


def preempt(s: View, a: View, nxt: Next, cfg: Config, ops: Ops) -> Effect:
    """Allocation failure in schedule(): FCFS preempts the last running request
    ([cite:alloc-failure-preempts]) with drop_stale_output = requires_kv_delivery."""
    reqs = range(cfg.requests)
    if cfg.has("preempt") and cfg.has("preempt-drop"):
        drop = a.drop
    else:
        drop = cfg.has("preempt-drop")
    victim_ok = []
    for r in reqs:
        me = a.req == r
        last = ops.all(
            *[ops.implies(s.status[q] == Status.RUNNING, s.running_rank[q] < s.running_rank[r]) for q in reqs if q != r]
        )
        victim_ok.append(ops.implies(me, ops.all(s.status[r] == Status.RUNNING, last)))
        _preempt(s, nxt, cfg, ops, r, me, drop, cfg.prof.preempt_marks_stale)
        nxt.waiting_rank[r] = ops.ite(me, s.waiting_front - 1, s.waiting_rank[r])  # prepend ([cite:preempt-prepends])
    nxt.waiting_front = s.waiting_front - 1
    return Effect(guard=ops.all(_front_end_slot(s, cfg), *victim_ok))


def reset_args(cfg: Config) -> tuple[Arg, ...]:
    return ()


def reset_prefix_cache(s: View, a: View, nxt: Next, cfg: Config, ops: Ops) -> Effect:
    """reset_prefix_cache(reset_running_requests=True)
    ([cite:reset-prefix-cache reset-preempts-drop-stale reset-clears-prev-scheduled]): preempt every
    running request, last first, drop-stale; each is prepended, so the waiting queue
    starts with them in their running order."""
    reqs = range(cfg.requests)
    running = [s.status[r] == Status.RUNNING for r in reqs]
    num_running = ops.count(running)
    # 0.32.0 preempts with drop_stale_output=True; h2/h3 preempted the old way, then
    # zeroed placeholders and armed a frame discard
    marks_stale = cfg.prof.preempt_marks_stale and cfg.prof.reset == "preempt-drop-stale"
    for r in reqs:
        at_or_after = ops.count(ops.all(running[q], s.running_rank[q] >= s.running_rank[r]) for q in reqs if q != r) + 1
        _preempt(s, nxt, cfg, ops, r, running[r], True, marks_stale)
        nxt.waiting_rank[r] = ops.ite(running[r], s.waiting_front - at_or_after, s.waiting_rank[r])
        if cfg.prof.reset == "discard-flag":
            nxt.num_output_placeholders[r] = ops.ite(running[r], 0, s.num_output_placeholders[r])
            nxt.discard_latest_async_tokens[r] = ops.ite(running[r], True, s.discard_latest_async_tokens[r])
        if cfg.prof.reset == "discard-counter":
            nxt.async_tokens_to_discard[r] = ops.ite(
                running[r], s.num_output_placeholders[r], s.async_tokens_to_discard[r]
            )
            nxt.num_output_placeholders[r] = ops.ite(running[r], 0, s.num_output_placeholders[r])
    nxt.waiting_front = s.waiting_front - num_running
    # with an abstract rest, a reset may find only other requests running: the focal
    # request is then left alone
    someone_runs = True if cfg.rest else num_running > 0
    return Effect(guard=ops.all(_front_end_slot(s, cfg), someone_runs))


# ------------------------------------------------------------------- stream / abort


def stream_update_args(cfg: Config) -> tuple[Arg, ...]:
    return (
        Arg("req", int, "the session", lo=0, hi=_other(cfg)),
        Arg("new_tokens", int, "prompt tokens of the next input chunk", lo=1),
    )


def stream_update(s: View, a: View, nxt: Next, cfg: Config, ops: Ops) -> Effect:
    """add_request with an existing id ([cite:add-request-streaming-update]): applied at once to a session
    waiting for input, else queued (one queued update modelled)."""
    guard = [_front_end_slot(s, cfg)]
    asserts = []
    for r in range(cfg.requests):
        me = a.req == r
        guard.append(
            ops.implies(me, ops.all(s.resumable[r], s.status[r] != Status.FINISHED, ops.not_(s.pending_update[r])))
        )
        now = ops.all(me, s.status[r] == Status.WAITING_FOR_STREAMING_REQ)
        later = ops.all(me, ops.not_(now))
        # _update_request_as_session
        # ([cite:session-keep-computed session-appends-update session-prompt-len session-to-waiting])
        c, T, L = s.num_computed_tokens[r], s.num_tokens[r], s.num_prompt_tokens[r]
        kept, keep_ok = session_kept(cfg.prof, T, c, ops)
        asserts.append(("session-keep-covers-computed", ops.implies(now, keep_ok)))
        nxt.num_tokens[r] = ops.ite(now, kept + a.new_tokens, T)
        nxt.num_prompt_tokens[r] = ops.ite(now, ops.max(L, kept) + a.new_tokens, L)
        nxt.status[r] = ops.ite(now, Status.WAITING, s.status[r])
        nxt.pending_update[r] = ops.ite(later, True, s.pending_update[r])
        nxt.pending_update_len[r] = ops.ite(later, a.new_tokens, s.pending_update_len[r])
    return Effect(guard=ops.all(*guard), asserts=_merge(ops, asserts))


def abort_args(cfg: Config) -> tuple[Arg, ...]:
    return (Arg("req", int, "the aborted request", lo=0, hi=_other(cfg)),)


def abort(s: View, a: View, nxt: Next, cfg: Config, ops: Ops) -> Effect:
    """finish_requests(FINISHED_ABORTED) ([cite:finish-requests]): counters untouched; later
    deliveries for it are skipped ([cite:skip-finished])."""
    guard = []
    for r in range(cfg.requests):
        me = a.req == r
        guard.append(ops.implies(me, s.status[r] != Status.FINISHED))
        nxt.status[r] = ops.ite(me, Status.FINISHED, s.status[r])
        nxt.finished_unshipped[r] = ops.any(
            s.finished_unshipped[r], me
        )  # _free_request ([cite:free-request-records-finished])
    return Effect(guard=ops.all(*guard))
