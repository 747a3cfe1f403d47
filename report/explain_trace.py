"""`vllm-contract explain --trace FILE`: which modelled mechanism a recorded trace is, or where it leaves the model.

A trace the monitor wrote (targets/monitor/core.py), or any ITF trace with a configuration,
is replayed on the model with the states it records compared at every step
(model/trace.py `judge`). When the model replays it and violates the recorded property at
its last step, the answer is the trace's class (model/bmc.py `mechanisms_of`, the
definition the prover's searches use), what each release does on the same picks, and
the generated cases of the same mechanism; for a liveness property (a hang the monitor
named), the model run on by itself from the last state must leave the same request behind.
When it does not, the answer is the step and the value where the recording and the model
part, and whose that is: where the tree departs from its release's model when the recording
says the code that ran is not the release as released (a file the model covers differs
from the release's, adapter/released.py: a local patch or a changed vLLM; a plugin vLLM
loads; a scheduler method from outside vLLM), else a finding about the model, unless the
recording says that requests outside the trace acted at that step or that the window
began after a request's admission (then the recording cannot decide it).
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from vllm_contract.adapter import released
from vllm_contract.codegen.case import arms_for, predict
from vllm_contract.codegen.cases import CaseError, config_from_meta, describe_expect, sentence_parts
from vllm_contract.model import hang
from vllm_contract.model.bmc import mechanisms_of
from vllm_contract.model.interpreter import Interpreter, args_for, nested
from vllm_contract.model.itf import read
from vllm_contract.model.trace import Replayed, Step, judge
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import ExitStatus, MalformedConfig, SpecError
from vllm_contract.spec.profiles import PROFILES
from vllm_contract.spec.properties import ASSERTS, PROPERTIES

REPO = Path(__file__).resolve().parent.parent
INDEX = REPO / "generated_tests" / "cases" / "README.md"


@dataclass
class Answer:
    path: str
    prop: str
    cfg: Config | None
    replay: Replayed
    status: int  # ExitStatus: OK (reproduced), FINDING (leaves the model), COULD_NOT_RUN (undecided)
    headline: str
    mechanisms: list[str] = field(default_factory=list)
    releases: list[tuple[str, list[str]]] = field(default_factory=list)  # arm -> describe_expect lines
    same: list[str] = field(default_factory=list)  # generated cases of the same mechanism
    lines: list[str] = field(default_factory=list)  # the steps, as far as the model went
    notes: list[str] = field(default_factory=list)
    inferred: list[str] = field(default_factory=list)  # faults the scheduler could not see, found here
    release: str = ""  # the answer's first line: the release it is for, and why


def _step_words(event: str, named: dict) -> str:
    picks = " ".join(f"{k}={v}" for k, v in named.items() if v not in (0, False, -1, [0], [False]) or k == "budget")
    return f"{event} {picks}".strip()


def same_mechanism(prop: str, runner_family: str, mechanisms: list[str], index: Path = INDEX) -> list[str]:
    """The committed generated cases that violate `prop` through exactly these mechanisms,
    on a runner of the same family (their index rows, read back)."""
    from vllm_contract.codegen.generate import INDEX_ROW

    if not index.is_file():
        return []
    out = []
    for line in index.read_text().splitlines():
        match = INDEX_ROW.match(line)
        if not match or match.group(2) != "violation":
            continue
        parts = sentence_parts(match.group(3))
        if parts is None or parts["property"] != prop or sorted(parts["mechanisms"]) != sorted(mechanisms):
            continue
        if parts["runner"].split("-")[0] == runner_family:
            out.append(f"generated_tests/cases/{match.group(1)}")
    return out


def infer_stale_slot_reads(cfg: Config, init: dict, steps: list, recorded: list) -> tuple[Config, list, list[str]]:
    """A V2 runner that sampled an admission step the model's rule discards: is it the
    stale-slot-read fault (the slot read as its previous occupant left it), which the
    scheduler cannot see? Each such first difference gets the fault's pick at that step for
    that request, while the replay then agrees further; returns the configuration, steps
    and what was added (nothing when it does not help)."""
    if not cfg.is_v2 or "stale-slot-read" in cfg.faults:
        return cfg, steps, []
    faulty = cfg.with_(faults=cfg.faults | {"stale-slot-read"}).validate()
    it = Interpreter(faulty)
    steps = [(e, dict(p)) for e, p in steps]
    added = []
    for _ in range(len(steps)):
        replay = judge(it, faulty, init, steps, recorded)
        where = replay.differs or ""
        if not where.startswith("state ") or "q_sampled[" not in where:
            break
        t = int(where.split()[1].rstrip(","))
        label = where.split(": ", 1)[1].split()[0]  # q_sampled[i][r]
        r = int(label.split("][")[1].rstrip("]"))
        event, picks = steps[t - 1]
        if event != "schedule" or picks.get("stale_read", [False] * cfg.requests)[r]:
            break
        picks["stale_read"] = list(picks.get("stale_read", [False] * cfg.requests))
        picks["stale_read"][r] = True
        added.append(f"step {t}: r{r}'s slot read stale")
    final = judge(it, faulty, init, steps, recorded)
    if added and final.left_at is None and not final.differs:
        return faulty, steps, added
    return cfg, steps, []


def recorded_release(meta: dict) -> tuple[str | None, str]:
    """The release a trace says it ran on, and where it says so: the monitor's record,
    else its configuration's profile (a historical profile is named as itself)."""
    release = (meta.get("monitor") or {}).get("release")
    if release:
        return release, "the release the monitor recorded, #meta.monitor.release"
    profile = (meta.get("config") or {}).get("profile")
    if isinstance(profile, str) and profile in PROFILES:
        prof = PROFILES[profile]
        if prof.historical:
            return profile, f"the trace's configuration, the historical profile {profile} of {prof.release}"
        return prof.release, "the trace's configuration, #meta.config.profile"
    return None, "the trace records no modelled release"


def departure(meta: dict, release: str | None) -> str:
    """Where the code that ran a recording is not vLLM `release` as released, as the monitor
    recorded it (#meta.monitor.code): files the model covers that differ, plugins vLLM
    loads, scheduler methods from outside vLLM; '' when it is the release, or unrecorded."""
    code = (meta.get("monitor") or {}).get("code")
    if not isinstance(code, dict) or release is None:
        return ""
    said = []
    files = code.get("files")
    if isinstance(files, dict):
        changed = released.departures(files, release)
        if changed:
            version = code.get("version", "?")
            said.append(
                f"its vllm/{', vllm/'.join(changed)} differ{'s' if len(changed) == 1 else ''} from vLLM {release} as "
                f"released (it declares {version}: a local patch, or a vLLM other than the release)"
            )
    plugins = code.get("plugins") or []
    if plugins:
        said.append("vLLM loads plugins from outside its package (" + "; ".join(map(str, plugins)) + ")")
    foreign = code.get("foreign_methods") or {}
    if foreign:
        said.append("the scheduler's " + ", ".join(f"{m} comes from {f}" for m, f in sorted(foreign.items())))
    return "; ".join(said)


def explain_trace(path: Path, release: str | None = None, every_release: bool = True) -> Answer:
    """The answer for one trace file, for the release it records (`release`, from
    --release, must be that one); SpecError (bad input) when it cannot be read, holds a
    malformed configuration, or names another release. `every_release=False` leaves out
    what the trace does on the other releases (a check that asks only whether the model
    reproduces it: the monitor's tests)."""
    meta, trace = read(path)
    if trace.kind != "violation":
        raise SpecError(f"{path}: explain --trace reads a violation (#meta violated), not a {trace.kind}")
    prop = trace.goal
    if prop not in PROPERTIES:
        raise SpecError(f"{path}: #meta names no known violated property ({prop!r})")
    if not isinstance(meta.get("config"), dict):
        raise SpecError(
            f"{path}: #meta has no 'config' record: explain --trace replays a trace on the configuration it "
            "records (the monitor writes it); `vllm-contract generate --trace FILE --config NAME` takes one by name"
        )
    recorded, where = recorded_release(meta)
    if release is not None and release != recorded:
        raise SpecError(
            f"{path}: --release {release} but the trace records {recorded or 'no release'} ({where}): a recording "
            "is explained on the release that ran it; drop --release"
        )
    first_line = f"for vLLM {recorded} ({where})" if recorded else f"for no modelled release ({where})"
    monitor = meta.get("monitor") or {}
    outside = {int(k): v for k, v in (monitor.get("outside") or {}).items()}
    notes = list(monitor.get("notes") or [])
    init = nested(trace.init)
    steps = [(s.event, nested(s.args)) for s in trace.steps]
    try:
        cfg = config_from_meta(meta)
    except MalformedConfig as exc:  # not a configuration at all: bad input, not a finding
        raise SpecError(f"{path}: #meta.config: {exc}") from None
    except (CaseError, SpecError) as exc:
        why = str(exc)
        replay = Replayed(left_at=0, why=why)
        return Answer(
            str(path),
            prop,
            None,
            replay,
            ExitStatus.FINDING,
            f"the engine ran a configuration outside the model ({why}): a finding about the model's scope",
            notes=notes,
            release=first_line,
        )
    it = Interpreter(cfg)
    replay = judge(it, cfg, init, steps, trace.recorded)
    inferred: list[str] = []
    if replay.differs and "q_sampled[" in replay.differs:
        cfg2, steps2, inferred = infer_stale_slot_reads(cfg, init, steps, trace.recorded)
        if inferred:
            cfg, steps, it = cfg2, steps2, Interpreter(cfg2)
            replay = judge(it, cfg, init, steps, trace.recorded)
    answer = Answer(str(path), prop, cfg, replay, ExitStatus.OK, "", notes=notes, inferred=inferred, release=first_line)
    shown = replay.steps_run if replay.left_at is None else replay.left_at
    answer.lines = [f"  {n:>3}  {_step_words(e, p)}" for n, (e, p) in enumerate(steps[:shown], 1)]
    reproduced = replay.left_at is None and not replay.differs and prop in replay.violated
    if reproduced:
        flat_steps = [Step(e, args_for(it.event(e), cfg, p)) for e, p in steps]
        answer.mechanisms = mechanisms_of(cfg, flat_steps, replay.states)
        answer.same = same_mechanism(prop, cfg.run.family, answer.mechanisms)
        # a hang is shown by the engine run on from the last state: each release's prediction
        # plays the same run on (as a generated hang case does)
        more = hang.run_on(it, replay.states[-1]) if every_release and PROPERTIES[prop].hangs and replay.stuck else []
        arms = arms_for(cfg.profile, False, "none", cfg.on_vllm_v1, cfg.run.releases) if every_release else {}
        for label, overrides in arms.items():
            if overrides["clamp"]:
                continue
            exp = predict(prop, cfg.with_(**overrides).validate(), init, steps + list(more), len(more))
            answer.releases.append((label, describe_expect(exp, prop, label)))
        how = ", ".join(answer.mechanisms) or "the core path (schedule and deliver only)"
        origin = "an injected fault the scheduler could not see" if inferred else "vLLM's own events"
        if any(m in cfg.faults for m in answer.mechanisms):
            faults = [m for m in answer.mechanisms if m in cfg.faults]
            origin = "a runner fault (" + ", ".join(m for m in faults if m != "under-drain") + ")"
            if "lost-sample" in faults:
                origin = origin.replace(
                    "lost-sample",
                    "lost-sample: the output handed over lacks a token the runner sampled, a pending async result "
                    "lost, the tpu-inference #2833 report",
                )
            if "under-drain" in faults:  # not the runner's: a rewrite of the output update_from_output reads
                origin = (
                    "a plugin's rewrite of the scheduler output (under-drain: the counts update_from_output reads "
                    "fall short of what was scheduled, the tpu-inference #3492 class)"
                    + (", and " + origin if len(faults) > 1 else "")
                )
        fired = replay.fired[0] if replay.fired else None
        reaction = f"crash: `{ASSERTS[fired].statement}` fires" if fired else "silent: no assert fires"
        if not fired and PROPERTIES[prop].hangs and replay.stuck:
            reaction = f"hang: no assert fires and the engine, run on by itself, leaves {hang.short(replay.stuck)}"
        answer.headline = (
            f"the recorded trace is {how} ({origin}), violating {prop} at step {len(steps)} on "
            f"{cfg.prof.release}: {reaction}; the model reproduces every value the monitor recorded"
        )
        return answer
    # where it leaves the model, and whether the recording can decide that
    at = replay.left_at if replay.left_at is not None else _state_step(replay.differs)
    if replay.left_at is not None:
        where = f"the model refuses step {replay.left_at}" + (
            f" ({_step_words(*steps[replay.left_at - 1])})" if 0 < replay.left_at <= len(steps) else ""
        )
        where += f": {replay.why}"
    elif replay.differs:
        where = f"the model replays it with other values: {replay.differs}"
    else:
        where = f"the model replays every step without violating {prop} at the last one (it violates: " + (
            ", ".join(replay.violated) or "nothing"
        )
        where += ")"
    undecided = []
    if at is not None and at in outside:
        undecided.append(f"{outside[at]} request(s) outside the trace were scheduled in step {at}")
    undecided += [n for n in notes if "before the window" in n]
    if undecided:
        answer.status = ExitStatus.COULD_NOT_RUN
        answer.headline = (
            f"the recorded trace leaves the model: {where}; the recording cannot decide whether that is "
            f"the model's: {'; '.join(undecided)}"
        )
    else:
        answer.status = ExitStatus.FINDING
        departs = departure(meta, recorded)
        if departs:
            answer.headline = (
                f"the recorded trace leaves the model: {where}. The code that ran it is not vLLM {recorded} as the "
                f"model has it: {departs}. This is where that tree departs from the {recorded} model, not a finding "
                "about the model"
            )
        else:
            answer.headline = f"the recorded trace leaves the model: {where}. This is a finding about the model"
    return answer


def _state_step(differs: str | None) -> int | None:
    if not differs or not differs.startswith("state "):
        return None
    return int(differs.split()[1].rstrip(","))


def render(a: Answer) -> str:
    out = [a.release] if a.release else []
    out += textwrap.wrap(a.headline, 100, break_on_hyphens=False)
    if a.inferred:
        out += ["", "NOT SEEN BY THE SCHEDULER, FOUND HERE (the model's stale-slot-read fault):"]
        out += [f"  {line}" for line in a.inferred]
    if a.cfg is not None:
        c = a.cfg
        out += [
            "",
            f"THE TRACE: {a.path}",
            f"  configuration {c.name}: runner {c.runner}, events {', '.join(sorted(c.events)) or 'none'}, "
            f"faults {', '.join(sorted(c.faults)) or 'none'}, {c.requests} request(s), pp {c.pp}, "
            f"{c.spec_tokens} draft token(s), block size {c.block_size}",
            f"  steps, as far as the model replays them ({len(a.lines)}):",
            *a.lines,
        ]
    if a.notes:
        out += ["", "WHAT THE RECORDING COULD NOT RECONSTRUCT:"] + [f"  - {n}" for n in a.notes]
    if a.releases:
        out += ["", "THE SAME PICKS ON EVERY RELEASE (the model's prediction):"]
        for label, lines in a.releases:
            out.append(f"  {label:<22}{lines[0]}")
            out += [f"  {'':<22}{line}" for line in lines[1:-1]]
    if a.status == ExitStatus.OK:
        out += ["", f"THE SAME MECHANISM IN THE GENERATED SUITES ({len(a.same)}):"]
        out += [f"  {m}" for m in a.same] or ["  none: generate one with the line below"]
        out += ["", f"A TEST OF THIS RELEASE'S SCHEDULER: vllm-contract generate --trace {a.path}"]
    return "\n".join(out)


def as_json(a: Answer) -> dict:
    return {
        "for": a.release,
        "answer": a.headline,
        "status": int(a.status),
        "property": a.prop,
        "config": a.cfg.record() if a.cfg is not None else None,
        "mechanisms": a.mechanisms,
        "inferred": a.inferred,
        "left_at": a.replay.left_at,
        "why": a.replay.why,
        "differs": a.replay.differs,
        "releases": {label: lines for label, lines in a.releases},
        "same_mechanism": a.same,
        "notes": a.notes,
    }


def dumps(a: Answer) -> str:
    return json.dumps(as_json(a), indent=1)
