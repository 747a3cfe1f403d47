"""The schedule event: Scheduler.schedule() and _update_after_schedule, then the runner executes the step."""

from __future__ import annotations

from vllm_contract.spec.config import Config
from vllm_contract.spec.engine import (
    SAMPLED_PER_STEP,
    common_prefix,
    has_requests,
    merge_checks,
    pending_rejections,
    rest_args,
    served_first,
    spec_k,
)
from vllm_contract.spec.events import Arg, Effect
from vllm_contract.spec.ops import Ops, select, whole_blocks
from vllm_contract.spec.properties import in_flight_sum
from vllm_contract.spec.runners import Shipped, v1_decide, v2_decide
from vllm_contract.spec.state import Next, View
from vllm_contract.spec.vocabulary import Status


def schedule_args(cfg: Config) -> tuple[Arg, ...]:
    args = [Arg("budget", int, "token budget of the step (max_num_scheduled_tokens)", lo=1, hi=cfg.max_budget)]
    if cfg.drafts:
        args.append(Arg("accepted", int, "drafts the runner accepts", over=("req",), lo=0, hi=cfg.spec_tokens))
    if "stale-slot-read" in cfg.faults:
        args.append(Arg("stale_read", bool, "fault: the add_request writes to the slot are lost", over=("req",)))
    if "over-delivery" in cfg.faults:
        args.append(Arg("extra", int, "fault: tokens committed beyond 1 + accepted", over=("req",), lo=0))
    if cfg.run.continue_decode:
        args.append(
            Arg(
                "cd_tokens",
                int,
                "Continue Decode: tokens the on-device loop returns for the row (1..max_decode_steps; 0 "
                "when the row is not sampled in a decode-only step)",
                over=("req",),
                lo=0,
                hi=cfg.run.continue_decode,
            )
        )
        args += rest_args(cfg, "rest_multi")
    args += rest_args(
        cfg, "rest_busy", "rest_before", "rest_unfinished", "rest_prefill", "rest_running", "rest_stopped"
    )
    if "stale-slot-read" in cfg.faults:
        args += rest_args(cfg, "rest_left_prefill_len", "rest_left_num_computed", "rest_left_total_len")
    if cfg.has("prefix-cache"):
        args += rest_args(cfg, "rest_hit_blocks")
    return tuple(args)


def schedule(s: View, a: View, nxt: Next, cfg: Config, ops: Ops) -> Effect:
    """Scheduler.schedule() ([cite:schedule-begins schedule-ends-with-update]) with
    AsyncScheduler._update_after_schedule
    ([cite:async-update-after-schedule reserve-placeholders spec-token-placeholders next-decode-eligible]), then
    the runner's execute_model for that output: one phase after another, in vLLM's order."""
    step = _ScheduleStep(s, a, nxt, cfg, ops)
    step.running_loop()
    step.waiting_loop()
    step.after_waiting_loop()
    step.admission_bookkeeping()
    shipped = step.update_after_schedule()
    discards = step.runner_executes(shipped)
    step.abstraction_view()
    step.queue_outputs(shipped, discards)
    return step.effect()


class _ScheduleStep:
    """One schedule event's working sheet. What a phase hands to the next: the step's
    budget left and the flags vLLM's loops keep; per request what the step scheduled
    (take, n, ks, order, start) and what the loops had done when its turn came
    (remaining_at, stopped_at, hit_at: the abstraction's picks that reproduce this step
    for that request, tests/test_abstraction.py). The phases run in vLLM's order, which is
    also the order the encoding's terms are made in (Z3's models follow it)."""

    def __init__(self, s: View, a: View, nxt: Next, cfg: Config, ops: Ops):
        self.s, self.a, self.nxt, self.cfg, self.ops = s, a, nxt, cfg, ops
        reqs = self.reqs = range(cfg.requests)
        self.K = spec_k(s, cfg)
        self.status = [s.status[r] for r in reqs]
        self.guard = [s.queue_len < cfg.queue_depth, has_requests(s, cfg, ops, a.rest_busy if cfg.rest else False)]
        self.checks: list = []
        self.asserts: list = []
        self.observed: dict = {}

        self.stagger = cfg.is_v2 and cfg.pp > 1
        self.skipped_first = cfg.prof.waiting_queues == "skipped-first"  # 0.29.0, 0.30.0
        if self.stagger:
            nxt.current_step = s.current_step + 1  # [cite:schedule-begins]

        # long_prefill_token_threshold applies only with more than one request in the
        # running or waiting queues ([cite:long-prefill-threshold-eligible], [cite:request-counts]),
        # from 0.34.0 also only with chunked prefill, which the model always has
        # ([cite:long-prefill-needs-chunked-prefill]); before that check (0.29.0, 0.30.0) always
        self.eligible = ops.count(st != Status.FINISHED for st in self.status) + (a.rest_unfinished if cfg.rest else 0)

        self.remaining = a.budget
        self.prefill_scheduled = False
        self.running_scheduled = False
        if cfg.rest:  # the others' share of the step, before the focal request's turn
            self.guard.append(a.rest_before <= a.budget)
            self.remaining = a.budget - a.rest_before
            self.prefill_scheduled, self.running_scheduled = a.rest_prefill, a.rest_running
        self.take = [False] * len(reqs)
        self.prefix = cfg.has("prefix-cache")
        self.tracked = self.prefix and not cfg.rest  # an abstract rest's hit is a pick
        self.B = cfg.block_size
        # the tokens of each request's sequence the prefix cache holds, as the step goes:
        # allocate_slots caches what it schedules before the next request's turn
        self.cache_now = [s.cached_tokens[r] for r in reqs] if self.tracked else []
        self.start = [s.num_computed_tokens[r] for r in reqs]  # num_computed_tokens when its turn came
        self.hit_of = [0] * len(reqs)  # the hit of its admission
        self.hit_at = [0] * len(reqs)  # what the lookup found when the loop reached it (the abstraction's pick)
        self.looked_up = [False] * len(reqs)
        self.n = [0] * len(reqs)
        self.ks = [0] * len(reqs)
        self.order = [0] * len(reqs)
        self.scheduled_count = 0
        self.remaining_at = [a.budget] * len(reqs)
        self.stopped_at = [False] * len(reqs)

    def cap_long_prefill(self, x):
        thr, ops = self.cfg.long_prefill_threshold, self.ops
        if thr == 0:
            return x
        applies = thr < x if self.cfg.prof.long_prefill == "always" else ops.all(self.eligible > 1, thr < x)
        return ops.ite(applies, thr, x)  # [cite:running-num-new-tokens], [cite:admission-padding]

    def running_loop(self) -> None:
        """RUNNING requests, in Scheduler.running order ([cite:running-loop])."""
        s, cfg, ops, reqs = self.s, self.cfg, self.ops, self.reqs
        running = [st == Status.RUNNING for st in self.status]
        run_pos = [
            ops.count(ops.all(running[q], s.running_rank[q] < s.running_rank[r]) for q in reqs if q != r) for r in reqs
        ]
        for p in range(cfg.requests):
            for r in reqs:
                self.remaining_at[r] = ops.ite(
                    ops.all(running[r], run_pos[r] == p), self.remaining, self.remaining_at[r]
                )
                here = ops.all(running[r], run_pos[r] == p, self.remaining > 0)
                if self.stagger:
                    here = ops.all(
                        here, ops.not_(self.nxt.current_step < s.next_decode_eligible_step[r])
                    )  # [cite:decode-eligible-skip]
                T, c, P, k0 = (
                    s.num_tokens[r],
                    s.num_computed_tokens[r],
                    s.num_output_placeholders[r],
                    s.num_spec_tokens[r],
                )
                if cfg.max_tokens is not None:
                    # async: its step in flight already reaches max_tokens, drafts all rejected or not
                    done = ops.all(P > 0, c + 2 - P >= s.num_prompt_tokens[r] + cfg.max_tokens)
                    here = ops.all(here, ops.not_(done))  # [cite:max-tokens-skip]
                want = self.cap_long_prefill(T + k0 + P - c)  # [cite:running-num-new-tokens]
                count = ops.min(want, self.remaining)  # [cite:running-budget-cap]
                if cfg.max_model_len is not None:  # the input stops short of the model's length
                    count = ops.min(count, cfg.max_model_len - c - SAMPLED_PER_STEP)  # [cite:max-model-len-cap]
                chosen = ops.all(here, count != 0)  # zero -> continue ([cite:running-zero-skip])
                self.asserts.append(("running-tokens-positive", ops.implies(chosen, count > 0)))
                spec_room = count + c - T - P  # [cite:spec-tokens-fit]
                spec = ops.ite(ops.all(k0 > 0, spec_room > 0), ops.min(k0, spec_room), 0)
                if self.tracked:  # [cite:allocate-caches-blocks]: min(computed + new, num_tokens), whole blocks
                    self.cache_now[r] = ops.ite(
                        chosen,
                        ops.max(self.cache_now[r], whole_blocks(ops, ops.min(c + count, T), self.B)),
                        self.cache_now[r],
                    )
                self.take[r] = ops.any(self.take[r], chosen)
                self.n[r] = ops.ite(chosen, count, self.n[r])
                self.ks[r] = ops.ite(chosen, spec, self.ks[r])
                self.order[r] = ops.ite(chosen, self.scheduled_count, self.order[r])
                self.scheduled_count = self.scheduled_count + ops.ite(chosen, 1, 0)
                self.remaining = self.remaining - ops.ite(chosen, count, 0)
                self.prefill_scheduled = ops.any(
                    self.prefill_scheduled, ops.all(chosen, s.is_prefill_chunk[r])
                )  # [cite:prefill-scheduled-flag]
                self.running_scheduled = ops.any(self.running_scheduled, chosen)

    def waiting_loop(self) -> None:
        """WAITING requests ([cite:waiting-loop]): kv_holding_waiting (c > 0) before waiting,
        or (0.29.0, 0.30.0) skipped_waiting before waiting ([cite:select-waiting-queue]);
        FCFS within each; blocked sessions and deliverable stale output are skipped."""
        s, a, cfg, ops, reqs, status = self.s, self.a, self.cfg, self.ops, self.reqs, self.status
        self.queued = [
            ops.any(st == Status.WAITING, st == Status.PREEMPTED, st == Status.WAITING_FOR_STREAMING_REQ)
            for st in status
        ]
        self.blocked = [
            ops.any(
                status[r]
                == Status.WAITING_FOR_STREAMING_REQ,  # [cite:blocked-waiting-check], [cite:streaming-waits-for-input]
                ops.all(
                    s.num_stale_output_tokens[r] > 0, ops.not_(s.drop_stale_output[r])
                ),  # [cite:stale-output-blocks-resume]
            )
            for r in reqs
        ]
        admissible = [ops.all(self.queued[r], ops.not_(self.blocked[r])) for r in reqs]
        front = [served_first(s, cfg, r) for r in reqs]

        def waits_before(q, r):
            same_queue = front[q] == front[r]
            return ops.any(
                ops.all(front[q], ops.not_(front[r])),
                ops.all(same_queue, s.waiting_rank[q] < s.waiting_rank[r]),
            )

        self.wait_pos = [ops.count(ops.all(admissible[q], waits_before(q, r)) for q in reqs if q != r) for r in reqs]
        # the loop's budget and stop flag before the admissible request at each position
        self.remaining_before: list = []
        self.stopped_before: list = []
        self.flags_after_running = (self.prefill_scheduled, self.running_scheduled)
        self.stopped = a.rest_stopped if cfg.rest else False
        self.admitted = [False] * len(reqs)
        self.admit_pos = [0] * len(reqs)
        self.admitted_count = 0
        K, B = self.K, self.B
        for p in range(cfg.requests):
            self.remaining_before.append(self.remaining)
            self.stopped_before.append(self.stopped)
            for r in reqs:
                turn = ops.all(admissible[r], self.wait_pos[r] == p)
                self.remaining_at[r] = ops.ite(turn, self.remaining, self.remaining_at[r])
                self.stopped_at[r] = ops.ite(turn, self.stopped, self.stopped_at[r])
                here = ops.all(admissible[r], self.wait_pos[r] == p, self.remaining > 0, ops.not_(self.stopped))
                # c == 0: a prefix-cache lookup, else kept ([cite:admission-prefix-lookup admission-keeps-computed])
                computed = s.num_computed_tokens[r]
                if self.prefix:
                    # the longest run of cached whole blocks, at most num_tokens - 1: the last token
                    # is computed again for its logits ([cite:prefix-cache-lookup prefix-hit-whole-blocks])
                    cap = ops.max(s.num_tokens[r] - 1, 0)
                    if cfg.rest:
                        hit = a.rest_hit_blocks * B
                        self.guard.append(ops.implies(here, hit <= cap))
                    else:
                        cached = _cached_for(s, cfg, ops, self.cache_now, r)
                        hit = whole_blocks(ops, ops.max(ops.min(cached, cap), 0), B)
                    hit = ops.ite(computed == 0, hit, 0)
                    self.hit_at[r] = ops.ite(here, hit, self.hit_at[r])
                    self.looked_up[r] = ops.any(self.looked_up[r], ops.all(here, computed == 0))
                    computed = computed + hit  # [cite:admission-sets-computed]
                want = s.num_tokens[r] - computed  # [cite:admission-num-new-tokens]
                pad = False
                if cfg.drafts:
                    # behind a scheduled running request, or (0.30.0 on) for a request with
                    # computed tokens ([cite:admission-padding])
                    beside = (
                        ops.any(self.running_scheduled, computed > 0)
                        if cfg.prof.admission_pad_if_computed
                        else self.running_scheduled
                    )
                    pad = ops.all(K > 0, want == 1, ops.not_(self.prefill_scheduled), beside)
                    if cfg.max_model_len is not None:  # padded only with room for the sampled token
                        pad = ops.all(
                            pad, computed + 1 + K + SAMPLED_PER_STEP <= cfg.max_model_len
                        )  # [cite:padding-needs-room]
                    no_room = ops.all(here, pad, 1 + K > self.remaining)  # [cite:admission-padding]: break
                    self.stopped = ops.any(self.stopped, no_room)
                    here = ops.all(here, ops.not_(no_room))
                    want = ops.ite(pad, 1 + K, want)
                count = ops.min(
                    self.cap_long_prefill(want), self.remaining
                )  # [cite:admission-padding admission-budget-cap]
                self.asserts.append(
                    ("admission-tokens-positive", ops.implies(here, count > 0))
                )  # [cite:admission-tokens-positive]
                if cfg.drafts:
                    # the threshold may cut a padded admission below 1 + K ([cite:padding-assert])
                    self.asserts.append(("padding-intact", ops.implies(ops.all(here, pad), count == 1 + K)))
                self.start[r] = ops.ite(here, computed, self.start[r])
                if self.prefix:
                    self.hit_of[r] = ops.ite(here, hit, self.hit_of[r])
                if self.tracked:
                    self.cache_now[r] = ops.ite(
                        here,
                        ops.max(self.cache_now[r], whole_blocks(ops, ops.min(computed + count, s.num_tokens[r]), B)),
                        self.cache_now[r],
                    )  # [cite:allocate-caches-blocks]
                self.take[r] = ops.any(self.take[r], here)
                self.admitted[r] = ops.any(self.admitted[r], here)
                self.admit_pos[r] = ops.ite(here, self.admitted_count, self.admit_pos[r])
                self.n[r] = ops.ite(here, count, self.n[r])
                self.ks[r] = ops.ite(
                    ops.all(here, pad), K, self.ks[r]
                )  # [cite:padding-assert padded-draft-placeholders]
                self.order[r] = ops.ite(here, self.scheduled_count, self.order[r])
                self.scheduled_count = self.scheduled_count + ops.ite(here, 1, 0)
                self.admitted_count = self.admitted_count + ops.ite(here, 1, 0)
                self.remaining = self.remaining - ops.ite(here, count, 0)
        self.remaining_before.append(self.remaining)
        self.stopped_before.append(self.stopped)

    def after_waiting_loop(self) -> None:
        """What the step's end checks and moves: V2's logits rows, what a blocked request
        saw at its place, and (0.29.0, 0.30.0) the skipped requests put back."""
        s, nxt, cfg, ops, reqs = self.s, self.nxt, self.cfg, self.ops, self.reqs
        if cfg.drafts and cfg.run.asserts_logits_covered:
            # the V2 runner reads a request's 1 + drafts logits rows off the end of its query: a
            # step that schedules only drafts (nothing left to decode) ends the engine
            for r in reqs:
                self.asserts.append(
                    ("logits-covered", ops.implies(ops.all(self.take[r], self.ks[r] > 0), self.n[r] >= 1 + self.ks[r]))
                )  # [cite:v2-logits-cover-assert]
        for r in reqs:  # a blocked request the loop reaches sees the budget and flag at its place
            held_back = ops.all(self.queued[r], self.blocked[r])
            place = self.wait_pos[r]
            self.remaining_at[r] = ops.ite(
                held_back, select(ops, self.remaining_before, place, self.remaining), self.remaining_at[r]
            )
            self.stopped_at[r] = ops.ite(
                held_back, select(ops, self.stopped_before, place, self.stopped), self.stopped_at[r]
            )
        if self.skipped_first:
            _move_skipped(
                s, nxt, cfg, ops, self.queued, self.blocked, self.wait_pos, self.remaining_before, self.stopped_before
            )
            for r in reqs:
                nxt.in_skipped_waiting[r] = ops.ite(self.admitted[r], False, nxt.in_skipped_waiting[r])

    def admission_bookkeeping(self) -> None:
        """Admission ([cite:running-append admitted-new-or-resumed resumed-sent-as-new]
        [cite:admission-records-tokens admission-sets-running]): status RUNNING, appended to running."""
        s, a, nxt, cfg, ops, reqs = self.s, self.a, self.nxt, self.cfg, self.ops, self.reqs
        rank_base = s.next_running_rank
        for r in reqs:
            nxt.status[r] = ops.ite(self.admitted[r], Status.RUNNING, self.status[r])
            nxt.running_rank[r] = ops.ite(self.admitted[r], rank_base + self.admit_pos[r], s.running_rank[r])
            if (
                cfg.tracks_held_blocks
            ):  # a scheduled request has blocks for its tokens ([cite:allocate-slots-new-blocks])
                nxt.holds_blocks[r] = ops.any(s.holds_blocks[r], self.take[r])
        nxt.next_running_rank = rank_base + self.admitted_count
        for r in reqs:
            if self.tracked:
                nxt.cached_tokens[r] = self.cache_now[r]
            if self.prefix:
                nxt.hit_tokens[r] = ops.ite(self.admitted[r], self.hit_of[r], s.hit_tokens[r])
        if self.prefix and cfg.rest:  # one spelling per trace: no blocks picked where no lookup is made
            self.guard.append(ops.implies(ops.not_(ops.any(*self.looked_up)), a.rest_hit_blocks == 0))
        for r in reqs:
            # shipped in this output, then cleared ([cite:output-finished-req-ids], [cite:finished-ids-cleared])
            nxt.finished_unshipped[r] = False

    def update_after_schedule(self) -> list[Shipped]:
        """_update_after_schedule ([cite:update-after-schedule advance-computed-and-in-flight is-prefill-chunk
        finished-ids-cleared], [cite:async-update-after-schedule reserve-placeholders spec-token-placeholders
        next-decode-eligible]): what each request's row of the step ships to the runner."""
        s, nxt, cfg, ops, reqs, status = self.s, self.nxt, self.cfg, self.ops, self.reqs, self.status
        take, n, ks, admitted = self.take, self.n, self.ks, self.admitted
        shipped = []
        resent = cfg.prof.resumed_requests == "sent-as-new"
        self.reserved = [0] * len(reqs)
        for r in reqs:
            c0, P0, T = self.start[r], s.num_output_placeholders[r], s.num_tokens[r]
            c1 = c0 + n[r]
            chunk = c1 < T + P0  # [cite:is-prefill-chunk]
            self.reserved[r] = ops.ite(
                ops.all(take[r], ops.not_(chunk)), SAMPLED_PER_STEP + ks[r], 0
            )  # [cite:reserve-placeholders]
            nxt.num_computed_tokens[r] = ops.ite(take[r], c1, c0)  # [cite:advance-computed-and-in-flight]
            nxt.num_in_flight_tokens[r] = s.num_in_flight_tokens[r] + n[r]  # [cite:advance-computed-and-in-flight]
            nxt.is_prefill_chunk[r] = ops.ite(take[r], chunk, s.is_prefill_chunk[r])
            nxt.chunked[r] = ops.any(s.chunked[r], ops.all(take[r], chunk))
            nxt.num_output_placeholders[r] = P0 + self.reserved[r]
            # drafts cleared when scheduled ([cite:drafts-cleared-when-scheduled]); placeholders for the next step
            # when sampled ([cite:spec-token-placeholders])
            # an admitted prefill chunk keeps what drafts it had: none, but after a resumable
            # stop without the rollback (0.29.0, 0.30.0), its old ones
            kept = ops.ite(admitted[r], s.num_spec_tokens[r], 0)
            nxt.num_spec_tokens[r] = ops.ite(take[r], ops.ite(chunk, kept, self.K), s.num_spec_tokens[r])
            if self.stagger:
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
                    # a resumed request is a new one to the runner from 0.34.0 ([cite:resumed-sent-as-new])
                    as_new=ops.all(admitted[r], status[r] == Status.WAITING) if not resent else admitted[r],
                    as_resumed=ops.all(admitted[r], status[r] == Status.PREEMPTED) if not resent else False,
                    admit_pos=self.admit_pos[r],
                    chunk=chunk,
                    order=self.order[r],
                    skipped=s.skipped_unshipped[r] if cfg.ships_skipped else 0,
                )
            )
            if cfg.ships_skipped:
                nxt.skipped_unshipped[r] = 0  # shipped in this output
        return shipped

    def runner_executes(self, shipped: list[Shipped]) -> list:
        """The runner executes the step ([cite:engine-executes]): which rows it discards, and
        the checks of what it holds against the scheduler's counts."""
        s, a, nxt, cfg, ops, reqs, take = self.s, self.a, self.nxt, self.cfg, self.ops, self.reqs, self.take
        observed = self.observed
        if cfg.is_v1:
            discards, observed["v1_rows"] = v1_decide(s, a, nxt, cfg, ops, shipped)
        else:
            discards, observed["v2_rows"] = v2_decide(s, a, nxt, cfg, ops, shipped, self.status)
        if cfg.is_v2:
            for r in reqs:
                self.checks.append(
                    (
                        "positions-agree",
                        # the scheduler's count when the step is built: an admission's prefix-cache hit included
                        ops.implies(
                            take[r],
                            observed["v2_rows"][r]["num_computed"]
                            == self.start[r] - pending_rejections(s, cfg, ops, r),
                        ),
                    )
                )
            for r in reqs:
                # what the runner holds of r's sequence when it runs this step, against the
                # scheduler's tokens and what its current steps in flight sampled
                ahead = in_flight_sum(
                    s, cfg, ops, r, lambda i, r=r: s.q_sampled[i, r], lambda i, r=r: s.q_epoch[i, r] == s.epoch[r]
                )
                self.checks.append(
                    (
                        "history-agrees",
                        ops.implies(take[r], observed["v2_rows"][r]["total_len"] == s.num_tokens[r] + ahead),
                    )
                )
        else:
            rows = observed["v1_rows"]
            for r in reqs:
                if cfg.run.host_rows:
                    self.checks.append(("no-placeholder-input", ops.not_(rows[r]["placeholder_input"])))
                if cfg.run.zero_placeholders and not cfg.drafts:
                    self.checks.append(("runner-tokens-agree", ops.not_(rows[r]["reads_wrong"])))
                    self.asserts.append(("tpu-substitute-pops-empty", ops.not_(rows[r]["pops_empty"])))
                if cfg.run.positional_outputs:
                    self.guard.append(ops.not_(rows[r]["reenters"]))
                if cfg.run.prompt_bounded_view:
                    # a step feeding more than one known token is a prefill to attention
                    feeds_many = ops.all(take[r], self.n[r] - self.ks[r] > 1)
                    self.checks.append(("prefill-view-agrees", ops.implies(feeds_many, rows[r]["prefilling"])))
        if cfg.run.continue_decode and cfg.rest:  # one spelling: the others' rows matter only beside the focal one
            self.guard.append(ops.implies(ops.not_(take[0]), ops.not_(a.rest_multi)))
        observed["discard"] = discards
        observed["reserved"] = self.reserved
        return discards

    def abstraction_view(self) -> None:
        """For each request, what the others had done at its turn: the picks of an abstract
        rest that reproduce this step for that request."""
        a, cfg, ops, reqs, take, n = self.a, self.cfg, self.ops, self.reqs, self.take, self.n
        self.observed["rest"] = [
            {
                "rest_before": a.budget - self.remaining_at[r],
                "rest_unfinished": self.eligible - ops.ite(self.status[r] != Status.FINISHED, 1, 0),
                "rest_prefill": self.flags_after_running[0],
                "rest_running": self.flags_after_running[1],
                "rest_stopped": self.stopped_at[r],
                "rest_busy": has_requests(self.s, cfg, ops, only=[q for q in reqs if q != r]),
                **({"rest_hit_blocks": ops.floor_div(self.hit_at[r], self.B)} if self.prefix else {}),
                **(
                    {"rest_multi": ops.any(False, *[ops.all(take[q], n[q] != 1) for q in reqs if q != r])}
                    if cfg.run.continue_decode
                    else {}
                ),
            }
            for r in reqs
        ]

    def queue_outputs(self, shipped: list[Shipped], discards: list) -> None:
        """What the step's output will deliver, queued in the batch queue
        ([cite:batch-queue-append]): per request its tokens sampled, reserved and scheduled."""
        s, a, nxt, cfg, ops, reqs, take, guard = (
            self.s,
            self.a,
            self.nxt,
            self.cfg,
            self.ops,
            self.reqs,
            self.take,
            self.guard,
        )
        for r in reqs:
            sampling = ops.all(take[r], ops.not_(discards[r]))
            accepted = a.accepted[r] if cfg.drafts else 0
            extra = a.extra[r] if "over-delivery" in cfg.faults else 0
            sampled = ops.ite(sampling, SAMPLED_PER_STEP + accepted + extra, 0)
            if cfg.run.continue_decode:
                # a decode-only step returns 1..N tokens per row, however many the scheduler
                # reserved ([cite:tpu-cd-tokens-returned])
                multi = ops.all(sampling, self.observed["v1_rows"][r]["decode_only"])
                guard.append(ops.ite(multi, a.cd_tokens[r] >= 1, a.cd_tokens[r] == 0))
                sampled = ops.ite(multi, a.cd_tokens[r], sampled)
            # picks that do not apply are pinned to 0, so every trace has one spelling
            if cfg.drafts:
                guard.append(accepted <= ops.ite(sampling, self.ks[r], 0))
            if "over-delivery" in cfg.faults:
                guard.append(ops.implies(ops.not_(sampling), extra == 0))
            if "stale-slot-read" in cfg.faults:
                guard.append(
                    ops.implies(ops.not_(ops.any(shipped[r].as_new, shipped[r].as_resumed)), ops.not_(a.stale_read[r]))
                )
            chunk = nxt.is_prefill_chunk[r]
            self.checks.append(("predicates-agree", ops.implies(take[r], discards[r] == chunk)))
            for i in range(cfg.queue_depth):
                at = s.queue_len == i
                nxt.q_scheduled[i, r] = ops.ite(at, self.n[r], s.q_scheduled[i, r])
                nxt.q_spec[i, r] = ops.ite(at, self.ks[r], s.q_spec[i, r])
                nxt.q_reserved[i, r] = ops.ite(at, self.reserved[r], s.q_reserved[i, r])
                nxt.q_sampled[i, r] = ops.ite(at, sampled, s.q_sampled[i, r])
                nxt.q_order[i, r] = ops.ite(at, self.order[r], s.q_order[i, r])
                nxt.q_epoch[i, r] = ops.ite(at, ops.ite(take[r], s.epoch[r], 0), s.q_epoch[i, r])
                nxt.q_admitted[i, r] = ops.ite(at, self.admitted[r], s.q_admitted[i, r])
        nxt.queue_len = s.queue_len + 1  # appendleft ([cite:batch-queue-append])

    def effect(self) -> Effect:
        ops = self.ops
        return Effect(
            guard=ops.all(*self.guard),
            checks=merge_checks(ops, self.checks),
            asserts=merge_checks(ops, self.asserts),
            observed=self.observed,
        )


def _cached_for(s: View, cfg: Config, ops: Ops, cache_now: list, r: int):
    """How much of request r's sequence the prefix cache holds, from position 0: its own
    blocks, and another request's within the prefix their prompts share (block hashes
    chain over every token before, [cite:block-hash-chain])."""
    held = cache_now[r]
    for q in range(cfg.requests):
        if q != r:
            held = ops.max(held, ops.min(cache_now[q], common_prefix(s, cfg, ops, r, q)))
    return held


def _move_skipped(s, nxt, cfg, ops, queued, blocked, wait_pos, remaining_before, stopped_before):
    """0.29.0, 0.30.0: a blocked request the waiting loop reaches (budget left, no break)
    is skipped into skipped_waiting ([cite:blocked-waiting-check], [cite:stale-output-blocks-resume]);
    at the end of the step the skipped ones are put back in front of skipped_waiting in
    the order visited ([cite:requeue-skipped-waiting]): those already there keep their
    place, those from waiting follow them in their waiting order."""
    reqs = range(cfg.requests)
    reached = []
    for r in reqs:
        # wait_pos[r]: the admissible requests served before r, whose budget went first
        at = [
            ops.all(wait_pos[r] == p, remaining_before[p] > 0, ops.not_(stopped_before[p]))
            for p in range(len(remaining_before))
        ]
        reached.append(ops.all(queued[r], blocked[r], ops.any(*at)))
    moved = [ops.all(reached[r], ops.not_(s.in_skipped_waiting[r])) for r in reqs]
    for r in reqs:
        before = ops.count(ops.all(moved[q], s.waiting_rank[q] < s.waiting_rank[r]) for q in reqs if q != r)
        nxt.waiting_rank[r] = ops.ite(moved[r], s.waiting_back + before, s.waiting_rank[r])
        nxt.in_skipped_waiting[r] = ops.any(s.in_skipped_waiting[r], moved[r])
    nxt.waiting_back = s.waiting_back + ops.count(moved)
