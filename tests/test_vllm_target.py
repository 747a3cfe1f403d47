"""The vLLM target against the reference interpreter, on hand-written traces.

Every trace is replayed with targets.harness.replay, which compares vLLM's
scheduler with the model after every step (all projected variables, the running and
waiting orders, and which vLLM assert fires). The explicit asserts on top pin what
the loaded vLLM release itself did (0.32.0 or 0.33.0, `--vllm`), so a test still
says something if the model changes. Configurations take the loaded tree's profile.

vLLM is imported once per session; a fresh scheduler is built per case.
"""

from __future__ import annotations

import pytest
from vllm_contract.adapter import current as vllm_env
from vllm_contract.adapter import objects
from vllm_contract.model.interpreter import nested
from vllm_contract.model.run import Run
from vllm_contract.model.sampler import random_trace
from vllm_contract.spec import citations, profiles
from vllm_contract.spec.config import Config
from vllm_contract.spec.properties import ASSERTS, statement_key
from vllm_contract.spec.vocabulary import Status
from vllm_contract.targets.fuzz.presets import KNOWN, ignore_known
from vllm_contract.targets.harness import Divergence, replay
from vllm_contract.targets.orders import model_orders
from vllm_contract.targets.vllm_target import CaseEnded, VllmTarget

# a vLLM tree the run cannot load stops it (the plugin's preflight), never a skip
pytestmark = pytest.mark.vllm

PROFILE = vllm_env.tree().profile
RELEASE = PROFILE.removeprefix("vllm-")
PROF = profiles.of(PROFILE)
ASSERTS_AT_ZERO = profiles.of(PROFILE).asserts_counter_at_zero
COUNTER_ASSERT = "assert request.num_output_placeholders >= 0"
COUNTER_SITE = vllm_env.statement_site(COUNTER_ASSERT)


HAS_V1 = objects.has_v1_runner()


def C(name, **kw):
    """A configuration of the loaded tree's release profile; where V2 is vLLM's only runner
    (0.34.0 on), the tests that drive the scheduler with V1's discard play V2's instead."""
    kw.setdefault("profile", PROFILE)
    if kw.get("runner") == "v1" and not HAS_V1:
        kw["runner"] = "v2"
    return Config(name, **kw)


def needs_v1(runner: str = "v1") -> None:
    """A test about vLLM's V1 runner itself has nothing to check on a tree without it."""
    if runner == "v1" and not HAS_V1:
        pytest.skip(f"vLLM {RELEASE} has no V1 model runner (removed in 0.34.0); V2's case runs beside it")


F = frozenset
W, RUN, PRE, WSTREAM, FIN = (
    Status.WAITING,
    Status.RUNNING,
    Status.PREEMPTED,
    Status.WAITING_FOR_STREAMING_REQ,
    Status.FINISHED,
)
SCHED = "schedule"
DELIVER = "deliver"


@pytest.fixture(scope="module")
def target():
    return VllmTarget()


def walk(target, cfg, init, steps, ignore=None):
    """Replay (spec == vLLM after every step), then step the target again and return
    its projection (nested) after each step, for explicit checks."""
    result = replay(cfg, init, steps, target, ignore=ignore)
    run = Run(cfg, init, steps)
    target.reset(cfg, run.init)
    views = []
    for played in run:
        outcome = target.step(played.event, played.args, played)
        views.append((outcome, nested(target.project())))
    return result, views


def at(views, i, name):
    return views[i][1][name]


# ----------------------------------------------------------------- length stops


def _engine_until_done(cfg, init):
    """The engine left alone from init (model/hang.py's fault-free steps) until nothing is
    left: no stop pick anywhere, so every request ends on a length stop."""
    from vllm_contract.model import hang
    from vllm_contract.model.interpreter import Interpreter

    interp = Interpreter(cfg)
    state = interp.initial(**init)
    steps = []
    while len(steps) < 60:
        more = hang.run_on(interp, state)
        if not more:
            break
        run = Run(interp, init, steps + more)
        for played in run:
            state = played.state
        steps += more
    return steps, state


@pytest.mark.parametrize(
    "prompt, max_model_len, max_tokens, spec",
    [(3, 64, 5, 0), (3, 64, 5, 2), (9, 12, 50, 0), (9, 12, 50, 2)],
    ids=["max-tokens", "max-tokens-drafts", "max-model-len", "max-model-len-drafts"],
)
def test_a_request_stops_at_its_length_as_vllm_stops_it(target, prompt, max_model_len, max_tokens, spec):
    """vLLM's step cap and stop check against the model's, with drafts: the engine runs with
    no stop token until the request finishes, and every step agrees (replay)."""
    cfg = C("length", runner="v1", requests=1, spec_tokens=spec, max_model_len=max_model_len, max_tokens=max_tokens)
    steps, end = _engine_until_done(cfg, {"prompt_len": [prompt]})
    result = replay(cfg, {"prompt_len": [prompt]}, steps, target)
    assert result.fired is None and end[("status", 0)] == FIN
    # it stopped at the first length it reached, not later
    tokens = end[("num_tokens", 0)]
    assert tokens == min(prompt + max_tokens, max_model_len), tokens


# ----------------------------------------------------------------- healthy path


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_healthy_chunked_prefill_decode_stop(target, runner):
    needs_v1(runner)
    cfg = C("healthy", runner=runner, requests=1)
    steps = [
        (SCHED, {"budget": 64}),  # chunk 1: 64 of 100
        (SCHED, {"budget": 64}),  # final chunk: 36, reserves 1
        (DELIVER, {}),  # chunk 1: the runner discards
        (SCHED, {"budget": 64}),  # decode
        (DELIVER, {}),  # final chunk's token
        (SCHED, {"budget": 64}),
        (DELIVER, {"stop": [1]}),  # the stop token
        (SCHED, {"budget": 64}),  # empty: ships the finished id (sched:2813-2815)
        (DELIVER, {}),  # the last step, for a finished request
        (DELIVER, {}),  # the empty step
    ]
    result, v = walk(target, cfg, {"prompt_len": [100]}, steps)
    assert result.fired is None and result.steps_run == len(steps)
    assert at(v, 0, "num_computed_tokens") == [64]
    assert at(v, 0, "is_prefill_chunk") == [True]
    assert at(v, 0, "num_output_placeholders") == [0]
    assert at(v, 1, "num_computed_tokens") == [100]
    assert at(v, 1, "is_prefill_chunk") == [False]
    assert at(v, 1, "num_output_placeholders") == [1]
    assert at(v, 2, "num_tokens") == [100]  # nothing delivered for the chunk
    assert at(v, 4, "num_tokens") == [101]
    assert at(v, 6, "status") == [FIN]
    assert at(v, 6, "num_tokens") == [102]
    assert at(v, 9, "queue_len") == 0
    assert v[0][0].facts["runner_returns"] == {0: 0}
    assert v[1][0].facts["runner_returns"] == {0: 1}


def test_two_requests_share_the_budget(target):
    cfg = C("share", runner="v1", long_prefill_threshold=5)
    steps = [
        (SCHED, {"budget": 8}),
        (SCHED, {"budget": 8}),
        (DELIVER, {}),
        (SCHED, {"budget": 8}),
        (DELIVER, {}),
        (SCHED, {"budget": 8}),
        (DELIVER, {}),
    ]
    result, v = walk(target, cfg, {"prompt_len": [12, 9]}, steps)
    # the threshold caps each request at 5 while two are eligible (sched:708-709)
    assert v[0][0].facts["num_scheduled_tokens"] == {"r0": 5, "r1": 3}
    assert result.target_state[("status", 0)] == RUN


# ----------------------------------------------------------------- the seed's trigger


def test_seed_synthetic_trigger_fires_counter_assert(target):
    """A runner that samples a non-final prefill chunk (V2 reading a stale slot)
    drives num_output_placeholders to -1 on 0.29.0-0.32.0: the counter assert
    (async_scheduler.py:63 on 0.29.0, :71 on 0.32.0). On 0.33.0 the token is appended
    silently."""
    cfg = C("seed", runner="v2", requests=1, faults=F({"stale-slot-read"}))
    steps = [
        (SCHED, {"budget": 64, "stale_read": [True]}),  # chunk 1 sampled anyway
        (SCHED, {"budget": 64}),  # chunk 2: still a chunk, reserves nothing
        (DELIVER, {}),  # chunk 1's token: P = 0 - 1
    ]
    result = replay(cfg, {"prompt_len": [200]}, steps, target)
    if ASSERTS_AT_ZERO:
        assert result.fired == "placeholders-nonnegative"
        assert result.outcomes[-1].assert_site[:2] == COUNTER_SITE
        with pytest.raises(CaseEnded):
            target.step(SCHED, {("budget",): 1}, None)
    else:  # 0.33.0 decrements only when P > 0: the stray token is kept, nothing fires
        assert result.fired is None
        assert result.target_state[("num_tokens", 0)] == 201
        assert result.target_state[("num_output_placeholders", 0)] == 0


def test_seed_trigger_is_absorbed_by_a_final_chunk(target):
    """In engine order the stray token of a two-chunk prompt consumes the final
    chunk's placeholder silently; the counters stay non-negative (but the response
    got a token sampled from an incomplete prompt)."""
    cfg = C("seed2", runner="v2", requests=1, faults=F({"stale-slot-read"}))
    steps = [
        (SCHED, {"budget": 64, "stale_read": [True]}),
        (SCHED, {"budget": 64}),
        (DELIVER, {}),
        (SCHED, {"budget": 64}),
        (DELIVER, {}),
    ]
    result, v = walk(target, cfg, {"prompt_len": [100]}, steps)
    assert result.fired is None
    assert at(v, 2, "num_tokens") == [101]  # the stray token was appended
    assert at(v, 2, "num_output_placeholders") == [0]


# ----------------------------------------------------------------- preemption


def test_preempt_deliver_mode(target):
    cfg = C("pre", runner="v1", events=F({"preempt", "preempt-drop"}))
    steps = [
        (SCHED, {"budget": 8}),
        (SCHED, {"budget": 8}),
        (DELIVER, {}),
        ("preempt", {"req": 1, "drop": False}),
        (SCHED, {"budget": 8}),  # r1 not resumed: deliverable stale output
        (DELIVER, {}),  # the stale step: appended, counters untouched
        (SCHED, {"budget": 8}),  # r1 resumed: recomputes all 6 tokens
        (DELIVER, {}),
    ]
    result, v = walk(target, cfg, {"prompt_len": [4, 4]}, steps)
    assert at(v, 3, "status") == [RUN, PRE]
    assert at(v, 3, "num_computed_tokens")[1] == 0
    assert at(v, 3, "num_output_placeholders")[1] == 0
    assert at(v, 3, "num_stale_output_tokens")[1] == 1
    assert at(v, 3, "drop_stale_output")[1] is False
    assert "r1" not in v[4][0].facts["num_scheduled_tokens"]
    assert at(v, 5, "num_tokens")[1] == 6  # stale token delivered
    assert at(v, 5, "num_stale_output_tokens")[1] == 0
    assert v[6][0].facts["num_scheduled_tokens"]["r1"] == 6
    assert at(v, 6, "status") == [RUN, RUN]


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_preempt_drop_mode(target, runner):
    needs_v1(runner)
    cfg = C("pre-drop", runner=runner, events=F({"preempt", "preempt-drop"}))
    steps = [
        (SCHED, {"budget": 8}),
        (SCHED, {"budget": 8}),
        (DELIVER, {}),
        ("preempt", {"req": 1, "drop": True}),
        (SCHED, {"budget": 8}),  # drop mode: resumed at once
        (DELIVER, {}),  # the stale step: dropped
        (SCHED, {"budget": 8}),
        (DELIVER, {}),
    ]
    result, v = walk(target, cfg, {"prompt_len": [4, 4]}, steps)
    assert at(v, 3, "drop_stale_output")[1] is True
    assert v[4][0].facts["num_scheduled_tokens"]["r1"] == 5
    assert at(v, 4, "q_admitted")[1][1] is True
    assert at(v, 5, "num_tokens")[1] == 5  # nothing appended
    assert at(v, 5, "num_stale_output_tokens")[1] == 0
    assert at(v, 7, "num_tokens")[1] == 6


def test_preempt_orders_three_requests(target):
    cfg = C("pre3", runner="v1", requests=3, events=F({"preempt"}))
    steps = [
        (SCHED, {"budget": 30}),
        (SCHED, {"budget": 30}),
        (DELIVER, {}),
        ("preempt", {"req": 2}),
        (SCHED, {"budget": 30}),
        (DELIVER, {}),
        ("preempt", {"req": 1}),
        (SCHED, {"budget": 30}),
        (DELIVER, {}),
        (SCHED, {"budget": 30}),
    ]
    result, v = walk(target, cfg, {"prompt_len": [3, 4, 5]}, steps)
    assert at(v, 6, "status") == [RUN, PRE, PRE]
    # r1 was prepended last, so it is first in `waiting`; it waits for its stale
    # output, r2 is resumed first and re-enters `running` before r1
    assert v[7][0].facts["num_scheduled_tokens"] == {"r0": 1, "r2": 7}
    orders = target.orders()
    assert orders == model_orders(cfg, result.spec_state)
    assert orders["running"] == ["r0", "r2", "r1"]


# ----------------------------------------------------------------- reset_prefix_cache


def test_reset_prefix_cache_preempts_all_drop_mode(target):
    cfg = C("reset", runner="v1", events=F({"reset"}))
    steps = [
        (SCHED, {"budget": 20}),
        (SCHED, {"budget": 20}),
        (DELIVER, {}),
        ("reset_prefix_cache", {}),
        (SCHED, {"budget": 20}),
        (DELIVER, {}),
    ]
    result, v = walk(target, cfg, {"prompt_len": [4, 6]}, steps)
    assert v[3][0].facts["reset_failed"] is None
    assert at(v, 3, "status") == [PRE, PRE]
    assert at(v, 3, "drop_stale_output") == [True, True]
    assert at(v, 3, "num_stale_output_tokens") == [1, 1]
    assert v[3][1]["num_output_placeholders"] == [0, 0]
    # both resumed in the next step, in their running order
    assert v[4][0].facts["num_scheduled_tokens"] == {"r0": 5, "r1": 7}
    assert at(v, 5, "num_tokens") == [5, 7]  # the stale step was dropped


RESET_STREAM_STEPS = [
    (SCHED, {"budget": 10}),
    (SCHED, {"budget": 10}),
    (DELIVER, {"stop": [1, 0]}),  # r0's turn ends: a session waiting for input, its blocks kept
    ("reset_prefix_cache", {}),  # r1 preempted, then the call raises: r0 holds blocks
    (SCHED, {"budget": 10}),  # r1 resumes
    (DELIVER, {}),
    ("stream_update", {"req": 0, "new_tokens": 3}),  # r0 waits with its next input, blocks still held
    ("reset_prefix_cache", {}),  # raises again
    (SCHED, {"budget": 10}),  # both run
    (DELIVER, {}),
    ("reset_prefix_cache", {}),  # nobody else holds a block: the reset succeeds
]


def test_reset_fails_while_a_session_holds_blocks(target):
    """vLLM preempts every running request, then raises because a streaming session outside
    `running` still holds KV blocks (sched:2868-2875); EngineCore returns the failure to the
    caller and runs on. The model says which calls fail (observed `reset_fails`) and follows
    who holds blocks (holds_blocks, compared with vLLM's KV cache manager after every step)."""
    cfg = C("reset-stream", runner="v1", events=F({"stream", "reset"}))
    init = {"prompt_len": [3, 3], "resumable": [True, False]}
    result, v = walk(target, cfg, init, RESET_STREAM_STEPS)
    failed = [o.facts["reset_failed"] for o, _ in v if "reset_failed" in o.facts]
    assert [f.startswith("RuntimeError: Failed to reset KV cache") if f else f for f in failed] == [True, True, None]
    assert at(v, 3, "status") == [WSTREAM, PRE]  # the preemption stands although the call raised
    assert at(v, 3, "holds_blocks") == [True, False]
    assert at(v, 7, "status") == [W, PRE]
    assert at(v, 7, "holds_blocks") == [True, False]
    assert at(v, 10, "holds_blocks") == [False, False]
    run = Run(cfg, init, RESET_STREAM_STEPS)
    assert [p.result.observed["reset_fails"] for p in run if p.event == "reset_prefix_cache"] == [True, True, False]


def test_a_reset_outcome_the_model_does_not_predict_is_a_divergence(target):
    """Negative control: the same calls with the model's prediction flipped are reported
    as what they are, a failure the model did not predict and a success it did not."""
    cfg = C("reset-stream", runner="v1", events=F({"stream", "reset"}))
    run = Run(cfg, {"prompt_len": [3, 3], "resumable": [True, False]}, RESET_STREAM_STEPS)
    target.reset(cfg, run.init)
    said = []
    for played in run:
        if played.event == "reset_prefix_cache":
            played.result.observed["reset_fails"] = not played.result.observed["reset_fails"]
        said += target.step(played.event, played.args, played).mismatches
    assert len(said) == 3
    assert "the model says the call succeeds; vLLM RuntimeError: Failed to reset KV cache" in said[0]
    assert said[2] == "reset_prefix_cache: the model says the call fails (a session holds KV blocks); vLLM returned"


# ----------------------------------------------------------------- streaming sessions


def test_streaming_session_stop_and_update(target):
    cfg = C("stream", runner="v1", events=F({"stream"}))
    steps = [
        (SCHED, {"budget": 20}),
        (SCHED, {"budget": 20}),
        (DELIVER, {}),
        (SCHED, {"budget": 20}),
        (DELIVER, {"stop": [1, 0]}),  # r0's turn ends
        ("stream_update", {"req": 0, "new_tokens": 3}),  # applied at once
        (SCHED, {"budget": 20}),
        (DELIVER, {}),
        ("stream_update", {"req": 0, "new_tokens": 2}),  # queued
        (SCHED, {"budget": 20}),
        (DELIVER, {"stop": [1, 0]}),
    ]  # stop applies the queued update
    result, v = walk(target, cfg, {"prompt_len": [4, 4], "resumable": [True, False]}, steps)
    assert at(v, 4, "status") == [WSTREAM, RUN]
    if not PROF.stop_rolls_back:
        # 0.29.0, 0.30.0: no rollback; the walk compared every step with the model
        assert at(v, 4, "num_computed_tokens")[0] == 6
        assert at(v, 4, "num_output_placeholders")[0] == 1
        assert at(v, 4, "drop_stale_output")[0] is False
        return
    assert at(v, 4, "num_computed_tokens")[0] == 5  # safe frontier c - P = 6 - 1
    assert at(v, 4, "num_output_placeholders")[0] == 0
    assert at(v, 4, "drop_stale_output")[0] is True
    assert at(v, 4, "num_stale_output_tokens")[0] == 1
    assert at(v, 5, "status")[0] == W
    assert at(v, 5, "num_tokens")[0] == 8  # 5 kept + 3 new
    assert at(v, 5, "num_prompt_tokens")[0] == 8
    assert v[6][0].facts["num_scheduled_tokens"]["r0"] == 3
    assert at(v, 8, "pending_update")[0] is True
    assert at(v, 8, "pending_update_len")[0] == 2
    assert at(v, 10, "status")[0] == W
    assert at(v, 10, "num_tokens")[0] == 10
    assert at(v, 10, "pending_update")[0] is False


def test_the_target_runs_on_with_the_runners_decisions_the_model_made(target, monkeypatch):
    """The 0.29.0/0.30.0 sweep's run-on divergences (trace 25 of v2live-all, seed 11): after
    a KV-load failure the V2 live-length runner samples the prefill chunk the engine, run
    on, schedules next; the model's run-on plays the configuration's runner and dies of
    the counter assert there (0.29.0 and 0.30.0 assert it at 0), while the target's runner
    returned only what the scheduler reserved and ran on. The target's run-on now returns
    what the model's runner decided for each step the two both schedule, as the case's own
    steps do; on every release the two agree, and each decision reaches the target."""
    from vllm_contract.model import hang

    none = {"accepted": [0, 0]}
    no_fault = {"stop": [0, 0], "kv_fail_req": -1, "kv_fail_block": 0}
    steps = [
        ("stream_update", {"req": 0, "new_tokens": 3}),
        (SCHED, {"budget": 1, **none}),
        (SCHED, {"budget": 1, **none}),
        (DELIVER, no_fault),
        (SCHED, {"budget": 1, **none}),
        (DELIVER, no_fault),
        (SCHED, {"budget": 2, "accepted": [1, 0]}),
        (DELIVER, {**no_fault, "stop": [1, 0]}),
        (SCHED, {"budget": 3, **none}),
        ("abort", {"req": 1}),
        (DELIVER, no_fault),
        ("preempt", {"req": 0, "drop": False}),
        (SCHED, {"budget": 1, **none}),
        (DELIVER, no_fault),
        (SCHED, {"budget": 5, **none}),
        (DELIVER, no_fault),
        (SCHED, {"budget": 5, **none}),
        (DELIVER, {**no_fault, "kv_fail_req": 0}),
    ]
    cfg = C(
        "v2live-all",
        runner="v2-live",
        events=F({"abort", "kvfail", "preempt", "preempt-drop", "reset", "stream"}),
        requests=2,
        spec_tokens=3,
        long_prefill_threshold=5,
        block_size=4,
    )
    init = {"prompt_len": [1, 1], "resumable": [True, False]}
    run = Run(cfg, init, steps)
    for _ in run:
        pass
    _, states, fired = hang.played_on(run.interp, run.state)
    decisions = []
    for state in states:
        slot = state[("queue_len",)] - 1
        if slot >= 0 and any(state[("q_scheduled", slot, r)] for r in range(cfg.requests)):
            decisions.append({r: state[("q_sampled", slot, r)] for r in range(2) if state[("q_scheduled", slot, r)]})
    if not PROF.stop_rolls_back:
        assert fired == ["placeholders-nonnegative"]  # the unreserved chunk's token, run on
    handed = []
    played = VllmTarget.engine_step

    def engine_step(self, decided=None):
        handed.append(decided)
        return played(self, decided)

    monkeypatch.setattr(VllmTarget, "engine_step", engine_step)
    replay(cfg, init, steps, target)  # a Divergence if the two run-ons part
    given = [d for d in handed if d is not None]
    assert given and given == decisions[: len(given)]


# ----------------------------------------------------------------- abort


def test_session_update_below_zero_computed_keeps_a_python_slice(target):
    """The 0.30.0 sweep's divergence (trace 24 of v1-all-over-clamp, shrunk): a KV-load
    recompute under two rejected drafts leaves the session at num_computed_tokens -1 when
    it stops, and 0.29.0/0.30.0 apply the update from there without the stop's rollback.
    _update_request_as_session slices the history at num_computed_tokens (sched:1581-1585 on
    0.30.0): at -1 it keeps all but the last token, 4 of 5, so the update of 1 makes 5. From
    0.31.0 on, the rollback's safe-frontier assert ends the same trace at the stop, in both."""
    cfg = C(
        "stream-below-zero",
        runner="v1",
        spec_tokens=2,
        block_size=4,
        clamp=True,
        faults=F({"over-delivery"}),
        events=F({"preempt", "reset", "stream", "kvfail"}),
    )
    none = {"accepted": [0, 0], "extra": [0, 0]}
    steps = [
        (SCHED, {"budget": 4, **none}),
        (SCHED, {"budget": 3, **none}),
        (DELIVER, {"stop": [0, 0], "kv_fail_req": 0, "kv_fail_block": 0}),
        (SCHED, {"budget": 1, **none}),
        (DELIVER, {"stop": [1, 0], "kv_fail_req": -1, "kv_fail_block": 0}),
        ("stream_update", {"req": 0, "new_tokens": 1}),
    ]
    result = replay(cfg, {"prompt_len": [4, 1], "resumable": [True, True]}, steps, target)
    if PROF.stop_rolls_back:
        assert result.fired == "safe-frontier-nonnegative" and result.steps_run == 5
        return
    assert result.steps_run == 6
    assert result.spec_state[("num_computed_tokens", 0)] == -1
    assert result.target_state[("num_tokens", 0)] == 5
    assert result.target_state[("num_prompt_tokens", 0)] == 5


def test_abort_skips_later_deliveries(target):
    cfg = C("abort", runner="v1", events=F({"abort"}))
    # abort lands between engine steps, while the queue has room
    steps = [
        (SCHED, {"budget": 10}),
        (SCHED, {"budget": 10}),
        (DELIVER, {}),
        ("abort", {"req": 1}),
        (SCHED, {"budget": 10}),
        (DELIVER, {}),
    ]
    result, v = walk(target, cfg, {"prompt_len": [3, 3]}, steps)
    assert v[3][0].facts["aborted"] == ["r1"]
    assert at(v, 3, "status") == [RUN, FIN]
    assert "r1" not in v[4][0].facts["num_scheduled_tokens"]
    assert at(v, 5, "num_tokens")[1] == 4  # its in-flight token was not appended
    # vLLM forgets a finished request (sched:2746-2749): its in-flight count is never
    # drained, in the model too (found by the fuzzer as divergence "finished-drain")
    assert at(v, 5, "num_in_flight_tokens")[1] == 1


# ----------------------------------------------------------------- KV-load failure


KV_TRACE = [
    (SCHED, {"budget": 5}),  # r0 admitted: a 5-token chunk (the step that "loaded")
    (SCHED, {"budget": 1}),
    (DELIVER, {"kv_fail_req": 0, "kv_fail_block": 0}),  # block 0 failed: c := 0
    (SCHED, {"budget": 7}),  # re-prefill on the cached path
    (DELIVER, {}),
    (SCHED, {"budget": 4}),
    (DELIVER, {}),
]


def test_kv_load_failure_recompute_v1(target):
    needs_v1()
    cfg = C("kv-v1", runner="v1", events=F({"kvfail"}), block_size=4)
    result, v = walk(target, cfg, {"prompt_len": [13, 4]}, KV_TRACE)
    assert result.fired is None
    assert at(v, 2, "num_computed_tokens")[0] == 0  # rolled back to block 0
    assert at(v, 2, "status")[0] == RUN  # stays in `running`
    assert at(v, 2, "num_tokens")[0] == 13
    assert v[3][0].facts["num_scheduled_tokens"]["r0"] == 7
    assert v[3][0].facts["runner_returns"][0] == 0  # V1 discards the re-prefill chunk


def test_kv_load_failure_recompute_v2_underflows(target):
    """V2's slot (num_computed, prefill_len) is not rolled back on the cached path:
    the re-prefill chunk reaches prefill_len, is sampled, and the delivery finds no
    placeholder (§3.3 of the contract notes) -- on 0.32.0 both sides fire the same
    assert; on 0.33.0 the decrement is skipped at P = 0 and the token is kept."""
    cfg = C("kv-v2", runner="v2", events=F({"kvfail"}), block_size=4)
    result = replay(cfg, {"prompt_len": [13, 4]}, KV_TRACE, target)
    assert result.fired == ("placeholders-nonnegative" if ASSERTS_AT_ZERO else None)
    assert result.steps_run == len(KV_TRACE)
    assert result.outcomes[3].facts["runner_returns"][0] == 1


# ----------------------------------------------------------------- spec decode


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_spec_decode_with_rejections(target, runner):
    needs_v1(runner)
    cfg = C("spec", runner=runner, requests=1, spec_tokens=2)
    steps = [
        (SCHED, {"budget": 10}),  # prefill, reserves 1, two draft placeholders
        (SCHED, {"budget": 10, "accepted": [0]}),  # 1 + 2 drafts, none accepted
        (DELIVER, {}),
        (SCHED, {"budget": 10, "accepted": [2]}),
        (DELIVER, {}),  # 2 drafts rejected: c and P roll back by 2
        (SCHED, {"budget": 10, "accepted": [1]}),
        (DELIVER, {}),  # all accepted: 3 tokens
        (SCHED, {"budget": 10}),
        (DELIVER, {}),  # one rejected
    ]
    result, v = walk(target, cfg, {"prompt_len": [3]}, steps)
    assert result.fired is None
    assert at(v, 0, "num_spec_tokens") == [2]
    assert v[1][0].facts["spec"] == {"r0": 2}
    assert at(v, 1, "num_output_placeholders") == [4]
    assert at(v, 1, "num_computed_tokens") == [6]
    assert at(v, 4, "num_computed_tokens") == [7]
    assert at(v, 4, "num_tokens") == [5]
    assert at(v, 6, "num_tokens") == [8]


def test_padded_admission_cut_by_the_threshold_asserts_in_vllm(target):
    """A 1-token admission is padded to 1 + K drafts (sched:1134-1153), then cut by
    long_prefill_token_threshold (sched:1155-1156); vLLM asserts the padded size at
    sched:1372 and the engine dies. The fuzzer found this as a divergence; the model
    now checks it as the fatal property padding-intact, and both sides fire."""
    cfg = C("pad-thr", runner="v1", spec_tokens=2, long_prefill_threshold=2)
    steps = [(SCHED, {"budget": 2}), (SCHED, {"budget": 10})]
    result = replay(cfg, {"prompt_len": [2, 1]}, steps, target)
    assert result.steps_run == 2
    assert result.fired == "padding-intact"


def test_engine_loop_schedules_once_more_after_the_last_finish(target):
    """Once every request has finished, vLLM's has_requests() stays True until the
    next schedule() ships finished_req_ids (sched:2813-2815), so EngineCore schedules
    an empty step first. The fuzzer found this as divergence "engine-finished-ids";
    the model now tracks finished_unshipped, and the engine views agree."""
    cfg = C("engine", runner="v1", events=F({"abort"}))
    steps = [("abort", {"req": 0}), ("abort", {"req": 1}), (SCHED, {"budget": 1})]
    result = replay(cfg, {"prompt_len": [1, 1]}, steps, target, engine=True)
    assert result.steps_run == 3
    assert target.engine_view() == {"has_requests": False}


# ----------------------------------------------------------------- pipeline parallel


def test_v2_pp2_decode_cadence(target):
    cfg = C("pp2", runner="v2", pp=2)
    steps = [
        (SCHED, {"budget": 10}),
        (SCHED, {"budget": 10}),
        (SCHED, {"budget": 10}),
        (DELIVER, {}),
        (SCHED, {"budget": 10}),
        (DELIVER, {}),
    ]
    result, v = walk(target, cfg, {"prompt_len": [2, 3]}, steps)
    # 0.32.0 on: decode_stagger (pp_size but on XPU); 0.29.0-0.31.0 stagger by pp_size
    assert objects.pipeline_depth(target.sched) - 1 == 2
    assert v[1][0].facts["num_scheduled_tokens"] == {}  # not yet eligible
    assert at(v, 0, "next_decode_eligible_step") == [3, 3]


# ----------------------------------------------------------------- the mapping itself


def test_every_assert_statement_is_in_the_loaded_vllm():
    """The vLLM targets recognise asserts by statement: each one the spec names (and the
    loaded release has) must be a line of the scheduler package, or of the V2 runner for a
    runner's assert, wherever it moved."""
    files = {
        "scheduler": ("v1/core/sched/scheduler.py", "v1/core/sched/async_scheduler.py"),
        "runner": ("v1/worker/gpu/model_runner.py",),
    }
    lines = {
        site: {statement_key(line) for name in names for line in vllm_env.source_path(name).read_text().splitlines()}
        for site, names in files.items()
    }
    cits = citations.load()
    for a in ASSERTS.values():
        # an assert is looked for in the releases its citations record
        if a.statement is None or not any(RELEASE in cits[c].lines for c in a.cite.split()):
            continue
        assert statement_key(a.statement) in lines[a.site], f"{a.name}: {a.statement!r} is not in vLLM {RELEASE}"


@pytest.mark.parametrize(
    "profile,events,steps,init",
    [
        (
            "h1-preempt-keeps-placeholders",
            {"preempt"},
            [(SCHED, {"budget": 8}), (SCHED, {"budget": 8}), (DELIVER, {}), ("preempt", {"req": 1})],
            {"prompt_len": [4, 4]},
        ),
        (
            "h2-reset-discard-flag",
            {"reset"},
            [(SCHED, {"budget": 8}), (SCHED, {"budget": 8}), (DELIVER, {}), ("reset_prefix_cache", {})],
            {"prompt_len": [4, 4]},
        ),
        (
            "h3-reset-discard-counter",
            {"reset"},
            [(SCHED, {"budget": 8}), (SCHED, {"budget": 8}), (DELIVER, {}), ("reset_prefix_cache", {})],
            {"prompt_len": [4, 4]},
        ),
        (
            "h4-stream-no-rollback",
            {"stream"},
            [
                (SCHED, {"budget": 8}),
                (SCHED, {"budget": 8}),
                (DELIVER, {}),
                (SCHED, {"budget": 8}),
                (DELIVER, {"stop": [1, 0]}),
            ],
            {"prompt_len": [4, 4], "resumable": [True, False]},
        ),
    ],
)
def test_historical_profiles_are_told_apart(target, profile, events, steps, init):
    """The comparison is sensitive: each historical profile swaps one mechanism of
    0.32.0 back, and the replay catches it at the step that uses it."""
    if RELEASE != "0.32.0":
        pytest.skip("historical profiles alter 0.32.0; they are told apart from vLLM 0.32.0")
    cfg = Config(profile, runner="v1", profile=profile, events=F(events))
    with pytest.raises(Divergence) as info:
        replay(cfg, init, steps, target)
    assert info.value.step == len(steps) - 1


def test_random_traces_agree_on_core_config(target):
    import random

    cfg = C("fuzz-small", runner="v1", spec_tokens=1, events=F({"preempt", "reset"}))
    for seed in range(15):
        init, steps, _ = random_trace(cfg, random.Random(seed), 25)
        replay(cfg, init, steps, target, ignore=ignore_known(list(KNOWN)))


def test_a_fresh_scheduler_starts_from_the_construction_budget_not_an_earlier_ones(target):
    """Schedulers of one shape share a cached VllmConfig whose budget set_budget writes: a
    new one must not inherit the last case's (an xdist worker once ran test_monitor's
    default-budget step with 6 tokens)."""
    from vllm_contract.adapter import construct

    cfg = Config("budget-leak", runner="v2", requests=1)
    first = construct.new_scheduler(cfg)
    objects.set_budget(first, 6)
    second = construct.new_scheduler(cfg)
    assert objects.budget(second) == construct.MAX_MODEL_LEN
