"""Hangs: a liveness violation is shown by running the engine on, and detected on a target's own state.

The under-drain fault (tpu-inference #3492) leaves stale output that nothing drains; the
prover's counterexample is a hang only because the engine, run on with no fault, never
schedules the request again. Each claim has its control: without the fault the request
runs again, and a target whose has_requests() says the engine is idle fails the case.
"""

import pytest
from vllm_contract.codegen.case import Case, Tally, predict
from vllm_contract.model import hang
from vllm_contract.model.bmc import Bmc, Goal
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.interpreter import Interpreter
from vllm_contract.model.run import Run
from vllm_contract.model.trace import confirm
from vllm_contract.spec.config import Config
from vllm_contract.spec.matrix import by_name
from vllm_contract.spec.verdicts import Fired, Reaction
from vllm_contract.targets.harness import Divergence, replay_case
from vllm_contract.targets.protocol import Outcome
from vllm_contract.targets.reference import ReferenceTarget

UNDER_DRAIN = by_name(["under-drain@0.32.0"])[0]
# schedule the whole prompt, preempt (deliver-stale mode) with that step in flight, an
# empty step (the request waits for its stale output), then deliver the first step with
# its count rewritten one token short
STEPS = (
    ("schedule", {"budget": 2}),
    ("preempt", {"req": 0, "drop": False}),
    ("schedule", {"budget": 1}),
    ("deliver", {"stop": [0], "short": [1]}),
)


def _end(steps, cfg=UNDER_DRAIN):
    run = Run(cfg, {"prompt_len": [2]}, steps)
    for _ in run:
        pass
    return run.interp, run.state


@pytest.mark.parametrize("prop", ["stale-drains", "bounded-progress"])
def test_the_prover_reports_the_under_drain_as_a_hang(prop):
    trace = Bmc(Encoding(UNDER_DRAIN)).shortest(Goal.violation(prop), 6)
    assert trace is not None
    confirm(Interpreter(UNDER_DRAIN), trace, trace.solver_states)
    assert trace.stuck == ((0, "stale"),)
    assert trace.fired_at_end.reaction is Reaction.HANG


def test_run_on_shows_the_stuck_request_and_without_the_fault_it_runs_again():
    interp, state = _end(STEPS)
    steps, stuck = hang.shown(interp, state)
    assert len(steps) == hang.engine_bound(UNDER_DRAIN) and stuck == ((0, "stale"),)
    assert "r0 never runs again" in hang.describe(UNDER_DRAIN, stuck)
    # the control: the same steps with the count delivered whole
    interp, state = _end(STEPS[:3] + (("deliver", {"stop": [0], "short": [0]}),))
    assert hang.shown(interp, state)[1] == ()


def test_stuck_needs_requests_left_and_a_whole_bound():
    interp, state = _end(STEPS)
    steps = hang.run_on(interp, state)
    run = Run(interp, {"prompt_len": [2]}, STEPS + tuple(steps))
    played = list(run)[len(STEPS) :]
    events, states = [p.event for p in played], [p.state for p in played]
    assert hang.stuck(UNDER_DRAIN, events, states, busy=True) == ((0, "stale"),)
    # has_requests() false with the request still waiting: the engine idles (only a target can show it)
    assert hang.stuck(UNDER_DRAIN, events, states, busy=False) == ((0, "asleep"),)
    assert hang.stuck(UNDER_DRAIN, events[:-1], states[:-1], busy=True) == ()


def test_fired_spells_hang_and_reads_it_back():
    assert str(Fired(hang=True)) == "hang" and Fired.parse("hang") == Fired(hang=True)
    assert Fired.parse("silent").reaction is Reaction.SILENT
    assert Fired("placeholders-nonnegative", hang=True).reaction is Reaction.CRASH


def _case():
    interp, state = _end(STEPS)
    more = tuple(hang.run_on(interp, state))
    steps = STEPS + more
    expect = predict("stale-drains", UNDER_DRAIN, {"prompt_len": [2]}, steps, len(more))
    assert expect.reaction is Reaction.HANG
    return Case(
        name="hang_probe",
        config=UNDER_DRAIN.record(),
        init={"prompt_len": [2]},
        steps=steps,
        kind="violation",
        property="stale-drains",
        arms={"vllm-0.32.0": ({"profile": "vllm-0.32.0", "clamp": False, "guard": "none"}, expect)},
        engine_steps=len(more),
    )


class _IdleEngine(ReferenceTarget):
    """The reference target, except that its engine says nothing is left to do."""

    def engine_view(self):
        return {"has_requests": False}


def test_bounded_progress_is_read_where_a_case_is_about_it():
    """A progress property runs the engine on from every state: an arm reports it for a
    case about it (violated from the stuck state on), and for no other case."""
    interp, state = _end(STEPS)
    more = tuple(hang.run_on(interp, state))
    about = predict("bounded-progress", UNDER_DRAIN, {"prompt_len": [2]}, STEPS + more, len(more))
    assert about.violations[0] == len(STEPS) and about.reaction is Reaction.HANG
    other = predict("stale-drains", UNDER_DRAIN, {"prompt_len": [2]}, STEPS + more, len(more))
    assert "bounded-progress" not in dict(other.others)


def test_a_case_detects_the_hang_on_the_target_and_fails_where_the_target_does_not_hang():
    case = _case()
    assert replay_case(case, ReferenceTarget()) == ["vllm-0.32.0"]
    with pytest.raises(Divergence, match="target: HANG .* has_requests.. is false while it waits"):
        replay_case(case, _IdleEngine())


def test_a_hang_is_not_claimed_when_an_arm_stops_early():
    # an arm that stops before the case's last step (an assert, a step its release does
    # not allow) has not run the engine's bound: no hang is read off it
    case = _case()
    run = Run(UNDER_DRAIN, case.init, case.steps)
    tally = Tally(UNDER_DRAIN, case.property, case.engine_steps)
    for played in run:
        tally.add(played, run.interp)
    assert tally.expect(run.state, len(case.steps)).stuck == ((0, "stale"),)
    stopped = tally.expect(run.state, len(case.steps) + 1)
    assert stopped.stuck == () and stopped.reaction is Reaction.SILENT


def test_under_drain_with_kv_failures_is_refused():
    with pytest.raises(Exception, match="under-drain"):
        Config(name="x", faults=frozenset({"under-drain"}), events=frozenset({"kvfail"})).validate()


# ------------------------------------------------------------------ run on, on a target

PREEMPT = Config("preempt-probe", runner="v2", events=frozenset({"preempt"}), requests=1).validate()
# the prompt scheduled, the request preempted with that step in flight (its output stale),
# an empty step (the stale output holds it back), the step delivered (the stale share drained)
PREEMPT_STEPS = (
    ("schedule", {"budget": 2}),
    ("preempt", {"req": 0}),
    ("schedule", {"budget": 1}),
    ("deliver", {"stop": [0]}),
)


def _preempt_case():
    expect = predict(None, PREEMPT, {"prompt_len": [2]}, PREEMPT_STEPS)
    arm = {"profile": PREEMPT.profile, "clamp": False, "guard": "none"}
    return Case(
        "preempt_probe", PREEMPT.record(), {"prompt_len": [2]}, PREEMPT_STEPS, "witness", None, {"a": (arm, expect)}
    )


class _NeverSchedules(ReferenceTarget):
    """The reference target, except that running on by itself its schedule() schedules nothing."""

    def engine_step(self):
        return "schedule", Outcome()


class _NoDrain(ReferenceTarget):
    """The reference target with update_from_output's stale drain removed (the missing-drain edit)."""

    def step(self, event, args, model=None):
        before = {k: v for k, v in self.state.items() if k[0] == "num_stale_output_tokens"}
        outcome = super().step(event, args, model)
        if event == "deliver":
            self.state = {**self.state, **before}
        return outcome

    def engine_step(self):
        before = {k: v for k, v in self.state.items() if k[0] == "num_stale_output_tokens"}
        event, outcome = super().engine_step()
        if event == "deliver":
            self.state = {**self.state, **before}
        return event, outcome


def test_after_the_case_the_target_runs_on_and_a_hang_the_model_does_not_predict_fails_it():
    case = _preempt_case()
    assert replay_case(case, ReferenceTarget()) == ["a"]  # vLLM's policy: it resumes
    with pytest.raises(Divergence, match=r"HANG on the target: after the case's last step") as info:
        replay_case(case, _NeverSchedules())
    assert "request r0 never runs again" in str(info.value) and info.value.diff == {
        ("stuck",): ((), ((0, "unscheduled"),))
    }


def test_a_target_that_never_drains_is_named_a_hang_whatever_the_case_injected():
    """No fault in the case: the target's own state breaks stale-drains from the delivery
    on, and run on by itself it leaves the request behind, with the count that holds it."""
    with pytest.raises(Divergence) as info:
        replay_case(_preempt_case(), _NoDrain())
    said = str(info.value)
    assert "HANG on the target: playing the case on by itself its own state violates stale-drains from step 4" in said
    assert "request r0 never runs again" in said and "num_stale_output_tokens 2 > 0 token(s)" in said
    assert "divergence after step 4: deliver" in said  # the first difference is still said


def test_a_trace_replay_runs_on_too():
    from vllm_contract.targets.harness import replay

    run = Run(PREEMPT, {"prompt_len": [2]}, PREEMPT_STEPS)
    steps = [(p.event, p.args) for p in run]  # the fuzzer's form: flat keys
    replay(PREEMPT, {"prompt_len": [2]}, steps, ReferenceTarget())  # nothing left behind
    with pytest.raises(Divergence, match="run on by itself after the last step") as info:
        replay(PREEMPT, {"prompt_len": [2]}, steps, _NeverSchedules())
    assert info.value.event == "run-on" and ("stuck",) in info.value.diff


# ------------------------------------------------------------------ a lost sample (tpu-inference #2833)

LOST = by_name(["lost-sample@0.33.0"])[0]


def test_a_lost_sample_one_step_short_of_max_tokens_hangs_the_request():
    """A step's output without the token the runner sampled leaves its placeholder unresolved;
    once the request's steps reach max_tokens the running loop's max_tokens skip passes it over
    for good (prover and interpreter agree); the same trace with the sample delivered finishes."""
    trace = Bmc(Encoding(LOST)).shortest(Goal.violation("bounded-progress"), 8)
    assert trace is not None and trace.mechanisms == ["lost-sample"]
    confirm(Interpreter(LOST), trace, trace.solver_states)
    assert trace.stuck == ((0, "leaked"),) and trace.fired_at_end.reaction is Reaction.HANG
    steps = [(s.event, s.named_args()) for s in trace.steps]
    whole = [(e, {**a, "lost": [False]}) if e == "deliver" else (e, a) for e, a in steps]
    init = {k[0]: [v] for k, v in trace.init.items()}
    for played, stuck in ((steps, ((0, "leaked"),)), (whole, ())):
        run = Run(LOST, init, played)
        for _ in run:
            pass
        assert hang.shown(run.interp, run.state)[1] == stuck
