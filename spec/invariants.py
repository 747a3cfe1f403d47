"""Auxiliary invariants of the contract: the facts k-induction needs besides a property.

Each lemma is a claim about every reachable state under the configurations its
`applies` accepts. They are not assumed: the prover checks each one (base case from
the initial states, and preserved by every transition that keeps the engine alive)
together with the property it helps prove. A lemma that is false somewhere shows up as
a failed proof with a counterexample, never as a silent pass.

Notation as in the contract notes: T tokens, c computed, P placeholders, F in flight,
S stale, n/ks/r/d a queue entry's scheduled/drafts/reserved/sampled counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from vllm_contract.spec.config import Config
from vllm_contract.spec.engine import pending_rejections, spec_k
from vllm_contract.spec.ops import Ops
from vllm_contract.spec.properties import in_flight_sum, placeholder_accounting
from vllm_contract.spec.state import View
from vllm_contract.spec.vocabulary import Status


@dataclass(frozen=True)
class Lemma:
    name: str
    doc: str
    applies: Callable[[Config], bool]
    holds: Callable[[View, Config, Ops], object]
    # properties or lemmas that imply this one (checked in tests/test_prover.py): when
    # one of them is proved alongside, this lemma adds nothing but solver work
    implied_by: tuple[str, ...] = ()


def _doc(fn: Callable) -> str:
    """A lemma's doc: its function's docstring, which every lemma has."""
    if fn.__doc__ is None:
        raise TypeError(f"lemma {fn.__name__} has no docstring")
    return fn.__doc__


def _reqs(cfg):
    return range(cfg.requests)


def _queue(cfg):
    return range(cfg.queue_depth)


def _waiting_like(s: View, r: int, ops: Ops):
    st = s.status[r]
    return ops.any(st == Status.WAITING, st == Status.PREEMPTED, st == Status.WAITING_FOR_STREAMING_REQ)


def _in_flight(s: View, i: int, r: int, ops: Ops):
    return ops.all(i < s.queue_len, s.q_scheduled[i, r] != 0)


# ------------------------------------------------------------------ queue shape


def queue_shape(s: View, cfg: Config, ops: Ops):
    """The queue holds 0..pp+1 steps; unused positions and absent requests read 0."""
    K = spec_k(s, cfg)
    conds = [s.queue_len >= 0, s.queue_len <= cfg.queue_depth]
    if cfg.k_symbolic:
        conds.append(K >= 0)
        if cfg.spec_tokens_max is not None:
            conds.append(K <= cfg.spec_tokens_max)
    for i in _queue(cfg):
        for r in _reqs(cfg):
            n, ks, rsv, d = s.q_scheduled[i, r], s.q_spec[i, r], s.q_reserved[i, r], s.q_sampled[i, r]
            empty = ops.all(
                n == 0,
                ks == 0,
                rsv == 0,
                d == 0,
                s.q_epoch[i, r] == 0,
                ops.not_(s.q_admitted[i, r]),
                s.q_order[i, r] == 0,
            )
            sampled_ok = ops.any(d == 0, d >= 1)
            if cfg.run.continue_decode:  # a decode-only step returns up to max_decode_steps tokens
                sampled_ok = ops.any(d == 0, ops.all(d >= 1, d <= ops.max(1 + ks, cfg.run.continue_decode)))
            elif "over-delivery" not in cfg.faults:
                sampled_ok = ops.any(d == 0, ops.all(d >= 1, d <= 1 + ks))
            entry = ops.all(
                n >= 1,
                ks >= 0,
                ks <= K,
                ops.any(rsv == 0, rsv == 1 + ks),
                sampled_ok,
                s.q_epoch[i, r] >= 0,
                s.q_epoch[i, r] <= s.epoch[r],
                s.q_order[i, r] >= 0,
                s.q_order[i, r] < cfg.requests,
            )
            conds.append(ops.implies(i >= s.queue_len, empty))
            conds.append(ops.implies(i < s.queue_len, ops.any(empty, entry)))
            # epochs only grow along the queue (older steps first)
            for j in range(i + 1, cfg.queue_depth):
                conds.append(
                    ops.implies(
                        ops.all(j < s.queue_len, n != 0, s.q_scheduled[j, r] != 0),
                        s.q_epoch[i, r] <= s.q_epoch[j, r],
                    )
                )
    return ops.all(*conds)


def request_shape(s: View, cfg: Config, ops: Ops):
    """Counters are in range; the in-flight count is the sum over the queue."""
    conds = []
    for r in _reqs(cfg):
        conds += [
            s.status[r] >= Status.WAITING,
            s.status[r] <= Status.FINISHED,
            s.num_prompt_tokens[r] >= 1,
            s.num_tokens[r] >= 1,
            s.epoch[r] >= 0,
            s.num_spec_tokens[r] >= 0,
            s.num_spec_tokens[r] <= spec_k(s, cfg),
            ops.implies(
                s.status[r] != Status.FINISHED,
                s.num_in_flight_tokens[r] == in_flight_sum(s, cfg, ops, r, lambda i, r=r: s.q_scheduled[i, r]),
            ),
            s.num_stale_output_tokens[r] >= 0,
        ]
        # drafts exist only after a sampled step; preemption and stops clear them (a
        # resumable stop without the rollback keeps them: 0.29.0, 0.30.0, h4)
        if _stops_roll_back(cfg):
            conds.append(ops.implies(s.num_spec_tokens[r] > 0, ops.not_(_waiting_like(s, r, ops))))
        if cfg.has("stream"):
            conds.append(ops.implies(s.pending_update[r], s.pending_update_len[r] >= 1))
            conds.append(ops.implies(s.pending_update[r], s.resumable[r]))
    return ops.all(*conds)


def unshipped_finished(s: View, cfg: Config, ops: Ops):
    """An id not yet shipped to the runner as finished is a finished request's
    ([cite:free-request-records-finished], cleared at the next schedule)."""
    return ops.all(*[ops.implies(s.finished_unshipped[r], s.status[r] == Status.FINISHED) for r in _reqs(cfg)])


def computed_unfinished(s: View, cfg: Config, ops: Ops):
    """c >= 0 while a request is unfinished. A stop that trims drafts rolls c back
    (0.33.0): after a KV-load recompute that can take a finishing request below 0."""
    return ops.all(*[ops.implies(s.status[r] != Status.FINISHED, s.num_computed_tokens[r] >= 0) for r in _reqs(cfg)])


def within_lengths(s: View, cfg: Config, ops: Ops):
    """An unfinished request is below its lengths: its tokens and its computed position
    stay under max_model_len (a step stops short of it, a delivery that reaches it stops
    the request), and its output under max_tokens."""
    conds = []
    for r in _reqs(cfg):
        mine = []
        if cfg.max_model_len is not None:
            mine += [s.num_tokens[r] < cfg.max_model_len, s.num_computed_tokens[r] < cfg.max_model_len]
        if cfg.max_tokens is not None:
            mine.append(s.num_tokens[r] - s.num_prompt_tokens[r] < cfg.max_tokens)
        conds.append(ops.implies(s.status[r] != Status.FINISHED, ops.all(*mine)))
    return ops.all(*conds)


def _computed_stays_nonnegative(cfg: Config) -> bool:
    """Without KV-load failures, or with at most one draft: a recompute from 0 with two
    rejected drafts takes a running request's c to -1 (finding 9)."""
    small_k = (
        cfg.spec_tokens is not None
        and cfg.spec_tokens <= 1
        or (cfg.k_symbolic and cfg.spec_tokens_max is not None and cfg.spec_tokens_max <= 1)
    )
    return not cfg.has("kvfail") or small_k


def stale_share(s: View, cfg: Config, ops: Ops):
    """S is exactly the in-flight tokens scheduled before the last preemption/stop, and
    deliverable stale output keeps a request out of RUNNING ([cite:stale-output-blocks-resume])."""
    conds = []
    for r in _reqs(cfg):
        old = in_flight_sum(
            s, cfg, ops, r, lambda i, r=r: s.q_scheduled[i, r], lambda i, r=r: s.q_epoch[i, r] != s.epoch[r]
        )
        conds.append(ops.implies(s.status[r] != Status.FINISHED, s.num_stale_output_tokens[r] == old))
        # deliver-mode stale output exists only for a preempted (or finished) request
        conds.append(
            ops.implies(
                ops.all(s.num_stale_output_tokens[r] > 0, ops.not_(s.drop_stale_output[r])),
                ops.any(s.status[r] == Status.PREEMPTED, s.status[r] == Status.FINISHED),
            )
        )
    return ops.all(*conds)


def idle_has_no_placeholders(s: View, cfg: Config, ops: Ops):
    """A request that is not running holds no placeholders and no current-epoch step."""
    conds = []
    for r in _reqs(cfg):
        current = in_flight_sum(
            s, cfg, ops, r, lambda i, r=r: s.q_scheduled[i, r], lambda i, r=r: s.q_epoch[i, r] == s.epoch[r]
        )
        conds.append(ops.implies(_waiting_like(s, r, ops), ops.all(s.num_output_placeholders[r] == 0, current == 0)))
    return ops.all(*conds)


def decode_gap(s: View, cfg: Config, ops: Ops):
    """A running request always has >= 1 token left to compute: T + P - c >= 1; so a
    step's drafts never fill all its scheduled tokens (ks <= n - 1, [cite:spec-tokens-fit])."""
    conds = []
    for r in _reqs(cfg):
        conds.append(
            ops.implies(
                s.status[r] == Status.RUNNING,
                s.num_tokens[r] + s.num_output_placeholders[r] - s.num_computed_tokens[r] >= 1,
            )
        )
        for i in _queue(cfg):
            conds.append(ops.implies(_in_flight(s, i, r, ops), s.q_spec[i, r] <= s.q_scheduled[i, r] - 1))
    return ops.all(*conds)


def frontier(s: View, cfg: Config, ops: Ops):
    """The materialised frontier c - P sits one token short of T once a request samples,
    and below T while it prefills (what makes the resumable stop's rollback land on the
    history, [cite:resumable-stop-rollback])."""
    conds = []
    for r in _reqs(cfg):
        f = s.num_computed_tokens[r] - s.num_output_placeholders[r]
        T = s.num_tokens[r]
        running = s.status[r] == Status.RUNNING
        conds.append(ops.implies(ops.all(running, ops.not_(s.is_prefill_chunk[r])), f == T - 1))
        conds.append(
            ops.implies(ops.all(running, s.is_prefill_chunk[r]), ops.all(f < T, s.num_output_placeholders[r] == 0))
        )
    return ops.all(*conds)


def placeholders_nonnegative(s: View, cfg: Config, ops: Ops):
    """P >= 0 while a request is unfinished (a finished one's counter is never read again)."""
    return ops.all(
        *[ops.implies(s.status[r] != Status.FINISHED, s.num_output_placeholders[r] >= 0) for r in _reqs(cfg)]
    )


def session_prompt(s: View, cfg: Config, ops: Ops):
    """Where a waiting request resumes from: a new or continued session has its whole
    history as prompt (L = T) and c < T; a session waiting for input sits at T - 1,
    past its prompt (or at 0 after a stale stop, where a release allows one); a
    preempted request restarts from 0 ([cite:preempt-resets-request], [cite:resumable-stop-rollback])."""
    conds = []
    for r in _reqs(cfg):
        st, L, T, c = s.status[r], s.num_prompt_tokens[r], s.num_tokens[r], s.num_computed_tokens[r]
        conds.append(L <= T)
        conds.append(ops.implies(st == Status.WAITING, ops.all(L == T, c < T)))
        at_frontier = ops.all(L <= c, c == T - 1)
        if cfg.prof.stale_stop_of_preempted_session:
            # a stale frame that stops a preempted session leaves it at c = 0, with
            # the frame's tokens appended past its prompt
            at_frontier = ops.any(at_frontier, ops.all(c == 0, L <= T - 1))
        conds.append(ops.implies(st == Status.WAITING_FOR_STREAMING_REQ, at_frontier))
        conds.append(ops.implies(st == Status.PREEMPTED, c == 0))
    return ops.all(*conds)


# ------------------------------------------------------------ reservations


def accounting_at_least(s: View, cfg: Config, ops: Ops):
    """With KV-load failures a skipped step leaks its reservation: P >= owed."""
    conds = []
    for r in _reqs(cfg):
        owed = in_flight_sum(
            s, cfg, ops, r, lambda i, r=r: s.q_reserved[i, r], lambda i, r=r: s.q_epoch[i, r] == s.epoch[r]
        )
        conds.append(ops.implies(s.status[r] != Status.FINISHED, s.num_output_placeholders[r] >= owed))
    return ops.all(*conds)


def in_flight_agreement(s: View, cfg: Config, ops: Ops):
    """Every step in flight returns tokens exactly when the scheduler reserved for it."""
    return ops.all(
        *[
            ops.implies(_in_flight(s, i, r, ops), (s.q_sampled[i, r] > 0) == (s.q_reserved[i, r] > 0))
            for r in _reqs(cfg)
            for i in _queue(cfg)
        ]
    )


# ------------------------------------------------------------------ runners


def v1_aligned(s: View, cfg: Config, ops: Ops):
    """J: the V1 runner's optimistic length never falls behind the scheduler's T + P,
    so its trim makes Nr = T + P before every prepare ([cite:v1-optimistic-draft-extend v1-trim-outputs]).
    A runner that never rebuilds its list ([cite:tpu-trim-only]) keeps it for a running or
    preempted request out of its batch too, where T + P only shrinks, but for the tokens of
    stale steps still to be delivered (their samples are in the list already)."""
    conds = []
    for r in _reqs(cfg):
        length = s.v1_num_tokens[r] + s.v1_prev_draft_len[r]
        if cfg.run.rebuilds_outputs:
            held = ops.all(s.status[r] == Status.RUNNING, s.v1_in_batch[r])
            conds.append(ops.implies(held, length >= s.num_tokens[r] + s.num_output_placeholders[r]))
            continue
        stale_to_come = in_flight_sum(
            s,
            cfg,
            ops,
            r,
            lambda i, r=r: s.q_sampled[i, r],
            lambda i, r=r: ops.all(s.q_epoch[i, r] != s.epoch[r], ops.not_(s.drop_stale_output[r])),
        )
        held = ops.any(s.status[r] == Status.RUNNING, s.status[r] == Status.PREEMPTED)
        conds.append(s.v1_prev_draft_len[r] >= 0)
        conds.append(ops.implies(held, length >= s.num_tokens[r] + s.num_output_placeholders[r] + stale_to_come))
    return ops.all(*conds)


def v1_inputs_known(s: View, cfg: Config, ops: Ops):
    """The V1 runner holds a real id for every position it will read from the host: a
    running request in the batch that was sampled in the last step is caught up
    (c >= T + P - 1: only the device's token is fed), one that was not has no
    placeholder and has gained no token since it entered the batch (T + P <= the T it
    entered with)."""
    return ops.all(
        *[
            ops.implies(
                ops.all(s.status[r] == Status.RUNNING, s.v1_in_batch[r]),
                ops.ite(
                    s.v1_prev_sampled[r],
                    s.num_computed_tokens[r] >= s.num_tokens[r] + s.num_output_placeholders[r] - 1,
                    s.num_tokens[r] + s.num_output_placeholders[r] <= s.v1_entered_at[r],
                ),
            )
            for r in _reqs(cfg)
        ]
        + [
            # the batch the runner holds is the newest step's: in it iff scheduled there,
            # sampled iff that step returns tokens for it
            ops.implies(
                ops.all(s.status[r] == Status.RUNNING, s.queue_len - 1 == i),
                ops.all(
                    s.v1_in_batch[r] == (s.q_scheduled[i, r] != 0), s.v1_prev_sampled[r] == (s.q_sampled[i, r] > 0)
                ),
            )
            for r in _reqs(cfg)
            for i in _queue(cfg)
        ]
    )


def v2_slots(s: View, cfg: Config, ops: Ops):
    """Present requests own distinct slots; the free stack holds exactly the others."""
    conds = []
    present = [s.v2_present[r] for r in _reqs(cfg)]
    conds.append(s.v2_num_free == cfg.slots - ops.count(present))
    for r in _reqs(cfg):
        conds.append(ops.implies(present[r], ops.all(s.v2_slot[r] >= 0, s.v2_slot[r] < cfg.slots)))
        for q in _reqs(cfg):
            if q < r:
                conds.append(ops.implies(ops.all(present[q], present[r]), s.v2_slot[q] != s.v2_slot[r]))
    for i in range(cfg.slots):
        listed = i < s.v2_num_free
        conds.append(ops.implies(listed, ops.all(s.v2_free[i] >= 0, s.v2_free[i] < cfg.slots)))
        for r in _reqs(cfg):
            conds.append(ops.implies(ops.all(listed, present[r]), s.v2_free[i] != s.v2_slot[r]))
        for j in range(i):
            conds.append(ops.implies(listed, s.v2_free[j] != s.v2_free[i]))
    # running (and queued) requests are known to the runner once admitted
    for r in _reqs(cfg):
        conds.append(ops.implies(s.status[r] == Status.RUNNING, present[r]))
    return ops.all(*conds)


def v2_tracks_scheduler(s: View, cfg: Config, ops: Ops):
    """K: a running request's slot mirrors the scheduler: while prefilling its
    prefill_len is T and its GPU computed count is c; once decoding it is past
    prefill_len and one token short of T + P (contract notes §5.3, K')."""
    conds = []
    for r in _reqs(cfg):
        T, c, P = s.num_tokens[r], s.num_computed_tokens[r], s.num_output_placeholders[r]
        g, pl, tl = s.v2_num_computed[r], s.v2_prefill_len[r], s.v2_total_len[r]
        pending_rejects = pending_rejections(s, cfg, ops, r)  # what positions-agree subtracts too
        sampled_ahead = in_flight_sum(
            s, cfg, ops, r, lambda i, r=r: s.q_sampled[i, r], lambda i, r=r: s.q_epoch[i, r] == s.epoch[r]
        )
        prefilling = ops.all(P == 0, pl == T, g == c, c < T, tl == T)
        decoding = ops.all(g >= pl, T + P - c == 1, g == c - pending_rejects, tl == T + sampled_ahead)
        conds.append(ops.implies(s.status[r] == Status.RUNNING, ops.any(prefilling, decoding)))
    return ops.all(*conds)


def v2_history(s: View, cfg: Config, ops: Ops):
    """The recompute fix keeps a running request's slot on the scheduler's sequence: its
    total_len is T, plus what its current steps in flight sampled, plus the tokens of a
    skipped step the scheduler has still to tell the runner about (history-agrees once
    they are dropped, at the next SchedulerOutput)."""
    conds = []
    for r in _reqs(cfg):
        sampled_ahead = in_flight_sum(
            s, cfg, ops, r, lambda i, r=r: s.q_sampled[i, r], lambda i, r=r: s.q_epoch[i, r] == s.epoch[r]
        )
        held = s.num_tokens[r] + sampled_ahead + s.skipped_unshipped[r]
        conds.append(ops.implies(s.status[r] == Status.RUNNING, ops.all(s.v2_present[r], s.v2_total_len[r] == held)))
    return ops.all(*conds)


def v2_never_behind(s: View, cfg: Config, ops: Ops):
    """Without drafts, the recompute fix keeps a running request's slot count at or above
    the scheduler's: a KV-load failure only lowers the scheduler's, and the next step that
    schedules the request rolls the slot back to it (positions-agree at that step)."""
    return ops.all(
        *[
            ops.implies(
                s.status[r] == Status.RUNNING,
                ops.all(s.v2_present[r], s.v2_num_computed[r] >= s.num_computed_tokens[r]),
            )
            for r in _reqs(cfg)
        ]
    )


def decode_cadence(s: View, cfg: Config, ops: Ops):
    """V2 with pipeline stages: the step counter only grows from 0, and a request's next
    eligible decode step is at most pp steps past it (set to current_step + pp when it
    decodes, [cite:next-decode-eligible]), so the decode skip ([cite:decode-eligible-skip])
    holds a running request back for fewer than pp schedules."""
    return ops.all(
        s.current_step >= 0,
        *[s.next_decode_eligible_step[r] <= s.current_step + cfg.pp for r in _reqs(cfg)],
    )


def _no(*faults_or_families):
    def applies(cfg: Config) -> bool:
        return not any(x in cfg.faults or x in cfg.events for x in faults_or_families)

    return applies


def _all_of(*tests):
    return lambda cfg: all(t(cfg) for t in tests)


def _any_of(*tests):
    return lambda cfg: any(t(cfg) for t in tests)


def _stops_roll_back(cfg: Config) -> bool:
    """Every resumable stop rolls back to the safe frontier: the profile does (not 0.29.0,
    0.30.0, h4), or the configuration has no streaming sessions at all."""
    return cfg.prof.stop_rolls_back or not cfg.has("stream")


def _sessions_consistent(cfg: Config) -> bool:
    """A KV-load failure or a fault can make a session stop below its prompt (c - P < L),
    after which its prompt is longer than its history (the kvfail-stream finding)."""
    return _stops_roll_back(cfg) and (not cfg.has("stream") or _no("kvfail", "stale-slot-read", "over-delivery")(cfg))


def _marks_stale_everywhere(cfg: Config) -> bool:
    """Preemption and reset both mark in-flight output stale (not h1, h2, h3)."""
    return cfg.prof.preempt_marks_stale and cfg.prof.reset == "preempt-drop-stale"


def _zeroes_when_idle(cfg: Config) -> bool:
    """Preemption and resumable stops both zero placeholders (not h1, h4)."""
    return cfg.prof.preempt_marks_stale and _stops_roll_back(cfg)


def _honours(cfg: Config) -> bool:
    """The runner samples what the scheduler reserved for, faults aside: not a plugin
    runner that samples chunks (Continue Decode's one-token rows, vllm-metal's MLX path)."""
    return cfg.run.honours_reservation


LEMMAS: tuple[Lemma, ...] = (
    Lemma("queue-shape", _doc(queue_shape), lambda cfg: True, queue_shape),
    Lemma("request-shape", _doc(request_shape), lambda cfg: True, request_shape),
    # true everywhere; only idle-only-when-done (streaming sessions) needs it, and elsewhere
    # it would cost solver work for nothing
    Lemma("unshipped-finished", _doc(unshipped_finished), lambda cfg: cfg.has("stream"), unshipped_finished),
    Lemma(
        "computed-unfinished",
        _doc(computed_unfinished),
        _computed_stays_nonnegative,
        computed_unfinished,
        implied_by=("computed-nonnegative",),
    ),
    Lemma("stale-share", _doc(stale_share), _marks_stale_everywhere, stale_share),
    Lemma(
        "within-lengths",
        _doc(within_lengths),
        lambda cfg: cfg.max_model_len is not None or cfg.max_tokens is not None,
        within_lengths,
    ),
    Lemma(
        "idle-no-placeholders",
        _doc(idle_has_no_placeholders),
        _all_of(_zeroes_when_idle, _honours),
        idle_has_no_placeholders,
    ),
    # over-committed spec tokens roll c forward past T + P when P is already 0
    Lemma("decode-gap", _doc(decode_gap), _all_of(_no("over-delivery"), _honours), decode_gap),
    Lemma(
        "frontier",
        _doc(frontier),
        _all_of(_no("kvfail", "stale-slot-read", "over-delivery"), _zeroes_when_idle, _honours),
        frontier,
    ),
    Lemma(
        "placeholders-nonnegative",
        _doc(placeholders_nonnegative),
        lambda cfg: True,
        placeholders_nonnegative,
        implied_by=("counter-nonnegative", "placeholder-accounting", "accounting-exact", "accounting-at-least"),
    ),
    Lemma("session-prompt", _doc(session_prompt), _sessions_consistent, session_prompt),
    # the property placeholder-accounting itself, as a lemma where it is not proved alongside
    Lemma(
        "accounting-exact",
        _doc(placeholder_accounting),
        _all_of(_no("kvfail", "stale-slot-read", "over-delivery"), _honours),
        placeholder_accounting,
        implied_by=("placeholder-accounting",),
    ),
    # needs a runner that agrees with the scheduler: V1, or V2 without KV-load failures,
    # and sessions that resume from their whole history
    # and a runner that commits no more than it sampled: over-committed tokens lengthen
    # T, and V1's later steps are discarded where the scheduler reserved (finding on 0.33.0)
    Lemma(
        "in-flight-agreement",
        _doc(in_flight_agreement),
        _all_of(
            _no("stale-slot-read", "over-delivery"),
            _sessions_consistent,
            lambda cfg: cfg.run.follows_scheduler or not cfg.has("kvfail"),
            _honours,
        ),
        in_flight_agreement,
    ),
    # the step-reservation guard keeps it whatever the runner does: a step never gives
    # back more than it reserved
    Lemma(
        "accounting-at-least",
        _doc(accounting_at_least),
        _any_of(
            _all_of(
                _no("stale-slot-read", "over-delivery"),
                _sessions_consistent,
                lambda cfg: cfg.run.follows_scheduler or not cfg.has("kvfail"),
                _honours,
            ),
            lambda cfg: cfg.guard == "step-reservation",
        ),
        accounting_at_least,
        implied_by=("placeholder-accounting", "accounting-exact"),
    ),
    # over-committed tokens lengthen T beyond what the runner counted for the step
    Lemma(
        "v1-aligned",
        _doc(v1_aligned),
        _all_of(lambda cfg: cfg.is_v1, _sessions_consistent, _no("over-delivery"), _honours),
        v1_aligned,
    ),
    # a KV-load failure rolls c back under a request that stays in the batch (the finding)
    Lemma(
        "v1-inputs-known",
        _doc(v1_inputs_known),
        _all_of(lambda cfg: cfg.is_v1, _sessions_consistent, _no("over-delivery", "kvfail"), _honours),
        v1_inputs_known,
    ),
    Lemma(
        "v2-history",
        _doc(v2_history),
        _all_of(
            lambda cfg: cfg.is_v2 and cfg.run.drops_skipped and cfg.ships_skipped,
            _no("stale-slot-read", "over-delivery"),
            _sessions_consistent,
        ),
        v2_history,
    ),
    Lemma(
        "v2-never-behind",
        _doc(v2_never_behind),
        _all_of(
            lambda cfg: cfg.is_v2 and cfg.run.rolls_back and cfg.spec_tokens == 0,
            _no("stale-slot-read", "over-delivery"),
            _sessions_consistent,
        ),
        v2_never_behind,
    ),
    Lemma("decode-cadence", _doc(decode_cadence), lambda cfg: cfg.is_v2 and cfg.pp > 1, decode_cadence),
    Lemma(
        "v2-tracks-scheduler",
        _doc(v2_tracks_scheduler),
        _all_of(lambda cfg: cfg.is_v2, _no("kvfail", "stale-slot-read", "over-delivery")),
        v2_tracks_scheduler,
    ),
)

# Facts about the model's own bookkeeping that no contract property depends on: not
# assumed by the matrix's proofs (they cost solver time there for nothing), proved on
# their own in tests/test_prover.py.
BOOKKEEPING: tuple[Lemma, ...] = (Lemma("v2-slots", _doc(v2_slots), lambda cfg: cfg.is_v2, v2_slots),)

BY_NAME = {lemma.name: lemma for lemma in LEMMAS + BOOKKEEPING}


def lemmas_for(cfg: Config, proved: list[str] | tuple[str, ...] = ()) -> list[Lemma]:
    """The lemmas a proof of these properties under cfg assumes: every lemma that
    holds there, less those implied by a proved property or by another chosen lemma."""
    chosen = [lemma for lemma in LEMMAS if lemma.applies(cfg)]
    dropping = True
    while dropping:  # one at a time, so two lemmas that imply each other keep one
        dropping = False
        for lemma in chosen:
            others = set(proved) | {other.name for other in chosen if other is not lemma}
            if others.intersection(lemma.implied_by):
                chosen.remove(lemma)
                dropping = True
                break
    return chosen
