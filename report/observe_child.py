"""Observe one vLLM tree: every generated case (each arm of the tree's profile) and the given traces.

The child process of `vllm-contract review` (one vLLM tree per process, started by
adapter/child.py): records what
the tree does whatever the model predicts (report/observe.py) and writes it as JSON.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from vllm_contract.spec.errors import ExitStatus, TargetUnavailable
from vllm_contract.spec.heartbeat import to_stderr

NAME = "observe"
STATUSES = {
    ExitStatus.OK: "observed and written",
    ExitStatus.COULD_NOT_RUN: "the observer failed (its traceback's last lines)",
    ExitStatus.TREE: "the tree does not load or cannot be driven",
}


def add_arguments(parser) -> None:
    parser.add_argument("--vllm", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--traces", type=Path)
    parser.add_argument("--cases", default="*")


def run(args) -> int:
    from vllm_contract.model.workers import die_with_parent
    from vllm_contract.report.observe import run_tree

    die_with_parent()  # a review that is stopped takes its observers with it
    traces = json.loads(args.traces.read_text()) if args.traces else []
    try:
        result = run_tree(args.vllm, traces, log=to_stderr, cases_pattern=args.cases)
    except TargetUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitStatus.TREE
    except Exception:  # the parent shows the traceback's last lines
        traceback.print_exc()
        return ExitStatus.COULD_NOT_RUN
    tmp = args.out.with_suffix(".partial")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(args.out)
    return ExitStatus.OK
