"""`make explain COUNTERS="..."`: which mechanisms can produce the counters an operator saw.

    python -m report.explain COUNTERS [--configs NAME ...] [--jobs N] [--max-depth D] [--timeout S]
                             [--from build/prove] [--report build/report] [--out build/explain]

COUNTERS is one request's counters at the crash, in any of three forms:
  the seed's log line   placeholders=-1 new_tokens=1 computed=8448 num_tokens=9119 prompt=9118
                        output=1 prefill_chunk=True
  a JSON object         {"placeholders": -1, "computed": 8448, "prefill_chunk": true}
  a Request's repr      Request(request_id='r0', num_output_placeholders=-1, status=RequestStatus.RUNNING, ...)
                        or vars(request): attributes the model does not have are listed and ignored
(or @FILE holding one of them). For every configuration of spec/matrix.py (runner,
events, faults, profile, clamp) it answers with a shortest trace that reaches a state
with exactly those values, a proof that no trace can, or "unknown" (never a no); then
ranks the mechanisms that reach them, with their generated tests and report pages.
Each reaching trace is written as ITF under --out (a trace whose last step violates a
property can become a regression test: `python -m codegen.generate --trace FILE`).

Exit 0 when some configuration reaches the counters, 1 when none does, 2 on bad input
(one line naming the field and the accepted names), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import ast
import json
import multiprocessing
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from model.explain import ALIASES, BUDGET_S, COUNTERS, MAX_DEPTH, TIMEOUT_S, Answer, accepted_names, explain_config
from spec.config import SpecError
from spec.vocabulary import Status

FAULTS = ("stale-slot-read", "over-delivery")


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
    if isinstance(raw, int):
        return raw
    try:
        return int(str(raw).strip())
    except ValueError:
        raise InputError(f"field {name!r}: expected a whole number, got {raw!r}") from None


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


def parse(text: str) -> tuple[dict, list[str], str]:
    """(counter values, ignored attributes, the form read) from any accepted form."""
    text = text.strip()
    if not text:
        raise InputError(f"no counters given; accepted: {accepted_names()}")
    if text.startswith("{"):
        try:
            fields = json.loads(text)
        except ValueError:
            try:
                fields = ast.literal_eval(_enum_free(text))
            except (ValueError, SyntaxError):
                raise InputError("the counters look like a JSON object or a dict but do not parse as one") from None
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


# ------------------------------------------------------------------ running the matrix


def _worker(cfg, values, max_depth, timeout_s, budget_s) -> Answer:
    return explain_config(cfg, values, max_depth, timeout_s, budget_s)


def run(
    configs: list, values: dict, jobs: int, max_depth: int, timeout_s: float, budget_s: float = BUDGET_S, log=print
) -> list[Answer]:
    """explain_config for every configuration, each in a fresh process (Z3's answers
    follow its history), heaviest first; a line per configuration as it finishes."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["model.explain"])
    answers: dict[str, Answer] = {}
    order = sorted(
        configs, key=lambda c: c.requests**2 * (2 + len(c.events) + len(c.faults)) * c.queue_depth, reverse=True
    )
    pool = ProcessPoolExecutor(max_workers=max(jobs, 1), mp_context=context, max_tasks_per_child=1)
    try:
        futures = {pool.submit(_worker, cfg, values, max_depth, timeout_s, budget_s): cfg for cfg in order}
        for n, future in enumerate(as_completed(futures), 1):
            a = future.result()
            answers[a.config] = a
            what = {
                "reached": f"reached in {a.depth} step(s), {a.reaction}",
                "unreachable": "proved unreachable",
                "unknown": "unknown",
            }[a.verdict]
            log(f"[{n:>2}/{len(configs)}] {a.config:<34} {what:<52} {a.seconds:5.1f} s")
    except BaseException:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [answers[c.name] for c in configs]


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


def links(prove_dir: Path, report_dir: Path) -> tuple[dict, str]:
    """config -> [(property, mechanisms, test module, page)] from the prover's results;
    and a note when they cannot be read."""
    try:
        from report.data import counterexamples, load_summary

        cxs = counterexamples(load_summary(prove_dir), prove_dir)
    except SpecError as exc:
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
    from report.story import picks

    trace = a.trace
    init = ", ".join(
        f"r{r}: prompt {n}" for r, n in enumerate([trace.init[k] for k in sorted(trace.init) if k[0] == "prompt_len"])
    )
    lines = [f"      init      {init}"]
    for t, step in enumerate(trace.steps):
        lines.append(f"      {t + 1:>2} {step.event:<18} {picks(cfg, step.event, step.args)}")
    return lines


def write_traces(answers: list[Answer], cfgs: dict, out: Path) -> dict[str, str]:
    """Each reaching trace as ITF (config -> path), for those whose last step violates a
    property: such a trace is a counterexample codegen can turn into a test."""
    from model.interpreter import Interpreter
    from model.itf import to_itf, write
    from spec.properties import ASSERTS, PROPERTIES

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
        path = out / f"{a.config}.itf.json"
        write(path, to_itf(trace, cfg.record(), f"explain: reaches the operator's counters and violates {broken[0]}"))
        written[a.config] = str(path)
    return written


def render(
    values: dict, answers: list[Answer], cfgs: dict, link_map: dict, note: str, written: dict, seconds: float, jobs: int
) -> str:
    out = []
    reached = sorted([a for a in answers if a.verdict == "reached"], key=lambda a: (a.depth, a.config))
    proved = [a for a in answers if a.verdict == "unreachable"]
    unknown = [a for a in answers if a.verdict == "unknown"]
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
            f"{'CRASH (' + a.reaction.split(': ', 1)[1] + ')' if a.reaction.startswith('crash') else 'silent'}"
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
        f"{len(answers)} configuration(s) in {seconds:.1f} s on {jobs} worker(s): {len(reached)} reach the "
        f"counters, {len(proved)} proved unreachable, {len(unknown)} unknown",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise InputError(f"{message} (see --help)")

    ap = Parser(prog="python -m report.explain", description=__doc__.split("\n\n")[0])
    ap.add_argument("counters", help="the log line, a JSON object, a Request repr, or @FILE")
    ap.add_argument("--configs", nargs="*", default=None, help="configurations or scenarios (default: the matrix)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--max-depth", type=int, default=MAX_DEPTH)
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per solver query")
    ap.add_argument(
        "--budget",
        type=float,
        default=BUDGET_S,
        help=f"seconds per configuration before the search stops deepening (default {BUDGET_S:g})",
    )
    ap.add_argument("--from", dest="prove_dir", type=Path, default=Path("build/prove"))
    ap.add_argument("--report", type=Path, default=Path("build/report"))
    ap.add_argument("--out", type=Path, default=Path("build/explain"))
    try:
        args = ap.parse_args(argv)
        text = args.counters
        if text.startswith("@"):
            try:
                text = Path(text[1:]).read_text()
            except OSError as exc:
                raise InputError(f"{text[1:]}: cannot be read ({exc.strerror})") from None
        values, ignored, form = parse(text)
        if args.jobs < 1 or args.max_depth < 1 or args.timeout <= 0 or args.budget <= 0:
            raise InputError("--jobs and --max-depth must be >= 1, --timeout and --budget > 0")
        from model.prove import import_matrix

        configs = import_matrix().by_name(args.configs or [])
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cfgs = {c.name: c for c in configs}
    print(f"explain: one request's counters ({form}), as the spec names them")
    for name, value in values.items():
        shown = Status.NAMES[value] if COUNTERS[name].kind == "status" else value
        print(f"  {name:<14} = {str(shown):<8} {COUNTERS[name].meaning}")
    if ignored:
        print(f"  ignored (not in the model): {', '.join(ignored)}")
    print(
        f"checking {len(configs)} configuration(s) on {args.jobs} worker(s), up to {args.max_depth} steps or "
        f"{args.budget:g} s each; a line per configuration as it finishes",
        flush=True,
    )
    started = time.perf_counter()
    try:
        answers = run(
            configs,
            values,
            args.jobs,
            args.max_depth,
            args.timeout,
            args.budget,
            log=lambda line: print(line, flush=True),
        )
    except KeyboardInterrupt:
        print("interrupted: stopped", file=sys.stderr)
        return 130
    seconds = time.perf_counter() - started
    link_map, note = links(args.prove_dir, args.report)
    written = write_traces(answers, cfgs, args.out)
    print(render(values, answers, cfgs, link_map, note, written, seconds, args.jobs))
    return 0 if any(a.verdict == "reached" for a in answers) else 1


if __name__ == "__main__":
    sys.exit(main())
