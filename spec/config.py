"""One configuration of the contract: which runner, events, faults, profile and clamp.

A configuration is static: it decides which variables exist and which branches of the
contract apply. Everything that varies along a trace is state or an event argument.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping


class SpecError(ValueError):
    """A configuration or matrix entry is malformed. The message says what and how to fix it."""


RUNNERS = {
    "v1": "GPUModelRunner (V1): discards while cr + n < CachedRequestState.num_tokens (live)",
    "v2": "V2 runner as in 0.32.0: discards while seq_len < prefill_len (snapshot taken at add)",
    "v2-live": "V2 with the fix: discards while seq_len < total_len (live length of the slot)",
}

# Event families that can be switched on. Scheduling, delivery and stop tokens are
# always on: without them there is no contract.
EVENT_FAMILIES = {
    "preempt": "KV-cache-pressure preemption of the last running request, deliver-stale mode",
    "preempt-drop": "preemption by a connector with requires_kv_delivery, drop-stale mode",
    "reset": "reset_prefix_cache(reset_running_requests=True): preempt all, drop-stale",
    "kvfail": "KV-load failure reported in a step's output, kv_load_failure_policy=recompute",
    "stream": "resumable requests: stop on a stop token, then a streaming input update",
    "abort": "finish_requests(FINISHED_ABORTED) from the front end",
}

FAULTS = {
    "stale-slot-read": "V2 runner reads its state slot as its previous occupant left it "
    "(the add_request writes were not seen; stale UVA buffers under CC)",
    "over-delivery": "the runner commits more than 1 + spec tokens for a sampled step "
    "(the /v1/realtime path of #30142)",
}

PROFILES = {
    "vllm-0.32.0": "vLLM 0.32.0 as installed",
    "h1-preempt-keeps-placeholders": "preemption resets only computed tokens: placeholders "
    "kept, in-flight output not marked stale (before #38624)",
    "h2-reset-discard-flag": "reset_prefix_cache zeroes placeholders and sets a boolean "
    "that drops one output frame (discard_latest_async_tokens)",
    "h3-reset-discard-counter": "reset_prefix_cache sets async_tokens_to_discard := "
    "placeholders, decremented once per non-empty frame (#42117)",
    "h4-stream-no-rollback": "resumable stop without the safe-frontier rollback: "
    "placeholders, computed tokens and in-flight output kept (before #58259)",
}

VERDICTS = ("proved", "violated", "bounded", "unknown")
EXPECTATIONS = ("proved", "violated")


@dataclass(frozen=True)
class Config:
    """A point of the configuration matrix.

    requests: how many requests share the token budget and the runner's slots.
    pp: pipeline-parallel stages; the in-flight queue holds pp + 1 steps
        (config/vllm.py:577-587). V1 supports async scheduling only with pp = 1.
    spec_tokens: draft tokens per step (num_speculative_tokens); 0 = no spec decode.
    max_budget: upper bound of a step's token budget; None = unbounded.
    prompt_lens: fixed prompt lengths, or None for symbolic ones (>= 1).
    long_prefill_threshold: long_prefill_token_threshold; 0 = off.
    block_size: KV block size; KV-load failures roll back to block boundaries.
    """

    name: str
    runner: str = "v1"
    events: frozenset[str] = frozenset()
    faults: frozenset[str] = frozenset()
    profile: str = "vllm-0.32.0"
    clamp: bool = False
    requests: int = 2
    pp: int = 1
    spec_tokens: int = 0
    max_budget: int | None = None
    prompt_lens: tuple[int, ...] | None = None
    long_prefill_threshold: int = 0
    block_size: int = 16
    expect: Mapping[str, str] = field(default_factory=dict)
    note: str = ""

    # -- derived, static facts -------------------------------------------------
    @property
    def queue_depth(self) -> int:
        return self.pp + 1

    @property
    def is_v2(self) -> bool:
        return self.runner in ("v2", "v2-live")

    @property
    def slots(self) -> int:
        # V2 RequestState has max_num_reqs slots (states.py:30); we run with
        # max_num_seqs = number of requests, so admission never runs out of slots.
        return self.requests

    def has(self, family: str) -> bool:
        return family in self.events

    def with_(self, **changes) -> "Config":
        return replace(self, **changes)

    def record(self) -> dict:
        """The fields that define its semantics, JSON-friendly (traces' #meta and
        generated cases carry it; Config(**record) rebuilds it)."""
        return {
            "name": self.name, "runner": self.runner, "events": sorted(self.events),
            "faults": sorted(self.faults), "profile": self.profile, "clamp": self.clamp,
            "requests": self.requests, "pp": self.pp, "spec_tokens": self.spec_tokens,
            "max_budget": self.max_budget,
            "prompt_lens": list(self.prompt_lens) if self.prompt_lens else None,
            "long_prefill_threshold": self.long_prefill_threshold, "block_size": self.block_size,
        }

    def validate(self) -> "Config":
        where = f"config {self.name!r}"
        if self.runner not in RUNNERS:
            raise SpecError(
                f"{where}: unknown runner {self.runner!r}; use one of {', '.join(RUNNERS)}"
            )
        for fam in self.events:
            if fam not in EVENT_FAMILIES:
                raise SpecError(
                    f"{where}: unknown event family {fam!r}; use any of {', '.join(EVENT_FAMILIES)}"
                )
        for fault in self.faults:
            if fault not in FAULTS:
                raise SpecError(f"{where}: unknown fault {fault!r}; use any of {', '.join(FAULTS)}")
        if self.profile not in PROFILES:
            raise SpecError(
                f"{where}: unknown profile {self.profile!r}; use one of {', '.join(PROFILES)}"
            )
        if "stale-slot-read" in self.faults and not self.is_v2:
            raise SpecError(
                f"{where}: fault stale-slot-read needs a V2 runner (v2 or v2-live): "
                "the V1 runner keeps no slot state for its discard decision"
            )
        if self.runner == "v1" and self.pp != 1:
            raise SpecError(
                f"{where}: the V1 runner supports async scheduling only with pp=1 "
                "(config/vllm.py:2962-2974); set pp=1 or use a V2 runner"
            )
        if not 1 <= self.requests <= 4:
            raise SpecError(f"{where}: requests must be 1..4, got {self.requests}")
        if not 1 <= self.pp <= 3:
            raise SpecError(f"{where}: pp must be 1..3, got {self.pp}")
        if not 0 <= self.spec_tokens <= 3:
            raise SpecError(f"{where}: spec_tokens must be 0..3, got {self.spec_tokens}")
        if self.max_budget is not None and self.max_budget < 1:
            raise SpecError(f"{where}: max_budget must be >= 1 or None, got {self.max_budget}")
        if self.prompt_lens is not None:
            if len(self.prompt_lens) != self.requests or any(n < 1 for n in self.prompt_lens):
                raise SpecError(
                    f"{where}: prompt_lens needs {self.requests} lengths >= 1, "
                    f"got {self.prompt_lens}"
                )
        if self.long_prefill_threshold < 0 or self.block_size < 1:
            raise SpecError(f"{where}: long_prefill_threshold >= 0 and block_size >= 1 required")
        if self.profile == "h4-stream-no-rollback" and "stream" not in self.events:
            raise SpecError(f"{where}: profile {self.profile} only differs on the stream events; add 'stream'")
        if self.profile in ("h2-reset-discard-flag", "h3-reset-discard-counter") and "reset" not in self.events:
            raise SpecError(f"{where}: profile {self.profile} only differs on reset; add 'reset'")
        from spec.properties import PROPERTIES

        for prop, verdict in self.expect.items():
            if prop not in PROPERTIES:
                raise SpecError(
                    f"{where}: expectation for unknown property {prop!r}; "
                    f"use one of {', '.join(PROPERTIES)}"
                )
            if verdict not in EXPECTATIONS:
                raise SpecError(
                    f"{where}: expected verdict for {prop} must be 'proved' or 'violated', got {verdict!r}"
                )
        return self
