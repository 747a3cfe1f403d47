"""The prover: every proof has a negative control, unknown fails, bad input is refused.

Each proved property of the matrix is proved here on a configuration, and the same
check is run on a weakened contract (the clamp removed, V1 swapped for V2 with a fault,
a mutated rule) where it must find a counterexample, replayed on the interpreter.
"""

import json

import pytest
from vllm_contract.model import hang, progress
from vllm_contract.model.bmc import Bmc, Goal
from vllm_contract.model.check import check_config
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.induction import KInduction
from vllm_contract.model.interpreter import Interpreter
from vllm_contract.model.solvers import SolverUnknown
from vllm_contract.model.trace import confirm
from vllm_contract.spec.config import Config
from vllm_contract.spec.invariants import LEMMAS, lemmas_for
from vllm_contract.spec.verdicts import VIOLATED
from vllm_contract.spec.vocabulary import Status

from vllm_contract.cli import main as cli

ALL = frozenset({"preempt", "preempt-drop", "reset", "stream", "abort"})


def prove(cfg, props):
    lemmas = [(lemma.name, lemma.holds) for lemma in lemmas_for(cfg, props)]  # as make prove does
    return KInduction(Encoding(cfg)).prove(props, lemmas)


def counterexample(cfg, prop, depth=10):
    trace = Bmc(Encoding(cfg)).shortest(Goal.violation(prop), depth)
    assert trace is not None, f"{cfg.name}: no counterexample for {prop} within {depth} steps"
    confirm(Interpreter(cfg), trace, trace.solver_states)  # replayed concretely
    return trace


V1 = Config(name="v1", runner="v1", requests=2, spec_tokens=1, events=ALL)


def test_v1_proves_agreement_and_v2_with_a_stale_slot_refutes_it():
    assert prove(V1, ["predicates-agree", "no-token-while-prefilling"]).status == "proved"
    weak = Config(name="v2-stale", runner="v2", requests=1, faults=frozenset({"stale-slot-read"}))
    assert counterexample(weak, "predicates-agree").depth == 1
    assert counterexample(weak, "no-token-while-prefilling").depth == 3


def test_the_clamp_proves_the_counter_and_removing_it_refutes_it():
    clamped = Config(
        name="clamp",
        runner="v1",
        requests=2,
        spec_tokens=1,
        clamp=True,
        events=ALL | {"kvfail"},
        faults=frozenset({"over-delivery"}),
    )
    assert prove(clamped, ["counter-nonnegative"]).status == "proved"
    trace = counterexample(clamped.with_(name="no-clamp", clamp=False, requests=1), "counter-nonnegative")
    assert trace.mechanisms == ["over-delivery"]


def test_accounting_proved_without_kvfail_and_leaks_with_it():
    assert prove(V1, ["placeholder-accounting"]).status == "proved"
    leak = counterexample(V1.with_(name="kv", events=frozenset({"kvfail"}), requests=1), "placeholder-accounting")
    assert "kv-load-failure" in leak.mechanisms


def test_safe_frontier_proved_and_refuted_by_a_recompute_on_a_session():
    assert prove(V1, ["safe-frontier-nonnegative"]).status == "proved"
    weak = V1.with_(name="kv-stream", events=frozenset({"kvfail", "stream"}), requests=1)
    assert counterexample(weak, "safe-frontier-nonnegative").depth <= 8


def test_scheduled_tokens_proved_and_refuted_by_the_old_stream_handoff():
    assert prove(V1, ["scheduled-tokens-positive"]).status == "proved"
    weak = V1.with_(name="h4", events=frozenset({"stream"}), requests=1, profile="h4-stream-no-rollback")
    counterexample(weak, "scheduled-tokens-positive")


def test_padding_proved_and_refuted_when_the_threshold_cuts_it():
    assert prove(V1.with_(spec_tokens=2), ["padding-intact"]).status == "proved"
    weak = V1.with_(name="thr", events=frozenset(), spec_tokens=2, long_prefill_threshold=2)
    counterexample(weak, "padding-intact")


def test_stale_count_proved_and_refuted_by_a_mutated_preemption(monkeypatch):
    assert prove(V1, ["stale-count-nonnegative"]).status == "proved"
    import vllm_contract.spec.front_end as sch

    original = sch._preempt

    def overcounting(s, nxt, cfg, ops, r, cond, drop, marks_stale):
        original(s, nxt, cfg, ops, r, cond, drop, marks_stale)
        # mutant: the stale share misses a token (S := F - 1)
        nxt.num_stale_output_tokens[r] = ops.ite(cond, nxt.num_in_flight_tokens[r] - 1, nxt.num_stale_output_tokens[r])

    monkeypatch.setattr(sch, "_preempt", overcounting)
    weak = V1.with_(name="mutant", events=frozenset({"preempt"}), requests=1)
    counterexample(weak, "stale-count-nonnegative")


def test_stale_drains_proved_and_refuted_when_preemption_overcounts_the_stale_share(monkeypatch):
    """The mechanism of tpu-inference #3492: an in-flight count that under-drains leaves a
    remainder that preemption turns into stale output no frame in flight will drain, so
    the request is skipped from then on."""
    assert prove(V1, ["stale-drains"]).status == "proved"
    import vllm_contract.spec.front_end as sch

    original = sch._preempt

    def leftover(s, nxt, cfg, ops, r, cond, drop, marks_stale):
        original(s, nxt, cfg, ops, r, cond, drop, marks_stale)
        # mutant: one in-flight token was never drained (S := F + 1)
        nxt.num_stale_output_tokens[r] = ops.ite(cond, nxt.num_in_flight_tokens[r] + 1, nxt.num_stale_output_tokens[r])

    monkeypatch.setattr(sch, "_preempt", leftover)
    weak = V1.with_(name="mutant", events=frozenset({"preempt"}), requests=1)
    trace = counterexample(weak, "stale-drains")
    last = trace.states[-1]
    assert last[("num_stale_output_tokens", 0)] > 0 and not last[("drop_stale_output", 0)]


def _computed_too(monkeypatch) -> Config:
    """A mutant delivery that counts the appended token as computed (c := T for a running
    request), and a configuration to show what it does on."""
    import vllm_contract.spec.deliver as dlv

    original = dlv._pop_head

    def computed_too(s, nxt, cfg, ops):
        original(s, nxt, cfg, ops)
        for r in range(cfg.requests):
            running = nxt.status[r] == Status.RUNNING
            nxt.num_computed_tokens[r] = ops.ite(running, nxt.num_tokens[r], nxt.num_computed_tokens[r])

    monkeypatch.setattr(dlv, "_pop_head", computed_too)
    return V1.with_(name="mutant", events=frozenset(), requests=1, spec_tokens=0)


def test_no_stuck_request_proved_and_refuted_when_a_delivery_counts_its_token_as_computed(monkeypatch):
    """The running half of no-stuck-request: a running request with nothing in flight has
    tokens to schedule. A mutant delivery that counts the appended token as computed
    leaves it with none, so the running loop skips it forever: a hang, shown."""
    assert prove(V1, ["no-stuck-request"]).status == "proved"
    weak = _computed_too(monkeypatch)
    trace = counterexample(weak, "no-stuck-request")
    assert trace.stuck == ((0, "idle"),) and str(trace.fired_at_end) == "hang"


def test_idle_only_when_done_proved_and_refuted_when_a_stop_leaves_the_update_queued(monkeypatch):
    """has_requests() is false only when nothing is left. A mutant session stop that
    leaves its queued update queued (the session waits for input it already has) and
    a resumable stop without the safe-frontier rollback (its next step still in flight,
    live) both break it, each with a replayed trace."""
    assert prove(V1, ["idle-only-when-done"]).status == "proved"
    no_rollback = V1.with_(name="h4", events=frozenset({"stream"}), requests=1, profile="h4-stream-no-rollback")
    assert counterexample(no_rollback, "idle-only-when-done").states[-1][("status", 0)] == (
        Status.WAITING_FOR_STREAMING_REQ
    )
    import vllm_contract.spec.deliver as dlv

    original = dlv._pop_head

    def forgets(s, nxt, cfg, ops):
        original(s, nxt, cfg, ops)
        for r in range(cfg.requests):  # mutant: an update the stop applied stays queued
            applied = ops.all(s.pending_update[r], ops.not_(nxt.pending_update[r]))
            nxt.status[r] = ops.ite(applied, Status.WAITING_FOR_STREAMING_REQ, nxt.status[r])
            nxt.pending_update[r] = ops.ite(applied, True, nxt.pending_update[r])

    monkeypatch.setattr(dlv, "_pop_head", forgets)
    weak = V1.with_(name="mutant", events=frozenset({"stream"}), requests=1)
    last = counterexample(weak, "idle-only-when-done").states[-1]
    assert last[("status", 0)] == Status.WAITING_FOR_STREAMING_REQ and last[("pending_update", 0)]


LIVE = ["stale-drains", "no-stuck-request"]


def prove_progress(cfg, bound=None):
    """bounded-progress as make prove proves it: from the invariants k-induction establishes."""
    lemmas = [(lemma.name, lemma.holds) for lemma in lemmas_for(cfg, LIVE)]
    enc = Encoding(cfg)
    assert KInduction(enc).prove(LIVE, lemmas).status == "proved"
    return progress.prove(enc, [fn for _, fn in lemmas], LIVE, 60_000, bound)


ANY_V1 = V1.with_(name="v1-any", requests=1, rest=True, spec_tokens=None)


@pytest.mark.parametrize("cfg", [V1, ANY_V1, ANY_V1.with_(name="v2-pp2", runner="v2", pp=2)], ids=lambda c: c.name)
def test_bounded_progress_proved_within_the_bound_and_not_below_two_steps_per_frame(cfg):
    """The engine delivers a frame every other step once its queue is full, so 2 * queue
    depth steps let every request run again: proved there and at engine_bound, never at
    one step less or at bound 1 (a too small bound is a failed proof, not a pass)."""
    tight = 2 * cfg.queue_depth
    assert prove_progress(cfg).status == "proved"
    assert prove_progress(cfg, tight).status == "proved"
    assert prove_progress(cfg, tight - 1).status == "not-proved"
    assert prove_progress(cfg, 1).status == "not-proved"


def test_bounded_progress_with_bound_1_is_no_proof_and_its_trace_is_real(monkeypatch):
    """The invariants admit a state one engine step does not progress from; the prover
    does not call that a violation but searches one from the initial state, replayed."""
    monkeypatch.setattr(hang, "engine_bound", lambda cfg: 1)
    cfg = V1.with_(name="v1-one", requests=1, expect={**dict.fromkeys(LIVE, "proved"), "bounded-progress": "proved"})
    row = {r.property: r for r in check_config(cfg, walks=False).rows}["bounded-progress"]
    assert row.verdict == VIOLATED and row.trace and "perhaps unreachable" in row.note


def test_bounded_progress_refuted_when_a_delivery_counts_its_token_as_computed(monkeypatch):
    """A mutant delivery leaves a running request with nothing to schedule, so the running
    loop skips it forever: the prover reports bounded-progress violated, a hang with a
    replayed trace."""
    weak = _computed_too(monkeypatch)
    report = check_config(weak.with_(expect={"no-stuck-request": "proved", "bounded-progress": "proved"}), walks=False)
    row = {r.property: r for r in report.rows}["bounded-progress"]
    assert row.verdict == VIOLATED and str(row.fired) == "hang"
    assert json.loads(report.documents[row.trace])["#meta"]["violated"] == "bounded-progress"
    trace = counterexample(weak, "bounded-progress")
    assert trace.stuck == ((0, "idle"),)


def test_bounded_progress_is_no_proof_when_the_engine_has_no_step(monkeypatch):
    """Unrolled steps the engine cannot take would prove progress by having no path: the
    first query asks for a state the invariants admit where it has none (here: a budget
    of 0, below every schedule's)."""
    monkeypatch.setattr(hang, "budget_for", lambda s, cfg, ops: 0)
    assert prove_progress(ANY_V1).status == "no-step"


def test_a_progress_query_that_runs_out_of_time_is_unknown_not_a_pass():
    lemmas = [lemma.holds for lemma in lemmas_for(V1, LIVE)]
    with pytest.raises(SolverUnknown):
        progress.prove(Encoding(V1), lemmas, LIVE, timeout_ms=1)


def test_a_false_lemma_never_proves_anything():
    def bogus(s, cfg, ops):  # "no placeholder is ever reserved"
        return ops.all(*[s.num_output_placeholders[r] == 0 for r in range(cfg.requests)])

    lemmas = [(lemma.name, lemma.holds) for lemma in LEMMAS if lemma.applies(V1)] + [("bogus", bogus)]
    result = KInduction(Encoding(V1)).prove(["counter-nonnegative"], lemmas)
    assert result.status == "violated-base" and result.failed == "lemma bogus"


def test_a_solver_timeout_is_unknown_not_a_pass():
    with pytest.raises(SolverUnknown):
        KInduction(Encoding(V1), timeout_ms=1).prove(
            ["predicates-agree"], [(lemma.name, lemma.holds) for lemma in LEMMAS if lemma.applies(V1)]
        )


def test_every_matrix_result_is_as_expected_for_a_small_config():
    report = check_config(
        Config(
            name="h1",
            runner="v2",
            requests=1,
            events=frozenset({"preempt"}),
            profile="h1-preempt-keeps-placeholders",
            expect={"predicates-agree": "violated"},
        )
    )
    assert [(r.property, str(r.verdict)) for r in report.rows] == [("predicates-agree", "violated")]
    assert report.witness["reached"] is True


def test_prove_refuses_an_unknown_configuration_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "prove"
    assert cli(["prove", "no-such-config", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unknown configuration no-such-config" in err and err.count("\n") == 1
    assert not out.exists()


def test_prove_writes_a_summary_with_replayable_traces(tmp_path):
    out = tmp_path / "prove"
    assert cli(["prove", "v2-kvfail@0.32.0", "--out", str(out), "--jobs", "1"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    verdicts = {r["property"]: r["verdict"] for r in summary["results"]}
    liveness = [verdicts.pop(p) for p in ("stale-drains", "no-stuck-request", "bounded-progress")]
    assert liveness == ["proved"] * 3 and set(verdicts.values()) == {"violated"}
    violated = [r for r in summary["results"] if r["verdict"] == "violated"]
    assert {r["reaction"] for r in violated} == {"silent", "crash: placeholders-nonnegative"}
    first = violated[0]
    assert set(first) >= {
        "config",
        "runner",
        "clamp",
        "events",
        "faults",
        "profile",
        "property",
        "verdict",
        "depth",
        "seconds",
        "trace",
    }
    doc = json.loads((out / first["trace"]).read_text())
    assert doc["#meta"]["violated"] == first["property"]
    assert doc["states"][0]["mbt::actionTaken"] == "init"


def test_an_over_constrained_encoding_has_no_witness(monkeypatch):
    """Vacuity check that can fail: forbid every completion in the encoding alone; the
    interpreter's healthy run is then rejected and the configuration reported vacuous."""
    import vllm_contract.model.check as check
    import z3

    class NoStop(Encoding):
        def __init__(self, cfg):
            super().__init__(cfg)
            done = [self._next_template[("completed", r)] for r in range(cfg.requests)]
            self._trans = z3.And(self._trans, *[z3.Not(d) for d in done])

    monkeypatch.setattr(check, "Encoding", NoStop)
    cfg = Config(name="v1-one", runner="v1", requests=1, expect={"counter-nonnegative": "proved"})
    report = check.check_config(cfg)
    assert report.witness["reached"] is False
    assert "over-constrained" in report.witness["note"]


def test_counterexample_picks_are_least_along_their_path():
    import z3
    from vllm_contract.model.solvers import value_of

    goal = Goal.violation("counter-nonnegative")
    bmc = Bmc(Encoding(Config(name="kv", runner="v2", requests=1, events=frozenset({"kvfail"}))))
    trace = bmc.shortest(goal, 10)
    enc, depth = bmc.enc, trace.depth
    names = enc.event_index()
    path = [enc.step(t).act == names.index(s.event) for t, s in enumerate(trace.steps)]
    values = [enc.init_args[k] == v for k, v in trace.init.items()]
    values += [enc.step(t).args[s.event][k] == v for t, s in enumerate(trace.steps) for k, v in s.args.items()]
    assumptions = bmc._prefix(depth, last_alive=not goal.may_end_engine) + [bmc.goal_at(goal, depth)]
    objective = bmc.picks(depth)
    assert bmc.solver.check(*assumptions, *path, *values) == z3.sat
    found = value_of(bmc.solver.model(), objective)
    assert found > 0  # the test would say nothing about a trace with nothing to minimise
    assert bmc.solver.check(*assumptions, *path, objective < found) == z3.unsat


def test_the_slot_bookkeeping_is_an_invariant():
    """v2-slots is left out of the matrix's proofs (no property needs it); it is proved
    here, for V2 with every event family, so the slot stack is still checked."""
    from vllm_contract.spec.invariants import BOOKKEEPING

    cfg = V1.with_(name="v2", runner="v2")
    lemmas = [(lemma.name, lemma.holds) for lemma in lemmas_for(cfg) + list(BOOKKEEPING) if lemma.applies(cfg)]
    assert "v2-slots" in [n for n, _ in lemmas]
    assert KInduction(Encoding(cfg)).prove([], lemmas).status == "proved"


@pytest.mark.parametrize(
    "cfg", [V1, V1.with_(name="v1-kvfail", events=frozenset({"kvfail", "preempt", "abort"}))], ids=lambda c: c.name
)
def test_a_lemma_left_out_as_implied_is_implied(cfg):
    """lemmas_for drops a lemma when a proved property or a kept lemma implies it; each
    such claim is checked here on states that satisfy the shape lemmas."""
    import z3
    from vllm_contract.spec.invariants import BY_NAME
    from vllm_contract.spec.properties import PROPERTIES

    enc = Encoding(cfg)
    shape = [enc.state_formula(BY_NAME[n].holds, 0) for n in ("queue-shape", "request-shape")]
    checked = 0
    for lemma in LEMMAS:
        for name in lemma.implied_by:
            if not lemma.applies(cfg) or (name in BY_NAME and not BY_NAME[name].applies(cfg)):
                continue
            premise = enc.holds(name, 0) if name in PROPERTIES else enc.state_formula(BY_NAME[name].holds, 0)
            solver = z3.Solver()
            solver.add(*shape, premise, z3.Not(enc.state_formula(lemma.holds, 0)))
            assert solver.check() == z3.unsat, f"{name} does not imply {lemma.name} under {cfg.name}"
            checked += 1
    assert checked >= 2


def test_the_witness_falls_back_to_a_search_when_the_policy_does_not_get_through(monkeypatch):
    import vllm_contract.model.check as check

    monkeypatch.setattr(check, "policy_run", lambda *args: None)
    report = check.check_config(Config(name="v1-one", runner="v1", requests=1))
    assert report.witness["reached"] is True and report.witness["depth"] >= 5


def test_session_keep_proved_on_0_33_and_refuted_without_the_stop_rollback(monkeypatch):
    """0.33.0 asserts keep_end >= num_computed_tokens in a session update. Proved for
    every event family; a 0.33.0 whose resumable stop keeps its in-flight computed
    tokens (the safe-frontier rollback removed) must fire it."""
    from dataclasses import replace

    import vllm_contract.spec.profiles as profiles

    v1_033 = V1.with_(name="v1-033", profile="vllm-0.33.0")
    assert prove(v1_033, ["session-keep-covers-computed"]).status == "proved"
    mutant = replace(profiles.V0_33_0, name="t-0.33-no-rollback", stop_rolls_back=False)
    monkeypatch.setitem(profiles.PROFILES, mutant.name, mutant)
    weak = v1_033.with_(name="no-rollback", profile=mutant.name, events=frozenset({"stream"}), requests=1)
    trace = counterexample(weak, "session-keep-covers-computed")
    assert trace.fired[-1] == ["session-keep-covers-computed"]


def test_0_33_guard_keeps_the_counter_at_zero_where_0_32_asserts():
    """The same stray token: 0.32.0 fires the counter assert, 0.33.0 keeps P at 0 and
    appends the token (no-token-while-prefilling is violated instead)."""
    stray = Config(name="stray", runner="v2", requests=1, faults=frozenset({"stale-slot-read"}))
    trace = counterexample(stray, "counter-nonnegative")
    assert str(trace.fired_at_end) == "crash: placeholders-nonnegative"
    interp = Interpreter(stray.with_(profile="vllm-0.33.0"))
    from vllm_contract.model.trace import replay

    fired: list = []
    states, checks, _ = replay(interp, trace.init, trace.steps, fired)
    assert fired[-1] == []
    assert states[-1][("num_output_placeholders", 0)] == 0
    assert checks[-1]["no-token-while-prefilling"] is False
