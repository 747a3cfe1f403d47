"""The configuration matrix `make prove` runs, with the verdict expected for each
property. An expectation is a claim about vLLM: `make prove` fails when the prover
disagrees, and a "violated" entry is a finding with a replayable trace.

A scenario (runner, events, faults, clamp, sizes) is checked once per vLLM release it
is written for; its configurations are named `<scenario>@<release>` and a release may
expect other verdicts than the one before. A historical profile is a scenario of its
own. `make prove CONFIGS=v2-kvfail` runs every release of a scenario,
`CONFIGS=v2-kvfail@0.33.0` one.

Expectations: "proved" (k-induction, for every depth), "violated" (a shortest
counterexample, replayed), "bounded" (no counterexample within the search depth and no
proof claimed: honest about where the model stops).

Prompt lengths and budgets are symbolic everywhere. The draft count K is symbolic in
proofs (`spec_tokens=None`: one proof covers every K >= 0, or every K up to
`spec_tokens_max`), and one per step in searches unless an entry says otherwise; a
`frontier:K=N` expectation is computed: proved for K < N, violated at K = N (a shortest
trace). Proofs run with `rest=True`: one focal request against an abstract rest, so they
hold for any number of requests (README, "Any number of requests"). A counterexample search runs with as many
requests as its
mechanism needs: one for a mechanism inside a request (a recompute, a session stop),
two where requests interact (a slot's previous occupant, the shared budget), since
every extra idle request multiplies the search for nothing.
"""

from __future__ import annotations

import sys
from typing import Any

from vllm_contract.spec import expectations
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.plugin_runners import plugin_scenarios
from vllm_contract.spec.profiles import RELEASES

ALL = frozenset({"preempt", "preempt-drop", "reset", "stream", "abort"})
KVFAIL = ALL | {"kvfail"}
# prefix caching is modelled without streaming sessions (spec/config.py says why)
PREFIX = ALL - {"stream"} | {"prefix-cache"}

SAFETY = (
    "counter-nonnegative",
    "computed-nonnegative",
    "predicates-agree",
    "no-token-while-prefilling",
    "placeholder-accounting",
    "stale-count-nonnegative",
    "safe-frontier-nonnegative",
    "scheduled-tokens-positive",
    "padding-intact",
)
# 0.33.0 asserts that a session update keeps every token it has computed
SAFETY_033 = SAFETY + ("session-keep-covers-computed",)
# a proof for every size: one focal request against an abstract rest, any K
ANY_SIZE: dict[str, Any] = {"requests": 1, "rest": True, "spec_tokens": None}
# what the real runners showed: each runner's inputs, stated per runner
V1_INPUTS = ("no-placeholder-input",)
V2_POSITIONS = ("positions-agree",)
# and continues the scheduler's token history (the slot's total_len)
V2_HISTORY = ("history-agrees",)
# and never meets a step that schedules only drafts (its own assert)
V2_LOGITS = ("logits-covered",)
# what the whole V2 recompute fix proves (fixes/v2-recompute-rollback)
ROLLBACK_FIXED = (
    "predicates-agree",
    "counter-nonnegative",
    "no-token-while-prefilling",
    "placeholder-accounting",
    *V2_HISTORY,
)
# V1 under KV-load failures: runner and scheduler still agree on what is sampled
V1_RECOMPUTES = (
    "counter-nonnegative",
    "predicates-agree",
    "no-token-while-prefilling",
    "stale-count-nonnegative",
    "scheduled-tokens-positive",
)
# V2 when the scheduler recomputes below what the slot computed (up to 0.32.0 the counter
# assert crashes the engine; 0.33.0 checks it only when positive: the rest, [1:], breaks)
V2_RECOMPUTE_BREAKS = (
    "counter-nonnegative",
    "predicates-agree",
    "no-token-while-prefilling",
    "placeholder-accounting",
    *V2_POSITIONS,
    *V2_HISTORY,
)
# 0.29.0, 0.30.0: a resumable stop without the safe-frontier rollback (#58259 came in
# 0.31.0) breaks these with streaming sessions, each with a shortest trace; the other
# properties are not claimed there (their proofs rest on lemmas that need the rollback)
NO_ROLLBACK = (
    "counter-nonnegative",
    "predicates-agree",
    "no-token-while-prefilling",
    "placeholder-accounting",
    "scheduled-tokens-positive",
)


def _expect(proved=(), violated=(), bounded=(), frontier=None) -> dict:
    out = {p: "proved" for p in proved}
    out.update({p: "violated" for p in violated})
    out.update({p: "bounded" for p in bounded})
    out.update({p: f"frontier:K={k}" for p, k in (frontier or {}).items()})
    return out


# the liveness properties (below, _liveness), for a configuration that states them itself
LIVENESS = ("stale-drains", "no-stuck-request", "bounded-progress")
# a token delivered for a step nothing was reserved for: the runner's decision is not the
# scheduler's, the token lands while the request prefills, and the delivery outruns the
# reservations of its steps in flight
UNRESERVED_TOKEN = ("predicates-agree", "no-token-while-prefilling", "placeholder-accounting")


def _searched(violated: tuple[str, ...]) -> dict:
    """Every safety and liveness property of a configuration no proof covers (its runner
    samples steps nothing was reserved for, so the lemmas the induction rests on are not
    used): the violated ones, and every other one searched to the configuration's depth."""
    return _expect(violated=violated, bounded=tuple(p for p in SAFETY + LIVENESS if p not in violated))


def _cfg(name, note, expect, **kw) -> Config:
    kw.setdefault("spec_tokens", 1)
    return Config(name=name, note=note, expect=expect, **kw)


def _span(key: str) -> list[str]:
    """The releases a key of _releases names: "0.32.0", or "0.29.0..0.32.0" (both ends
    included, each a known release)."""
    known = [p.release for p in RELEASES]
    ends = key.split("..")
    if len(ends) > 2 or any(e not in known for e in ends):
        raise SpecError(f"spec/matrix.py: {key!r} is not a release or a range A..B of releases ({', '.join(known)})")
    first, last = known.index(ends[0]), known.index(ends[-1])
    return known[first : last + 1]


def _releases(scenario: str, note: str, expect: dict, runner_without_v1: str | None = None, **kw) -> tuple[Config, ...]:
    """One configuration per release: expect maps a release ("0.32.0") or a range of
    them ("0.29.0..0.32.0") to its expectations, or to (note for those releases,
    expectations). A release absent from every key gets no configuration. A V1 scenario
    has none on a release without the V1 runner (0.34.0 on, [cite:v1-runner-removed]),
    unless `runner_without_v1` names the runner it runs there instead: a mechanism of
    the scheduler's, which vLLM's only runner then meets."""
    chosen: dict[str, object] = {}
    for key, entry in expect.items():
        for release in _span(key):
            if release in chosen:
                raise SpecError(f"spec/matrix.py: {scenario}: release {release} is given twice (key {key!r})")
            chosen[release] = entry
    out = []
    for profile in RELEASES:
        if profile.release not in chosen:
            continue
        entry = chosen[profile.release]
        text, wanted = entry if isinstance(entry, tuple) else (note, entry)
        cfg = _cfg(f"{scenario}@{profile.release}", text, wanted, profile=profile.name, **kw)
        if cfg.on_vllm_v1 and not profile.has_v1_runner:
            if runner_without_v1 is None:
                continue
            cfg = cfg.with_(runner=runner_without_v1)
        out.append(cfg)
    return tuple(out)


def _same(expect: dict) -> dict:
    return {p.release: expect for p in RELEASES}


# the seed's deployment (#57562, ../shared/seed): V2, chunked prefill, prefix caching
# (--enable-prefix-caching: with the abstract rest, any hit of whole blocks at an admission),
# max_num_batched_tokens=8192, --max-num-seqs 64 (the abstract rest: any number of others),
# a 9118-token prompt, no draft tokens; preemption under KV pressure and aborts
SEED: dict[str, Any] = {
    "runner": "v2",
    "events": frozenset({"preempt", "abort", "prefix-cache"}),
    "max_budget": 8192,
    "prompt_lens": (9118,),
    "requests": 1,
    "rest": True,
    "spec_tokens": 0,
}

MATRIX: tuple[Config, ...] = (
    # ---- the seed's configuration first: the report's index starts with it ----------------
    *_releases(
        "seed",
        "the seed's deployment: V2, chunked prefill, prefix caching, budget 8192, up to 64 sequences, "
        "a 9118-token prompt, preemption and aborts",
        _same(_expect(proved=SAFETY + V2_POSITIONS + V2_HISTORY)),
        **SEED,
    ),
    *_releases(
        "seed-cc",
        "the seed's deployment under Confidential Computing: the V2 slot read as its previous "
        "occupant left it (the stale UVA buffers the seed discussion suspects)",
        {
            "0.29.0..0.32.0": _expect(
                violated=("counter-nonnegative", "predicates-agree", "no-token-while-prefilling") + V2_POSITIONS
            ),
            # 0.33.0 asserts only a counter that was positive: at the seed's sizes no trace
            # within 12 steps drives it negative (with any sizes, v2-stale-slot: 7 steps)
            "0.33.0..0.34.0": _expect(
                violated=("predicates-agree", "no-token-while-prefilling") + V2_POSITIONS,
                bounded=("counter-nonnegative",),
            ),
        },
        faults=frozenset({"stale-slot-read"}),
        **SEED,
    ),
    # ---- without faults: the contract holds, for every event family -----------------------
    *_releases(
        "v1",
        "V1 runner; preemption (both modes), reset, streaming sessions, aborts",
        {
            # no-placeholder-input is not claimed there: after a resumable stop without the
            # rollback, vLLM 0.29.0/0.30.0's own V1 runner feeds no placeholder where the model's
            # V1 input rule says it does (the runner targets, 7 steps); the rule is 0.32.0's
            "0.29.0..0.30.0": _expect(violated=NO_ROLLBACK),
            "0.31.0..0.32.0": _expect(proved=SAFETY + V1_INPUTS),
            "0.33.0..0.34.0": _expect(proved=SAFETY_033 + V1_INPUTS),
        },
        runner="v1",
        events=ALL,
        **ANY_SIZE,
    ),
    *_releases(
        "v2",
        "V2 runner (snapshot prefill_len); every event family but KV-load failure",
        {
            "0.29.0..0.30.0": _expect(violated=NO_ROLLBACK + V2_POSITIONS),
            "0.31.0..0.32.0": _expect(proved=SAFETY + V2_POSITIONS + V2_HISTORY + V2_LOGITS),
            "0.33.0..0.34.0": _expect(proved=SAFETY_033 + V2_POSITIONS + V2_HISTORY + V2_LOGITS),
        },
        runner="v2",
        events=ALL,
        **ANY_SIZE,
    ),
    *_releases(
        "v2-live",
        "V2 with the live-length fix; every event family but KV-load failure",
        {
            "0.29.0..0.30.0": _expect(violated=NO_ROLLBACK + V2_POSITIONS),
            "0.31.0..0.32.0": _expect(proved=SAFETY + V2_POSITIONS + V2_HISTORY + V2_LOGITS),
            "0.33.0..0.34.0": _expect(proved=SAFETY_033 + V2_POSITIONS + V2_HISTORY + V2_LOGITS),
        },
        runner="v2-live",
        events=ALL,
        **ANY_SIZE,
    ),
    *[
        c
        for pp in (2, 3, 4)
        for c in _releases(
            f"v2-pp{pp}",
            f"V2 with {pp} pipeline stages: {pp + 1} steps in flight, the decode cadence; every event "
            "family but KV-load failure",
            {
                # with pipeline stages the no-rollback traces are longer (placeholder-accounting: 80 s
                # with 3 stages, past 60 s per query with 4): the short ones
                "0.29.0..0.30.0": _expect(violated=("predicates-agree", "scheduled-tokens-positive") + V2_POSITIONS),
                "0.31.0..0.32.0": _expect(proved=SAFETY + V2_POSITIONS + V2_HISTORY),
                "0.33.0..0.34.0": _expect(proved=SAFETY_033 + V2_POSITIONS + V2_HISTORY),
            },
            runner="v2",
            events=ALL,
            pp=pp,
            **ANY_SIZE,
        )
    ],
    *_releases(
        "v1-kvfail",
        "V1 with KV-load failures (recompute) and every other event but streaming: runner and scheduler still agree",
        {
            "0.29.0..0.32.0": _expect(
                proved=V1_RECOMPUTES,
                violated=V1_INPUTS,
                frontier={"computed-nonnegative": 2},
            ),
            "0.33.0..0.34.0": (
                "V1 with KV-load failures: runner and scheduler agree, but a stop that trims a "
                "draft rolls a recomputed request's computed count below 0 as it finishes",
                _expect(
                    proved=V1_RECOMPUTES,
                    violated=("computed-nonnegative",) + V1_INPUTS,
                ),
            ),
        },
        runner="v1",
        events=ALL - {"stream"} | {"kvfail"},
        **ANY_SIZE,
    ),
    *_releases(
        "kvfail-2drafts",
        "KV-load failure with two draft tokens: after the recompute both "
        "drafts are rejected from a computed count of 1 ([cite:spec-reject-decrement] checks c > 0, "
        "not c >= rejected), and the next step is scheduled from position -1",
        {
            "0.29.0..0.33.0": _expect(violated=("computed-nonnegative",)),
            "0.34.0": (
                "KV-load failure with two draft tokens on vLLM's only runner, V2: the scheduler still "
                "rejects both drafts from a computed count of 1 and schedules from position -1; the V2 "
                "recompute's stray sample leaves the liveness lemmas without a proof (none within 12 steps)",
                _expect(
                    violated=("computed-nonnegative",),
                    bounded=("stale-drains", "no-stuck-request", "bounded-progress"),
                ),
            ),
        },
        runner="v1",
        runner_without_v1="v2",
        events=frozenset({"kvfail"}),
        spec_tokens=2,
        requests=1,
    ),
    *_releases(
        "v1-kvfail-leak",
        "V1 with KV-load failures: the failed step's placeholder is never consumed",
        _same(_expect(violated=("placeholder-accounting",))),
        runner="v1",
        events=frozenset({"kvfail"}),
        requests=1,
    ),
    # ---- prefix caching: admissions that start at cached blocks, shared between requests -----
    *_releases(
        "v1-prefix",
        "V1 with prefix caching: admissions that start at the cached whole blocks of their tokens "
        "(a preempted request's own, or another's within a shared prefix), reset_prefix_cache with "
        "hits; preemption (both modes), aborts",
        _same(_expect(proved=SAFETY + V1_INPUTS)),
        runner="v1",
        events=PREFIX,
        **ANY_SIZE,
    ),
    *_releases(
        "v2-prefix",
        "V2 with prefix caching: a cache-hit admission writes the hit as the slot's GPU computed count "
        "and num_tokens as its prefill_len; preemption (both modes), reset, aborts",
        _same(_expect(proved=SAFETY + V2_POSITIONS + V2_HISTORY + V2_LOGITS)),
        runner="v2",
        events=PREFIX,
        **ANY_SIZE,
    ),
    *_releases(
        "v1-prefix-kvfail",
        "V1 with prefix caching and KV-load failures: a request admitted with its prompt cached "
        "decodes at once, the failure comes after; the V1 runner follows the scheduler's count",
        {
            "0.29.0..0.32.0": _expect(
                proved=V1_RECOMPUTES,
                violated=V1_INPUTS,
                frontier={"computed-nonnegative": 2},
            ),
            "0.33.0..0.34.0": _expect(
                proved=V1_RECOMPUTES,
                violated=("computed-nonnegative",) + V1_INPUTS,
            ),
        },
        runner="v1",
        events=PREFIX | {"kvfail"},
        **ANY_SIZE,
    ),
    *_releases(
        "v1-kvfail-shared",
        "V1: a KV-load failure on a block a second request found in the prefix cache: vLLM scans "
        "every running request; the sharer, whose own load did not fail, gives up its step's output "
        "and leaks that step's placeholder, and the V1 runner then feeds placeholder ids",
        _same(_expect(violated=("placeholder-accounting",) + V1_INPUTS)),
        runner="v1",
        events=frozenset({"prefix-cache", "kvfail"}),
        spec_tokens=0,
        via=frozenset({"shared-block-failure"}),
        search_depth=8,
    ),
    *_releases(
        "v2-kvfail-shared",
        "V2: a KV-load failure on a block a second request found in the prefix cache, its whole "
        "prompt but the last token, so that it decoded at once: vLLM scans every running request, "
        "the loader recomputes the block, and the sharer gives up the token its step sampled and "
        "that step's position while its next step is in flight; the runner keeps both",
        {
            "0.29.0..0.32.0": _expect(violated=V2_RECOMPUTE_BREAKS),
            "0.33.0..0.34.0": (
                "V2: a KV-load failure on a block a second request found in the prefix cache: the "
                "sharer's skipped token stays in the runner's history and its recompute is sampled; "
                "0.33.0 appends the stray token silently (no counter crash within 8 steps)",
                _expect(violated=V2_RECOMPUTE_BREAKS[1:], bounded=("counter-nonnegative",)),
            ),
        },
        runner="v2",
        events=frozenset({"prefix-cache", "kvfail"}),
        spec_tokens=0,
        via=frozenset({"shared-block-failure"}),
        search_depth=8,
    ),
    # ---- length stops: max_model_len caps a step and stops a request, max_tokens stops it ---
    *_releases(
        "v1-length",
        "V1 with length stops (max_model_len 12, max_tokens 5) and drafts; preemption, reset, aborts",
        _same(_expect(proved=SAFETY + V1_INPUTS)),
        runner="v1",
        events=ALL - {"stream"},
        max_model_len=12,
        max_tokens=5,
        **ANY_SIZE,
    ),
    *_releases(
        "v2-length",
        "V2 with length stops (max_model_len 12, max_tokens 5) and drafts; preemption, reset, aborts",
        _same(_expect(proved=SAFETY + V2_POSITIONS + V2_HISTORY + V2_LOGITS)),
        runner="v2",
        events=ALL - {"stream"},
        max_model_len=12,
        max_tokens=5,
        **ANY_SIZE,
    ),
    # ---- KV-load failure on the V2 runner: the #57562 candidate ------------------------------
    *_releases(
        "v2-kvfail",
        "V2: a recompute after a KV-load failure re-prefills below prefill_len",
        {
            "0.29.0..0.32.0": _expect(violated=V2_RECOMPUTE_BREAKS),
            "0.33.0..0.34.0": (
                "V2: the recompute's stray token is appended silently during the prefill "
                "(the decrement is skipped while P = 0): no crash, wrong output",
                _expect(violated=V2_RECOMPUTE_BREAKS[1:], bounded=("counter-nonnegative",)),
            ),
        },
        runner="v2",
        events=frozenset({"kvfail"}),
        requests=1,
    ),
    *_releases(
        "v2-live-kvfail",
        "the live-length fix does not cover it: the GPU computed count is stale too",
        {
            "0.29.0..0.32.0": _expect(
                violated=("counter-nonnegative", "predicates-agree", "no-token-while-prefilling") + V2_POSITIONS
            ),
            "0.33.0..0.34.0": _expect(
                violated=("predicates-agree", "no-token-while-prefilling") + V2_POSITIONS,
                bounded=("counter-nonnegative",),
            ),
        },
        runner="v2-live",
        events=frozenset({"kvfail"}),
        requests=1,
    ),
    *_releases(
        "kvfail-stream",
        "KV-load failure on a streaming session: the stop lands below the prompt",
        {
            "0.29.0..0.30.0": (
                "KV-load failure on a streaming session, without the safe-frontier rollback: "
                "the stop keeps its placeholders, and what is still in flight crashes the counter",
                _expect(violated=NO_ROLLBACK),
            ),
            "0.31.0..0.32.0": _expect(violated=("predicates-agree", "safe-frontier-nonnegative")),
            "0.33.0": (
                "KV-load failure on a streaming session: the stop still lands below the computed "
                "history; the runner's disagreement of 0.32.0 (7 steps) is not found within 8",
                _expect(violated=("safe-frontier-nonnegative",), bounded=("predicates-agree",)),
            ),
            "0.34.0": (
                "KV-load failure on a streaming session, on vLLM's only runner (V2): the stop still "
                "lands below the computed history, and the V2 recompute samples a chunk nothing was "
                "reserved for",
                _expect(violated=("safe-frontier-nonnegative", "predicates-agree")),
            ),
        },
        runner="v1",
        runner_without_v1="v2",
        events=frozenset({"kvfail", "stream"}),
        requests=1,
        search_depth=8,
    ),
    # ---- runner faults -------------------------------------------------------------------------
    *_releases(
        "v2-stale-slot",
        "V2 reading its slot as the previous occupant left it (CC / UVA)",
        _same(
            _expect(violated=("counter-nonnegative", "predicates-agree", "no-token-while-prefilling") + V2_POSITIONS)
        ),
        runner="v2",
        events=frozenset({"abort"}),
        faults=frozenset({"stale-slot-read"}),
    ),
    *_releases(
        "v2-live-stale-slot",
        "the live-length fix under stale slot reads",
        _same(_expect(violated=("counter-nonnegative", "predicates-agree", "no-token-while-prefilling"))),
        runner="v2-live",
        events=frozenset({"abort"}),
        faults=frozenset({"stale-slot-read"}),
    ),
    *_releases(
        "v1-over-delivery",
        "V1 over-committing tokens for a sampled step (realtime path)",
        _same(_expect(violated=("counter-nonnegative",))),
        runner="v1",
        events=frozenset(),
        faults=frozenset({"over-delivery"}),
        requests=1,
    ),
    # ---- the seed PR's clamp -----------------------------------------------------------------------
    *_releases(
        "v1-clamp",
        "clamp with V1 and every event family but streaming sessions, any K",
        _same(_expect(proved=("counter-nonnegative",))),
        runner="v1",
        events=KVFAIL - {"stream"},
        clamp=True,
        **ANY_SIZE,
    ),
    *_releases(
        "v2-clamp-faults",
        "clamp with V2 under KV-load failures, streaming and both faults, K <= 1 "
        "(with two drafts the over-delivery frontier below applies)",
        _same(_expect(proved=("counter-nonnegative",), violated=("predicates-agree", "no-token-while-prefilling"))),
        runner="v2",
        events=KVFAIL,
        faults=frozenset({"stale-slot-read", "over-delivery"}),
        clamp=True,
    ),
    *_releases(
        "v2-kvfail-clamp",
        "clamp on the #57562 candidate: survives, but a stray token is kept",
        _same(_expect(proved=("counter-nonnegative",), violated=("predicates-agree", "no-token-while-prefilling"))),
        runner="v2",
        events=frozenset({"kvfail"}),
        clamp=True,
        requests=1,
    ),
    *_releases(
        "under-drain",
        "the scheduler output update_from_output reads counts fewer tokens than were scheduled "
        "(a platform plugin rewrote num_scheduled_tokens, tpu-inference #3492); preemption in both modes",
        _same(_expect(violated=("stale-drains", "no-stuck-request", "bounded-progress", "stale-count-nonnegative"))),
        runner="v1",
        runner_without_v1="v2",
        events=frozenset({"preempt", "preempt-drop"}),
        faults=frozenset({"under-drain"}),
        requests=1,
        spec_tokens=0,
    ),
    *_releases(
        "lost-sample",
        "a step's output reaches update_from_output without the token the runner sampled for the request (a "
        "plugin that loses or never materialises a pending async result, the tpu-inference #2833 report) when "
        "its steps already reach max_tokens: the placeholder is never resolved, and the max_tokens skip never "
        "schedules the request again",
        _same(
            _expect(
                violated=("placeholder-accounting", "bounded-progress"), bounded=("stale-drains", "no-stuck-request")
            )
        ),
        runner="v2",
        events=frozenset(),
        faults=frozenset({"lost-sample"}),
        requests=1,
        spec_tokens=0,
        max_tokens=3,
    ),
    *_releases(
        "v1-over-delivery-clamp",
        "the clamp's frontier in the draft count: the rejection decrement "
        "(guarded by P > 0, [cite:spec-reject-decrement]) drives the counter negative once two "
        "drafts can be rejected",
        _same(_expect(frontier={"counter-nonnegative": 2})),
        runner="v1",
        events=frozenset(),
        faults=frozenset({"over-delivery"}),
        clamp=True,
        spec_tokens=None,
        requests=1,
    ),
    *_releases(
        "v2-over-delivery-clamp",
        "the clamp's frontier in the draft count on vLLM's only runner from 0.34.0: the rejection "
        "decrement (guarded by P > 0, [cite:spec-reject-decrement]) drives the counter negative once "
        "two drafts can be rejected, whatever the runner",
        {"0.34.0": _expect(frontier={"counter-nonnegative": 2})},
        runner="v2",
        events=frozenset(),
        faults=frozenset({"over-delivery"}),
        clamp=True,
        spec_tokens=None,
        requests=1,
    ),
    *_releases(
        "v2-over-delivery-logits",
        "the clamp under an over-delivering V2 runner with drafts: vLLM counts a draft step's extra "
        "tokens as accepted drafts, so num_rejected is negative and the rollback advances c "
        "([cite:spec-reject-decrement]) while the clamp drops those tokens (P = 0): the request is left "
        "with nothing to decode, the next step schedules only its draft and the V2 runner's own assert "
        "ends the engine (the model's scheduler runs without log_stats, as the targets do)",
        _same(_expect(violated=V2_LOGITS)),
        runner="v2",
        events=frozenset(),
        faults=frozenset({"over-delivery"}),
        clamp=True,
        requests=2,
    ),
    # ---- fixes (fixes/): each claim is a proof, each has a negative control (tests/test_fixes.py) ---
    *_releases(
        "guard-v1-faults",
        "the step-reservation guard: V1 over-committing tokens, KV-load failures, "
        "every event but streaming sessions, any number of requests and drafts: the counter never goes "
        "negative, no stray token is kept, only tokens beyond a step's reservation are dropped",
        _same(_expect(proved=("counter-nonnegative", "no-token-while-prefilling", "drops-only-unreserved"))),
        runner="v1",
        events=KVFAIL - {"stream"},
        faults=frozenset({"over-delivery"}),
        guard="step-reservation",
        **ANY_SIZE,
    ),
    *_releases(
        "guard-v2-faults",
        "the step-reservation guard: V2 with stale slot reads, over-committed tokens and "
        "KV-load failures, every event but streaming sessions, any size",
        _same(_expect(proved=("counter-nonnegative", "no-token-while-prefilling", "drops-only-unreserved"))),
        runner="v2",
        events=KVFAIL - {"stream"},
        faults=frozenset({"stale-slot-read", "over-delivery"}),
        guard="step-reservation",
        **ANY_SIZE,
    ),
    *_releases(
        "guard-v2-stream",
        "the step-reservation guard with streaming sessions as well (0.33.0: its "
        "session update keeps the history whole)",
        {
            "0.33.0..0.34.0": _expect(
                proved=("counter-nonnegative", "no-token-while-prefilling", "drops-only-unreserved")
            )
        },
        runner="v2",
        events=KVFAIL,
        faults=frozenset({"stale-slot-read", "over-delivery"}),
        guard="step-reservation",
        **ANY_SIZE,
    ),
    *_releases(
        "guard-healthy",
        "the step-reservation guard on healthy runners (V1 and V2 alike, every event "
        "family but KV-load failure): it never fires",
        {
            "0.29.0..0.30.0": (
                "the step-reservation guard on healthy runners: on 0.29.0 and 0.30.0 a resumable stop "
                "keeps its placeholders and in-flight output, and the guard drops what they deliver",
                _expect(violated=("never-drops", "placeholder-accounting")),
            ),
            "0.31.0..0.34.0": _expect(proved=("never-drops", "counter-nonnegative", "placeholder-accounting")),
        },
        runner="v2",
        events=ALL,
        guard="step-reservation",
        **ANY_SIZE,
    ),
    *_releases(
        "guard-v1-healthy",
        "the step-reservation guard on the healthy V1 runner: it never fires",
        {
            "0.29.0..0.30.0": (
                "the step-reservation guard on the healthy V1 runner: it fires after a resumable stop "
                "without the rollback (0.29.0, 0.30.0)",
                _expect(violated=("never-drops",)),
            ),
            "0.31.0..0.34.0": _expect(proved=("never-drops",)),
        },
        runner="v1",
        events=ALL,
        guard="step-reservation",
        **ANY_SIZE,
    ),
    *_releases(
        "guard-drops",
        "what the guard drops, per fault: the over-committed tokens (shortest trace)",
        _same(_expect(violated=("never-drops",))),
        runner="v1",
        events=frozenset(),
        faults=frozenset({"over-delivery"}),
        guard="step-reservation",
        requests=1,
    ),
    *_releases(
        "guard-drops-kvfail",
        "what the guard drops after a KV-load failure on V2: the recompute's stray tokens",
        _same(_expect(violated=("never-drops",))),
        runner="v2",
        events=frozenset({"kvfail"}),
        guard="step-reservation",
        requests=1,
    ),
    *_releases(
        "v2-rollback-kvfail",
        "the V2 recompute fix's runner half as first written (v2-rollback): the runner follows the scheduler's "
        "prefill-chunk decision and rolls the slot's computed count back after a KV-load failure; every event "
        "but streaming sessions, any size",
        # positions: the fix runs the recompute at the scheduler's positions, but with a draft
        # in flight the scheduler's own count is off (it still rolls the draft's rejection
        # back from the recomputed count, the kvfail-2drafts mechanism): 4 steps, K = 1
        # history: this half rolls the slot's computed count back, not its total_len, which
        # keeps the token the failed step sampled and the scheduler skipped (v2-rollback-history
        # below is the whole fix)
        _same(
            _expect(
                proved=("predicates-agree", "counter-nonnegative", "no-token-while-prefilling"),
                violated=V2_POSITIONS + V2_HISTORY,
            )
        ),
        runner="v2-rollback",
        events=KVFAIL - {"stream"},
        **ANY_SIZE,
    ),
    # the whole recompute fix: both halves of fixes/v2-recompute-rollback
    *_releases(
        "v2-rollback-history",
        "the whole V2 recompute fix: the runner follows the scheduler's prefill-chunk decision and rolls the "
        "slot's computed count back; the scheduler releases the reservation of a step whose output it skips for "
        "a KV-load failure and tells the runner the tokens sampled there, which leave the slot's history; every "
        "event but streaming sessions, any size",
        # positions: with a draft in flight the scheduler's own count is off after the recompute
        # (it still rolls the draft's rejection back from the recomputed count, the kvfail-2drafts
        # mechanism, which this fix does not touch): 4 steps, K = 1; without drafts, proved below
        _same(_expect(proved=ROLLBACK_FIXED, violated=V2_POSITIONS)),
        runner="v2-rollback-history",
        events=KVFAIL - {"stream"},
        release_skipped=True,
        **ANY_SIZE,
    ),
    *_releases(
        "v2-rollback-history-prefix",
        "the whole V2 recompute fix with prefix caching: admissions at cached blocks, and a KV-load failure on "
        "a block another request found in the cache, which skips that request's step too; any size",
        _same(_expect(proved=ROLLBACK_FIXED)),
        runner="v2-rollback-history",
        events=PREFIX | {"kvfail"},
        release_skipped=True,
        **ANY_SIZE,
    ),
    *_releases(
        "v2-rollback-history-nodrafts",
        "the whole V2 recompute fix without draft tokens: the recompute also runs at the scheduler's positions",
        _same(_expect(proved=ROLLBACK_FIXED + V2_POSITIONS)),
        runner="v2-rollback-history",
        events=KVFAIL - {"stream"},
        release_skipped=True,
        **{**ANY_SIZE, "spec_tokens": 0},
    ),
    *_releases(
        "v2-rollback-no-release",
        "negative control of the whole V2 recompute fix: its runner half on vLLM's own scheduler, which keeps "
        "the reservation of a step it skips for a KV-load failure and tells the runner nothing",
        _same(_expect(violated=("placeholder-accounting",) + V2_HISTORY)),
        runner="v2-rollback-history",
        events=frozenset({"kvfail"}),
        requests=1,
    ),
    *_releases(
        "v2-rollback-no-drop",
        "negative control of the whole V2 recompute fix: its scheduler half with the runner of v2-rollback, "
        "which rolls the slot's computed count back but keeps the skipped token in total_len",
        _same(_expect(violated=V2_HISTORY)),
        runner="v2-rollback",
        events=frozenset({"kvfail"}),
        release_skipped=True,
        requests=1,
    ),
    *_releases(
        "v2-rollback-live",
        "negative control of the V2 recompute fix: rolling the slot back is not "
        "enough while the runner decides on its own (a recompute that covers a pending draft's position is "
        "a chunk to the scheduler, not to the runner)",
        _same(_expect(violated=("predicates-agree",))),
        runner="v2-rollback-live",
        events=frozenset({"kvfail"}),
        requests=1,
    ),
    # ---- historical behaviours (each 0.32.0 with one mechanism swapped back) ---------------------
    _cfg(
        "h1-preempt",
        "preemption kept placeholders, output not marked stale (before #38624); "
        "V2 re-prefills a resumed request while the scheduler still counts old placeholders",
        _expect(violated=("counter-nonnegative", "predicates-agree", "placeholder-accounting")),
        runner="v2",
        events=frozenset({"preempt"}),
        profile="h1-preempt-keeps-placeholders",
        requests=1,
    ),
    # one request with two drafts shows it at the depth two requests with one draft need,
    # in a sixth of the search (measured)
    _cfg(
        "h2-reset-flag",
        "reset_prefix_cache dropped one frame with a boolean: a later "
        "frame carrying drafts is consumed against the zeroed counter (one request with two "
        "drafts; with one draft it takes a second request)",
        _expect(violated=("counter-nonnegative",)),
        runner="v1",
        events=frozenset({"reset"}),
        profile="h2-reset-discard-flag",
        spec_tokens=2,
        requests=1,
    ),
    _cfg(
        "h3-reset-counter",
        "reset_prefix_cache counted tokens but dropped frames (#42117): "
        "a multi-token frame is counted as one, later frames are dropped and leak placeholders",
        _expect(violated=("placeholder-accounting",)),
        runner="v1",
        events=frozenset({"reset"}),
        profile="h3-reset-discard-counter",
        spec_tokens=2,
        requests=1,
    ),
    _cfg(
        "h4-stream",
        "resumable stop without the safe-frontier rollback (#35755, #50692)",
        _expect(violated=("counter-nonnegative", "predicates-agree", "scheduled-tokens-positive")),
        runner="v1",
        events=frozenset({"stream"}),
        profile="h4-stream-no-rollback",
        requests=1,
    ),
)

# ---- platform plugins' runners: each plugin's module in spec/plugin_runners/ holds its
# configurations and their expected verdicts (docs/plugin-runners.md); named plugin-<...> ----
MATRIX = MATRIX + plugin_scenarios(sys.modules[__name__])
# a plugin configuration of fixed sizes searches for counterexamples; the liveness of its
# runner is claimed on the plugin's configurations for any number of requests (rest)
_PLUGIN_SEARCHES = frozenset(c.name for c in MATRIX if c.run.plugin and not c.rest)

# Liveness: stale output drains (stale-drains), so stale output never keeps a request from
# resuming forever, a request with nothing in flight can run again (no-stuck-request),
# has_requests() is false only when nothing is left (idle-only-when-done, with streaming
# sessions: without them it says nothing more than has_requests()), and from every
# reachable state the engine, run on by itself, schedules every request left within
# 2 * (pp + 1) + 2 steps (bounded-progress, proved from the invariants the others'
# k-induction establishes, so wherever no-stuck-request is). All claimed proved wherever
# the contract's lemmas carry the proof; not claimed (no proof, and no counterexample
# within 10 steps either) on 0.29.0 and 0.30.0 for the scenarios whose streaming stop
# there has no safe-frontier rollback, for the seed's clamp under over-delivery, and on
# the historical profiles.
_DRAINS_NOT_ON_0_29_0_30 = frozenset(
    {"v1", "v2", "v2-live", "v2-pp2", "v2-pp3", "v2-pp4", "guard-healthy", "guard-v1-healthy"}
)
# nor, in the two shared-block failure scenarios (a request's computed count cut back by a
# failure on a block it shares is not inductive with the lemmas), where no counterexample
# comes within 12 steps either
_DRAINS_NOT_CLAIMED = frozenset(
    {"v1-over-delivery-clamp", "v2-over-delivery-clamp", "v1-kvfail-shared", "v2-kvfail-shared"}
)


# no-stuck-request is not claimed under over-delivery, nor for the guard's streaming
# sessions on 0.33.0: not inductive with the lemmas there (the decode-gap lemma does not
# hold under over-delivery), and no counterexample within 8 steps either
_STUCK_NOT_CLAIMED = frozenset({"guard-v2-stream@0.33.0"})


def _liveness(cfg: Config) -> Config:
    if {"stale-drains", "no-stuck-request"} & set(cfg.expect) or cfg.prof.historical:
        return cfg
    if cfg.scenario in _DRAINS_NOT_CLAIMED or cfg.name in _PLUGIN_SEARCHES:
        return cfg
    if cfg.scenario in _DRAINS_NOT_ON_0_29_0_30 and cfg.prof.release in ("0.29.0", "0.30.0"):
        return cfg
    claims = {"stale-drains": "proved"}
    # without the safe-frontier rollback (0.29.0, 0.30.0) a session stops with its next step
    # in flight, live, and has_requests() false: the NO_ROLLBACK mechanism (3 steps), not
    # claimed again here
    if cfg.has("stream") and cfg.prof.stop_rolls_back:
        claims["idle-only-when-done"] = "proved"
    if "over-delivery" not in cfg.faults and cfg.name not in _STUCK_NOT_CLAIMED:
        claims["no-stuck-request"] = "proved"
        claims["bounded-progress"] = "proved"
    return cfg.with_(expect={**cfg.expect, **claims})


MATRIX = tuple(_liveness(cfg) for cfg in MATRIX)


def by_name(names: list[str] | None = None) -> list[Config]:
    """The named configurations (all when names is empty), validated, each once."""
    for i, c in enumerate(MATRIX):
        if not isinstance(c, Config) or not isinstance(c.name, str) or not c.name:
            raise SpecError(
                f"spec/matrix.py: MATRIX entry {i + 1} is not a Config with a name string "
                f'(got {c!r:.80}); write _cfg("name", "note", expect, ...)'
            )
    table = {c.name: c for c in MATRIX}
    if len(table) != len(MATRIX):
        shared = sorted({c.name for c in MATRIX if sum(d.name == c.name for d in MATRIX) > 1})
        raise SpecError(
            f"spec/matrix.py: configuration name(s) {', '.join(map(repr, shared))} used more "
            "than once; names must be unique (rename one entry)"
        )
    if not names:
        return [expectations.check(c.validate()) for c in MATRIX]
    names = list(dict.fromkeys(names))  # a name given twice is run once
    chosen: list[str] = []
    unknown = []
    for n in names:
        if n in table:
            chosen.append(n)
            continue
        if n.endswith("*") and len(n) > 1:  # a prefix: every configuration whose name starts with it
            matched = [c.name for c in MATRIX if c.name.startswith(n[:-1])]
            if matched:
                chosen.extend(matched)
                continue
        releases = [c.name for c in MATRIX if c.scenario == n]  # a scenario: all its releases
        if releases:
            chosen.extend(releases)
        else:
            unknown.append(n)
    if unknown:
        scenarios = list(dict.fromkeys(c.scenario for c in MATRIX))
        raise SpecError(
            f"unknown configuration {', '.join(unknown)}; known scenarios: {', '.join(scenarios)} "
            "(each runs on every release; name one as SCENARIO@RELEASE, or a prefix as PREFIX*; see spec/matrix.py)"
        )
    return [expectations.check(table[n].validate()) for n in dict.fromkeys(chosen)]
