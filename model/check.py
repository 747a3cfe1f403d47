"""Check one configuration: prove, refute, and show it is not vacuous.

For the properties the matrix expects to hold: k-induction with the configuration's
lemmas, and bounded progress from the invariants that proof established
(model/progress.py). If a proof does not close, BMC looks for a counterexample (a
finding) and otherwise reports `bounded`. For the properties expected to fail: the shortest
counterexample, minimal picks, and further violation classes. For every
configuration: a witness that a request completes after decoding, so an
over-constrained model cannot prove anything.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import z3
from vllm_contract.model.bmc import Bmc, Goal
from vllm_contract.model.encoding import Encoding
from vllm_contract.model.induction import InductionResult, KInduction
from vllm_contract.model.interpreter import Interpreter
from vllm_contract.model.itf import text as itf_text
from vllm_contract.model.itf import to_itf
from vllm_contract.model.probe import Race, walkable
from vllm_contract.model.progress import prove as prove_progress
from vllm_contract.model.results import VerdictRow
from vllm_contract.model.solvers import SolverUnknown, classify_unknown
from vllm_contract.model.trace import Trace, confirm
from vllm_contract.model.witness import admitted_by_encoding, policy_run
from vllm_contract.spec.config import Config
from vllm_contract.spec.invariants import lemmas_for
from vllm_contract.spec.ops import Ops
from vllm_contract.spec.properties import PROPERTIES
from vllm_contract.spec.state import View
from vllm_contract.spec.verdicts import BOUNDED, PROVED, UNKNOWN, VIOLATED, Kind, Verdict
from vllm_contract.spec.verdicts import frontier as frontier_verdict

MAX_DEPTH = 12
TIMEOUT_S = 60.0  # per solver query; `make prove --timeout SECONDS` changes it
CLASS_LIMIT = 3
# further classes are searched up to the first one's depth: two steps deeper doubled the
# searches that find none (measured: v2-stale-slot@0.33.0 9.7 -> 4.6 s)
CLASS_EXTRA_DEPTH = 0
WITNESS = "a request prefills in chunks, decodes, and completes on a stop token"


def completes(s: View, cfg: Config, ops: Ops):
    return ops.any(*[ops.all(s.completed[r], s.chunked[r]) for r in range(cfg.requests)])


def healthy(bmc: Bmc, bound: int | None = 3):
    """Restrict a search to traces using no optional mechanism: schedule and deliver
    only, no fault, no KV-load failure, no session stop; with a bound, picks at most
    that far above their lower limits (any small healthy path will do)."""

    def restrict(depth):
        clean = [z3.Not(used) for used in bmc.mechanisms(depth).values()]
        return z3.And(*clean, bmc.small_picks(depth, bound)) if bound is not None else z3.And(*clean)

    return restrict


K_FRONTIER_MAX = 8  # a frontier search proves K <= 0, 1, ... up to this bound


def _row(cfg: Config, prop: str, **kw) -> VerdictRow:
    kw.setdefault("scope", scope_of(cfg))
    return VerdictRow(
        config=cfg.name,
        runner=cfg.runner,
        clamp=cfg.clamp,
        events=sorted(cfg.events),
        faults=sorted(cfg.faults),
        profile=cfg.profile,
        property=prop,
        expected=cfg.expect.get(prop, "reached"),
        **kw,
    )


def concrete_instances(cfg: Config) -> list[Config]:
    """Where counterexamples are searched: the configuration itself, or for an abstract
    rest, concrete instances with one and then two requests (a trace is always real). A
    fixed prompt length is every instance request's (a narrower search, never a false trace)."""
    if not cfg.rest:
        return [cfg]
    return [
        cfg.with_(rest=False, requests=n, expect={}, prompt_lens=cfg.prompt_lens and cfg.prompt_lens * n)
        for n in (1, 2)
    ]


def scope_of(cfg: Config, trace: Trace | None = None, spec_tokens=None) -> dict:
    """The parameter space a verdict covers: a proof covers its configuration's space (K
    "any" when K is symbolic), a counterexample the instance it was found in."""
    if spec_tokens is None:
        if trace is not None and cfg.k_symbolic:
            spec_tokens = [trace.init.get(("spec_tokens",), 0)]
        elif cfg.k_symbolic:
            spec_tokens = "any" if cfg.spec_tokens_max is None else list(range(cfg.spec_tokens_max + 1))
        else:
            spec_tokens = [cfg.spec_tokens]
    requests = "any" if cfg.rest and trace is None else [cfg.requests]
    return {"requests": requests, "spec_tokens": spec_tokens, "pp": [cfg.pp]}


@dataclass
class ConfigReport:
    rows: list[VerdictRow]
    documents: dict  # relative path -> ITF text (model/itf.py text)
    witness: dict


@dataclass
class ViolationSearch:
    """One search for a property's counterexample: the random walks' trace (or None,
    on the first concrete instance), the BMC's shortest (or None) and where it was
    found, and the seconds from the start to each. found_by says which came first:
    "walk", "bmc" or "" (neither)."""

    early: Trace | None
    first: Trace | None
    where: Config
    bmc: Bmc | None
    first_seconds: float | None
    found_seconds: float | None
    found_by: str


def search_violation(
    cfg: Config,
    prop: str,
    max_depth: int,
    timeout_ms: int,
    enc: Encoding | None = None,
    walks: bool = True,
    seed: int = 0,
) -> ViolationSearch:
    """The BMC's shortest trace, on the configuration or, for an abstract rest, its
    concrete instances in order; with `walks`, random walks race it in a thread of their
    own (model/probe.py Race, up to a cap) until either has a counterexample, so the
    first one comes about when the faster of the two alone would give it (a property no
    walk can see, bounded-progress, is the BMC's alone: probe.walkable). The walks
    only time the first counterexample: what is reported is the BMC's (the race adds
    nothing to its queries, so it changes no verdict and no trace). Each BMC runs on a
    solver of its own: a trace depends on its configuration and property only, not on
    which other queries ran before it (Z3's models follow its history). Raises
    SolverUnknown as the BMC does."""
    started = time.perf_counter()
    instances = concrete_instances(cfg)
    race = Race(instances[0], prop, seed=seed) if walks and walkable(prop) else None
    first, where, bmc, first_seconds = None, cfg, None, None
    with race or contextlib.nullcontext():
        for instance in instances:
            bmc = Bmc(enc if (enc is not None and instance is cfg) else Encoding(instance), timeout_ms)
            # a configuration's `via`: the shortest trace through those mechanisms
            first = bmc.shortest(Goal.violation(prop), max_depth, bmc.through if cfg.via else None)
            first_seconds = time.perf_counter() - started
            if first is not None:
                where = instance
                break
    found_by, found_seconds = "", None
    if (
        race is not None
        and race.trace is not None
        and race.wall_seconds is not None  # set with race.trace
        and (first_seconds is None or race.wall_seconds < first_seconds)
    ):
        found_by, found_seconds = "walk", race.wall_seconds
    elif first is not None:
        found_by, found_seconds = "bmc", first_seconds
    return ViolationSearch(race.trace if race else None, first, where, bmc, first_seconds, found_seconds, found_by)


def check_config(
    cfg: Config, max_depth: int = MAX_DEPTH, timeout_s: float = TIMEOUT_S, walks: bool = True
) -> ConfigReport:
    """Every property of one configuration: proofs, shortest counterexamples (with
    `walks`, random walks race each search the matrix expects to find one: they only
    time the first counterexample), the frontier and the witness."""
    return ConfigCheck(cfg, max_depth, timeout_s, walks).run()


class ConfigCheck:
    """One configuration's check, one step per method, run in this order (Z3's models
    follow its history, so the order is part of every trace): k-induction of the claimed
    properties, the counterexample searches, bounded progress from the invariants the
    induction proved, the K frontiers, and last the witness."""

    def __init__(self, cfg: Config, max_depth: int, timeout_s: float, walks: bool):
        self.cfg = cfg
        self.max_depth = min(max_depth, cfg.search_depth) if cfg.search_depth is not None else max_depth
        self.walks = walks
        self.enc = Encoding(cfg)
        self.timeout_ms = max(int(timeout_s * 1000), 1)
        self.interp = Interpreter(cfg)
        self.documents: dict = {}
        self.proved: list[str] = []  # the claimed state properties k-induction is asked for
        self.induction: InductionResult | None = None

    def run(self) -> ConfigReport:
        cfg = self.cfg
        expected = {p: Verdict.parse(e, expectation=True) for p, e in cfg.expect.items()}
        claimed = [p for p, e in expected.items() if e.kind is Kind.PROVED]
        # progress is proved from the invariants the others' k-induction establishes
        progressing = [p for p in claimed if PROPERTIES[p].kind == "progress"]
        self.proved = [p for p in claimed if p not in progressing]
        rows: list[VerdictRow] = []
        invariants, why = None, "no invariants proved to start from"
        if self.proved:
            invariants, why, proved_rows = self.prove_claimed()
            rows += proved_rows
        rows += [self.refute(prop) for prop in expected if expected[prop].searches]
        # after the searches: its queries would change the Z3 context their models come from
        rows += [self.progress(prop, invariants, why) for prop in progressing]
        rows += [self.frontier(prop) for prop, e in expected.items() if e.kind is Kind.FRONTIER]
        return ConfigReport(rows=rows, documents=self.documents, witness=self.witness())

    def keep(self, trace: Trace, name: str, description: str, of: Config | None = None) -> str:
        """Replay the trace on the interpreter (it must agree step by step) and keep its ITF."""
        of = of or self.cfg
        confirm(self.interp if of is self.cfg else Interpreter(of), trace, trace.solver_states)
        path = f"traces/{self.cfg.name}/{name}.itf.json"
        self.documents[path] = itf_text(to_itf(trace, of.record(), description))
        return path

    def prove_claimed(self) -> tuple[list | None, str, list[VerdictRow]]:
        """k-induction of the claimed state properties with the configuration's lemmas:
        the invariants bounded progress starts from (None if the proof does not close, and
        why), and a row per property (refuted by search where the proof did not close)."""
        cfg = self.cfg
        lemmas = [(lemma.name, lemma.holds) for lemma in lemmas_for(cfg, self.proved)]
        started = time.perf_counter()
        try:
            self.induction = KInduction(self.enc, self.timeout_ms).prove(self.proved, lemmas)
        except SolverUnknown as exc:
            reason = str(exc)
        seconds = time.perf_counter() - started
        result = self.induction
        if result is not None and result.status == "proved":
            note = f"k-induction, k={result.k}, with {len(lemmas)} lemmas"
            rows = [_row(cfg, p, verdict=PROVED, depth=result.k, seconds=seconds, note=note) for p in self.proved]
            return lemmas, "", rows
        why = reason if result is None else f"induction {result.status} at k={result.k} ({result.failed})"
        return None, why, [self.refute(prop, note=why) for prop in self.proved]

    def refute(self, prop: str, note: str = "") -> VerdictRow:
        """The shortest counterexample and its further classes, or `bounded` if none is
        within the depth. An abstract rest proves, it does not refute: its counterexamples
        are searched on concrete instances (one request, then two), so every trace is a real one."""
        cfg, max_depth = self.cfg, self.max_depth
        started = time.perf_counter()
        try:
            race = self.walks and cfg.expect.get(prop) == "violated"  # search_violation leaves out what no walk sees
            found = search_violation(cfg, prop, max_depth, self.timeout_ms, self.enc, walks=race)
            first, where = found.first, found.where
            classes = (
                found.bmc.classes(Goal.violation(prop), first, first.depth + CLASS_EXTRA_DEPTH, CLASS_LIMIT)
                if first is not None and found.bmc is not None  # a BMC's trace: found.bmc found it
                else []
            )
        except SolverUnknown as exc:  # a timeout says so; an interrupt is not caught here
            return _row(
                cfg,
                prop,
                verdict=UNKNOWN,
                depth=None,
                seconds=time.perf_counter() - started,
                note=(note + "; then " if note else "") + str(exc),
            )
        seconds = time.perf_counter() - started
        if first is None:
            sizes = (
                ""
                if not cfg.rest
                else f" with {' or '.join(str(i.requests) for i in concrete_instances(cfg))} request(s)"
            )
            deeper = (
                f"; random walks found one in {found.early.depth} steps (replayed), deeper than the search"
                if found.early is not None
                else ""
            )
            return _row(
                cfg,
                prop,
                verdict=BOUNDED,
                depth=max_depth,
                seconds=seconds,
                note=(note + "; " if note else "") + f"no counterexample within {max_depth} steps{sizes}" + deeper,
            )
        paths = [
            self.keep(
                tr,
                prop if i == 0 else f"{prop}.{i}",
                f"{prop} violated ({', '.join(tr.mechanisms) or 'core path'})",
                of=where,
            )
            for i, tr in enumerate(classes)
        ]
        return _row(
            cfg,
            prop,
            verdict=VIOLATED,
            depth=first.depth,
            seconds=seconds,
            trace=paths[0],
            first_seconds=found.first_seconds,
            found_seconds=found.found_seconds,
            found_by=found.found_by,
            classes=paths[1:],
            mechanisms=first.mechanisms,
            fired=first.fired_at_end,
            scope=scope_of(where, first),
            note=note,
        )

    def frontier(self, prop: str) -> VerdictRow:
        """The smallest K with a counterexample: prove the property for K <= 0, 1, ...
        (k-induction, each bound on its own), and at the first bound whose proof fails
        search a shortest counterexample with K pinned to it."""
        cfg, max_depth, timeout_ms = self.cfg, self.max_depth, self.timeout_ms
        started = time.perf_counter()

        def undecided(note: str):
            return _row(cfg, prop, verdict=UNKNOWN, depth=None, seconds=time.perf_counter() - started, note=note)

        for k in range(K_FRONTIER_MAX + 1):
            bounded = cfg.with_(spec_tokens_max=k)
            lemmas = [(lemma.name, lemma.holds) for lemma in lemmas_for(bounded, [prop])]
            try:
                result = KInduction(Encoding(bounded), timeout_ms).prove([prop], lemmas)
            except SolverUnknown as exc:
                return undecided(f"frontier proof for K <= {k}: {exc}")
            if result.status == "proved":
                continue
            trace = None
            for pinned in concrete_instances(cfg.with_(spec_tokens=k, spec_tokens_max=None, expect={})):
                try:
                    trace = Bmc(Encoding(pinned), timeout_ms).shortest(Goal.violation(prop), max_depth)
                except SolverUnknown as exc:
                    return undecided(f"frontier search at K = {k}: {exc}")
                if trace is not None:
                    break
            seconds = time.perf_counter() - started
            below = list(range(k))
            if trace is None:
                return _row(
                    cfg,
                    prop,
                    verdict=BOUNDED,
                    depth=max_depth,
                    seconds=seconds,
                    scope=scope_of(cfg, spec_tokens=below),
                    note=f"proved for K <= {k - 1}; the proof fails at K <= {k} and no counterexample "
                    f"at K = {k} within {max_depth} steps",
                )
            path = self.keep(
                trace, prop, f"{prop} violated at K = {k} ({', '.join(trace.mechanisms) or 'core path'})", of=pinned
            )
            return _row(
                cfg,
                prop,
                verdict=frontier_verdict(k),
                depth=trace.depth,
                seconds=seconds,
                trace=path,
                mechanisms=trace.mechanisms,
                fired=trace.fired_at_end,
                scope={
                    **scope_of(cfg, spec_tokens=below),
                    "violated_at": {"spec_tokens": k, "requests": pinned.requests},
                },
                note=f"proved for K <= {k - 1} (k-induction); violated at K = {k} "
                f"(shortest trace, {trace.depth} steps)",
            )
        return _row(
            cfg,
            prop,
            verdict=PROVED,
            depth=None,
            seconds=time.perf_counter() - started,
            scope=scope_of(cfg, spec_tokens=list(range(K_FRONTIER_MAX + 1))),
            note=f"no proof for every K; proved for each K <= {K_FRONTIER_MAX} on its own",
        )

    def progress(self, prop: str, invariants: list | None, why: str) -> VerdictRow:
        """Bounded progress from the invariants k-induction proved (None: it proved none);
        else, or if the invariants admit a state without it, a counterexample search."""
        if invariants is None:
            return self.refute(prop, note=why)
        cfg = self.cfg
        started = time.perf_counter()
        state_props = [p for p in self.proved if PROPERTIES[p].kind == "state"]
        try:
            result = prove_progress(self.enc, [fn for _, fn in invariants], state_props, self.timeout_ms)
        except SolverUnknown as exc:
            return _row(cfg, prop, verdict=UNKNOWN, depth=None, seconds=time.perf_counter() - started, note=str(exc))
        if result.status == "proved":
            return _row(
                cfg,
                prop,
                verdict=PROVED,
                depth=result.bound,
                seconds=result.seconds,
                note=f"{result.bound} engine steps, from {len(invariants)} lemmas and {len(state_props)} properties",
            )
        if result.status == "no-step":
            why = "a state the invariants admit has no engine step"
        else:
            why = f"from a state the invariants admit, {result.bound} engine steps leave a request behind"
        return self.refute(prop, note=why + " (perhaps unreachable)")

    def witness(self) -> dict:
        """A healthy run to a completed request, so an over-constrained model cannot prove
        anything: schedule and deliver alone must get a request through (no event family or
        fault is needed to make progress). The engine's own policy, run on the interpreter,
        gives one, and the encoding must admit it; else a bounded search finds one."""
        cfg, enc, timeout_ms, max_depth = self.cfg, self.enc, self.timeout_ms, self.max_depth
        started = time.perf_counter()
        witness, error, undecided = None, "", False
        try:
            run = policy_run(self.interp, completes, "completes")
            if run is not None:
                solver_states = admitted_by_encoding(enc, run, completes, timeout_ms)
                if solver_states is None:
                    error = (
                        f"the encoding rejects a healthy run of {run.depth} steps that the "
                        "interpreter accepts: over-constrained"
                    )
                else:
                    run.solver_states = solver_states
                    witness = run
            else:  # the policy did not get through: search (bounded picks first, then any)
                search, goal = Bmc(enc, timeout_ms), Goal("completes", "witness", completes)
                witness = search.shortest(goal, max_depth, healthy(search), minimise=False)
                if witness is None:
                    search = Bmc(enc, timeout_ms)
                    witness = search.shortest(goal, max_depth, healthy(search, None), minimise=False)
        except SolverUnknown as exc:
            if type(exc) is SolverUnknown:  # raised with Z3's bare reason: was it a timeout or an interrupt?
                classified = classify_unknown(
                    str(exc), time.perf_counter() - started, timeout_ms, f"{cfg.name}: the witness check", cfg.name
                )
                if not isinstance(classified, SolverUnknown):
                    raise classified from None
                exc = classified
            witness, error, undecided = None, str(exc), True
        info = {"goal": WITNESS, "seconds": round(time.perf_counter() - started, 4)}
        if witness is None:
            info.update(reached=False, note=error or f"not reachable within {max_depth} steps: vacuous model")
            if undecided:
                info["unknown"] = True  # not shown vacuous: the solver did not decide
        else:
            info.update(reached=True, depth=witness.depth, trace=self.keep(witness, "witness", f"witness: {WITNESS}"))
        return info


def row_dict(row: VerdictRow) -> dict:
    return row.to_json()
