"""The generated cases against one vLLM tree that carries a fix natively: one run of fix-check.

The child process of `vllm-contract fix-check` (one vLLM tree per process, started by
adapter/child.py); see fixes/arms.py.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import sys
import time
from pathlib import Path

from vllm_contract.spec.errors import ExitStatus, TargetUnavailable

NAME = "fix-arm"
STATUSES = {
    ExitStatus.OK: "the expectation is met",
    ExitStatus.FINDING: "it is not",
    ExitStatus.TREE: "the tree or the target cannot run (no arm ran)",
}


def add_arguments(parser) -> None:
    parser.add_argument("check", choices=("guard", "rollback"))
    parser.add_argument("--vllm", required=True, help="0.32.0, 0.33.0 or a patched tree (with VLLM_PROFILE)")
    parser.add_argument("--expect", choices=("fixed", "control", "minus"), default="fixed")
    parser.add_argument("--json", type=Path, default=None, help="write the per-arm results here")
    parser.add_argument(
        "--cases", default=None, help="only the cases whose name matches one of these comma-separated globs"
    )
    parser.add_argument(
        "--import",
        dest="modules",
        default="",
        help="comma-separated modules of the tree to import first (the ones a patch touches): "
        "one that does not import stops the run",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="a line per arm")


def import_modules(names: list[str]) -> dict:
    """Import each module from the loaded tree; {module: its file}, and the fields of
    SchedulerOutput (what a patch adds there). Raises TargetUnavailable, one line."""
    import importlib

    files = {}
    for name in names:
        try:
            files[name] = importlib.import_module(name).__file__
        except Exception as exc:  # any failure of a patched module is the finding
            raise TargetUnavailable(f"{name} does not import from this tree: {type(exc).__name__}: {exc}") from None
    if not names:
        return {}
    from vllm_contract.adapter import objects

    return {"files": files, "scheduler_output_fields": objects.output_fields()}


def run(args) -> int:
    from vllm_contract.adapter import current as env
    from vllm_contract.fixes.arms import (
        check_guard,
        check_rollback,
        claimed,
        load_cases,
        native_guard_target,
        runner_target,
        summary,
        verdict,
    )
    from vllm_contract.model.workers import die_with_parent

    die_with_parent()  # a fix-check that is stopped takes its runs with it

    started = time.monotonic()
    try:
        tree = env.select(args.vllm)
        env.load()
        imported = import_modules([m for m in args.modules.split(",") if m])
        target = native_guard_target() if args.check == "guard" else runner_target()
    except TargetUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitStatus.TREE
    globs = args.cases.split(",") if args.cases else ["*"]
    cases = [c for c in load_cases() if any(fnmatch.fnmatchcase(c.name, g) for g in globs)]
    check = check_guard if args.check == "guard" else check_rollback
    results = check(cases, target, tree.profile)
    skipped = [r.detail for r in results if r.detail.startswith("skipped:")]
    if results and len(skipped) == len(results):
        print(f"error: {tree.title}: the target runs none of the {len(results)} arm(s): {skipped[0]}", file=sys.stderr)
        return ExitStatus.TREE
    ok, why = verdict(results, args.expect)
    counts = summary(results, args.check)
    seconds = round(time.monotonic() - started, 1)
    if args.verbose:
        for r in results:
            print(r.row())
    for r in results:  # a fix that does not hold in the model where it claims to
        if claimed(r, args.check):
            print(f"  the model: {r.case} [{r.arm}] still violates {', '.join(claimed(r, args.check))} with the fix")
    print(
        f"{args.check} on {tree.title} (profile {tree.profile}), expect {args.expect}: "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
        + f"; {seconds} s"
    )
    for line in why:
        print("  unexpected: " + line)
    print("OK" if ok else "NOT AS EXPECTED")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "check": args.check,
                    "tree": str(tree.root),
                    "label": tree.label,
                    "profile": tree.profile,
                    "expect": args.expect,
                    "ok": ok,
                    "seconds": seconds,
                    "summary": counts,
                    "imported": imported,
                    "results": [dataclasses.asdict(r) for r in results],
                },
                indent=2,
            )
            + "\n"
        )
    return ExitStatus.OK if ok else ExitStatus.FINDING
