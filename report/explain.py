"""Which mechanisms can produce the counters an operator saw: parsing them, running the matrix, the answer's text.

`vllm-contract explain` (vllm_contract/commands/explain.py) is the command; the solving
for one configuration is model/explain.py.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
import re
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from vllm_contract.model.explain import ALIASES, BUDGET_S, COUNTERS, Answer, accepted_names, explain_config
from vllm_contract.spec.config import FAULTS
from vllm_contract.spec.errors import BadInput, SpecError
from vllm_contract.spec.profiles import release_order
from vllm_contract.spec.user_input import MIB, loads, whole_number
from vllm_contract.spec.verdicts import Fired, Reaction
from vllm_contract.spec.vocabulary import Status

COULD_NOT_RUN = "could not run"
MAX_COUNTER = 2**63 - 1  # a counter beyond a 64-bit integer is not a count a request reaches
MAX_COUNTERS_BYTES = 4 * MIB  # @FILE: a log line, a JSON object or a Request repr (its token lists included)


class InputError(SpecError):
    """Malformed counters: one line naming the field and the accepted names."""


# ------------------------------------------------------------------ reading the counters

# a Request's attributes that map onto counters: name -> (counter, how to read the value)
_REQUEST_LISTS = {
    "prompt_token_ids": "prompt",
    "_all_token_ids": "num_tokens",
    "all_token_ids": "num_tokens",
    "_output_token_ids": "output",
    "output_token_ids": "output",
    "spec_token_ids": "drafts",
}
_STATUS_NAMES = {name: code for code, name in Status.NAMES.items()}


def _status(value) -> int:
    text = str(value).split(".")[-1].split(":")[0].strip("<> '\"").upper()
    if text in _STATUS_NAMES:
        return _STATUS_NAMES[text]
    if text.startswith("FINISHED"):
        return Status.FINISHED
    if text == "WAITING_FOR_REMOTE_KVS" or text == "WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR":
        return Status.WAITING
    raise InputError(
        f"field 'status': unknown status {value!r}; use one of {', '.join(_STATUS_NAMES)} (or any FINISHED_*)"
    )


def _value(name: str, raw):
    counter = COUNTERS[name]
    if counter.kind == "status":
        return _status(raw)
    if counter.kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise InputError(f"field {name!r}: expected True or False, got {raw!r}")
    if isinstance(raw, bool):
        raise InputError(f"field {name!r}: expected a whole number, got {raw!r}")
    number = raw if isinstance(raw, int) else whole_number(raw.strip()) if isinstance(raw, str) else None
    if number is None:
        raise InputError(f"field {name!r}: expected a whole number in ASCII digits (e.g. -1, 8448), got {raw!r}")
    if abs(number) > MAX_COUNTER:
        raise InputError(
            f"field {name!r}: {number} is beyond what a 64-bit integer holds (±{MAX_COUNTER}), not a count a "
            "request reaches: check the value"
        )
    return number


def _canonical(fields: dict, lenient: bool) -> tuple[dict, list[str]]:
    """Counter values by canonical name; the ignored attributes (lenient: a Request's)."""
    out, ignored = {}, []
    for key, raw in fields.items():
        name = key.strip()
        if name in _REQUEST_LISTS and isinstance(raw, (list, tuple)):
            raw, name = len(raw), _REQUEST_LISTS[name]
        name = ALIASES.get(name, name)
        if name not in COUNTERS:
            if lenient:
                ignored.append(key)
                continue
            raise InputError(f"unknown field {key!r}; accepted: {accepted_names()}")
        value = _value(name, raw)
        if name in out and out[name] != value:
            raise InputError(f"field {name!r} given twice with different values ({out[name]!r}, {value!r})")
        out[name] = value
    if not out:
        raise InputError(f"no counter given; accepted: {accepted_names()}")
    return out, ignored


def _enum_free(text: str) -> str:
    """A repr with vLLM's enums (<RequestStatus.RUNNING: 2>, RequestStatus.RUNNING) as strings."""
    text = re.sub(r"<(\w+)\.(\w+): [^>]*>", r"'\2'", text)
    return re.sub(r"\b(RequestStatus)\.(\w+)\b", r"'\2'", text)


def _dict_literal(text: str) -> dict:
    """A Python dict's repr (vars(request) printed), each key once."""
    unreadable = InputError("the counters look like a JSON object or a dict but do not parse as one")
    try:
        node = ast.parse(_enum_free(text), mode="eval").body
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        raise unreadable from None
    if isinstance(node, ast.Dict):
        keys = [key.value for key in node.keys if isinstance(key, ast.Constant)]
        twice = next((key for i, key in enumerate(keys) if key in keys[:i]), None)
        if twice is not None:
            raise InputError(f"field {twice!r} given twice")
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        raise unreadable from None


def parse(text: str) -> tuple[dict, list[str], str]:
    """(counter values, ignored attributes, the form read) from any accepted form."""
    text = text.strip()
    if not text:
        raise InputError(f"no counters given; accepted: {accepted_names()}")
    if text.startswith("{"):
        try:
            json.loads(text)
        except (ValueError, RecursionError):
            fields = _dict_literal(text)
        else:  # JSON, read strictly: each key once, numbers that are numbers
            fields = loads(text, "the counters")
        if not isinstance(fields, dict):
            raise InputError("the counters must be a JSON object")
        lenient = "request_id" in fields
        values, ignored = _canonical(fields, lenient)
        return values, ignored, "vars(Request)" if lenient else "JSON"
    call = re.match(r"^\w*Request\s*\(", text)
    if call:
        try:
            node = ast.parse(_enum_free(text), mode="eval").body
        except SyntaxError:
            raise InputError("the Request repr does not parse: expected Request(name=value, ...)") from None
        if not isinstance(node, ast.Call) or node.args:
            raise InputError("the Request repr must hold keyword fields only: Request(name=value, ...)")
        fields = {}
        for kw in node.keywords:
            if kw.arg in fields:
                raise InputError(f"field {kw.arg!r} given twice")
            try:
                fields[kw.arg] = ast.literal_eval(kw.value)
            except ValueError:
                fields[kw.arg] = ast.unparse(kw.value)  # an object repr: kept as text, ignored unless a counter
        values, ignored = _canonical(fields, True)
        return values, ignored, "Request repr"
    fields = {}
    for token in re.split(r"[\s,]+", text):
        if not token:
            continue
        if "=" not in token:
            raise InputError(f"{token!r} is not name=value; accepted names: {accepted_names()}")
        key, raw = token.split("=", 1)
        if key in fields:
            raise InputError(f"field {key!r} given twice")
        fields[key] = raw
    values, ignored = _canonical(fields, False)
    return values, ignored, "log line"


# ------------------------------------------------------------------ which release


@dataclass
class Scope:
    """The configurations explain answers for, and the answer's first line saying which
    release and why: the release the counters came from."""

    configs: list
    line: str
    every_release: bool = False  # --all-releases: each release's answer printed as it completes


def installed_release() -> tuple[str, str] | None:
    """The modelled release nearest the vLLM installed here, and why; None when no vLLM is."""
    from vllm_contract.adapter.tree import installed_version, nearest_release

    version = installed_version()
    return None if version is None else nearest_release(version)


def scope(matrix: list, named: list | None, releases: list[str] | None, every_release: bool) -> Scope:
    """--all-releases: the whole matrix (or the named configurations); --release R: R's;
    else the configurations named with --configs as they are; else the installed vLLM's
    release (its nearest modelled one). Never a silent default."""
    from vllm_contract.spec.profiles import RELEASE_NAMES

    others = f"another release: --release X.Y.Z ({', '.join(RELEASE_NAMES)}); every release: --all-releases"
    if every_release and releases:
        raise InputError("--all-releases and --release ask for different things: give one of them")
    if every_release:
        return Scope(
            matrix,
            "for every release of the matrix (--all-releases): each release's answer as it completes, "
            "then the whole matrix's",
            True,
        )
    if releases:
        chosen = of_releases(matrix, releases)
        return Scope(chosen, f"for vLLM {', '.join(releases)} (--release)")
    if named:
        shown = sorted({c.prof.release for c in matrix}, key=release_order)
        return Scope(matrix, f"for the {len(matrix)} configuration(s) named with --configs (vLLM {', '.join(shown)})")
    found = installed_release()
    if found is None:
        raise InputError(
            "which release crashed? no --release given and no vLLM installed here to take it from: "
            f"name it with --release X.Y.Z ({', '.join(RELEASE_NAMES)}), or ask --all-releases"
        )
    release, why = found
    return Scope(of_releases(matrix, [release]), f"for vLLM {release} (the installed vLLM: {why}; {others})")


def group_of(cfg) -> str:
    """The release a configuration answers for (a historical profile is its own)."""
    return cfg.profile if cfg.prof.historical else cfg.prof.release


def group_order(label: str) -> tuple:
    from vllm_contract.spec.profiles import RELEASE_NAMES

    return (0, release_order(label), "") if label in RELEASE_NAMES else (1, 0, label)


# ------------------------------------------------------------------ running the matrix


def of_releases(configs: list, releases: list[str]) -> list:
    """The configurations that model these releases (historical profiles alter a release
    on purpose: they are not one an operator runs)."""
    from vllm_contract.spec.profiles import RELEASE_NAMES

    unknown = [r for r in releases if r not in RELEASE_NAMES]
    if unknown:
        raise InputError(
            f"--release {' '.join(unknown)}: not a modelled release; use one of {', '.join(RELEASE_NAMES)}"
        )
    chosen = [c for c in configs if not c.prof.historical and c.prof.release in releases]
    if not chosen:
        raise InputError(f"--release {' '.join(releases)}: none of the chosen configurations models it")
    return chosen


def _worker(cfg, values, max_depth, timeout_s, budget_s) -> Answer:
    """One configuration's answer; one that raises is could-not-run with its cause (the
    other configurations still answer)."""
    started = time.perf_counter()
    try:
        return explain_config(cfg, values, max_depth, timeout_s, budget_s)
    except Exception as exc:  # reported as this configuration's outcome
        cause = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no message'}"
        return Answer(cfg.name, COULD_NOT_RUN, time.perf_counter() - started, cause)


def run(
    configs: list,
    values: dict,
    jobs: int,
    max_depth: int,
    timeout_s: float,
    budget_s: float = BUDGET_S,
    log=print,
    on_group=None,
) -> list[Answer]:
    """explain_config for every configuration, each in a fresh process (Z3's answers
    follow its history), heaviest first; a line per configuration as it finishes.
    Configurations with the same model (0.31.0 and 0.32.0 agree in every modelled
    mechanism) are solved once: the others get that answer, said so in theirs.
    `on_group(release, answers)`: the configurations are solved a release after
    another (oldest first, historical profiles last), and each release's answers are
    handed over as soon as its last one is in."""
    from vllm_contract.model.prove import cost
    from vllm_contract.model.workers import run_isolated

    models: dict[str, list] = {}
    for cfg in configs:
        models.setdefault(json.dumps(cfg.semantics(), sort_keys=True), []).append(cfg)
    first = (lambda cfg: group_order(group_of(cfg))) if on_group is not None else (lambda cfg: ())
    solved = sorted((same[0] for same in models.values()), key=lambda cfg: (first(cfg), -cost(cfg)))
    sharing = {same[0].name: same[1:] for same in models.values()}
    waiting: dict[str, set] = {}
    for cfg in configs:
        waiting.setdefault(group_of(cfg), set()).add(cfg.name)
    done = [0]

    def line(a: Answer) -> None:
        done[0] += 1
        what = {
            "reached": f"reached in {a.depth} step(s), {a.fired}",
            "unreachable": "proved unreachable",
            "unknown": "unknown",
            COULD_NOT_RUN: f"COULD NOT RUN ({a.how})",
        }[a.verdict]
        when = f"the model of {a.same_as}" if a.same_as else f"{a.seconds:5.1f} s"
        log(f"[{done[0]:>2}/{len(configs)}] {a.config:<34} {what:<52} {when}")

    answers: list[Answer] = []
    by_config = {cfg.name: cfg for cfg in configs}

    def arrived(a: Answer) -> None:
        answers.append(a)
        line(a)
        label = group_of(by_config[a.config])
        waiting[label].discard(a.config)
        if on_group is not None and not waiting[label]:
            on_group(label, [x for x in answers if group_of(by_config[x.config]) == label])

    def show(i: int, a: Answer) -> None:
        arrived(a)
        for other in sharing[a.config]:
            arrived(shared(a, other))

    run_isolated(
        _worker,
        [(cfg, values, max_depth, timeout_s, budget_s) for cfg in solved],
        jobs,
        ["vllm_contract.model.explain"],
        show,
    )
    by_name = {a.config: a for a in answers}
    return [by_name[c.name] for c in configs]


def shared(a: Answer, cfg) -> Answer:
    """The answer of a configuration with the same model, as cfg's own: its name on the
    trace, cfg (or cfg's concrete instance of the same size) as where it runs."""
    from vllm_contract.model.check import concrete_instances

    instance = trace = None
    if a.instance is not None:
        instance = next(i for i in concrete_instances(cfg) if i.requests == a.instance.requests)
    if a.trace is not None:
        trace = copy.deepcopy(a.trace)
        trace.config = cfg.name
    return dataclasses.replace(
        a,
        config=cfg.name,
        seconds=0.0,
        how=f"{a.how} (answered once for {a.config}, whose model is the same)",
        trace=trace,
        instance=instance,
        mechanisms=list(a.mechanisms),
        same_as=a.config,
    )


# ------------------------------------------------------------------ ranking and links


def group_key(a: Answer) -> tuple:
    return tuple(sorted(a.mechanisms))


def rank(answers: list[Answer], cfgs: dict) -> list[dict]:
    """Mechanism groups of the reaching answers, most plausible first: a mechanism some
    current release has before one only a historical profile has, vLLM's own events
    before an injected fault, fewer steps, then more configurations."""
    groups: dict[tuple, list[Answer]] = {}
    for a in answers:
        if a.verdict == "reached":
            groups.setdefault(group_key(a), []).append(a)
    out = []
    for key, members in groups.items():
        historical = all(cfgs[a.config].prof.historical for a in members)
        fault = any(m in FAULTS for m in key)
        out.append(
            {
                "mechanisms": list(key),
                "answers": sorted(members, key=lambda a: (a.depth, a.config)),
                "historical": historical,
                "fault": fault,
                "depth": min(a.depth for a in members),
            }
        )
    out.sort(key=lambda g: (g["historical"], g["fault"], g["depth"], -len(g["answers"]), g["mechanisms"]))
    return out


def _releases(answers: list[Answer], cfgs: dict) -> str:
    names = sorted({(a.instance or cfgs[a.config]).prof.release for a in answers}, key=release_order)
    return ", ".join(names)


def _reaction(answers: list[Answer]) -> str:
    crashes = sorted({a.fired.assert_name for a in answers if a.fired is not None and a.fired.assert_name})
    others = {(a.fired or Fired()).reaction for a in answers} - {Reaction.CRASH}
    parts = [f"crash ({', '.join(crashes)})"] if crashes else []
    return " or ".join(parts + [r.value for r in (Reaction.HANG, Reaction.SILENT) if r in others])


def headline(answers: list[Answer], cfgs: dict) -> str:
    """The answer in one line: the most plausible mechanism (rank's first), where and
    how vLLM reacts, and how many others can also produce the counters."""
    groups = rank(answers, cfgs)
    if not groups:
        proved = sum(a.verdict == "unreachable" for a in answers)
        open_ = len(answers) - proved
        return f"no configuration reaches these counters: {proved} proved unreachable" + (
            f", {open_} without an answer (unknown or could not run: not a no)" if open_ else ""
        )
    first = groups[0]
    label = ", ".join(first["mechanisms"]) or "the core path (schedule and deliver only)"
    origin = "an injected fault" if first["fault"] else "vLLM's own events"
    if first["historical"]:
        origin += ", a historical profile only"
    others = len(groups) - 1
    return (
        f"most likely: {label} ({origin}; vLLM {_releases(first['answers'], cfgs)}; "
        f"{first['depth']} step(s); {_reaction(first['answers'])}); "
        f"{others} other mechanism(s) can also produce these counters"
    )


# what an operator can do now, each with the setting or class and what it costs; which
# configurations of the run stand for it (their answers are the evidence shown)
MITIGATIONS = (
    (
        "the step-reservation guard",
        lambda cfg: cfg.guard == "step-reservation",
        "`--scheduler-cls vllm_contract.adapter.guard_scheduler.GuardAsyncScheduler` with this package "
        "installed (or adapter/guard_scheduler.py copied onto PYTHONPATH: it imports nothing of ours; or the "
        "patch, fixes/step-reservation-guard/vllm-<release>.patch); "
        "it drops only tokens the runner returned beyond what the step reserved, warns once and logs each drop "
        "at debug level",
    ),
    (
        "the V1 model runner",
        lambda cfg: cfg.runner == "v1" and not cfg.clamp and cfg.guard == "none",
        "`VLLM_USE_V2_MODEL_RUNNER=0` (the seed's own workaround): V1 decides a prefill chunk against the live "
        "token count, not V2's prefill_len snapshot; it gives up what Model Runner V2 brings",
    ),
    (
        "the seed's clamp",
        lambda cfg: cfg.clamp,
        "the total-placeholder clamp of the seed PR (adapter/clamp_scheduler.py as a scheduler_cls): it keeps "
        "a stray token under a placeholder reserved for a later step, and with two or more drafts the counter "
        "still reaches -1",
    ),
)


def mitigations(answers: list[Answer], cfgs: dict) -> list[str]:
    """What to do now: each mitigation, and what this run says of it (its configurations'
    verdicts on these counters)."""
    out = []
    for name, stands_for, how in MITIGATIONS:
        mine = [a for a in answers if stands_for(a.instance or cfgs[a.config])]
        if not mine:
            continue
        counts = {v: sorted(a.config for a in mine if a.verdict == v) for v in ("unreachable", "reached")}
        rest = len(mine) - len(counts["unreachable"]) - len(counts["reached"])
        evidence = f"proved unreachable in {len(counts['unreachable'])} of its {len(mine)} configuration(s)"
        if counts["reached"]:
            faulty = {a.config for a in mine if a.verdict == "reached" and any(m in FAULTS for m in a.mechanisms)}
            shown = [c + (" (an injected fault)" if c in faulty else "") for c in counts["reached"]]
            evidence += f"; REACHED in {', '.join(shown)}"
        if rest:
            evidence += f"; {rest} without an answer (not a no)"
        out.append(f"{name}: {how}. Here: {evidence}.")
    return out


def links(prove_dir: Path, report_dir: Path) -> tuple[dict, str]:
    """config -> [(property, mechanisms, test module, page)] from the prover's results;
    and a note when they cannot be read."""
    try:
        from vllm_contract.model.results import load_summary
        from vllm_contract.report.data import counterexamples

        cxs = counterexamples(load_summary(prove_dir), prove_dir)
    except BadInput as exc:
        return {}, f"no links to tests and pages: {exc}"
    out: dict = {}
    for c in cxs:
        page = report_dir / c.page
        out.setdefault(c.cfg.name, []).append(
            (
                c.prop,
                sorted(c.trace.mechanisms),
                c.module.path if c.module else None,
                str(page) if page.is_file() else None,
            )
        )
    note = "" if (report_dir / "index.md").is_file() else f"no report pages under {report_dir}: run `make report`"
    return out, note


def steps_text(a: Answer, cfg) -> list[str]:
    from vllm_contract.report.story import picks

    trace = a.trace
    init = ", ".join(
        f"r{r}: prompt {n}" for r, n in enumerate([trace.init[k] for k in sorted(trace.init) if k[0] == "prompt_len"])
    )
    lines = [f"      init      {init}"]
    for t, step in enumerate(trace.steps):
        lines.append(f"      {t + 1:>2} {step.event:<18} {picks(cfg, step.event, step.args)}")
    return lines


def traces_to_write(answers: list[Answer], cfgs: dict) -> dict[str, dict]:
    """Each reaching trace as an ITF document (file name -> document), for those whose
    last step violates a property: such a trace is a counterexample codegen can turn into
    a test."""
    from vllm_contract.model.interpreter import Interpreter
    from vllm_contract.model.itf import to_itf
    from vllm_contract.spec.properties import ASSERTS, PROPERTIES

    written = {}
    for a in answers:
        if a.verdict != "reached":
            continue
        cfg = a.instance or cfgs[a.config]
        trace = a.trace
        props = Interpreter(cfg).state_properties(trace.states[-1])
        # the property the firing assert reports first, then the state's, then the step's
        broken = [ASSERTS[a].property for a in (trace.fired[-1] if trace.fired else [])]
        broken += [p for p, ok in props.items() if not ok and PROPERTIES[p].applies(cfg)]
        broken += [p for p, ok in trace.checks[-1].items() if not ok] if trace.checks else []
        if not broken:
            continue
        trace.kind, trace.goal = "violation", broken[0]
        description = f"explain: reaches the operator's counters and violates {broken[0]}"
        written[f"{a.config}.itf.json"] = to_itf(trace, cfg.record(), description)
    return written


def budget_note(answers: list[Answer], cfgs: dict) -> str:
    """What the time budget did to this answer, in a line ("" when nothing): the answer
    found only at the edge of its budget, configurations that ran out of it."""
    groups = rank(answers, cfgs)
    parts = []
    if groups and all(a.edge for a in groups[0]["answers"]):
        worst = max(groups[0]["answers"], key=lambda a: a.seconds)
        parts.append(
            f"this answer was found at the edge of its budget ({worst.config}, {worst.seconds:.1f} s): on a "
            "busier host it may not come (raise --budget to be sure)"
        )
    spent = [a for a in answers if a.out_of_budget]
    if spent:
        parts.append(
            f"{len(spent)} configuration(s) ran out of their budget (unknown, not a no: a mechanism only they "
            "reach is not in this answer; raise --budget)"
        )
    return "note: " + "; ".join(parts) if parts else ""


def render(
    values: dict,
    answers: list[Answer],
    cfgs: dict,
    link_map: dict,
    note: str,
    written: dict,
    seconds: float,
    jobs: int,
    first_line: str = "",
) -> str:
    out = [first_line] if first_line else []
    out.append(headline(answers, cfgs))
    if budget_note(answers, cfgs):
        out.append(budget_note(answers, cfgs))
    out += ["", "WHAT TO DO NOW (each mitigation, and what this run says of it):"]
    for line in mitigations(answers, cfgs) or ["no configuration of this run stands for a mitigation"]:
        out += textwrap.wrap(line, 100, initial_indent="  - ", subsequent_indent="    ", break_on_hyphens=False)
    out += ["", "THE COUNTERS, as the spec names them:"]
    for name, value in values.items():
        shown = Status.NAMES[value] if COUNTERS[name].kind == "status" else value
        out.append(f"  {name:<14} = {str(shown):<8} {COUNTERS[name].meaning}")
    reached = sorted([a for a in answers if a.verdict == "reached"], key=lambda a: (a.depth, a.config))
    proved = [a for a in answers if a.verdict == "unreachable"]
    unknown = [a for a in answers if a.verdict == "unknown"]
    failed = [a for a in answers if a.verdict == COULD_NOT_RUN]
    out += [
        "",
        f"REACHED by {len(reached)} configuration(s), shortest first "
        "(the last state has exactly these counters for request r):",
    ]
    for a in reached:
        cfg = a.instance or cfgs[a.config]
        via = ", ".join(a.mechanisms) or "core path"
        out.append(
            f"  {a.config}: {a.depth} step(s), r{a.request}, via {via}; vLLM "
            f"{cfg.prof.release if not cfg.prof.historical else cfg.profile}: "
            f"{'CRASH (' + a.fired.assert_name + ')' if a.fired.assert_name else a.fired.reaction.value}"
        )
        out += steps_text(a, cfg)
        if a.config in written:
            out.append(f"      trace: {written[a.config]}")
    out += ["", f"PROVED UNREACHABLE in {len(proved)} configuration(s):"]
    for a in proved:
        out.append(f"  {a.config}: {a.how}")
    out += ["", f"UNKNOWN in {len(unknown)} configuration(s) (not a no):"]
    for a in unknown:
        out.append(f"  {a.config}: {a.how}")
    if failed:
        out += ["", f"COULD NOT RUN in {len(failed)} configuration(s) (no answer, not a no):"]
        causes: dict[str, list[str]] = {}
        for a in failed:
            causes.setdefault(a.how, []).append(a.config)
        for cause, names in causes.items():
            out.append(f"  {cause} ({len(names)}: {', '.join(names)})")
    out += [
        "",
        "MECHANISMS, most plausible first (a current release before a historical profile, vLLM's own "
        "events before an injected fault, fewer steps, more configurations):",
    ]
    for i, g in enumerate(rank(answers, cfgs), 1):
        label = ", ".join(g["mechanisms"]) or "core path (schedule and deliver only)"
        tags = [t for t, on in (("historical", g["historical"]), ("fault", g["fault"])) if on]
        names = ", ".join(a.config for a in g["answers"])
        out.append(f"  {i}. {label}{' [' + ', '.join(tags) + ']' if tags else ''}: {g['depth']} step(s); {names}")
        seen = set()
        for a in g["answers"]:
            for prop, mech, module, page in link_map.get(a.config, []):
                if mech != g["mechanisms"] or (module, page) in seen:
                    continue
                seen.add((module, page))
                out.append(f"       {prop}: test {module or '(none generated)'}" + (f"; page {page}" if page else ""))
    if note:
        out.append(f"  ({note})")
    out += [
        "",
        f"{len(answers)} configuration(s) in {seconds:.1f} s on {jobs} worker(s) "
        f"({sum(a.cpu for a in answers):.1f} CPU s): {len(reached)} reach the "
        f"counters, {len(proved)} proved unreachable, {len(unknown)} unknown"
        + (f", {len(failed)} could not run" if failed else "")
        + (
            f"; {same} share the answer of a configuration with the same model"
            if (same := sum(1 for a in answers if a.same_as))
            else ""
        ),
    ]
    return "\n".join(out)


def answers_json(values: dict, answers: list[Answer], cfgs: dict, first_line: str = "") -> dict:
    """The answer as data (answers.json, --json): which release and why, the one-line
    answer, the mechanisms ranked, the counters, and per configuration its verdict."""
    return {
        "for": first_line,
        "answer": headline(answers, cfgs),
        "note": budget_note(answers, cfgs),
        "mechanisms": [
            {
                "mechanisms": g["mechanisms"],
                "fault": g["fault"],
                "historical": g["historical"],
                "steps": g["depth"],
                "configs": [a.config for a in g["answers"]],
            }
            for g in rank(answers, cfgs)
        ],
        "mitigations": mitigations(answers, cfgs),
        "counters": values,
        "answers": [
            {
                "config": a.config,
                "verdict": a.verdict,
                "how": a.how,
                "depth": a.depth,
                "request": a.request,
                "reaction": str(a.fired) if a.fired is not None else "",
                "mechanisms": a.mechanisms,
                "edge": a.edge,
            }
            for a in answers
        ],
    }
