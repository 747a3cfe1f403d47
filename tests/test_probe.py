"""The random-walk probe (model/probe.py): it finds a known counterexample fast, returns
the same trace for the same seed, keeps its budget, and finds nothing where the property
is proved. A trace it returns is a replayed counterexample, never shorter than the
BMC's shortest (a probe is only an early answer; the BMC still gives the shortest)."""

import dataclasses
import time

import pytest
from vllm_contract.model.bmc import Bmc, Goal
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.interpreter import Interpreter
from vllm_contract.model.probe import probe
from vllm_contract.model.trace import happens
from vllm_contract.spec.config import Config

# as the matrix's v1-over-delivery@0.32.0 (counter-nonnegative violated: crash in 3 steps)
OVER = Config("probe-over-delivery", runner="v1", faults=frozenset({"over-delivery"}), requests=1, spec_tokens=1)
# as the matrix's h1-preempt (a transition property, predicates-agree, violated)
H1 = Config(
    "probe-h1",
    runner="v2",
    events=frozenset({"preempt"}),
    profile="h1-preempt-keeps-placeholders",
    requests=1,
    spec_tokens=1,
)
# the clamp with one draft token: counter-nonnegative is proved (spec/matrix.py v1-clamp)
CLAMP = Config("probe-clamp", runner="v1", events=frozenset({"preempt", "reset", "abort"}), clamp=True, spec_tokens=1)


def test_finds_a_known_counterexample_fast():
    started = time.perf_counter()
    trace = probe(OVER, "counter-nonnegative", seconds=10, seed=0)
    took = time.perf_counter() - started
    assert trace is not None, "the probe found no over-delivery crash in 10 s (a random walk takes ~0.1 s)"
    assert took < 5
    assert trace.kind == "violation" and trace.goal == "counter-nonnegative" and trace.config == OVER.name
    assert trace.states and happens(Interpreter(OVER), trace, "counter-nonnegative")  # replayed, and violates it
    assert trace.fired_at_end.assert_name  # 0.32.0 asserts the counter
    shortest = Bmc(Encoding(OVER)).shortest(Goal.violation("counter-nonnegative"), 12)
    assert shortest is not None and trace.depth >= shortest.depth


def test_finds_a_transition_violation():
    trace = probe(H1, "predicates-agree", seconds=10, seed=0)
    assert trace is not None
    assert trace.checks[-1]["predicates-agree"] is False


def test_same_seed_same_trace():
    one = probe(OVER, "counter-nonnegative", seconds=10, seed=7)
    two = probe(OVER, "counter-nonnegative", seconds=10, seed=7)
    assert one is not None and two is not None
    assert one.init == two.init
    assert [(s.event, s.args) for s in one.steps] == [(s.event, s.args) for s in two.steps]


def test_walk_count_bounds_the_search_whatever_the_time():
    # with max_walks the outcome does not depend on the machine's speed
    none = probe(OVER, "counter-nonnegative", seconds=60, seed=0, max_walks=0)
    assert none is None


def test_none_on_a_proved_configuration_within_budget():
    started = time.perf_counter()
    assert probe(CLAMP, "counter-nonnegative", seconds=0.5, seed=0) is None
    assert time.perf_counter() - started < 0.5 + 0.5  # at most one step past the deadline


def test_symbolic_draft_count_does_not_break_it():
    cfg = dataclasses.replace(OVER, name="probe-over-any-k", spec_tokens=None)
    trace = probe(cfg, "counter-nonnegative", seconds=10, seed=0)
    assert trace is not None and happens(Interpreter(cfg), trace, "counter-nonnegative")


def test_a_paused_walker_finds_what_an_unpaused_one_does():
    # the race gives the walks many small slices: slicing must not change what they find
    from vllm_contract.model.probe import Walker

    whole = Walker(OVER, "counter-nonnegative", seed=5).run(30)
    sliced, found = Walker(OVER, "counter-nonnegative", seed=5), None
    for _ in range(100_000):
        found = sliced.run(0.0005)
        if found is not None:
            break
    assert whole is not None and found is not None
    assert (whole.init, whole.steps) == (found.init, found.steps)


def test_race_beside_the_bmc_finds_no_shorter_trace():
    # a trace the walks found is a real counterexample, never shorter than the BMC's.
    # (That the race changes no reported trace is checked in fresh processes, where Z3's
    # history is the same: tests/test_prove_cache.py, --no-walks against the default.)
    from vllm_contract.model.probe import Race

    goal = Goal.violation("counter-nonnegative")
    with Race(OVER, "counter-nonnegative", seed=0) as race:
        with_race = Bmc(Encoding(OVER)).shortest(goal, 12)
    alone = Bmc(Encoding(OVER)).shortest(goal, 12)
    assert with_race is not None and alone is not None and with_race.depth == alone.depth
    if race.trace is not None:
        assert race.trace.depth >= alone.depth and race.wall_seconds > 0
        assert happens(Interpreter(OVER), race.trace, "counter-nonnegative")
    assert race.walked <= race.cap + 0.1


def test_race_walks_in_a_thread_of_its_own():
    # while the search's thread waits (as it does in a solver check, which releases the
    # GIL) the walks go on and find the counterexample; the race ends with the search
    from vllm_contract.model.probe import Race

    with Race(OVER, "counter-nonnegative", seed=0, cap=30) as race:
        deadline = time.perf_counter() + 20
        while race.trace is None and time.perf_counter() < deadline:
            time.sleep(0.01)
    assert race.trace is not None and not race._thread.is_alive()
    assert happens(Interpreter(OVER), race.trace, "counter-nonnegative")


def test_an_error_in_a_walk_is_raised_not_swallowed(monkeypatch):
    from vllm_contract.model import probe

    def broken(*args, **kwargs):
        raise RuntimeError("interpreter bug")

    monkeypatch.setattr(probe.Walker, "run", broken)
    with pytest.raises(RuntimeError, match="interpreter bug"):
        with probe.Race(OVER, "counter-nonnegative"):
            time.sleep(0.05)


def test_no_walk_races_a_property_no_step_shows():
    """bounded-progress has no state predicate (the engine must be run on): the search
    for its counterexample runs without walks, where a walk raised TypeError (its test
    called a predicate that is None) once the race got to it (bench speed, make prove
    with a caller that asked for walks)."""
    from vllm_contract.model.check import MAX_DEPTH, search_violation
    from vllm_contract.model.probe import Walker, walkable
    from vllm_contract.spec.matrix import by_name

    (cfg,) = by_name(["under-drain@0.32.0"])
    assert cfg.expect["bounded-progress"] == "violated" and not walkable("bounded-progress")
    with pytest.raises(ValueError, match="bounded-progress is a progress property"):
        Walker(cfg, "bounded-progress")
    found = search_violation(cfg, "bounded-progress", min(MAX_DEPTH, cfg.search_depth or MAX_DEPTH), 60_000)
    assert found.first is not None and found.found_by == "bmc" and found.early is None
