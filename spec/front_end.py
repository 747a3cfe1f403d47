"""The events that land between engine steps: preemption, reset_prefix_cache, a streaming update, an abort."""

from __future__ import annotations

from vllm_contract.spec.config import Config
from vllm_contract.spec.engine import merge_checks, session_kept
from vllm_contract.spec.events import Arg, Effect
from vllm_contract.spec.ops import Ops
from vllm_contract.spec.state import Next, View
from vllm_contract.spec.vocabulary import Status


def _other(cfg: Config) -> int:
    """The highest request index an event may name: with an abstract rest, index 1 is
    'another request' (the focal one is left alone)."""
    return cfg.requests if cfg.rest else cfg.requests - 1


def _front_end_slot(s: View, cfg: Config):
    """Between two engine steps the queue is never full ([cite:batch-queue-not-full])."""
    return s.queue_len < cfg.queue_depth


def _preempt(s: View, nxt: Next, cfg: Config, ops: Ops, r: int, cond, drop, marks_stale: bool) -> None:
    """_preempt_request "
    "([cite:preempt-request preempt-resets-request preempt-zeroes-placeholders preempt-prepends]) on request r "
    "when cond."""
    nxt.status[r] = ops.ite(cond, Status.PREEMPTED, nxt.status[r])
    nxt.num_computed_tokens[r] = ops.ite(cond, 0, nxt.num_computed_tokens[r])  # [cite:preempt-resets-request]
    nxt.num_spec_tokens[r] = ops.ite(cond, 0, nxt.num_spec_tokens[r])  # [cite:preempt-resets-request]
    nxt.epoch[r] = nxt.epoch[r] + ops.ite(cond, 1, 0)
    if cfg.has("prefix-cache"):  # its blocks are freed, and stay cached ([cite:preempt-frees-blocks])
        nxt.hit_tokens[r] = ops.ite(cond, 0, nxt.hit_tokens[r])
    if cfg.tracks_held_blocks:
        nxt.holds_blocks[r] = ops.ite(cond, False, nxt.holds_blocks[r])  # [cite:preempt-frees-blocks]
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
    starts with them in their running order.

    Then the block pool is reset only if no block is held ([cite:reset-clears-cache]). A
    streaming session outside `running` (waiting for input, or updated and not yet
    scheduled again) still holds its blocks: vLLM then raises RuntimeError after the
    preemptions ([cite:reset-raises-when-blocks-held]), which EngineCore returns to the
    caller as a failed utility call and runs on ([cite:utility-call-failure]). The state
    is the same either way (the preemptions stand; the cache is not cleared, and prefix
    caching is not modelled with sessions); `observed["reset_fails"]` says which outcome
    vLLM's call has, for the targets to compare."""
    reqs = range(cfg.requests)
    running = [s.status[r] == Status.RUNNING for r in reqs]
    num_running = ops.count(running)
    observed = {}
    if cfg.tracks_held_blocks:
        observed["reset_fails"] = ops.any(*[ops.all(ops.not_(running[r]), s.holds_blocks[r]) for r in reqs])
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
    if cfg.has("prefix-cache") and not cfg.rest:
        # with every running request preempted no block is held, and the cache is
        # emptied ([cite:reset-clears-cache])
        for r in reqs:
            nxt.cached_tokens[r] = 0
    # with an abstract rest, a reset may find only other requests running: the focal
    # request is then left alone
    someone_runs = True if cfg.rest else num_running > 0
    return Effect(guard=ops.all(_front_end_slot(s, cfg), someone_runs), observed=observed)


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
    return Effect(guard=ops.all(*guard), asserts=merge_checks(ops, asserts))


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
        if cfg.tracks_held_blocks:  # and its blocks ([cite:free-blocks-deletes-request])
            nxt.holds_blocks[r] = ops.ite(me, False, s.holds_blocks[r])
    return Effect(guard=ops.all(*guard))
