"""Which mechanisms can produce the counters an operator saw: a shortest trace, a proof that none can, or unknown.

With --trace FILE instead of counters: which modelled mechanism a recorded trace (the
contract monitor's, targets/monitor/scheduler.py) is, or where it leaves the model
(report/explain_trace.py).

COUNTERS is one request's counters at the crash, in any of three forms:
  the seed's log line   placeholders=-1 new_tokens=1 computed=8448 num_tokens=9119 prompt=9118
                        output=1 prefill_chunk=True
  a JSON object         {"placeholders": -1, "computed": 8448, "prefill_chunk": true}
  a Request's repr      Request(request_id='r0', num_output_placeholders=-1, status=RequestStatus.RUNNING, ...)
                        or vars(request): attributes the model does not have are listed and ignored
(or @FILE holding one of them, a regular file of at most 4 MiB). It answers for the release
the counters came from, and its first line says which and why: --release R; else the
installed vLLM's release (the nearest modelled one); --all-releases answers every release,
each as it completes. For every configuration of that release in spec/matrix.py it
answers with a shortest trace that reaches a state with exactly those values, a proof
that no trace can, or "unknown" (never a no); then ranks the mechanisms that reach them,
with their generated tests and report pages. The budget is seconds per configuration
(proof and search together); an answer found at the edge of it says so. Each reaching trace that violates a property is
written as ITF under --out (`vllm-contract generate --trace FILE` makes it a test); the
answer is printed before anything is written, so a write that fails loses nothing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from vllm_contract.outfolder import OutFolder, interrupts, stopped
from vllm_contract.parsing import seconds, whole
from vllm_contract.spec.errors import ContractError, ExitStatus
from vllm_contract.spec.heartbeat import to_stderr
from vllm_contract.spec.user_input import read_text

NAME = "explain"
HELP = "which configurations reach an operator's counters (a log line, JSON or a Request repr)"
STATUSES = {
    ExitStatus.OK: "some configuration reaches the counters; --trace: the model reproduces the recorded violation "
    "(its mechanism is named)",
    ExitStatus.FINDING: "no configuration reaches them (each is proved unreachable or unknown); --trace: the "
    "recorded trace leaves the model (a finding about the model)",
    ExitStatus.BAD_INPUT: "bad input (a malformed counter: one line naming the field and the accepted names; a "
    "field given twice; a trace that cannot be read or holds a value of the wrong type; a file that is not a "
    "regular file or too large; no release given and no vLLM installed; both counters and --trace, or neither)",
    ExitStatus.COULD_NOT_RUN: "some configuration could not run (its cause is printed), or the reaching traces "
    "could not be written (the answer was printed); --trace: the trace leaves the model where the recording "
    "cannot decide it (requests outside the trace acted, or the window began after an admission)",
    ExitStatus.INTERRUPTED: "interrupted",
    ExitStatus.TERMINATED: "terminated",
}


def add_arguments(parser) -> None:
    from vllm_contract.model.explain import BUDGET_S, MAX_DEPTH, TIMEOUT_S

    parser.add_argument("counters", nargs="?", help="the log line, a JSON object, a Request repr, or @FILE")
    parser.add_argument(
        "--trace",
        type=Path,
        default=None,
        metavar="FILE",
        help="instead of counters: an ITF trace the contract monitor recorded (or any violation trace with its "
        "configuration): which modelled mechanism it is, or where it leaves the model",
    )
    parser.add_argument("--configs", nargs="*", default=None, help="configurations or scenarios (default: the matrix)")
    parser.add_argument(
        "--release",
        nargs="+",
        default=None,
        metavar="RELEASE",
        help="the vLLM release(s) the counters came from (default: the installed vLLM's; --trace: the release "
        "the trace records)",
    )
    parser.add_argument(
        "--all-releases",
        action="store_true",
        help="every release of the matrix (historical profiles too), each release's answer printed as it completes",
    )
    parser.add_argument("--jobs", type=whole(), default=min(2, os.cpu_count() or 1))
    parser.add_argument("--max-depth", type=whole(), default=MAX_DEPTH)
    parser.add_argument("--timeout", type=seconds, default=TIMEOUT_S, help="seconds per solver query")
    parser.add_argument(
        "--budget",
        type=seconds,
        default=BUDGET_S,
        help=f"seconds per configuration before the search stops deepening (default {BUDGET_S:g})",
    )
    parser.add_argument("--from", dest="prove_dir", type=Path, default=Path("build/prove"))
    parser.add_argument("--report", type=Path, default=Path("build/report"))
    parser.add_argument("--out", type=Path, default=Path("build/explain"))
    parser.add_argument("--json", action="store_true", help="print the answer as JSON (answers.json's content)")


def run(args) -> int:
    from vllm_contract.model.itf import write
    from vllm_contract.model.prove import import_matrix
    from vllm_contract.report import explain

    if (args.trace is None) == (args.counters is None):
        raise explain.InputError("give the counters or --trace FILE (one of them)")
    if args.trace is not None:
        return run_trace(args)
    text = args.counters
    if text.startswith("@"):
        text = read_text(text[1:], explain.MAX_COUNTERS_BYTES, "an explain input (counters)")
    values, ignored, form = explain.parse(text)
    chosen = explain.scope(import_matrix().by_name(args.configs or []), args.configs, args.release, args.all_releases)
    configs = chosen.configs
    folder = OutFolder(args.out, "vllm-contract explain", keep_previous=True)
    folder.check()  # an --out that is not ours is refused before the solving
    cfgs = {c.name: c for c in configs}

    # progress on stderr; stdout's first line says which release, the answer follows once it is known
    log = to_stderr

    if args.json:
        log(chosen.line)
    else:  # which release, and why: the answer's first line, at once
        print(chosen.line, flush=True)

    def release_done(label: str, answers: list) -> None:
        line = f"vLLM {label}" if label[:1].isdigit() else f"historical profile {label}"
        text = f"{line}: {explain.headline(answers, cfgs)}"
        print(text, file=sys.stderr if args.json else sys.stdout, flush=True)

    log(f"explain: one request's counters ({form}): {', '.join(f'{k}={v}' for k, v in values.items())}")
    if ignored:
        log(f"  ignored (not in the model): {', '.join(ignored)}")
    log(
        f"checking {len(configs)} configuration(s) on {args.jobs} worker(s), up to {args.max_depth} steps or "
        f"{args.budget:g} s each; a line per configuration as it finishes"
    )
    started = time.perf_counter()
    try:
        with interrupts():
            answers = explain.run(
                configs,
                values,
                args.jobs,
                args.max_depth,
                args.timeout,
                args.budget,
                log=log,
                on_group=release_done if chosen.every_release else None,
            )
    except KeyboardInterrupt as exc:
        return stopped(exc, "stopped, nothing written")
    except BrokenProcessPool as exc:
        print(f"error: a solver worker died ({exc}); no answer: rerun with fewer --jobs", file=sys.stderr)
        return ExitStatus.COULD_NOT_RUN
    elapsed = time.perf_counter() - started
    link_map, note = explain.links(args.prove_dir, args.report)
    documents = explain.traces_to_write(answers, cfgs)
    where = {name.removesuffix(".itf.json"): str(args.out / name) for name in documents}
    if args.json:
        print(json.dumps(explain.answers_json(values, answers, cfgs, chosen.line), indent=1))
    else:
        if chosen.every_release:
            print()
        print(explain.render(values, answers, cfgs, link_map, note, where, elapsed, args.jobs))
    sys.stdout.flush()
    status = ExitStatus.OK if any(a.verdict == "reached" for a in answers) else ExitStatus.FINDING
    if any(a.verdict == explain.COULD_NOT_RUN for a in answers):
        status = ExitStatus.COULD_NOT_RUN
    try:
        with interrupts():
            staging = folder.begin()
            for name, doc in documents.items():
                folder.adopt(name)
                write(staging / name, doc)
            folder.adopt("answers.json")
            document = explain.answers_json(values, answers, cfgs, chosen.line)
            (staging / "answers.json").write_text(json.dumps(document, indent=1) + "\n")
            folder.commit()
    except (KeyboardInterrupt, ContractError, OSError) as exc:
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
        print(f"error: the traces could not be written ({why}); {folder.failed_note()}", file=sys.stderr)
        return ExitStatus.COULD_NOT_RUN
    finally:
        folder.abort()
    return status


def run_trace(args) -> int:
    """explain --trace FILE: the answer printed, its status returned."""
    from vllm_contract.report import explain_trace
    from vllm_contract.report.explain import InputError

    if args.all_releases:
        raise InputError("--all-releases is for counters: explain --trace shows the same picks on every release")
    if args.release and len(args.release) > 1:
        raise InputError("--trace is explained on one release, the one it records: give at most one --release")
    answer = explain_trace.explain_trace(args.trace, args.release[0] if args.release else None)
    print(explain_trace.dumps(answer) if args.json else explain_trace.render(answer))
    return answer.status
