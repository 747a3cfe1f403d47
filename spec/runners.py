"""The model runner's half of the contract: does it sample a scheduled request?

The worker executes steps strictly in schedule order, and nothing else moves runner
state in between ([cite:step-with-batch-queue]), so the runner's decision for a step is taken in the
`schedule` event, from the SchedulerOutput the scheduler just built.

The variants are records (spec/runner_variants.py), each with its rule over the rows
built here: v1 and v2 as in vLLM, v2-live, and the recompute fix (v2-rollback) with its
negative control.
  v1       GPUModelRunner. Discards while cr + n < Nr, where cr is the scheduler's
           num_computed_tokens before the step and Nr = CachedRequestState.num_tokens,
           a live count the runner re-aligns to the scheduler's T + P every step
           ([cite:v1-optimistic-seq-lens v1-discard-mask],
           [cite:v1-optimistic-draft-extend v1-trim-outputs v1-resumed-outputs-rebuilt],
           [cite:v1-cached-num-tokens]).
  v2       V2 runner, 0.32.0. Discards while seq_len < prefill_len, where
           seq_len = num_computed_tokens (GPU, slot state) + n and prefill_len is the
           token count written once, in add_request ([cite:v2-discard-kernel], [cite:v2-add-writes-slot]).
  v2-live  The fix the seed discussion points to: compare with the slot's live
           total_len instead of prefill_len; same inputs otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_contract.spec.config import Config
from vllm_contract.spec.ops import Ops, select
from vllm_contract.spec.state import Next, View
from vllm_contract.spec.vocabulary import Status

Term = Any


@dataclass
class Shipped:
    """What SchedulerOutput carries to the runner for one request in one step."""

    on: Term  # scheduled in this step (n > 0)
    n: Term  # num_scheduled_tokens ([cite:output-num-scheduled-tokens]), drafts included
    ks: Term  # len(scheduled_spec_decode_tokens) ([cite:output-scheduled-spec-tokens])
    # num_computed_tokens before this step's advance ([cite:new-req-num-computed],
    # [cite:cached-reqs-computed-and-output])
    c0: Term
    prompt_len: Term  # len(prompt_token_ids) ([cite:new-req-prompt-token-ids])
    num_tokens: Term  # len(_all_token_ids) at schedule time (V2 prefill_token_ids, [cite:v2-new-req-all-token-ids])
    placeholders: (
        Term  # P before this step's reservation (num_output_tokens - (T-L), [cite:cached-reqs-computed-and-output])
    )
    as_new: Term  # in scheduled_new_reqs as a WAITING request (new or streaming)
    as_resumed: Term  # resumed from preemption (scheduled_resumed_reqs; V2 moves it to new)
    admit_pos: Term  # position in the waiting loop's admission order
    chunk: Term = False  # the scheduler classified the step as a prefill chunk (is_prefill_chunk)
    # tokens the runner sampled for the request in steps whose output the scheduler skipped
    # for a KV-load failure since its last SchedulerOutput (the recompute fix ships them)
    skipped: Term = 0
    order: Term = 0  # its place in the step's scheduling order (the running loop's, then admissions')


def v1_decide(
    s: View, a: View, nxt: Next, cfg: Config, ops: Ops, shipped: list[Shipped]
) -> tuple[list[Term], list[dict]]:
    """V1: returns, per request, whether the runner discards the step's sample, and the
    rule's inputs (for the step tables of generated cases)."""
    discards, rows = [], []
    run = cfg.run
    decode_only = continue_decode_step(a, cfg, ops, shipped)
    for r, sh in enumerate(shipped):
        nr, in_batch, prev_draft = s.v1_num_tokens[r], s.v1_in_batch[r], s.v1_prev_draft_len[r]
        aligned = sh.num_tokens + sh.placeholders  # scheduler's T + P_before
        if run.rebuilds_outputs:
            cached = ops.ite(
                ops.any(sh.as_resumed, ops.not_(in_batch)),
                # not in the persistent batch: outputs trimmed ([cite:v1-trim-outputs]) and rebuilt
                # from all_token_ids to num_output_tokens ([cite:v1-resumed-outputs-rebuilt]) -> T + P_before
                aligned,
                # in batch: optimistic draft extend ([cite:v1-optimistic-draft-extend]), then trim to the
                # scheduler's num_output_tokens ([cite:v1-trim-outputs])
                ops.min(nr + prev_draft, aligned),
            )
        else:
            # a plugin runner that keeps its own output list and only trims it to the
            # scheduler's num_output_tokens, in the batch or not ([cite:tpu-trim-only])
            cached = ops.min(nr + prev_draft, aligned)
        num_tokens_now = ops.ite(
            sh.as_new,
            # new or streaming: CachedRequestState(output_token_ids=[]) ([cite:v1-new-request-state],
            # [cite:v1-streaming-update-state]) -> Nr = len(prompt_token_ids)
            sh.prompt_len,
            cached,
        )
        row = {
            "computed": sh.c0,
            "query_len": sh.n,
            "num_tokens": num_tokens_now,
            "prompt_len": sh.prompt_len,
            "never": False,
        }
        if run.continue_decode:
            # a Continue Decode step discards nothing ([cite:tpu-cd-no-discard]): its rule says so
            row["decode_only"] = decode_only
        # the runner's rule, c + n < Nr ([cite:v1-optimistic-seq-lens], [cite:v1-discard-mask])
        discard = run.rule.discards(row, ops)
        # input ids: the runner holds ids of r below the length it wrote when r entered the
        # batch (below), and -1 placeholders above, one per token sampled since
        # ([cite:v1-async-placeholder-outputs v1-cached-outputs-extend]);
        # a request that stays and was sampled in the last step gets that step's token at its
        # last non-draft position from the device ([cite:v1-prev-sampled-input]). Draft
        # positions are the drafter's (or -1 by design when it has none) and not counted.
        admitted = ops.any(sh.as_new, sh.as_resumed)
        entering = ops.all(sh.on, ops.any(admitted, ops.not_(in_batch)))
        # on entering, the runner writes the ids it holds for r: the prompt of a new (or
        # updated) request, or the T + P ids of a cached request rebuilt from all_token_ids
        # (the positions past T are not -1 there: measured on vLLM's V1 runner)
        entered_at = ops.ite(entering, ops.ite(sh.as_new, sh.num_tokens, aligned), s.v1_entered_at[r])
        stays = ops.all(s.v1_prev_sampled[r], ops.not_(admitted))
        from_host = sh.n - sh.ks - ops.ite(stays, 1, 0)  # non-draft positions read from the host ids
        # what the host row holds above the written ids. The runner writes r's row only at
        # its host count num_tokens_no_spec (ntns), which is not Nr: the optimistic draft
        # extend advances both by prev_draft without writing ([cite:v1-optimistic-draft-extend],
        # ngram_gpu), the trim realigns both to the scheduler's T + P ([cite:v1-trim-outputs]),
        # and the deferred correction, run after the step's inputs are read, takes the
        # rejected drafts of r's last sampled step back from ntns only (not from Nr)
        # ([cite:v1-deferred-draft-correction]). The step's drafts' -1s land at
        # [ntns, ntns + ks) before the inputs are read ([cite:v1-drafts-written-at-host-count]),
        # the sample's -1 at ntns - correction after ([cite:v1-async-placeholder-outputs]).
        # Above the highest position written since entering (v1_top) the row holds its old
        # content (zeros), not -1; below it, a position some write stepped over (v1_hole, only
        # the latest kept) holds zeros too. Entering rewrites the row ([0, entered_at)) and
        # forgets both.
        hole = ops.ite(entering, 0, s.v1_hole[r])
        top = ops.ite(entering, entered_at, s.v1_top[r])
        ntns = ops.ite(entering, entered_at, ops.ite(aligned < nr + prev_draft, aligned, s.v1_ntns[r] + prev_draft))
        shift = ops.ite(ops.all(ops.not_(entering), s.v1_prev_sampled[r]), s.v1_corr[r], 0)
        drafts_written = ops.all(sh.on, sh.ks > 0)
        hole = ops.ite(
            ops.all(drafts_written, ntns > top),
            top,
            ops.ite(ops.all(drafts_written, hole >= ntns, hole < ntns + sh.ks), 0, hole),
        )
        top = ops.ite(ops.all(drafts_written, ntns + sh.ks > top), ntns + sh.ks, top)
        lo = ops.ite(sh.c0 > entered_at, sh.c0, entered_at)  # first host position above the written ids
        hi = ops.min(sh.c0 + from_host, top)  # one past the last -1 the step can read
        placeholder_input = ops.all(sh.on, from_host > 0, hi > lo, ops.not_(ops.all(hi - lo == 1, lo == hole)))
        row.update(scheduled=sh.on, discard=discard, placeholder_input=placeholder_input)
        if run.prompt_bounded_view:
            # the runner's attention class: prefilling iff num_computed < num_prompt
            # ([cite:ascend-prompt-bounded-prefill]), however many tokens it feeds
            row["prefilling"] = sh.c0 < sh.prompt_len
        if run.zero_placeholders:
            _zero_placeholders(s, nxt, cfg, ops, r, sh, discard, nr + prev_draft, aligned, row)
        rows.append(row)
        nxt.v1_entered_at[r] = entered_at
        nxt.v1_prev_sampled[r] = ops.all(sh.on, ops.not_(discard))
        discards.append(discard)
        # one -1 placeholder per sampled request under async
        # ([cite:v1-async-placeholder-outputs v1-cached-outputs-extend])
        # a Continue Decode step appends max_decode_steps [0]s ([cite:tpu-cd-placeholders])
        appended = ops.ite(decode_only, run.continue_decode, 1) if run.continue_decode else 1
        nxt.v1_num_tokens[r] = ops.ite(sh.on, num_tokens_now + ops.ite(discard, 0, appended), nr)
        nxt.v1_prev_draft_len[r] = ops.ite(sh.on, sh.ks, prev_draft)
        # the sample's -1 lands at ntns - shift after the correction ([cite:v1-async-placeholder-outputs])
        sampled = ops.all(sh.on, ops.not_(discard))
        at = ntns - shift
        nxt.v1_hole[r] = ops.ite(ops.all(sampled, at > top), top, ops.ite(ops.all(sampled, at == hole), 0, hole))
        nxt.v1_top[r] = ops.ite(ops.all(sampled, at + 1 > top), at + 1, top)
        nxt.v1_ntns[r] = ops.ite(sh.on, at + ops.ite(sampled, 1, 0), s.v1_ntns[r])
        # the correction the next step applies: this step's rejected drafts
        accepted = a.accepted[r] if cfg.drafts else 0
        nxt.v1_corr[r] = ops.ite(sampled, sh.ks - accepted, 0)
        # unscheduled (or finished) requests leave the persistent batch ([cite:v1-finished-leave-batch],
        # [cite:v1-unscheduled-leave-batch]); scheduled ones are in it after this step
        nxt.v1_in_batch[r] = sh.on
    if run.positional_outputs:
        discards = _positional_outputs(s, ops, shipped, discards, rows)
    return discards, rows


def _positional_outputs(
    s: View, ops: Ops, shipped: list[Shipped], discards: list[Term], rows: list[dict]
) -> list[Term]:
    """vllm-gaudi before its #359: a row is a prompt row iff num_computed < num_prompt
    ([cite:gaudi-prompt-class]), and the decode rows come first ([cite:gaudi-decodes-first]);
    a prompt row yields a token only when its chunk reaches the prompt's end
    ([cite:gaudi-prompt-logits]), and an unfinished one yields none
    ([cite:gaudi-async-no-logits-row]); the tokens sampled, decode rows' first
    ([cite:gaudi-sampled-concat]), are laid over the output's rows from the first, none
    marked invalid ([cite:gaudi-positional-output gaudi-output-invalid-empty]). So a row receives a token iff its
    position is below the number of tokens sampled. Returns, per request, whether its step
    delivers nothing (what the scheduler will see).

    The prompt rows are taken in the step's scheduling order. With two requests that is
    the persistent batch's order (rows enter it appended, in admission order; the swap
    that brings decodes first only exchanges a decode with a prompt) except where a
    running request that left the batch comes back into it beside the other: that step
    is not modelled (the row's `reenters`, a guard of the step), and spec/config.py
    refuses the rule with more than two requests."""
    decode = [sh.c0 >= sh.prompt_len for sh in shipped]
    yielded = ops.count(ops.all(sh.on, ops.not_(d)) for sh, d in zip(shipped, discards))
    out = []
    for r, sh in enumerate(shipped):
        ahead = ops.count(
            ops.all(
                q.on,
                ops.any(
                    ops.all(decode[i], ops.not_(decode[r])),
                    ops.all(decode[i] == decode[r], q.order < sh.order),
                ),
            )
            for i, q in enumerate(shipped)
            if i != r
        )
        delivered = ops.all(sh.on, ahead < yielded)
        beside = ops.any(False, *[q.on for i, q in enumerate(shipped) if i != r])
        reenters = ops.all(sh.on, beside, ops.not_(ops.any(sh.as_new, sh.as_resumed)), ops.not_(s.v1_in_batch[r]))
        rows[r].update(position=ahead, yielded=yielded, delivered=delivered, reenters=reenters)
        out.append(ops.not_(delivered))
    return out


def continue_decode_step(a: View, cfg: Config, ops: Ops, shipped: list[Shipped]) -> Term:
    """Continue Decode's class of a step (tpu-inference): decode-only when the batch's
    scheduled tokens equal its rows, i.e. every scheduled row has exactly one token
    ([cite:tpu-decode-only-by-count tpu-cd-entered]), whatever the scheduler reserved. With
    an abstract rest, whether another row has more than one token is a pick."""
    if not cfg.run.continue_decode:
        return False
    scheduled = [sh.on for sh in shipped]
    ones = [ops.implies(sh.on, sh.n == 1) for sh in shipped]
    others = ops.not_(a.rest_multi) if cfg.rest else True
    # the rest's rows count only beside a focal row; alone, the step is the others' business
    return ops.all(ops.any(*scheduled), others, *ones)


def _zero_placeholders(s, nxt, cfg, ops, r, sh, discard, held, aligned, row) -> None:
    """tpu-inference's own token list (drafts left out: the property is stated without
    them). A sampled step appends a [0] at the new token's position
    ([cite:tpu-placeholder-zeros]). A step first trims the list of each scheduled request
    to the scheduler's count ([cite:tpu-trim-only]) and reads its inputs; after the model
    ran, it writes the previous step's tokens over the list's last entries, popping as many
    entries, only for a request in its own batch ([cite:tpu-substitute-skips
    tpu-substitute-pops]). tpu_pending: where the previous step's [0] is (-1: none);
    tpu_wrong: the lowest position where the list holds a token the scheduler does not
    (-1: none)."""
    pending, wrong = s.tpu_pending[r], s.tpu_wrong[r]

    def lowest(a, b):  # the lower of two positions, -1 meaning none
        return ops.ite(a < 0, b, ops.ite(b < 0, a, ops.min(a, b)))

    cached = ops.all(sh.on, ops.not_(sh.as_new))
    count = ops.min(held, aligned)  # the list's length (with the prompt) after the trim
    wrong = ops.ite(ops.all(cached, wrong >= count), -1, wrong)
    wrong = ops.ite(sh.as_new, -1, wrong)  # a new (or updated) request's list starts afresh
    # what the step reads before the model runs: positions c .. c + n - 1, the
    # scheduler's tokens below T
    row["wrong_at"] = wrong
    row["reads_wrong"] = ops.all(sh.on, wrong >= sh.c0, wrong < sh.c0 + sh.n, wrong < sh.num_tokens)
    # after the model ran: the previous step's token goes over the list's last entry, a
    # [0] popped first, an IndexError when the trim left no output entry
    substituting = ops.all(cached, pending >= 0)
    row["pops_empty"] = ops.all(substituting, count - sh.prompt_len < 1)
    written = count - 1
    misplaced = ops.all(substituting, written != pending)
    wrong = ops.ite(misplaced, lowest(wrong, written), wrong)
    wrong = ops.ite(ops.all(misplaced, pending < count), lowest(wrong, pending), wrong)
    # not in the batch: the [0] stays
    wrong = ops.ite(ops.all(ops.not_(sh.on), pending >= 0), lowest(wrong, pending), wrong)
    nxt.tpu_wrong[r] = wrong
    nxt.tpu_pending[r] = ops.ite(ops.all(sh.on, ops.not_(discard)), sh.c0 + sh.n, -1)


_SLOT_FIELDS = ("prefill_len", "num_computed", "total_len")


def _push_free(nxt: Next, cfg: Config, ops: Ops, cond: Term, slot: Term) -> None:
    """free_indices.append(slot) when cond ([cite:v2-remove-frees-slot])."""
    top = nxt.v2_num_free
    for i in range(cfg.slots):
        nxt.v2_free[i] = ops.ite(ops.all(cond, top == i), slot, nxt.v2_free[i])
    nxt.v2_num_free = ops.ite(cond, top + 1, top)


def _pop_free(nxt: Next, cfg: Config, ops: Ops, cond: Term) -> Term:
    """free_indices.pop() when cond ([cite:v2-add-takes-slot]); returns the slot."""
    top = nxt.v2_num_free
    slot = select(ops, [nxt.v2_free[i] for i in range(cfg.slots)], top - 1)
    nxt.v2_num_free = ops.ite(cond, top - 1, top)
    return slot


def _vacate(nxt: Next, cfg: Config, ops: Ops, cond: Term, r: int) -> None:
    """remove_request ([cite:v2-remove-frees-slot]): the slot returns to the free stack and keeps the
    values its occupant left in it; nothing clears them."""
    slot = nxt.v2_slot[r]
    _push_free(nxt, cfg, ops, cond, slot)
    for name in _SLOT_FIELDS:
        left = getattr(nxt, "v2_left_" + name)
        for i in range(cfg.slots):
            left[i] = ops.ite(ops.all(cond, slot == i), getattr(nxt, "v2_" + name)[r], left[i])
    nxt.v2_present[r] = ops.ite(cond, False, nxt.v2_present[r])


def v2_decide(
    s: View,
    a: View,
    nxt: Next,
    cfg: Config,
    ops: Ops,
    shipped: list[Shipped],
    status_before: list[Term],
) -> tuple[list[Term], list[dict]]:
    """V2 (snapshot or live): per request, whether the kernel zeroes num_sampled, and the
    kernel's row inputs (slot, num_computed, query_len, prefill_len, total_len).

    A request's slot values are kept with the request (v2_prefill_len[r], ...) while it
    is present, and copied into the slot's leftovers when it leaves; that is the same
    state as per-slot arrays, laid out so the kernel reads need no slot lookup."""
    reqs = range(cfg.requests)
    stale_read = "stale-slot-read" in cfg.faults
    # what a stale read of each request would see: the abstraction's leftover picks
    observed_left = [{name: 0 for name in _SLOT_FIELDS} for _ in reqs]

    # 1. finish_requests: drop finished and preempted requests, sorted by id ([cite:v2-finish-requests])
    for r in reqs:
        gone = ops.all(
            nxt.v2_present[r],
            ops.any(status_before[r] == Status.FINISHED, status_before[r] == Status.PREEMPTED),
        )
        _vacate(nxt, cfg, ops, gone, r)

    # the recompute fix: the tokens the scheduler skipped leave the slot's history
    # (fixes/v2-recompute-rollback), before any add writes a slot afresh: total_len, the
    # ids post_update wrote at total_len, and the last sampled token the next step is fed
    # ([cite:v2-history-advance v2-last-sampled-input])
    if cfg.run.drops_skipped and cfg.ships_skipped:
        for r in reqs:
            total = nxt.v2_total_len[r]
            nxt.v2_total_len[r] = ops.ite(nxt.v2_present[r], total - shipped[r].skipped, total)

    # 2. add_requests, in scheduled_new_reqs order: WAITING admissions, then resumed ones
    #    ([cite:v2-resumed-as-new]); from 0.34.0 every admission in admission order, resumed
    #    ones included ([cite:resumed-sent-as-new]); each first drops an old state of the same
    #    id ([cite:v2-add-drops-old-state])
    for resumed_pass in (False, True):
        for p in range(cfg.requests):
            for r in reqs:
                sh = shipped[r]
                here = ops.all(sh.as_resumed if resumed_pass else sh.as_new, sh.admit_pos == p)
                _vacate(nxt, cfg, ops, ops.all(here, nxt.v2_present[r]), r)
                slot = _pop_free(nxt, cfg, ops, here)
                nxt.v2_slot[r] = ops.ite(here, slot, nxt.v2_slot[r])
                nxt.v2_present[r] = ops.ite(here, True, nxt.v2_present[r])
                # [cite:v2-add-writes-slot]: prefill_len = total_len = len(all_token_ids); GPU
                # num_computed_tokens = the scheduler's value at add. Under the
                # stale-slot-read fault the writes do not reach the GPU's view and the
                # slot reads as its previous occupant left it.
                fresh = {"prefill_len": sh.num_tokens, "total_len": sh.num_tokens, "num_computed": sh.c0}
                lost = a.stale_read[r] if stale_read else False
                for name in _SLOT_FIELDS:
                    left = getattr(nxt, "v2_left_" + name)
                    previous = select(ops, [left[i] for i in range(cfg.slots)], slot)
                    if cfg.rest and stale_read:  # the slot may have held any other request
                        previous = getattr(a, "rest_left_" + name)
                    seen = ops.ite(lost, previous, fresh[name])
                    getattr(nxt, "v2_" + name)[r] = ops.ite(here, seen, getattr(nxt, "v2_" + name)[r])
                    observed_left[r][name] = ops.ite(
                        here, select(ops, [left[i] for i in range(cfg.slots)], slot), observed_left[r][name]
                    )

    # 3. the discard kernel, one row per scheduled request ([cite:v2-discard-kernel]), then
    #    post_update: total_len += num_sampled; num_computed += n - num_rejected
    #    ([cite:v2-total-len-advance], [cite:v2-computed-advance])
    discards = []
    rows = []
    for r in reqs:
        sh = shipped[r]
        computed = nxt.v2_num_computed[r]
        if cfg.run.rolls_back:
            # the recompute fix: a cached request whose scheduler count went backwards
            # (a KV-load failure's recompute) has its slot's GPU count rolled back to it
            cached = ops.all(sh.on, ops.not_(sh.as_new), ops.not_(sh.as_resumed))
            computed = ops.ite(ops.all(cached, sh.c0 < computed), sh.c0, computed)
        total = nxt.v2_total_len[r]
        row = {
            "left": observed_left[r],
            "scheduled": sh.on,
            "slot": nxt.v2_slot[r],
            "num_computed": computed,
            "query_len": sh.n,
            "num_draft": sh.ks,
            "prefill_len": nxt.v2_prefill_len[r],
            "total_len": total,
            # the scheduler's prefill-chunk decision, which the recompute fix ships to the runner
            "chunk": sh.chunk,
        }
        # the runner variant's rule: g + n < prefill_len (the kernel, 0.32.0 and 0.33.0),
        # g + n < total_len (the live-length fix), or the scheduler's chunk flag (the fix)
        discard = cfg.run.rule.discards(row, ops)
        row["discard"] = discard
        discards.append(discard)
        rows.append(row)
        accepted = a.accepted[r] if cfg.drafts else 0
        sampled = ops.ite(discard, 0, 1 + accepted)
        rejected = ops.ite(discard, 0, sh.ks - accepted)
        nxt.v2_total_len[r] = ops.ite(sh.on, total + sampled, total)
        nxt.v2_num_computed[r] = ops.ite(sh.on, computed + sh.n - rejected, computed)
    return discards, rows
