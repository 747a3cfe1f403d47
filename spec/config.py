"""One configuration of the contract: which runner, events, faults, profile and clamp.

A configuration is static: it decides which variables exist and which branches of the
contract apply. Everything that varies along a trace is state or an event argument.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

# the platform plugins' runners join RUNNERS when their package is imported
import vllm_contract.spec.plugin_runners  # noqa: F401  (its import adds the plugins' runners to RUNNERS)
from vllm_contract.spec.errors import MalformedConfig, SpecError

# Profiles (vLLM releases and historical behaviours) are data: spec/profiles.py.
from vllm_contract.spec.profiles import PROFILES, Profile
from vllm_contract.spec.runner_variants import RUNNERS, Runner

GUARDS = {
    "none": "vLLM's own accounting",
    "step-reservation": "the fix of fixes/step-reservation-guard: the scheduler remembers what it reserved "
    "for each request in each step and drops whatever the runner returns beyond it, before the "
    "spec-rejection and delivery decrements",
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
    "prefix-cache": "prefix caching on: an admission from position 0 starts at the whole blocks of its tokens "
    "the cache holds (at most num_tokens - 1), blocks are cached as they are scheduled and delivered, shared "
    "between requests with a common prefix, and reset_prefix_cache clears them",
}

FAULTS = {
    "stale-slot-read": "V2 runner reads its state slot as its previous occupant left it "
    "(the add_request writes were not seen; stale UVA buffers under CC)",
    "over-delivery": "the runner commits more than 1 + spec tokens for a sampled step "
    "(the /v1/realtime path of #30142)",
    "under-drain": "the step's num_scheduled_tokens handed to update_from_output is smaller than what "
    "was scheduled (a platform plugin rewrote it, tpu-inference #3492), so the in-flight and stale "
    "counts drain short",
    "lost-sample": "the output a step hands update_from_output has no token for a request the runner sampled "
    "(a plugin that loses or never materialises a pending async result, the tpu-inference #2833 report), so "
    "the step's placeholder is never resolved",
}

# The optional mechanisms a trace may go through (model/bmc.py tells them apart: a
# counterexample's class is the set it uses). A configuration's `via` makes its
# counterexample searches go through some of them: the shortest trace that shows a
# mechanism, where a shorter one without it exists.
MECHANISMS = {
    "kv-load-failure": "a step's output reports a KV-load failure",
    "stale-slot-read": "fault stale-slot-read",
    "over-delivery": "fault over-delivery",
    "under-drain": "fault under-drain",
    "lost-sample": "fault lost-sample",
    "session-stop": "a streaming session stops",
    "prefix-hit": "a request is admitted at blocks it found in the prefix cache",
    "shared-block-failure": "a KV-load failure cuts back a request that found the failed block in the prefix cache",
}

VERDICTS = ("proved", "violated", "bounded", "unknown")
EXPECTATIONS = ("proved", "violated", "bounded")


@dataclass(frozen=True)
class Config:
    """A point of the configuration matrix.

    requests: how many requests share the token budget and the runner's slots.
    pp: pipeline-parallel stages; the in-flight queue holds pp + 1 steps
        ([cite:max-concurrent-batches]). V1 supports async scheduling only with pp = 1.
    spec_tokens: draft tokens per step (num_speculative_tokens); 0 = no spec decode;
        None = any number: K is then a parameter of the trace (a constant state
        variable chosen at init), so a proof covers every K >= 0 at once.
    spec_tokens_max: with spec_tokens=None, an upper bound on K (None: unbounded); a
        frontier is proved this way ("for every K <= 1").
    search_depth: the deepest counterexample search for this configuration (None: the
        prover's --max-depth); a `bounded` verdict says how deep it looked.
    rest: one focal request against an abstract rest: `requests` is 1 and whatever any
        number of other requests can do to it (take budget before it, keep the engine
        busy, stop the waiting loop, leave values in a slot it is given, be preempted
        or updated instead of it) is a free pick of each event. A per-request property
        proved here holds for every request of every N (README, "Any number of
        requests"; tests/test_abstraction.py checks that every concrete step with 2 and
        3 requests is an abstract step).
    max_budget: upper bound of a step's token budget; None = unbounded.
    prompt_lens: fixed prompt lengths, or None for symbolic ones (>= 1).
    long_prefill_threshold: long_prefill_token_threshold; 0 = off.
    max_model_len: the model's length (a step stops short of it, a request stops when it
        reaches it); None = no length stop (requests end on a stop token or an abort).
    max_tokens: SamplingParams.max_tokens of every request (a request stops once it has
        that many output tokens); None = none.
    block_size: KV block size; KV-load failures roll back to block boundaries.
    via: mechanisms (MECHANISMS) every counterexample search must go through; proofs
        are not restricted.
    release_skipped: the scheduler's half of fixes/v2-recompute-rollback: when
        update_from_output skips a request's output for a KV-load failure (the failed
        request, or a sharer of the failed block), it releases what that step reserved
        and tells the runner, in the next SchedulerOutput, the tokens it did not take.
        vLLM keeps the reservation (the v1-kvfail-leak finding) and tells nothing.
    """

    name: str
    runner: str = "v1"
    events: frozenset[str] = frozenset()
    faults: frozenset[str] = frozenset()
    profile: str = "vllm-0.32.0"
    clamp: bool = False
    guard: str = "none"
    release_skipped: bool = False
    requests: int = 2
    pp: int = 1
    spec_tokens: int | None = 0
    spec_tokens_max: int | None = None
    rest: bool = False
    search_depth: int | None = None
    max_budget: int | None = None
    prompt_lens: tuple[int, ...] | None = None
    long_prefill_threshold: int = 0
    max_model_len: int | None = None
    max_tokens: int | None = None
    block_size: int = 16
    via: frozenset[str] = frozenset()
    expect: Mapping[str, str] = field(default_factory=dict)
    note: str = ""

    # -- derived, static facts -------------------------------------------------
    @property
    def queue_depth(self) -> int:
        return self.pp + 1

    @property
    def run(self) -> Runner:
        """The runner variant's record (spec/runner_variants.py: its rule, what it fixes)."""
        return RUNNERS[self.runner]

    @property
    def is_v2(self) -> bool:
        return self.run.family == "v2"

    @property
    def is_v1(self) -> bool:
        return self.run.family == "v1"

    @property
    def on_vllm_v1(self) -> bool:
        """The configuration runs vLLM's own V1 runner (not a plugin's runner of the V1 family)."""
        return self.is_v1 and not self.run.plugin

    @property
    def drops(self) -> bool:
        """A guard that may drop tokens the runner returned: the seed's clamp or ours."""
        return self.clamp or self.guard != "none"

    @property
    def ships_skipped(self) -> bool:
        """The scheduler tells the runner which sampled tokens it skipped for a KV-load
        failure (fixes/v2-recompute-rollback, the scheduler's half: release_skipped)."""
        return self.release_skipped and self.has("kvfail")

    @property
    def tracks_held_blocks(self) -> bool:
        """Which requests hold KV blocks is followed (holds_blocks): only a streaming session
        holds them outside `running`, and only reset_prefix_cache reads it (it raises then)."""
        return self.has("stream") and self.has("reset")

    @property
    def slots(self) -> int:
        # V2 RequestState has max_num_reqs slots ([cite:v2-free-indices-init]); we run with
        # max_num_seqs = number of requests, so admission never runs out of slots.
        return self.requests

    @property
    def prof(self) -> Profile:
        """The profile record (which mechanism each part of the contract uses)."""
        return PROFILES[self.profile]

    @property
    def scenario(self) -> str:
        """The name without its release suffix: `v2-kvfail@0.33.0` -> `v2-kvfail`."""
        return self.name.split("@", 1)[0]

    @property
    def k_symbolic(self) -> bool:
        """K (draft tokens per step) is a parameter of the trace, not a constant."""
        return self.spec_tokens is None

    @property
    def drafts(self) -> bool:
        """Spec decode may be on: K > 0, or a symbolic K."""
        return self.spec_tokens != 0

    def has(self, family: str) -> bool:
        return family in self.events

    def mechanisms(self) -> list[str]:
        """The optional mechanisms (MECHANISMS) its traces can go through."""
        on = {
            "kv-load-failure": self.has("kvfail"),
            "stale-slot-read": "stale-slot-read" in self.faults,
            "over-delivery": "over-delivery" in self.faults,
            "under-drain": "under-drain" in self.faults,
            "lost-sample": "lost-sample" in self.faults,
            "session-stop": self.has("stream"),
            "prefix-hit": self.has("prefix-cache"),
            "shared-block-failure": self.has("prefix-cache") and self.has("kvfail"),
        }
        return [name for name in MECHANISMS if on[name]]

    def with_(self, **changes) -> "Config":
        return replace(self, **changes)

    def record(self) -> dict:
        """The fields that define its semantics, JSON-friendly (traces' #meta and
        generated cases carry it; Config.from_record rebuilds it)."""
        return {
            "name": self.name,
            "runner": self.runner,
            "events": sorted(self.events),
            "faults": sorted(self.faults),
            "profile": self.profile,
            "clamp": self.clamp,
            **({"guard": self.guard} if self.guard != "none" else {}),
            **({"release_skipped": True} if self.release_skipped else {}),
            "requests": self.requests,
            "pp": self.pp,
            "spec_tokens": self.spec_tokens,
            **({"spec_tokens_max": self.spec_tokens_max} if self.spec_tokens_max is not None else {}),
            **({"rest": True} if self.rest else {}),
            "max_budget": self.max_budget,
            "prompt_lens": list(self.prompt_lens) if self.prompt_lens else None,
            "long_prefill_threshold": self.long_prefill_threshold,
            **({"max_model_len": self.max_model_len} if self.max_model_len is not None else {}),
            **({"max_tokens": self.max_tokens} if self.max_tokens is not None else {}),
            "block_size": self.block_size,
            **({"via": sorted(self.via)} if self.via else {}),
        }

    def semantics(self) -> dict:
        """What its model depends on: the record without the name, the profile as its
        behaviour, and the expectations (a proof assumes those it expects proved). Two
        configurations with equal semantics have the same encoding
        (tests/test_explain.py compares them), so one answer serves both."""
        record = self.record()
        del record["name"]
        record["profile"] = self.prof.behaviour()
        record["expect"] = dict(sorted(self.expect.items()))
        return record

    def validate(self) -> "Config":
        if not isinstance(self.name, str) or not self.name:
            raise MalformedConfig(f"config {self.name!r}: name must be a non-empty string")
        where = f"config {self.name!r}"
        # types first: a wrong type would pass unnoticed (clamp="no" is truthy) or fail
        # deep inside with a traceback ("kvfail" read as the families k, v, f, ...)
        for name in ("runner", "profile", "note", "guard"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise MalformedConfig(f"{where}: {name} must be a string, got {value!r} ({type(value).__name__})")
        fixed: dict = {}
        for name, known in (("events", EVENT_FAMILIES), ("faults", FAULTS), ("via", MECHANISMS)):
            value = getattr(self, name)
            example = (
                f"{name}=frozenset({{{value if isinstance(value, str) and value in known else next(iter(known))!r}}})"
            )
            if isinstance(value, (str, bytes)):
                raise MalformedConfig(
                    f"{where}: {name} must be a set of names, e.g. {example}, not the string "
                    f"{value!r} (a string would be read letter by letter)"
                )
            if not isinstance(value, (frozenset, set, list, tuple)) or not all(isinstance(v, str) for v in value):
                raise MalformedConfig(f"{where}: {name} must be a set of names, e.g. {example}; got {value!r}")
            if not isinstance(value, frozenset):
                fixed[name] = frozenset(value)
        if not isinstance(self.rest, bool):
            raise MalformedConfig(f"{where}: rest must be True or False, got {self.rest!r}")
        for name in ("clamp", "release_skipped"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise MalformedConfig(
                    f"{where}: {name} must be True or False, got {value!r} "
                    f"({type(value).__name__}; a string like 'no' would count as on)"
                )
        for name in (
            "requests",
            "pp",
            "spec_tokens",
            "long_prefill_threshold",
            "max_model_len",
            "max_tokens",
            "block_size",
            "max_budget",
            "spec_tokens_max",
            "search_depth",
        ):
            value = getattr(self, name)
            optional = ("max_budget", "spec_tokens", "spec_tokens_max", "search_depth", "max_model_len", "max_tokens")
            if name in optional and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise MalformedConfig(
                    f"{where}: {name} must be a whole number, got {value!r} "
                    f"({type(value).__name__}); write e.g. {name}=2, not {name}='2'"
                )
        if self.prompt_lens is not None:
            if not isinstance(self.prompt_lens, (tuple, list)) or any(
                isinstance(n, bool) or not isinstance(n, int) for n in self.prompt_lens
            ):
                raise MalformedConfig(
                    f"{where}: prompt_lens must be None or a tuple of whole numbers, "
                    f"e.g. prompt_lens=(16, 3); got {self.prompt_lens!r}"
                )
            if isinstance(self.prompt_lens, list):
                fixed["prompt_lens"] = tuple(self.prompt_lens)
        if not isinstance(self.expect, Mapping):
            raise MalformedConfig(
                f"{where}: expect must map property names to 'proved' or 'violated', got {self.expect!r}"
            )
        if fixed:  # a list or set where a frozenset is meant: the same configuration
            return replace(self, **fixed).validate()
        if self.runner not in RUNNERS:
            raise SpecError(f"{where}: unknown runner {self.runner!r}; use one of {', '.join(RUNNERS)}")
        for fam in self.events:
            if fam not in EVENT_FAMILIES:
                raise SpecError(f"{where}: unknown event family {fam!r}; use any of {', '.join(EVENT_FAMILIES)}")
        for fault in self.faults:
            if fault not in FAULTS:
                raise SpecError(f"{where}: unknown fault {fault!r}; use any of {', '.join(FAULTS)}")
        for mechanism in self.via:
            if mechanism not in MECHANISMS:
                raise SpecError(f"{where}: unknown mechanism {mechanism!r} in via; use any of {', '.join(MECHANISMS)}")
            if mechanism not in self.mechanisms():
                raise SpecError(
                    f"{where}: via {mechanism!r} ({MECHANISMS[mechanism]}) cannot happen under this configuration; "
                    f"it can go through: {', '.join(self.mechanisms()) or 'none'}"
                )
        if self.guard not in GUARDS:
            raise SpecError(f"{where}: unknown guard {self.guard!r}; use one of {', '.join(GUARDS)}")
        if self.guard != "none" and self.clamp:
            raise SpecError(f"{where}: the seed's clamp and guard {self.guard!r} are alternatives; choose one")
        if self.profile not in PROFILES:
            raise SpecError(f"{where}: unknown profile {self.profile!r}; use one of {', '.join(PROFILES)}")
        if "stale-slot-read" in self.faults and not self.is_v2:
            raise SpecError(
                f"{where}: fault stale-slot-read needs a V2 runner (v2 or v2-live): "
                "the V1 runner keeps no slot state for its discard decision"
            )
        if "under-drain" in self.faults and self.has("kvfail"):
            raise SpecError(
                f"{where}: fault under-drain rewrites the counts a KV-load failure's invalid-block "
                "handling also reads, which the model leaves out: drop 'kvfail' or the fault"
            )
        if self.is_v1 and self.pp != 1:
            raise SpecError(
                f"{where}: the V1 runner supports async scheduling only with pp=1 "
                "([cite:v1-pp-async-unsupported]); set pp=1 or use a V2 runner"
            )
        if self.rest and self.requests != 1:
            raise SpecError(f"{where}: rest=True is one focal request against the others: set requests=1")
        if not 1 <= self.requests <= 4:
            raise SpecError(f"{where}: requests must be 1..4, got {self.requests}")
        if self.run.positional_outputs and (self.requests > 2 or self.rest or self.spec_tokens != 0):
            raise SpecError(
                f"{where}: runner {self.runner} lays tokens over its rows by position, which the model "
                "follows for at most two requests, without drafts and without an abstract rest "
                "(spec/runners.py _positional_outputs): set requests<=2, spec_tokens=0, rest=False"
            )
        if not 1 <= self.pp <= 4:
            raise SpecError(f"{where}: pp must be 1..4, got {self.pp}")
        if self.spec_tokens is not None and not 0 <= self.spec_tokens <= 8:
            raise SpecError(f"{where}: spec_tokens must be 0..8 or None (any), got {self.spec_tokens}")
        if self.spec_tokens_max is not None and (self.spec_tokens is not None or self.spec_tokens_max < 0):
            raise SpecError(
                f"{where}: spec_tokens_max bounds a symbolic K: use it with spec_tokens=None "
                f"and a value >= 0, got {self.spec_tokens_max}"
            )
        if self.max_budget is not None and self.max_budget < 1:
            raise SpecError(f"{where}: max_budget must be >= 1 or None, got {self.max_budget}")
        if self.prompt_lens is not None:
            if len(self.prompt_lens) != self.requests or any(n < 1 for n in self.prompt_lens):
                raise SpecError(f"{where}: prompt_lens needs {self.requests} lengths >= 1, got {self.prompt_lens}")
        for name in ("max_model_len", "max_tokens"):
            value = getattr(self, name)
            if value is not None and value < (2 if name == "max_model_len" else 1):
                raise SpecError(
                    f"{where}: {name} must be None or >= {2 if name == 'max_model_len' else 1}, got {value}"
                )
        if self.has("prefix-cache") and self.has("stream"):
            raise SpecError(
                f"{where}: prefix caching is modelled for requests without streaming input (a session's update "
                "rewrites its history after the kept tokens, and with it the blocks' hashes): drop 'stream' or "
                "'prefix-cache'"
            )
        if (self.max_model_len is not None or self.max_tokens is not None) and self.has("stream"):
            raise SpecError(
                f"{where}: length stops are modelled for requests without streaming input (a session's "
                "prompt and output change with each update): drop 'stream', or max_model_len and max_tokens"
            )
        if self.max_model_len is not None and self.prompt_lens is not None:
            if any(n >= self.max_model_len for n in self.prompt_lens):
                raise SpecError(f"{where}: every prompt must be shorter than max_model_len {self.max_model_len}")
        if self.long_prefill_threshold < 0 or self.block_size < 1:
            raise SpecError(f"{where}: long_prefill_threshold >= 0 and block_size >= 1 required")
        prof = PROFILES[self.profile]
        if self.on_vllm_v1 and not prof.has_v1_runner:
            raise SpecError(
                f"{where}: vLLM {prof.release} has no V1 model runner ([cite:v1-runner-removed]); "
                "V1 configurations end at 0.33.0: use a V2 runner or an earlier profile"
            )
        if prof.historical and not prof.stop_rolls_back and "stream" not in self.events:
            raise SpecError(f"{where}: profile {self.profile} only differs on the stream events; add 'stream'")
        if prof.historical and prof.reset != "preempt-drop-stale" and "reset" not in self.events:
            raise SpecError(f"{where}: profile {self.profile} only differs on reset; add 'reset'")
        return self
