"""(c) Hypothesis stateful testing over the same sampler."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from vllm_contract.bench.peers.common import CLOCK, HYP_STEPS
from vllm_contract.model.interpreter import Interpreter
from vllm_contract.model.probe import _generic, _init, violated_by
from vllm_contract.model.sampler import Limits, propose
from vllm_contract.spec.config import Config


class OutOfTime(BaseException):
    """Raised inside a rule when the case's limit is spent. Not an Exception, so
    Hypothesis does not take it for a failure to shrink: it ends the run."""


class DrawRng:
    """The random.Random calls the fuzzer's sampler makes, answered by Hypothesis draws.
    Integers shrink to their lower bound; random() shrinks to 1.0, so the sampler's rare
    branches (a KV-load failure, a stop token, drop-stale) shrink to off."""

    def __init__(self, data):
        from hypothesis import strategies as st

        self.data, self.st = data, st

    def randint(self, a: int, b: int) -> int:
        return self.data.draw(self.st.integers(a, b))

    def randrange(self, n: int) -> int:
        return self.data.draw(self.st.integers(0, n - 1))

    def choice(self, seq):
        return seq[self.data.draw(self.st.integers(0, len(seq) - 1))]

    def random(self) -> float:
        return 1.0 - self.data.draw(self.st.integers(0, 999)) / 1000


@dataclass
class HypRecord:
    deadline: float
    started: float
    limit: float
    found_at: float | None = None
    failures: list = field(default_factory=list)  # the lengths of failing runs, in order
    steps: int = 0


def hypothesis_search(cfg: Config, prop: str, limit: float) -> dict:
    from hypothesis import HealthCheck, Phase, Verbosity, settings
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

    it, test, lim = Interpreter(cfg), violated_by(cfg, prop), Limits()
    started = CLOCK()
    rec = HypRecord(deadline=started + limit, started=started, limit=limit)

    def do(self, name: str, data) -> None:
        if self.dead:
            return
        if CLOCK() > rec.deadline:
            raise OutOfTime()
        rng = DrawRng(data)
        try:
            got = propose(it, cfg, self.state, name, rng, lim)
        except ValueError:  # an event the fuzzer has no sampler for
            got = _generic(it, cfg, self.state, name, rng)
        if got is None:
            return
        args, res = got
        self.trace.append(name)
        rec.steps += 1
        if test(res):
            if rec.found_at is None:
                rec.found_at = CLOCK()
                rec.deadline = rec.found_at + rec.limit  # shrinking gets a limit of its own
            rec.failures.append(len(self.trace))
            raise AssertionError(f"{prop} violated after {len(self.trace)} steps")
        if res.fired:
            self.dead = True  # the engine is dead: the rest of this run does nothing
        self.state = res.state

    def setup(self, data) -> None:
        self.state = it.initial(**_init(cfg, DrawRng(data), lim))

    def make(name: str):
        def event(self, data):
            do(self, name, data)

        event.__name__ = f"event_{name}"
        return rule(data=st.data())(event)

    def __init__(self):
        RuleBasedStateMachine.__init__(self)
        self.state, self.trace, self.dead = None, [], False

    namespace = {"__init__": __init__, "setup": initialize(data=st.data())(setup)}
    namespace.update({f"event_{name}": make(name) for name in it.events})
    machine = type("Contract", (RuleBasedStateMachine,), namespace)
    opts = settings(
        max_examples=10**7,
        stateful_step_count=HYP_STEPS,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
        print_blob=False,
        verbosity=Verbosity.quiet,
    )
    outcome = "passed"
    try:
        run_state_machine_as_test(machine, settings=opts)
    except OutOfTime:
        outcome = "limit"
    except AssertionError:
        outcome = "found"
    except Exception as exc:  # a Hypothesis error (e.g. Flaky, Unsatisfiable): say which
        # Hypothesis records the OutOfTime that ended a run and may then complain that the
        # run drew less than an earlier one (FlakyStrategyDefinition): that is the limit too
        cause, timed_out = exc, False
        while cause is not None and not timed_out:
            timed_out = isinstance(cause, OutOfTime)
            cause = cause.__context__ or cause.__cause__
        outcome = "limit" if timed_out or CLOCK() > rec.deadline else f"error: {type(exc).__name__}"
        if os.environ.get("PEERS_DEBUG"):
            import traceback

            traceback.print_exc()
    ended = CLOCK()
    found = rec.found_at is not None
    return {
        "found": found,
        "outcome": outcome,
        "find": rec.found_at - started if found else None,
        "shrink": (ended - rec.found_at) if found else None,
        "shrink_cut": found and outcome == "limit",
        # the final run Hypothesis reports is its shrunk example; if shrinking was cut, the shortest seen
        "len": (rec.failures[-1] if outcome == "found" else min(rec.failures)) if found else None,
        "first_len": rec.failures[0] if found else None,
        "steps": rec.steps,
    }
