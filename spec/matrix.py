"""The configuration matrix `make prove` runs, with the verdict expected for each
property. An expectation is a claim about vLLM: `make prove` fails when the prover
disagrees, and a "violated" entry is a finding with a replayable trace.

Prompt lengths and budgets are symbolic everywhere, with one draft token per step
unless an entry says otherwise. Proofs run with two requests sharing the token budget
and the runner's slots. A counterexample search runs with as many requests as its
mechanism needs: one for a mechanism inside a request (a recompute, a session stop),
two where requests interact (a slot's previous occupant, the shared budget), since
every extra idle request multiplies the search for nothing.
"""

from __future__ import annotations

from spec.config import Config, SpecError

ALL = frozenset({"preempt", "preempt-drop", "reset", "stream", "abort"})
KVFAIL = ALL | {"kvfail"}

SAFETY = ("counter-nonnegative", "predicates-agree", "no-token-while-prefilling",
          "placeholder-accounting", "stale-count-nonnegative", "safe-frontier-nonnegative",
          "scheduled-tokens-positive", "padding-intact")


def _expect(proved=(), violated=()) -> dict:
    out = {p: "proved" for p in proved}
    out.update({p: "violated" for p in violated})
    return out


def _cfg(name, note, expect, **kw) -> Config:
    kw.setdefault("spec_tokens", 1)
    return Config(name=name, note=note, expect=expect, **kw)


MATRIX: tuple[Config, ...] = (
    # ---- vLLM 0.32.0 without faults: the contract holds, for every event family ---------
    _cfg("v1", "V1 runner; preemption (both modes), reset, streaming sessions, aborts",
         _expect(proved=SAFETY), runner="v1", events=ALL),
    _cfg("v2", "V2 runner as in 0.32.0; every event family but KV-load failure",
         _expect(proved=SAFETY), runner="v2", events=ALL),
    _cfg("v2-live", "V2 with the live-length fix; every event family but KV-load failure",
         _expect(proved=SAFETY), runner="v2-live", events=ALL),
    _cfg("v2-pp2", "V2 with two pipeline stages: three steps in flight, decode cadence "
         "(without streaming sessions: that proof does not close in a minute with two requests)",
         _expect(proved=SAFETY), runner="v2", events=ALL - {"stream"}, pp=2),
    _cfg("v1-kvfail", "V1 with KV-load failures (recompute) and every other event but streaming: "
         "runner and scheduler still agree",
         _expect(proved=("counter-nonnegative", "predicates-agree", "no-token-while-prefilling",
                         "stale-count-nonnegative", "scheduled-tokens-positive")),
         runner="v1", events=ALL - {"stream"} | {"kvfail"}),
    _cfg("v1-kvfail-leak", "V1 with KV-load failures: the failed step's placeholder is never consumed",
         _expect(violated=("placeholder-accounting",)), runner="v1", events=frozenset({"kvfail"}), requests=1),
    # ---- KV-load failure on the V2 runner: the #57562 candidate ------------------------
    _cfg("v2-kvfail", "V2 0.32.0: a recompute after a KV-load failure re-prefills below prefill_len",
         _expect(violated=("counter-nonnegative", "predicates-agree", "no-token-while-prefilling",
                           "placeholder-accounting")),
         runner="v2", events=frozenset({"kvfail"}), requests=1),
    _cfg("v2-live-kvfail", "the live-length fix does not cover it: the GPU computed count is stale too",
         _expect(violated=("counter-nonnegative", "predicates-agree", "no-token-while-prefilling")),
         runner="v2-live", events=frozenset({"kvfail"}), requests=1),
    _cfg("kvfail-stream", "KV-load failure on a streaming session: the stop lands below the prompt",
         _expect(violated=("predicates-agree", "safe-frontier-nonnegative")),
         runner="v1", events=frozenset({"kvfail", "stream"}), requests=1),
    # ---- runner faults -------------------------------------------------------------------
    _cfg("v2-stale-slot", "V2 reading its slot as the previous occupant left it (CC / UVA)",
         _expect(violated=("counter-nonnegative", "predicates-agree", "no-token-while-prefilling")),
         runner="v2", events=frozenset({"abort"}), faults=frozenset({"stale-slot-read"})),
    _cfg("v2-live-stale-slot", "the live-length fix under stale slot reads",
         _expect(violated=("counter-nonnegative", "predicates-agree", "no-token-while-prefilling")),
         runner="v2-live", events=frozenset({"abort"}), faults=frozenset({"stale-slot-read"})),
    _cfg("v1-over-delivery", "V1 over-committing tokens for a sampled step (realtime path)",
         _expect(violated=("counter-nonnegative",)),
         runner="v1", events=frozenset(), faults=frozenset({"over-delivery"}), requests=1),
    # ---- the seed PR's clamp ---------------------------------------------------------------
    _cfg("v1-clamp", "clamp with V1 and every event family",
         _expect(proved=("counter-nonnegative",)), runner="v1", events=KVFAIL, clamp=True),
    _cfg("v2-clamp-faults", "clamp with V2 under KV-load failures and both faults",
         _expect(proved=("counter-nonnegative",),
                 violated=("predicates-agree", "no-token-while-prefilling")),
         runner="v2", events=KVFAIL, faults=frozenset({"stale-slot-read", "over-delivery"}), clamp=True),
    _cfg("v2-kvfail-clamp", "clamp on the #57562 candidate: survives, but a stray token is kept",
         _expect(proved=("counter-nonnegative",),
                 violated=("predicates-agree", "no-token-while-prefilling")),
         runner="v2", events=frozenset({"kvfail"}), clamp=True, requests=1),
    _cfg("v1-over-delivery-clamp-2drafts", "clamp with two draft tokens: the rejection decrement "
         "(sched:2127, guarded by P > 0) still drives the counter negative",
         _expect(violated=("counter-nonnegative",)),
         runner="v1", events=frozenset(), faults=frozenset({"over-delivery"}), clamp=True, spec_tokens=2,
         requests=1),
    # ---- historical behaviours: their triggers become regression suites --------------------
    _cfg("h1-preempt", "preemption kept placeholders, output not marked stale (before #38624); "
         "V2 re-prefills a resumed request while the scheduler still counts old placeholders",
         _expect(violated=("counter-nonnegative", "predicates-agree", "placeholder-accounting")),
         runner="v2", events=frozenset({"preempt"}), profile="h1-preempt-keeps-placeholders", requests=1),
    # one request with two drafts shows it at the depth two requests with one draft need,
    # in a sixth of the search (measured)
    _cfg("h2-reset-flag", "reset_prefix_cache dropped one frame with a boolean: a later "
         "frame carrying drafts is consumed against the zeroed counter (one request with two "
         "drafts; with one draft it takes a second request)",
         _expect(violated=("counter-nonnegative",)), runner="v1", events=frozenset({"reset"}),
         profile="h2-reset-discard-flag", spec_tokens=2, requests=1),
    _cfg("h3-reset-counter", "reset_prefix_cache counted tokens but dropped frames (#42117): "
         "a multi-token frame is counted as one, later frames are dropped and leak placeholders",
         _expect(violated=("placeholder-accounting",)), runner="v1", events=frozenset({"reset"}),
         profile="h3-reset-discard-counter", spec_tokens=2, requests=1),
    _cfg("h4-stream", "resumable stop without the safe-frontier rollback (#35755, #50692)",
         _expect(violated=("counter-nonnegative", "predicates-agree", "scheduled-tokens-positive")),
         runner="v1", events=frozenset({"stream"}), profile="h4-stream-no-rollback", requests=1),
)


def by_name(names: list[str] | None = None) -> list[Config]:
    """The named configurations (all when names is empty), validated."""
    table = {c.name: c for c in MATRIX}
    if len(table) != len(MATRIX):
        raise SpecError("spec/matrix.py: two configurations share a name; names must be unique")
    if not names:
        return [c.validate() for c in MATRIX]
    unknown = [n for n in names if n not in table]
    if unknown:
        raise SpecError(
            f"unknown configuration {', '.join(unknown)}; known: {', '.join(table)} (see spec/matrix.py)"
        )
    return [table[n].validate() for n in names]
