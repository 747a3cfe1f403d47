"""The deliver event: update_from_output for the oldest step in flight."""

from __future__ import annotations

from vllm_contract.spec.clamp import clamp_delivery
from vllm_contract.spec.config import Config
from vllm_contract.spec.engine import (
    SAMPLED_PER_STEP,
    common_prefix,
    has_requests,
    merge_checks,
    rest_args,
    session_kept,
    spec_k,
)
from vllm_contract.spec.events import Arg, Effect
from vllm_contract.spec.ops import Ops, whole_blocks
from vllm_contract.spec.state import Next, View
from vllm_contract.spec.vocabulary import Status


def deliver_args(cfg: Config) -> tuple[Arg, ...]:
    args = [Arg("stop", int, "0, or j: the j-th appended token is a stop token", over=("req",), lo=0)]
    if cfg.has("kvfail"):
        args.append(
            Arg(
                "kv_fail_req",
                int,
                "request whose loaded KV block failed (-1: none)",
                lo=-1,
                # with an abstract rest under prefix caching, `requests` names another
                # request, whose failed block the focal one may share
                hi=cfg.requests if cfg.rest and cfg.has("prefix-cache") else cfg.requests - 1,
                default=-1,
            )
        )
        args.append(Arg("kv_fail_block", int, "index of its first invalid block", lo=0))
    if "under-drain" in cfg.faults:
        args.append(
            Arg("short", int, "fault: tokens the rewritten output leaves out of the step's count", over=("req",), lo=0)
        )
    if "lost-sample" in cfg.faults:
        args.append(
            Arg(
                "lost",
                bool,
                "fault: the output has no token for the request although the runner sampled",
                over=("req",),
            )
        )
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
    sharers = failure_sharers(s, a, cfg, ops, guard) if cfg.has("kvfail") and cfg.has("prefix-cache") else None

    for r in reqs:
        n, ks = s.q_scheduled[0, r], s.q_spec[0, r]
        reserved, sampled = s.q_reserved[0, r], s.q_sampled[0, r]
        in_step = n != 0
        if "lost-sample" in cfg.faults:
            # the row update_from_output reads is empty: nothing is appended and, the output
            # being empty, nothing resolves the step's placeholders ([cite:update-only-nonempty-output]);
            # once its reservations reach max_tokens the running loop skips it ([cite:max-tokens-skip]).
            # tpu-inference #2833 reports a pending result lost on an empty step; the pinned 0.32.0
            # wheel drains it there ([cite:tpu-empty-step-drains]) and hands each step's tokens with
            # that step's own output ([cite:tpu-async-output-own-step]), and logs its warning on every
            # empty step ([cite:tpu-empty-step-warning])
            guard.append(ops.implies(a.lost[r], ops.all(in_step, sampled > 0)))
            sampled = ops.ite(a.lost[r], 0, sampled)
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
            loaded = cut + cfg.block_size <= L
            if cfg.has("prefix-cache"):
                # the connector loads past the local hit; and short of the last prompt token
                # (the hit's cap), so no copy of the block was cached before this load
                loaded = ops.all(cut >= s.hit_tokens[r], cut + cfg.block_size < L)
            guard.append(
                ops.implies(failed, ops.all(status == Status.RUNNING, s.q_admitted[0, r], cut < c - n, loaded))
            )
            c = ops.ite(failed, cut, c)
            if sharers is not None:
                # it holds the failed block through a prefix-cache hit, behind the request that
                # loaded it in Scheduler.running: that one recomputes the block, this one gives up
                # only this step's tokens ([cite:kv-failure-shared-block kv-failure-keeps-shared])
                c = ops.ite(sharers[r], c - n, c)
                failed = ops.any(failed, sharers[r])

        # in-flight and stale drain, before any skip ([cite:stale-drain]); a finished
        # request is gone from Scheduler.requests ([cite:free-blocks-deletes-request]), so nothing drains
        drained = n
        if "under-drain" in cfg.faults:
            # the count update_from_output reads is the rewritten one; it stays positive
            # (the assert below), and only a step's own requests are rewritten
            guard.append(ops.ite(in_step, a.short[r] < n, a.short[r] == 0))
            drained = n - a.short[r]
        asserts.append(
            ("delivery-tokens-positive", ops.implies(in_step, drained > 0))
        )  # [cite:delivery-tokens-positive]
        known = status != Status.FINISHED
        nxt.num_in_flight_tokens[r] = s.num_in_flight_tokens[r] - ops.ite(known, drained, 0)
        stale = ops.all(in_step, known, s.num_stale_output_tokens[r] > 0)
        S = ops.ite(stale, s.num_stale_output_tokens[r] - drained, s.num_stale_output_tokens[r])
        asserts.append(("stale-count-nonnegative", ops.implies(stale, S >= 0)))

        proceed = ops.all(
            in_step,
            ops.not_(failed),  # [cite:skip-failed-kv-load]
            status != Status.FINISHED,  # [cite:skip-finished]
            ops.not_(ops.all(stale, s.drop_stale_output[r])),  # [cite:skip-drop-stale]
        )
        live = ops.not_(stale)

        if cfg.ships_skipped:
            # fixes/v2-recompute-rollback, the scheduler's half: a live step whose output is
            # skipped for a KV-load failure ([cite:skip-failed-kv-load] keeps its reservation
            # and says nothing) gives back what it reserved, and the runner is told in the
            # next SchedulerOutput the tokens it sampled there
            skipping = ops.all(in_step, failed, live)
            P = ops.ite(skipping, P - reserved, P)
            nxt.skipped_unshipped[r] = s.skipped_unshipped[r] + ops.ite(skipping, sampled, 0)

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
        forced = _length_stop(cfg, ops, T, L, tokens)
        if forced is not None:
            # a stop token only before the length stop (one spelling per trace); the
            # length stop itself is vLLM's, at the first token that reaches a length
            guard.append(ops.implies(ops.all(appending, forced > 0), ops.any(stop_at == 0, stop_at < forced)))
            stop_at = ops.ite(ops.all(appending, forced > 0, stop_at == 0), forced, stop_at)
        appended = ops.ite(appending, ops.ite(stop_at > 0, stop_at, tokens), 0)
        T = T + appended
        continue_decode = cfg.run.continue_decode > 0
        if continue_decode:
            # tpu-inference's patch of vLLM's scheduler for Continue Decode: before the
            # original update, a live delivery of more than one token adds all but one of
            # them, untrimmed, to the placeholders ([cite:tpu-cd-precompensate])
            P = ops.ite(ops.all(appending, live, tokens > 1), P + tokens - 1, P)
        P_found = P  # what the delivery found, before it resolves this step's placeholders
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
        if continue_decode:
            # ... and after it, all but one of the tokens kept after the stop trim go to
            # num_computed_tokens: the device computed them ([cite:tpu-cd-advances-computed])
            c = ops.ite(ops.all(appending, live, appended > 1), c + appended - 1, c)
        checks.append(("no-token-while-prefilling", ops.implies(ops.all(live_append, appended > 0), reserved > 0)))
        if cfg.has("prefix-cache") and not cfg.rest:
            nxt.cached_tokens[r] = _cache_after_delivery(s, cfg, ops, r, calling, live, status, c, P, P_found, T, nxt)

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
                # without the rollback (0.29.0, 0.30.0, h4) a stopped session's in-flight
                # frames stay live and may stop it again while it is queued; vLLM then takes
                # it out of both waiting queues and leaves it in none ([cite:stopped-by-status]):
                # outside the model (with the rollback every frame of a queued request is stale)
                guard.append(ops.implies(ops.all(stopping, session), status == Status.RUNNING))
            session_stop = ops.all(stopping, session)
            if prof.stop_rolls_back:
                frontier = c - P
                asserts.append(("safe-frontier-nonnegative", ops.implies(session_stop, frontier >= 0)))
                c = ops.ite(session_stop, frontier, c)
                drop = ops.ite(session_stop, True, drop)
                S = ops.ite(session_stop, nxt.num_in_flight_tokens[r], S)
                P = ops.ite(session_stop, 0, P)
                epoch = epoch + ops.ite(session_stop, 1, 0)
                spec_drafts = ops.ite(session_stop, 0, spec_drafts)  # in the rollback's block
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
        if cfg.tracks_held_blocks:  # and its blocks; a stopped session keeps them ([cite:free-blocks-deletes-request])
            nxt.holds_blocks[r] = ops.ite(finishing, False, s.holds_blocks[r])

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
            if cfg.prof.waiting_queues == "skipped-first":
                # a session waiting for input is a blocked status: skipped_waiting ([cite:enqueue-waiting-skipped])
                nxt.in_skipped_waiting[r] = ops.ite(
                    session_stops[r], nxt.status[r] == Status.WAITING_FOR_STREAMING_REQ, s.in_skipped_waiting[r]
                )
        nxt.waiting_back = s.waiting_back + ops.count(session_stops)

    _pop_head(s, nxt, cfg, ops)
    return Effect(guard=ops.all(*guard), checks=merge_checks(ops, checks), asserts=merge_checks(ops, asserts))


def failure_sharers(s: View, a: View, cfg: Config, ops: Ops, guard: list) -> list:
    """Per request, whether the KV-load failure of this delivery finds the failed block
    among the blocks it computed before this step, through a prefix-cache hit on the block
    the failing request loaded: _update_requests_with_invalid_blocks scans every running
    request ([cite:kv-failure-scans-running]). The loader was admitted first and stays ahead
    in Scheduler.running, so it is the one cut back to the block; a sharer keeps the block
    and gives up this step's tokens. A sharer was admitted after the loader (its hit found
    the loader's block, the only copy), its hit covers the block, and the block lies in the
    prefix their prompts share. With an abstract rest the loader may be another request
    (kv_fail_req = requests), and the focal request any sharer of it."""
    B = cfg.block_size
    cut = a.kv_fail_block * B
    out = []
    for r in range(cfg.requests):
        n = s.q_scheduled[0, r]
        holds = ops.all(
            s.status[r] == Status.RUNNING,
            s.hit_tokens[r] >= cut + B,
            cut < s.num_computed_tokens[r] - n,  # among the blocks it computed before this step
        )
        if cfg.rest:
            other_failed = a.kv_fail_req == cfg.requests
            sharer = ops.all(other_failed, holds)
            guard.append(ops.implies(other_failed, holds))  # one spelling: a failure that reaches it
        else:
            loaders = [
                ops.all(
                    a.kv_fail_req == q,
                    s.running_rank[r] > s.running_rank[q],
                    common_prefix(s, cfg, ops, r, q) >= cut + B,
                )
                for q in range(cfg.requests)
                if q != r
            ]
            sharer = ops.all(holds, ops.any(*loaders))
        out.append(sharer)
    return out


def _cache_after_delivery(s: View, cfg: Config, ops: Ops, r: int, calling, live, status, c, P, P_found, T, nxt):
    """The blocks a delivery caches, besides those allocate_slots cached when it scheduled
    them: whole blocks up to num_computed_tokens less the placeholders still reserved
    (0.29.0-0.32.0, [cite:cache-after-delivery-0.32]) or less the tokens still in flight
    (0.33.0, live deliveries that found placeholders or run with drafts,
    [cite:cache-after-delivery-0.33]); both only for a request that was RUNNING."""
    was_running = status == Status.RUNNING
    if cfg.prof.cache_after_delivery == "computed-less-placeholders":
        caching, upto = ops.all(calling, was_running), c - P
    else:
        with_drafts = spec_k(s, cfg) > 0
        caching = ops.all(calling, live, was_running, ops.any(P_found > 0, with_drafts))
        upto = c - nxt.num_in_flight_tokens[r]
    held = s.cached_tokens[r]
    return ops.ite(caching, ops.max(held, whole_blocks(ops, ops.min(upto, T), cfg.block_size)), held)


def _length_stop(cfg: Config, ops: Ops, T, L, tokens):
    """The 1-based index of the returned token at which check_stop finds a length
    ([cite:length-stop]): num_tokens reaches max_model_len, or the output reaches
    max_tokens; 0 when no returned token does; None without length stops."""
    if cfg.max_model_len is None and cfg.max_tokens is None:
        return None
    firsts = []
    if cfg.max_model_len is not None:
        firsts.append(ops.max(cfg.max_model_len - T, 1))
    if cfg.max_tokens is not None:
        firsts.append(ops.max(cfg.max_tokens - (T - L), 1))  # num_output_tokens: T - L without sessions
    first = firsts[0] if len(firsts) == 1 else ops.min(*firsts)
    return ops.ite(first <= tokens, first, 0)


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
