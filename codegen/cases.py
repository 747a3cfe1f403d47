"""From an ITF trace to a case: the data a generated test module holds.

The trace's picks are replayed on the reference interpreter under every arm (clamp on
and off; a historical profile also against 0.32.0), and what each arm does is recorded
as the case's expectation. The step table shows, per step, only what changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from model.interpreter import Interpreter, args_for, nested
from model.itf import read
from model.trace import Trace, replay
from spec.config import Config, SpecError
from spec.matrix import by_name
from spec.properties import PROPERTIES
from spec.vocabulary import Status
from targets.harness import Case, Expect, arms_for, predict


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


# ------------------------------------------------------------------ configuration


def config_from_meta(meta: dict, override: str | None = None) -> Config:
    """The trace's configuration: named in --config, or carried in its #meta."""
    if override:
        return by_name([override])[0]
    fields = meta.get("config")
    if not isinstance(fields, dict) or "name" not in fields:
        raise CaseError("the trace's #meta has no 'config' record; name its configuration with --config NAME")
    known = {c.name: c for c in by_name(None)}
    base = known.get(fields["name"])
    data = dict(fields)
    data["events"] = frozenset(data.get("events", ()))
    data["faults"] = frozenset(data.get("faults", ()))
    if data.get("prompt_lens") is not None:
        data["prompt_lens"] = tuple(data["prompt_lens"])
    extra = {} if base is None else {"note": base.note}
    try:
        return Config(**data, **extra).validate()
    except TypeError as exc:
        raise CaseError(f"the trace's #meta config has an unknown field ({exc})") from None


# ------------------------------------------------------------------ the step table

_SHOWN = (  # (variable, short label); per request unless scalar
    ("status", "status"), ("num_prompt_tokens", "L"), ("num_tokens", "T"), ("num_computed_tokens", "c"),
    ("num_output_placeholders", "P"), ("num_in_flight_tokens", "F"), ("num_stale_output_tokens", "S"),
    ("drop_stale_output", "D"), ("is_prefill_chunk", "X"), ("num_spec_tokens", "drafts"),
    ("pending_update", "update"), ("v1_num_tokens", "Nr"), ("v2_slot", "slot"),
    ("v2_num_computed", "g"), ("v2_prefill_len", "pl"), ("v2_total_len", "tl"),
    ("discard_latest_async_tokens", "discard"), ("async_tokens_to_discard", "to_discard"),
    ("clamp_dropped", "dropped"),
)
LEGEND = ("L prompt, T tokens, c computed, P placeholders, F in flight, S stale, D drop-stale, "
          "X is_prefill_chunk, Nr V1 num_tokens, g/pl/tl V2 slot computed/prefill_len/total_len")


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


def step_table(cfg: Config, trace: Trace, states: list, observed: list) -> list[tuple[str, str, str, list[str]]]:
    it = Interpreter(cfg)
    rows = [("0", "init", _picks(nested(trace.init), {}), [])]
    for t, step in enumerate(trace.steps):
        before, after = states[t], states[t + 1]
        event = it.event(step.event)
        defaults = {a.name: ([a.fallback()] * cfg.requests if a.over else a.fallback()) for a in event.args(cfg)}
        named = nested(args_for(event, cfg, step.named_args()))
        changes = []
        for r in range(cfg.requests):
            parts = []
            for var, label in _SHOWN:
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


def module_path(cfg: Config, kind: str, goal: str, index: int) -> str:
    folder = _slug(cfg.profile)
    stem = "healthy_path" if kind == "witness" else _slug(goal) + (f"_{index}" if index else "")
    return f"generated_tests/cases/{folder}/test_{_slug(cfg.name)}__{stem}.py"


def sentence(cfg: Config, kind: str, goal: str, fired_at: int | None, mechanisms: list[str]) -> str:
    who = f"With {cfg.runner} and {cfg.profile}" + (" plus the clamp" if cfg.clamp else "")
    if kind == "witness":
        return (f"{who}, a request prefills in chunks, decodes and finishes on a stop token; "
                f"no property is violated and the clamp never drops a token.")
    how = ", ".join(mechanisms) if mechanisms else "the core path alone"
    return f"{who}, {how} violates {goal} at step {fired_at}. The property: {PROPERTIES[goal].doc}."


def build(trace_path: Path | str, config_override: str | None = None, index: int = 0) -> CaseSource:
    meta, trace = read(trace_path)
    cfg = config_from_meta(meta, config_override)
    if trace.init is None:
        raise CaseError(f"{trace_path}: no init picks in the first state")
    it = Interpreter(cfg)
    try:
        states, checks, observed = replay(it, trace.init, trace.steps)
    except Exception as exc:  # a step the spec does not allow, an unknown argument
        raise CaseError(f"{trace_path}: the trace does not replay on config {cfg.name!r}: {exc}") from None
    trace.states, trace.checks, trace.observed = states, checks, observed
    kind = trace.kind
    goal = trace.goal if kind == "violation" else None
    if kind == "violation" and goal not in PROPERTIES:
        raise CaseError(f"{trace_path}: #meta names no known violated property ({goal!r})")

    init = nested(trace.init)
    steps = tuple((s.event, nested(args_for(it.event(s.event), cfg, s.named_args()))) for s in trace.steps)
    arms = {}
    for label, overrides in arms_for(cfg.profile, cfg.clamp).items():
        arms[label] = (overrides, predict(goal, cfg.with_(**overrides).validate(), init, steps))

    found = next(exp for ov, exp in arms.values()
                 if ov.get("clamp", cfg.clamp) == cfg.clamp and ov.get("profile", cfg.profile) == cfg.profile)
    last = len(steps) - 1
    if kind == "violation" and last + 1 not in found.violations:
        raise CaseError(f"{trace_path}: replayed as found, {goal} is not violated at its last step {last + 1}")
    if kind == "witness":
        if not found.completed:
            raise CaseError(f"{trace_path}: the witness does not complete a request when replayed")
        for label, (overrides, exp) in arms.items():
            if exp.dropped:
                raise CaseError(f"{trace_path}: on arm {label} the clamp drops {exp.dropped} token(s) on a healthy path")
    elif not any(exp.violations or exp.fired for _, exp in arms.values()):
        raise CaseError(f"{trace_path}: no arm shows a violation: the case would pass on both arms")

    path = module_path(cfg, kind, goal or "healthy", index)
    case = Case(name=Path(path).stem[len("test_"):], config=cfg.record(), init=init, steps=steps,
                kind=kind, property=goal, arms=arms, path=path)
    return CaseSource(
        case=case, trace_path=str(trace_path), cfg=cfg,
        sentence=sentence(cfg, kind, goal, len(steps) if kind == "violation" else None, trace.mechanisms),
        table=step_table(cfg, trace, states, observed), module=path,
    )


def describe_expect(exp: Expect) -> str:
    parts = [f"runs {exp.runs} step(s)"]
    if exp.fired:
        parts.append(f"vLLM's assert for {exp.fired[0]} fires at step {exp.fired[1]}")
    if exp.violations:
        parts.append("violated at step(s) " + ", ".join(str(v) for v in exp.violations))
    if exp.dropped:
        parts.append(f"the clamp drops {exp.dropped} token(s)")
    if exp.completed:
        parts.append("a request completes")
    if not exp.fired and not exp.violations:
        parts.append("no violation")
    return "; ".join(parts)


__all__ = ["CaseError", "CaseSource", "LEGEND", "build", "describe_expect"]
