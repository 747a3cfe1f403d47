"""From an ITF trace to a case: the data a generated test module holds.

The trace's picks are replayed on the reference interpreter under every arm (every
vLLM release, clamp off and on; a historical profile also as itself), and what each
arm does is recorded as the case's expectation, with vLLM's reaction (an assert fires,
or the violation is silent). The step table shows, per step, only what changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from vllm_contract.codegen.case import Case, Expect, arms_for, predict
from vllm_contract.model import hang
from vllm_contract.model.interpreter import Interpreter, args_for, flat, nested
from vllm_contract.model.itf import read
from vllm_contract.model.trace import Step, Trace, first_difference, replay
from vllm_contract.spec import expectations
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import MalformedConfig, SpecError
from vllm_contract.spec.properties import PROPERTIES
from vllm_contract.spec.vocabulary import SHORT_LABELS, Status


class CaseError(SpecError):
    """A trace cannot become a case (it does not show what it claims, or is malformed)."""


@dataclass
class CaseSource:
    case: Case
    trace_path: str
    sentence: str
    cfg: Config
    table: list[tuple[str, str, str, list[str]]]  # (step, event, picks, changes)
    module: str  # relative path of the module to write
    # the profiles whose prover found this same trace too (codegen.generate.same_trace_once
    # keeps the oldest release's): the case is the shortest trace found on each of them
    also_found_on: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ configuration


def config_from_meta(meta: dict, override: str | None = None) -> Config:
    """The trace's configuration: named in --config, or carried in its #meta. The record
    is validated like a matrix entry (types included), so a malformed one is one line."""
    from vllm_contract.spec.matrix import MATRIX, by_name  # imported late: a malformed matrix is reported by the caller

    if override:
        return by_name([override])[0]
    fields = meta.get("config")
    if not isinstance(fields, dict) or not isinstance(fields.get("name"), str):
        raise CaseError(
            "the trace's #meta has no 'config' record with a name; name its configuration with --config NAME"
        )
    base = next((c for c in MATRIX if c.name == fields["name"]), None)
    data = dict(fields)
    if base is not None:
        data.setdefault("note", base.note)
    if "expect" in data:
        raise MalformedConfig("the trace's #meta config carries 'expect'; a case's configuration has no expectations")
    return expectations.from_record(data)


def concrete_k(cfg: Config, trace: Trace) -> tuple[Config, Trace]:
    """A trace of a configuration that leaves K open fixes K in its init picks; its case
    is that instance (targets build vLLM with a concrete num_speculative_tokens)."""
    if not cfg.k_symbolic:
        return cfg, trace
    init = dict(trace.init)
    k = init.pop(("spec_tokens",), 0)
    trace.init = init
    concrete = cfg.with_(spec_tokens=k, spec_tokens_max=None, expect={})
    if k == 0:  # no drafts: the draft picks (all 0 in such a trace) are not arguments any more
        it = Interpreter(concrete)
        for step in trace.steps:
            names = {arg.name for arg in it.event(step.event).args(concrete)}
            dropped = {key: v for key, v in step.args.items() if key[0] not in names}
            if any(v not in (0, False) for v in dropped.values()):
                raise CaseError(f"a trace at K = 0 picks {dropped} in a {step.event} step")
            step.args = {key: v for key, v in step.args.items() if key[0] in names}
    return concrete, trace


def concrete_rest(cfg: Config, trace: Trace, trace_path) -> tuple[Config, Trace]:
    """A trace of an abstract rest (a proof configuration's witness) in which the rest
    never acts is a trace of the one focal request alone: its case is that instance.
    One in which the rest acts is not a vLLM trace, and cannot become a case."""
    if not cfg.rest:
        return cfg, trace
    for t, step in enumerate(trace.steps):
        acting = {k[0]: v for k, v in step.args.items() if k[0].startswith("rest_") and v not in (0, False)}
        if acting:
            raise CaseError(
                f"{trace_path}: step {t + 1} uses the abstract rest ({acting}); only a trace in which "
                "the rest does nothing is a trace of vLLM"
            )
        step.args = {k: v for k, v in step.args.items() if not k[0].startswith("rest_")}
    return cfg.with_(rest=False, expect={}), trace


# ------------------------------------------------------------------ the step table

LEGEND = (
    "L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, "
    "X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len"
)


def _fmt(name: str, value) -> str:
    if name == "status":
        return Status.NAMES[value]
    if isinstance(value, bool):
        return "T" if value else "F"
    return str(value)


def _picks(named: dict, defaults: dict) -> str:
    shown = []
    for name, value in named.items():
        if value == defaults.get(name):
            continue
        shown.append(f"{name}={value}")
    return " ".join(shown)


def runner_rule(cfg: Config, obs: dict, r: int) -> str | None:
    """The runner's discard rule for request r in a schedule step, evaluated (the runner
    variant's own rule: the text is computed by the function that decides); None when
    r was not scheduled."""
    row = (obs.get("v1_rows" if cfg.is_v1 else "v2_rows") or [None] * cfg.requests)[r]
    if not row or not row["scheduled"]:
        return None
    return cfg.run.explain(row)


def step_table(cfg: Config, trace: Trace, states: list, observed: list) -> list[tuple[str, str, str, list[str]]]:
    it = Interpreter(cfg)
    rows = [("0", "init", _picks(nested(trace.init), {}), [])]
    in_flight: list[int] = []  # the schedule steps not yet delivered, oldest first
    for t, step in enumerate(trace.steps):
        before, after = states[t], states[t + 1]
        event = it.event(step.event)
        defaults = {a.name: ([a.fallback()] * cfg.requests if a.over else a.fallback()) for a in event.args(cfg)}
        named = nested(args_for(event, cfg, step.named_args()))
        changes = []
        if step.event == "schedule":
            in_flight.append(t + 1)
        elif step.event == "deliver" and in_flight:
            changes.append(f"delivers the output of step {in_flight.pop(0)}")
        for r in range(cfg.requests):
            parts = []
            for var, label in SHORT_LABELS:
                key = (var, r)
                if key in before and before[key] != after[key]:
                    parts.append(f"{label} {_fmt(var, before[key])}->{_fmt(var, after[key])}")
            if step.event == "schedule" and observed[t]:
                slot = before[("queue_len",)]
                n = after[("q_scheduled", slot, r)]
                if n:
                    sampled = after[("q_sampled", slot, r)]
                    reserved = after[("q_reserved", slot, r)]
                    changes.append(f"r{r}: scheduled {n}, reserved {reserved}, runner returns {sampled}")
                    rule = runner_rule(cfg, observed[t], r)
                    if rule:
                        changes.append(f"r{r}: runner rule {rule}")
            while parts:  # a few changes per line keeps the table readable
                changes.append(f"r{r}: " + ", ".join(parts[:5]))
                parts = parts[5:]
        if before[("queue_len",)] != after[("queue_len",)]:
            changes.append(f"in flight {before[('queue_len',)]}->{after[('queue_len',)]}")
        failed = [p for p, ok in (trace.checks[t] if trace.checks else {}).items() if not ok]
        if failed:
            changes.append("VIOLATES " + ", ".join(failed))
        rows.append((str(t + 1), step.event, _picks(named, defaults), changes))
    return rows


# ------------------------------------------------------------------ cases


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


USER_PREFIX = "test_user__"  # a user trace's module: named after its file, never after its config


def user_case_name(trace_path: Path | str) -> str:
    """The case name of a user trace: its file name without .itf.json / .json."""
    name = Path(trace_path).name
    for suffix in (".itf.json", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    slug = _slug(name)
    if not slug:
        raise CaseError(f"{trace_path}: the file name gives no case name; name it like my-case.itf.json")
    return slug


def module_path(profile: str, scenario: str, kind: str, goal: str, index: int, user: str | None = None) -> str:
    """Where a case's module goes (relative to the repository): one folder per profile."""
    folder = _slug(profile)
    if user is not None:  # its own name, so it never collides with the generated cases of its config
        return f"generated_tests/cases/{folder}/{USER_PREFIX}{user}.py"
    if kind == "divergence":
        stem = "divergence" + (f"_{index}" if index else "")
    else:
        stem = "healthy_path" if kind == "witness" else _slug(goal) + (f"_{index}" if index else "")
    return f"generated_tests/cases/{folder}/test_{_slug(scenario)}__{stem}.py"


def sentence(
    cfg: Config, kind: str, goal: str, fired_at: int | None, mechanisms: list[str], description: str = ""
) -> str:
    who = (
        f"With {cfg.runner} and {cfg.profile}"
        + (" plus the clamp" if cfg.clamp else "")
        + (" plus the step-reservation guard" if cfg.guard != "none" else "")
    )
    if kind == "witness":
        return (
            f"{who}, a request prefills in chunks, decodes and finishes on a stop token; "
            f"no property is violated and no guard drops a token."
        )
    if kind == "divergence":
        what = description or "a trace a vLLM target differed from the model on"
        return f"{who}: {what}. The case checks the target against the model after every step."
    how = ", ".join(mechanisms) if mechanisms else "the core path alone"
    return f"{who}, {how} violates {goal} at step {fired_at}. The property: {PROPERTIES[goal].doc}."


SENTENCE = re.compile(
    r"^With (?P<runner>\S+) and (?P<profile>\S+?)(?: plus the (?:clamp|step-reservation guard))?, "
    r"(?P<how>.+) violates (?P<prop>[\w-]+) at step (?P<step>\d+)\."
)


def sentence_parts(text: str) -> dict | None:
    """What a violation's `sentence` says, read back (runner, profile, mechanisms, property):
    how `vllm-contract explain --trace` finds the generated cases of a mechanism."""
    match = SENTENCE.match(text)
    if match is None:
        return None
    how = match["how"]
    mechanisms = [] if how == "the core path alone" else how.split(", ")
    return {"runner": match["runner"], "profile": match["profile"], "mechanisms": mechanisms, "property": match["prop"]}


def build(trace_path: Path | str, config_override: str | None = None, index: int = 0, user: bool = False) -> CaseSource:
    """A case from a trace file. `user`: a trace a person supplied (--trace, or
    generated_tests/traces/): its module is named after the file (test_user__NAME)."""
    meta, trace = read(trace_path)
    try:
        cfg = config_from_meta(meta, config_override)
    except SpecError as exc:
        raise CaseError(f"{trace_path}: {exc}") from None
    if trace.init is None:
        raise CaseError(f"{trace_path}: no init picks in the first state")
    cfg, trace = concrete_k(cfg, trace)
    cfg, trace = concrete_rest(cfg, trace, trace_path)
    it = Interpreter(cfg)
    try:
        states, checks, observed = replay(it, trace.init, trace.steps)
    except Exception as exc:  # a step the spec does not allow, an unknown argument
        raise CaseError(f"{trace_path}: the trace does not replay on config {cfg.name!r}: {exc}") from None
    trace.states, trace.checks, trace.observed = states, checks, observed
    differs = first_difference(trace)
    if differs is not None:  # the picks replay, but the states the file shows are not the spec's
        raise CaseError(
            f"{trace_path}: the recorded states contradict the spec (replayed on config "
            f"{cfg.name!r}): {differs}; fix the trace or drop its state variables"
        )
    kind = trace.kind
    goal = trace.goal if kind == "violation" else None
    if kind == "violation" and goal not in PROPERTIES:
        raise CaseError(f"{trace_path}: #meta names no known violated property ({goal!r})")

    engine_steps = 0
    if kind == "violation" and PROPERTIES[goal].hangs:
        # a hang is shown, not claimed: the engine's own next steps, no fault, go into the case
        more, stuck = hang.shown(it, states[-1])
        if stuck:
            trace.steps = list(trace.steps) + [Step(e, args_for(it.event(e), cfg, named)) for e, named in more]
            states, checks, observed = replay(it, trace.init, trace.steps)
            trace.states, trace.checks, trace.observed = states, checks, observed
            engine_steps = len(more)

    init = nested(trace.init)
    steps = tuple((s.event, nested(args_for(it.event(s.event), cfg, s.named_args()))) for s in trace.steps)
    arms = {}
    for label, overrides in arms_for(cfg.profile, cfg.clamp, cfg.guard, cfg.on_vllm_v1, cfg.run.releases).items():
        arms[label] = (overrides, predict(goal, cfg.with_(**overrides).validate(), init, steps, engine_steps))

    found = next(
        exp
        for ov, exp in arms.values()
        if ov["clamp"] == cfg.clamp and ov["profile"] == cfg.profile and ov["guard"] == cfg.guard
    )
    last = len(steps) - engine_steps - 1
    if kind == "violation" and last + 1 not in found.violations:
        raise CaseError(f"{trace_path}: replayed as found, {goal} is not violated at its last step {last + 1}")
    if kind == "witness":
        if not found.completed:
            raise CaseError(f"{trace_path}: the witness does not complete a request when replayed")
        # a runner that samples steps the scheduler reserved nothing for (a plugin's, e.g.
        # vllm-metal's) does so on the witness too: the guard's drops there are its finding
        for label, (_overrides, exp) in arms.items():
            if exp.dropped and cfg.run.honours_reservation:
                raise CaseError(
                    f"{trace_path}: on arm {label} the guard drops {exp.dropped} token(s) on a healthy path"
                )
    elif kind == "violation" and not any(exp.violations or exp.fired or exp.others for _, exp in arms.values()):
        raise CaseError(f"{trace_path}: no arm shows a violation: the case would pass on both arms")

    path = module_path(
        cfg.profile, cfg.scenario, kind, goal or "healthy", index, user_case_name(trace_path) if user else None
    )
    case = Case(
        name=Path(path).stem[len("test_") :],
        config=cfg.record(),
        init=init,
        steps=steps,
        kind=kind,
        property=goal,
        arms=arms,
        path=path,
        engine_steps=engine_steps,
    )
    return CaseSource(
        case=case,
        trace_path=str(trace_path),
        cfg=cfg,
        sentence=sentence(
            cfg, kind, goal, last + 1 if kind == "violation" else None, trace.mechanisms, meta.get("description", "")
        ),
        table=step_table(cfg, trace, states, observed),
        module=path,
    )


def from_monitor(trace_path: Path | str) -> dict | None:
    """A trace the contract monitor recorded (#meta monitor), as the case it stands for: it
    must replay on the model exactly as recorded (every value vLLM showed) and violate its
    property at its last step; it is then shrunk to the requests and steps that matter
    (model/shrink.py: the same property, the same assert, the same mechanisms). Returns
    the shrunk trace as an ITF document; None for a trace the monitor did not record."""
    from vllm_contract.model.bmc import mechanisms_of
    from vllm_contract.model.itf import to_itf
    from vllm_contract.model.shrink import violation
    from vllm_contract.model.trace import confirm, judge

    meta, trace = read(trace_path)
    monitor = meta.get("monitor")
    if not isinstance(monitor, dict):
        return None
    try:
        cfg = config_from_meta(meta)
    except SpecError as exc:
        raise CaseError(f"{trace_path}: {exc}") from None
    prop = trace.goal
    init = nested(trace.init)
    steps = [(s.event, nested(s.args)) for s in trace.steps]
    replay = judge(Interpreter(cfg), cfg, init, steps, trace.recorded)
    if replay.left_at is not None or replay.differs or prop not in replay.violated:
        where = (
            f"the model refuses step {replay.left_at} ({replay.why})"
            if replay.left_at is not None
            else replay.differs or f"the replay does not violate {prop} at the last step"
        )
        raise CaseError(
            f"{trace_path}: the recorded trace does not replay on the model as vLLM ran it ({where}); a case "
            f"would not reproduce it: `vllm-contract explain --trace {trace_path}` says where it leaves the model"
        )
    small, small_init, small_steps = violation(cfg, init, steps, prop)
    it = Interpreter(small)
    shrunk = Trace(
        small.name,
        flat(small_init),
        [Step(e, args_for(it.event(e), small, p)) for e, p in small_steps],
        prop,
        "violation",
    )
    confirm(it, shrunk)
    shrunk.mechanisms = mechanisms_of(small, shrunk.steps, shrunk.states)
    description = (
        f"the monitor's trace {Path(trace_path).name} ({len(steps)} steps, {cfg.requests} request(s), vLLM "
        f"{monitor.get('release', '?')}) shrunk to {len(small_steps)} steps and {small.requests} request(s) that "
        f"still violate {prop}"
    )
    document = to_itf(shrunk, small.record(), description)
    document["#meta"]["derived_from"] = {"file": str(trace_path), "steps": len(steps), "monitor": monitor}
    return document


def describe_expect(exp: Expect, prop: str | None, label: str = "") -> list[str]:
    """The lines of one arm: vLLM's reaction, what is violated where, how far it runs."""
    from vllm_contract.spec.properties import ASSERTS

    lines = []
    if exp.fired:
        name, step = exp.fired
        statement = ASSERTS[name].statement
        lines.append(f"CRASH at step {step}: " + (f"`{statement}` fires" if statement else f"{name} ends the engine"))
    elif exp.stuck:
        lines.append("HANG: no assert fires; " + hang.short(exp.stuck))
    elif exp.violations or exp.others:
        lines.append("SILENT: no assert fires")
    else:
        lines.append("holds: no assert fires, nothing is violated")
    violated = []
    if exp.violations:
        violated.append(f"{prop} at step " + ", ".join(str(v) for v in exp.violations))
    violated += [f"{p} at {step}" for p, step in exp.others]
    if violated:
        lines.append("violated: " + "; ".join(violated))
    if prop and not exp.violations:
        lines.append(f"{prop} holds on this arm")
    tail = [f"runs {exp.runs} step(s)"]
    if exp.dropped:
        tail.append(f"the {'guard' if '+guard' in label else 'clamp'} drops {exp.dropped} token(s)")
    if exp.completed:
        tail.append("a request completes")
    lines.append("; ".join(tail))
    return lines


__all__ = [
    "CaseError",
    "CaseSource",
    "LEGEND",
    "USER_PREFIX",
    "build",
    "describe_expect",
    "from_monitor",
    "sentence_parts",
    "user_case_name",
]
