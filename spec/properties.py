"""The properties the contract is checked against, and vLLM's asserts on its paths.

Properties say what must hold of the state or of a step, whatever vLLM does about it.
Transition properties are conditions an event returns in `Effect.checks`; state
properties are invariants of every reachable state; a progress property is about the
engine's own next steps from every reachable state (model/progress.py checks it).

Asserts are what vLLM does about it: an `assert` statement in vLLM's code that kills
EngineCore when it fails. An event returns each assert it passes through in
`Effect.asserts` (name -> condition that holds when the assert passes). Once an assert
fires the engine is dead: the trace ends there, so no counterexample may pass through
an earlier firing. A property's violation is a *crash* when an assert fires at the
same step, and *silent* otherwise; which one depends on the release (0.32.0 asserts
the counter after every live delivery, 0.33.0 only when it was positive before).

Some properties are nothing but an assert ("vLLM's assert X never fires"): their check
is the conjunction of their asserts' conditions, computed from `Effect.asserts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from vllm_contract.spec.config import Config
from vllm_contract.spec.engine import has_requests
from vllm_contract.spec.ops import Ops
from vllm_contract.spec.state import View
from vllm_contract.spec.vocabulary import Status


@dataclass(frozen=True)
class Property:
    name: str
    kind: str  # "transition" | "state" | "progress"
    doc: str
    cite: str  # citation id(s) in spec/citations.toml, space-separated
    holds: Callable[[View, Config, Ops], object] | None = None  # state properties only
    asserts: tuple[str, ...] = ()  # defined as "none of these asserts fires"
    applies: Callable[[Config], bool] = lambda cfg: True
    # a violation leaves a request the scheduler never runs again: without an assert,
    # vLLM's reaction is a hang (model/hang.py shows it by running the engine loop on)
    hangs: bool = False

    def state_holds(self, view: View, cfg: Config, ops: Ops) -> object:
        """A state property's condition at a state (a transition or progress property has none)."""
        if self.holds is None:
            raise TypeError(f"property {self.name} ({self.kind}) has no state condition")
        return self.holds(view, cfg, ops)


@dataclass(frozen=True)
class Assert:
    """One vLLM assert statement the contract's paths pass through."""

    name: str
    statement: str | None  # the statement as vLLM writes it (whitespace-normalised);
    #                        None: the model ends the trace although vLLM has no assert
    property: str  # the property whose violation it reports
    cite: str  # citation id in spec/citations.toml
    doc: str = ""
    # where it is: "scheduler" (every vLLM target runs it) or "runner" (vLLM's model runner's
    # or a plugin's: only a target that runs that runner can see it fire; elsewhere the model
    # ends the trace)
    site: Literal["scheduler", "runner"] = "scheduler"


def counter_nonnegative(s: View, cfg: Config, ops: Ops):
    """num_output_placeholders is never negative, for any request."""
    return ops.all(*[s.num_output_placeholders[r] >= 0 for r in range(cfg.requests)])


def computed_nonnegative(s: View, cfg: Config, ops: Ops):
    """num_computed_tokens is never negative, for any request."""
    return ops.all(*[s.num_computed_tokens[r] >= 0 for r in range(cfg.requests)])


def _dropped(s: View, cfg: Config, r: int):
    return s.clamp_dropped[r] if cfg.clamp else s.guard_dropped[r]


def never_drops(s: View, cfg: Config, ops: Ops):
    """The guard has never dropped a token."""
    return ops.all(*[_dropped(s, cfg, r) == 0 for r in range(cfg.requests)])


def drops_only_unreserved(s: View, cfg: Config, ops: Ops):
    """The guard has dropped no more tokens than the runner returned beyond their steps'
    reservations."""
    return ops.all(*[_dropped(s, cfg, r) <= s.unreserved[r] for r in range(cfg.requests)])


def in_flight_sum(s: View, cfg: Config, ops: Ops, r: int, value, where=None):
    """The sum of value(i) over request r's steps in flight (scheduled, not yet delivered),
    only those where `where(i)` holds when given: the one home of that sum (the
    properties here, the lemmas of spec/invariants.py)."""

    def counted(i):
        return ops.all(i < s.queue_len, s.q_scheduled[i, r] != 0, *([where(i)] if where else []))

    return ops.sum(ops.ite(counted(i), value(i), 0) for i in range(cfg.queue_depth))


def placeholder_accounting(s: View, cfg: Config, ops: Ops):
    """P = sum of reservations of in-flight steps of the current epoch, while unfinished."""
    conds = []
    for r in range(cfg.requests):
        owed = in_flight_sum(
            s, cfg, ops, r, lambda i, r=r: s.q_reserved[i, r], lambda i, r=r: s.q_epoch[i, r] == s.epoch[r]
        )
        conds.append(ops.implies(s.status[r] != Status.FINISHED, s.num_output_placeholders[r] == owed))
    return ops.all(*conds)


def stale_drains(s: View, cfg: Config, ops: Ops):
    """Stale output that keeps a request from resuming is covered by its frames in
    flight: each delivery drains its scheduled tokens, and once nothing is in flight
    nothing else clears it, so the request would never run again (the engine hangs)."""
    conds = []
    for r in range(cfg.requests):
        draining = in_flight_sum(s, cfg, ops, r, lambda i, r=r: s.q_scheduled[i, r])
        blocking = ops.all(
            s.status[r] != Status.FINISHED, s.num_stale_output_tokens[r] > 0, ops.not_(s.drop_stale_output[r])
        )
        conds.append(ops.implies(blocking, s.num_stale_output_tokens[r] <= draining))
    return ops.all(*conds)


def can_run(s: View, cfg: Config, ops: Ops):
    """A request with no step in flight is one the scheduler can pick again: queued and not
    held back by stale output, or running with tokens left to schedule (else the running
    loop skips it at every step); or it waits for input, or it is finished."""
    conds = []
    for r in range(cfg.requests):
        idle = ops.all(*[ops.implies(i < s.queue_len, s.q_scheduled[i, r] == 0) for i in range(cfg.queue_depth)])
        status = s.status[r]
        queued = ops.any(status == Status.WAITING, status == Status.PREEMPTED)
        held = ops.all(s.num_stale_output_tokens[r] > 0, ops.not_(s.drop_stale_output[r]))
        owed = s.num_tokens[r] + s.num_spec_tokens[r] + s.num_output_placeholders[r] - s.num_computed_tokens[r]
        conds.append(
            ops.implies(
                idle, ops.all(ops.implies(queued, ops.not_(held)), ops.implies(status == Status.RUNNING, owed > 0))
            )
        )
    return ops.all(*conds)


def idle_only_when_done(s: View, cfg: Config, ops: Ops):
    """has_requests() is false only when nothing is left: a request it does not count is
    finished, or a session waiting for input with no update queued (nothing else would
    apply it) and none of its output in flight live (what is in flight is stale and
    dropped). Once has_requests() is false and its queue drained, EngineCore waits for
    new input. Stated per request, so it holds whatever the others do."""
    done = []
    for r in range(cfg.requests):
        live = in_flight_sum(
            s, cfg, ops, r, lambda i, r=r: s.q_scheduled[i, r], lambda i, r=r: s.q_epoch[i, r] == s.epoch[r]
        )
        for_input = ops.all(
            s.status[r] == Status.WAITING_FOR_STREAMING_REQ,
            ops.not_(s.pending_update[r]),
            live == 0,
            ops.implies(s.num_stale_output_tokens[r] > 0, s.drop_stale_output[r]),
        )
        counted = has_requests(s, cfg, ops, only=[r])
        done.append(ops.implies(ops.not_(counted), ops.any(s.status[r] == Status.FINISHED, for_input)))
    return ops.all(*done)


_ALL = (
    Property(
        "counter-nonnegative",
        "state",
        "num_output_placeholders is never negative (0.32.0 asserts it after every live "
        "delivery; 0.33.0 only after a delivery that found it positive)",
        "delivery-decrement-0.32 delivery-decrement-0.33",
        counter_nonnegative,
    ),
    Property(
        "predicates-agree",
        "transition",
        "the runner samples a scheduled request iff the scheduler reserved placeholders "
        "for it (runner discard <=> is_prefill_chunk)",
        "is-prefill-chunk reserve-placeholders v1-discard-mask v2-discard-kernel",
    ),
    Property(
        "no-token-while-prefilling",
        "transition",
        "no live delivery appends a token for a step the scheduler classified as a prefill chunk",
        "expect-empty-while-prefilling",
    ),
    Property(
        "positions-agree",
        "transition",
        "the V2 runner computes a scheduled request's tokens from the scheduler's position: "
        "the slot's GPU num_computed_tokens equals the scheduler's num_computed_tokens less "
        "the drafts of in-flight steps still to be rejected",
        "v2-computed-advance v2-add-writes-slot spec-reject-decrement kv-failure-truncates-computed",
        applies=lambda cfg: cfg.is_v2,
    ),
    Property(
        "history-agrees",
        "transition",
        "the V2 runner continues the scheduler's sequence: a scheduled request's slot holds "
        "(total_len) the scheduler's num_tokens plus what its steps in flight since its admission "
        "sampled, so the runner's last sampled token is the scheduler's last token or one of those; "
        "in the releases, a step whose output the scheduler skips for a KV-load failure leaves its token "
        "in the runner's history",
        "v2-total-len-advance v2-add-writes-slot skip-failed-kv-load",
        applies=lambda cfg: cfg.is_v2,
    ),
    Property(
        "no-placeholder-input",
        "transition",
        "the V1 runner never feeds a placeholder token id (-1) at a position whose token the "
        "scheduler scheduled as known (every position but the drafts)",
        "v1-async-placeholder-outputs v1-cached-outputs-extend v1-prev-sampled-input",
        applies=lambda cfg: cfg.is_v1 and cfg.run.host_rows,
    ),
    Property(
        "runner-tokens-agree",
        "transition",
        "a plugin runner that keeps its own token list (tpu-inference: a [0] per sampled token, the real "
        "token written over it at the next step) feeds, at every position a step reads, the token the "
        "scheduler holds there, and never pops an entry its list does not have",
        "tpu-placeholder-zeros tpu-substitute-skips tpu-substitute-pops tpu-trim-only",
        asserts=("tpu-substitute-pops-empty",),
        applies=lambda cfg: cfg.is_v1 and cfg.run.zero_placeholders and not cfg.drafts,
    ),
    Property(
        "prefill-view-agrees",
        "transition",
        "a plugin runner whose attention classes a row as prefilling by num_computed < num_prompt "
        "(vllm-ascend) classes every step that feeds more than one known token of a request as prefilling",
        "ascend-prompt-bounded-prefill",
        applies=lambda cfg: cfg.is_v1 and cfg.run.prompt_bounded_view,
    ),
    Property(
        "placeholder-accounting",
        "state",
        "an unfinished request's placeholders equal the reservations of its in-flight steps "
        "scheduled since its last preemption or resumable stop",
        "reserve-placeholders delivery-decrement-0.32 preempt-zeroes-placeholders resumable-stop-rollback",
        placeholder_accounting,
    ),
    Property(
        "computed-nonnegative",
        "state",
        "num_computed_tokens is never negative: no step is scheduled to start before "
        "position 0 (the rejection rollback is guarded by c > 0, not c >= num_rejected; "
        "0.33.0 also rolls c back by the tokens trimmed at a stop)",
        "spec-reject-decrement stop-trim-rolls-back-computed",
        computed_nonnegative,
    ),
    Property(
        "never-drops",
        "state",
        "the guard (the seed's clamp or the step-reservation guard) never drops or alters a token",
        "reserve-placeholders",
        never_drops,
        applies=lambda cfg: cfg.drops,
    ),
    Property(
        "drops-only-unreserved",
        "state",
        "the guard drops no more tokens than the runner returned beyond what their steps reserved",
        "reserve-placeholders",
        drops_only_unreserved,
        applies=lambda cfg: cfg.drops,
    ),
    Property(
        "stale-drains",
        "state",
        "stale output that keeps a request from resuming never exceeds what its frames in flight "
        "will drain: otherwise the request is skipped forever and the engine spins without progress",
        "stale-output-blocks-resume stale-drain",
        stale_drains,
        hangs=True,
    ),
    Property(
        "no-stuck-request",
        "state",
        "a request with no step in flight can be scheduled again (queued and not held back by stale "
        "output, or running with tokens left to schedule), waits for input, or is finished: otherwise "
        "nothing will ever change it and the engine spins",
        "stale-output-blocks-resume running-zero-skip",
        can_run,
        hangs=True,
    ),
    Property(
        "idle-only-when-done",
        "state",
        "has_requests() is false only when nothing is left: every request is finished or a session "
        "waiting for input, with no update queued and none of its output in flight live; otherwise "
        "the engine waits for input while a request still needs it",
        "num-unfinished-requests has-finished-requests engine-schedules stop-applies-queued-update",
        idle_only_when_done,
        # without streaming sessions it says nothing has_requests() does not (every request finished);
        # a violation idles the engine rather than spinning it, which model/hang.py does not show
        applies=lambda cfg: cfg.has("stream"),
    ),
    Property(
        "bounded-progress",
        "progress",
        "from every reachable state the engine, run on by itself with no further fault (a budget for "
        "every request each step, every other pick at its fault-free default), schedules every request "
        "that is waiting, running or preempted within 2 * (pp + 1) + 2 engine steps, or the request "
        "finishes, waits for input, or an assert ends the engine",
        "step-with-batch-queue engine-schedules engine-defers-delivery",
        hangs=True,
    ),
    Property(
        "stale-count-nonnegative",
        "transition",
        "vLLM's assert num_stale_output_tokens >= 0 never fires",
        "stale-drain",
        asserts=("stale-count-nonnegative",),
    ),
    Property(
        "safe-frontier-nonnegative",
        "transition",
        "vLLM's assert safe_frontier >= 0 on a resumable stop never fires",
        "resumable-stop-rollback",
        asserts=("safe-frontier-nonnegative",),
    ),
    Property(
        "padding-intact",
        "transition",
        "an admission padded to 1 + num_spec_tokens is scheduled whole (the long-prefill threshold must not cut it)",
        "admission-padding padding-assert",
        asserts=("padding-intact",),
    ),
    Property(
        "scheduled-tokens-positive",
        "transition",
        "every scheduled token count is positive (asserted at admission and at delivery)",
        "admission-tokens-positive delivery-tokens-positive",
        asserts=("admission-tokens-positive", "running-tokens-positive", "delivery-tokens-positive"),
    ),
    Property(
        "logits-covered",
        "transition",
        "vLLM's V2 runner's assert that each scheduled request's tokens cover its 1 + drafts logits rows never "
        "fires: a running request with drafts always has a token left to decode when it is scheduled",
        "spec-tokens-fit v2-logits-cover-assert",
        asserts=("logits-covered",),
        applies=lambda cfg: cfg.drafts and cfg.run.asserts_logits_covered,
    ),
    Property(
        "session-keep-covers-computed",
        "transition",
        "vLLM's assert keep_end >= num_computed_tokens in a session update never fires "
        "(0.33.0 keeps every output token but the last)",
        "session-keep-end",
        asserts=("session-keep-covers-computed",),
        applies=lambda cfg: cfg.prof.session_keep == "all-but-last" and cfg.has("stream"),
    ),
)

ASSERTS: dict[str, Assert] = {
    a.name: a
    for a in (
        Assert(
            "placeholders-nonnegative",
            "assert request.num_output_placeholders >= 0",
            "counter-nonnegative",
            "delivery-decrement-0.32 delivery-decrement-0.33",
            "after a live delivery's decrement",
        ),
        Assert(
            "stale-count-nonnegative",
            "assert request.num_stale_output_tokens >= 0",
            "stale-count-nonnegative",
            "stale-drain",
        ),
        Assert(
            "safe-frontier-nonnegative",
            "assert safe_frontier >= 0",
            "safe-frontier-nonnegative",
            "resumable-stop-rollback",
        ),
        Assert(
            "padding-intact", "assert num_new_tokens == 1 + self.num_spec_tokens", "padding-intact", "padding-assert"
        ),
        Assert(
            "admission-tokens-positive",
            "assert num_new_tokens > 0",
            "scheduled-tokens-positive",
            "admission-tokens-positive",
        ),
        Assert(
            "running-tokens-positive",
            None,
            "scheduled-tokens-positive",
            "running-zero-skip",
            "a running request scheduled a negative token count: the step cannot execute "
            "(no assert in the scheduler's running loop; the model ends the trace)",
        ),
        Assert(
            "delivery-tokens-positive",
            "assert num_tokens_scheduled > 0",
            "scheduled-tokens-positive",
            "delivery-tokens-positive",
        ),
        Assert(
            "tpu-substitute-pops-empty",
            None,
            "runner-tokens-agree",
            "tpu-substitute-pops",
            "tpu-inference's runner pops a [0] from a request's output list that the trim left empty: "
            "IndexError in execute_model, the engine dies",
            site="runner",
        ),
        Assert(
            "logits-covered",
            "assert (num_scheduled_tokens_np >= num_logits).all()",
            "logits-covered",
            "v2-logits-cover-assert",
            "the V2 runner's inputs put a request's logits rows at the end of its query: a step that "
            "schedules only drafts ends the engine",
            site="runner",
        ),
        Assert(
            "session-keep-covers-computed",
            "assert keep_end >= session.num_computed_tokens",
            "session-keep-covers-computed",
            "session-keep-end",
        ),
    )
}

PROPERTIES: dict[str, Property] = {p.name: p for p in _ALL}
# properties that are an assert's non-firing (kept for callers that list them)
FATAL = tuple(p.name for p in _ALL if p.asserts)


def properties_for(cfg: Config) -> list[str]:
    """The properties that mean something under a configuration."""
    return [p.name for p in _ALL if p.applies(cfg)]


def checks_with_asserts(checks: dict, asserts: dict, ops: Ops) -> dict:
    """An event's transition checks plus the assert-defined properties' checks."""
    out = dict(checks)
    for prop in _ALL:
        if not prop.asserts:
            continue
        conds = [asserts[a] for a in prop.asserts if a in asserts]
        if conds:
            mine = out.get(prop.name)
            out[prop.name] = ops.all(*conds) if mine is None else ops.all(mine, *conds)
    return out


def reported_by(prop: str) -> list[str]:
    """The asserts whose firing reports a violation of `prop`."""
    return [a.name for a in ASSERTS.values() if a.property == prop]


def statement_key(text: str) -> str:
    """An assert statement with whitespace normalised: how a source line is matched."""
    return " ".join(text.replace("(", " ( ").replace(")", " ) ").split())


BY_STATEMENT: dict[str, str] = {statement_key(a.statement): a.name for a in ASSERTS.values() if a.statement}
