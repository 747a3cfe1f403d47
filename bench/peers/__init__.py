"""The project's counterexample search against its peers, side by side, in one run.

    vllm-contract bench peers [--limit 20] [--jobs 1] [--only NAME ...] [--no-proved]

Why: a bounded model checker is worth its cost only where it beats the obvious
alternatives on the same model. For every `violated` expectation of spec/matrix.py this
measures, on the same configuration and property:

(a) the project: the BMC's first counterexample without minimising (it deepens one step at
    a time, so the first one is already of the shortest length), the shortest with its
    picks minimised and replayed (what `make prove` reports); and the two ways
    model/probe.py offers to get a first counterexample sooner: probe() for a fixed
    budget before the BMC, and make prove's search, random walks racing the BMC in a
    thread beside it (the BMC still gives the shortest trace);
(b) a random walk on the interpreter: the fuzzer's sampler (targets.fuzz.propose, the
    fuzzer's sizes and walk length), restarted with fresh seeds until the property is
    violated: time to the first violation and its length, and the time per violation
    over the run (up to WALK_FINDS of them: the expected time, less luck);
(c) Hypothesis stateful testing: a RuleBasedStateMachine over the interpreter, one rule per
    event, whose arguments are the fuzzer's sampler answered by Hypothesis draws (so it
    generates what the walk does and can shrink it); the invariant is the property.
    Time to find, time to shrink, and the shrunk trace's length against the shortest;
(d) an explicit-state BFS on the interpreter at the counterexample's fixed parameters:
    the shortest trace's initial picks, and each unbounded integer pick bounded to the
    values that trace uses plus the three smallest. A finite search, shortest by
    construction; states explored and time to the violation.

For every configuration with `proved` expectations: how far the same BFS gets in the
same budget (states, complete depth), at small fixed parameters; the counters grow, so
it does not terminate where the proofs cover every depth.

Every peer has the same time limit per case (--limit); "not found" means that limit ran
out. All times and limits are CPU seconds of the process doing the work (see CLOCK); the
walk's time to a first violation varies far more than any of them (it is luck), hence
its time per violation over several.
A violated case whose configuration has a symbolic draft count (spec_tokens None) or an
abstract rest is not a concrete instance: the concrete peers skip it, with the reason
printed. A proved configuration of that kind (its proof covers every K, or any number
of requests) is run by BFS at a concrete instance, K = 1 and two requests, labelled.
Results: bench/results/peers.txt.
"""

from vllm_contract.bench.peers.run import main

__all__ = ["main"]
