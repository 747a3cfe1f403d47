"""The fuzzer's data: the configurations it samples (presets) and the known differences it can look past.

A preset is a small configuration whose traces are drawn at random and replayed on a
vLLM tree under that tree's profile. A known difference (`--known NAME`, or `--known
all`) has been analysed and reported: a masked difference is ignored by the comparison
and the trace goes on, so the fuzzer looks past it for others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from vllm_contract.spec.config import Config
from vllm_contract.spec.vocabulary import Status

F = frozenset
PRESETS: dict[str, Config] = {
    c.name: c
    for c in (
        Config("v1-core", runner="v1"),
        Config("v2-core", runner="v2"),
        Config("v1-thr", runner="v1", long_prefill_threshold=5, block_size=4),
        Config("v1-preempt", runner="v1", events=F({"preempt", "preempt-drop"})),
        Config("v2-preempt", runner="v2", events=F({"preempt", "preempt-drop"})),
        Config("v1-reset", runner="v1", events=F({"reset"})),
        Config("v2-reset", runner="v2", events=F({"reset"})),
        Config("v1-stream", runner="v1", events=F({"stream"})),
        Config("v2-stream", runner="v2", events=F({"stream"})),
        Config("v1-abort", runner="v1", events=F({"abort", "preempt"})),
        Config("v1-kvfail", runner="v1", events=F({"kvfail"}), block_size=4),
        Config("v2-kvfail", runner="v2", events=F({"kvfail"}), block_size=4),
        Config("v1-spec", runner="v1", spec_tokens=1),
        Config("v2-spec", runner="v2", spec_tokens=1),
        Config("v1-spec2-preempt", runner="v1", spec_tokens=2, events=F({"preempt", "reset"})),
        Config("v2-spec-stream", runner="v2", spec_tokens=1, events=F({"stream", "abort"})),
        Config(
            "v1-all",
            runner="v1",
            spec_tokens=1,
            block_size=4,
            events=F({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
        ),
        Config(
            "v2-all",
            runner="v2",
            spec_tokens=1,
            block_size=4,
            events=F({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
        ),
        Config("v2-pp2", runner="v2", pp=2, events=F({"preempt", "abort"})),
        Config("v2-stale-slot", runner="v2", faults=F({"stale-slot-read"})),
        Config("v2-stale-slot-clamp", runner="v2", faults=F({"stale-slot-read"}), clamp=True),
        Config("v1-over-clamp", runner="v1", faults=F({"over-delivery"}), clamp=True),
        Config("v1-3req", runner="v1", requests=3, events=F({"preempt", "stream"})),
        Config("v1-pad-thr", runner="v1", spec_tokens=2, long_prefill_threshold=2, events=F({"preempt", "stream"})),
        Config(
            "v1-4req-all",
            runner="v1",
            requests=4,
            spec_tokens=2,
            long_prefill_threshold=6,
            block_size=4,
            events=F({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
        ),
        Config(
            "v2-pp2-all",
            runner="v2",
            pp=2,
            spec_tokens=1,
            block_size=4,
            events=F({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
        ),
        Config("v2-pp3-stream", runner="v2", pp=3, requests=3, events=F({"stream", "preempt"})),
        Config(
            "v2live-all",
            runner="v2-live",
            spec_tokens=3,
            block_size=4,
            long_prefill_threshold=5,
            events=F({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
        ),
        Config(
            "v2-all-clamp",
            runner="v2",
            spec_tokens=1,
            block_size=4,
            clamp=True,
            faults=F({"stale-slot-read", "over-delivery"}),
            events=F({"preempt", "preempt-drop", "reset", "stream", "abort", "kvfail"}),
        ),
        Config(
            "v1-all-over-clamp",
            runner="v1",
            spec_tokens=2,
            block_size=4,
            clamp=True,
            faults=F({"over-delivery"}),
            events=F({"preempt", "reset", "stream", "kvfail"}),
        ),
        # length stops: a model length the prompts come near, max_tokens, drafts
        Config(
            "v1-length",
            runner="v1",
            requests=2,
            spec_tokens=2,
            block_size=4,
            max_model_len=24,
            max_tokens=6,
            events=F({"preempt", "preempt-drop", "reset", "abort", "kvfail"}),
        ),
        Config(
            "v2-length",
            runner="v2",
            requests=2,
            spec_tokens=1,
            block_size=4,
            max_model_len=24,
            max_tokens=6,
            events=F({"preempt", "preempt-drop", "reset", "abort", "kvfail"}),
        ),
        # the under-drain fault: the scheduler output's counts rewritten short
        Config("v1-under-drain", runner="v1", faults=F({"under-drain"}), events=F({"preempt", "preempt-drop"})),
        # prefix caching: blocks of 4 so that short prompts share and hit them; a trace draws
        # how long a prefix its prompts share; hits after preemption, resets, shared-block
        # KV-load failures, and with length stops
        Config(
            "v1-prefix",
            runner="v1",
            spec_tokens=1,
            block_size=4,
            events=F({"prefix-cache", "preempt", "preempt-drop", "reset", "abort"}),
        ),
        Config(
            "v2-prefix",
            runner="v2",
            spec_tokens=1,
            block_size=4,
            events=F({"prefix-cache", "preempt", "preempt-drop", "reset", "abort"}),
        ),
        Config(
            "v1-prefix-kvfail",
            runner="v1",
            requests=3,
            block_size=4,
            events=F({"prefix-cache", "kvfail", "preempt", "abort"}),
        ),
        Config(
            "v2-prefix-kvfail",
            runner="v2",
            spec_tokens=1,
            block_size=4,
            events=F({"prefix-cache", "kvfail", "preempt-drop", "reset"}),
        ),
        Config(
            "v2-prefix-length",
            runner="v2",
            spec_tokens=2,
            block_size=4,
            max_model_len=24,
            max_tokens=6,
            events=F({"prefix-cache", "kvfail", "preempt", "reset", "abort"}),
        ),
    )
}

# ------------------------------------------------------------------ known divergences


@dataclass(frozen=True)
class Known:
    name: str
    doc: str
    # (key, model value, target value, model state, runner mode) -> the difference is this one
    matches: Callable[[tuple, Any, Any, Mapping, str], bool]


def _finished(state: Mapping, key: tuple) -> bool:
    return len(key) == 2 and state.get(("status", key[1])) == Status.FINISHED


KNOWN: dict[str, Known] = {
    k.name: k
    for k in (
        Known(
            "runner-negative-position",
            "a request scheduled from position -1 (finding 9: a KV-load recompute under "
            "two rejected drafts) makes vLLM's V1 runner index its token table at a negative "
            "position: IndexError in _prepare_inputs ([cite:v1-prepare-inputs-token-table] on 0.32.0), "
            "which ends the engine. The model states the cause (computed-nonnegative), not "
            "the runner's exception; at that step nothing else is compared (the runner "
            "did not run it), and the case ends there",
            lambda key, a, b, s, runner: (
                _scheduled_below_zero(s) and ("IndexError" in str(b) if key == ("error",) else runner == "real")
            ),
        ),
    )
}


def _scheduled_below_zero(state: Mapping) -> bool:
    """The newest step scheduled some request from a negative position: its computed
    count after the step, less what the step scheduled, is below 0."""
    newest = state.get(("queue_len",), 0) - 1
    requests = sum(1 for key in state if key[0] == "num_computed_tokens")
    return newest >= 0 and any(
        state[("q_scheduled", newest, r)] > 0
        and state[("num_computed_tokens", r)] - state[("q_scheduled", newest, r)] < 0
        for r in range(requests)
    )


def ignore_known(names, runner: str = "model") -> Callable | None:
    """The comparison's mask for these known differences (None: mask nothing). runner:
    who decides the runner's returns, the model or vLLM's own runner ("real")."""
    chosen = [KNOWN[n] for n in names]
    if not chosen:
        return None
    return lambda key, a, b, s: any(k.matches(key, a, b, s, runner) for k in chosen)


def left_out_because(preset: str, release: str) -> tuple[str, str] | None:
    """Why a preset is no trace of a release, as (the kind of preset, the reason), or None
    where it runs: its runner is not in the release (vLLM's V1 runner ends at 0.33.0). A
    tree that is no modelled release runs every preset."""
    from vllm_contract.spec import profiles

    known = {p.release: p for p in profiles.RELEASES}
    if release in known and not known[release].has_v1_runner and PRESETS[preset].on_vllm_v1:
        return "V1", f"vLLM {release} has no V1 model runner"
    return None


def runs_on(preset: str, release: str) -> bool:
    """Whether a preset's runner exists in a release (left_out_because says why not)."""
    return left_out_because(preset, release) is None


def runnable_presets(releases: tuple[str, ...]) -> list[str]:
    """Every preset that runs on some of the releases: vLLM's V1 runner's end at 0.33.0
    (0.34.0 has no V1 runner; a campaign or a review of only such releases leaves them
    out). A tree that is no modelled release keeps them all."""
    return [name for name in PRESETS if any(runs_on(name, r) for r in releases)]
