"""What the scheduler's events share, and the init event: the engine loop's view of the requests.

The engine loop is EngineCore.step_with_batch_queue ([cite:step-with-batch-queue]): while requests
exist and the queue has room it schedules; it delivers the oldest step only when the
queue is full or nothing is left to schedule. Front-end calls (reset, a streaming
update) and preemption land between engine steps, when the queue has room; aborts are
also applied just before a delivery ([cite:aborts-before-delivery]). The events are
spec/schedule.py, spec/deliver.py and spec/front_end.py; each function mirrors the vLLM
code it cites (paths in spec/vocabulary.py).
"""

from __future__ import annotations

from vllm_contract.spec.config import Config
from vllm_contract.spec.events import Arg, Effect
from vllm_contract.spec.ops import Ops
from vllm_contract.spec.profiles import Profile
from vllm_contract.spec.state import Next, View
from vllm_contract.spec.vocabulary import Status

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
        "rest_multi": Arg(
            "rest_multi", bool, "rest: another row of the step has more than one token (Continue Decode's class)"
        ),
        # any whole blocks below num_tokens: the others may have cached any of its blocks (a
        # twin prompt, greedy outputs), and evicted any of its own
        "rest_hit_blocks": Arg(
            "rest_hit_blocks", int, "rest: whole blocks of its tokens the prefix cache holds at its admission", lo=0
        ),
        # any values at all: what the slot's previous occupant left (a superset of what it can leave)
        "rest_left_prefill_len": Arg(
            "rest_left_prefill_len", int, "rest: prefill_len a previous occupant left in the slot"
        ),
        "rest_left_num_computed": Arg("rest_left_num_computed", int, "rest: num_computed a previous occupant left"),
        "rest_left_total_len": Arg("rest_left_total_len", int, "rest: total_len a previous occupant left"),
    }
    return [known[n] for n in names]


def spec_k(s: View, cfg: Config):
    """K: the configuration's draft count, or the trace's when the configuration leaves
    it open (a constant state variable, so a proof covers every K)."""
    return s.spec_tokens if cfg.k_symbolic else cfg.spec_tokens


def served_first(s: View, cfg: Config, r: int):
    """Whether request r waits in the queue the waiting loop serves first: kv_holding_waiting,
    the requests holding computed tokens ([cite:enqueue-waiting-kv-holding]), or on 0.29.0 and
    0.30.0 skipped_waiting ([cite:select-waiting-queue]); FCFS (waiting_rank) within each."""
    if cfg.prof.waiting_queues == "skipped-first":
        return s.in_skipped_waiting[r]
    return s.num_computed_tokens[r] > 0


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


def merge_checks(ops: Ops, checks: list) -> dict:
    out: dict = {}
    for name, cond in checks:
        out.setdefault(name, []).append(cond)
    return {name: ops.all(*conds) for name, conds in out.items()}


def session_kept(prof: Profile, T, c, ops: Ops):
    """_update_request_as_session: how many tokens of the history a session keeps, and
    the condition of the assert that guards it (True where there is none)."""
    if prof.session_keep == "computed":
        # [cite:session-keep-computed]: the history up to num_computed_tokens, as a Python
        # slice end: a negative count keeps all but its last -c tokens (none below 0). Without
        # the stop's rollback (0.29.0, 0.30.0) a session reaches here with c < 0 after a
        # KV-load recompute under rejected drafts (finding 9)
        return ops.ite(c >= 0, ops.min(T, c), ops.max(0, T + c)), True
    keep_end = T - 1  # 0.33.0: every output token but the last sampled one
    return keep_end, keep_end >= c


def init_args(cfg: Config) -> tuple[Arg, ...]:
    args = [Arg("prompt_len", int, "prompt tokens of each request", over=("req",), lo=1)]
    if cfg.has("stream"):
        args.append(Arg("resumable", bool, "the request is a streaming-input session", over=("req",)))
    if cfg.k_symbolic:
        args.append(
            Arg("spec_tokens", int, "K, num_speculative_tokens, for the whole trace", lo=0, hi=cfg.spec_tokens_max)
        )
    if shares_prefix(cfg):
        args.append(Arg("shared_prefix", int, "prompt tokens every request's prompt starts with", lo=0))
    return tuple(args)


def shares_prefix(cfg: Config) -> bool:
    """Concrete requests under prefix caching: the trace says how long a prefix their
    prompts share (an abstract rest may share anything with the focal request)."""
    return cfg.has("prefix-cache") and not cfg.rest and cfg.requests > 1


def common_prefix(s: View, cfg: Config, ops: Ops, r: int, q: int):
    """Tokens requests r and q have in common from position 0: the prefix their prompts
    share, short of each prompt's last token (a request's own tokens, its last prompt token
    always among them, and its outputs after it never match another's)."""
    own = ops.min(s.num_prompt_tokens[r], s.num_prompt_tokens[q]) - 1
    return ops.min(s.shared_prefix, own)


def init(a: View, nxt: Next, cfg: Config, ops: Ops) -> Effect:
    """All requests added, in id order, before the first step ([cite:add-request-streaming-update add-request-new])."""
    guard = []
    for r in range(cfg.requests):
        if cfg.prompt_lens is not None:
            guard.append(a.prompt_len[r] == cfg.prompt_lens[r])
        if cfg.max_model_len is not None:  # a prompt vLLM accepts, with room to sample a token
            guard.append(a.prompt_len[r] < cfg.max_model_len)
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
        if cfg.tracks_held_blocks:
            nxt.holds_blocks[r] = False
        nxt.waiting_rank[r] = r
        if cfg.has("prefix-cache"):
            if not cfg.rest:
                nxt.cached_tokens[r] = 0
            nxt.hit_tokens[r] = 0
        if cfg.prof.waiting_queues == "skipped-first":
            nxt.in_skipped_waiting[r] = False
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
        if cfg.ships_skipped:
            nxt.skipped_unshipped[r] = 0
        if cfg.is_v1:
            nxt.v1_num_tokens[r] = 0
            nxt.v1_in_batch[r] = False
            nxt.v1_prev_draft_len[r] = 0
            nxt.v1_prev_sampled[r] = False
            nxt.v1_entered_at[r] = 0
            nxt.v1_hole[r] = 0
            nxt.v1_top[r] = 0
            nxt.v1_ntns[r] = 0
            nxt.v1_corr[r] = 0
            if cfg.run.zero_placeholders:
                nxt.tpu_pending[r] = -1
                nxt.tpu_wrong[r] = -1
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
    if shares_prefix(cfg):
        nxt.shared_prefix = a.shared_prefix
    nxt.next_running_rank = 0
    nxt.waiting_front = 0
    nxt.waiting_back = cfg.requests
    nxt.queue_len = 0
    return Effect(guard=ops.all(*guard))
