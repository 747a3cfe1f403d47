"""vLLM's own scheduler tests, from the release's hash-pinned sdist, on the release and on the patched tree.

The suites run twice per tree: as the CPU platform configures vLLM (Triton off, so the V1
model runner), and with Triton visible (interpreted), so that vLLM picks its model runner
as on a GPU (0.34.0 on: only the latter, since vLLM needs Triton on a CPU once its V1
runner is gone). Prints pass/fail/skip counts per tree and pass, what fails on the release
too, and every test whose outcome differs; writes build/fixes/<release>+<fix>/
vllm-tests.json and the JUnit files (fixes/vllm_tests.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

from vllm_contract.spec.errors import ExitStatus

NAME = "vllm-tests"
HELP = "vLLM's own scheduler tests on a release and on the release with a fix"
STATUSES = {
    ExitStatus.OK: "the patched tree fails nothing the release does not (and nothing in test_async_scheduler.py)",
    ExitStatus.FINDING: "it does",
    ExitStatus.BAD_INPUT: "the fix does not build, or the tests could not be had",
}


def add_arguments(parser) -> None:
    from vllm_contract.fixes.trees import FIXES, RELEASES

    parser.add_argument("fix", choices=FIXES)
    parser.add_argument("release", choices=RELEASES)
    parser.add_argument("--variant", default=None, help="the fix minus its key line instead of the fix")
    parser.add_argument("-k", dest="select", default=None, help="pytest -k expression (default: everything)")
    parser.add_argument("--cpu-only", action="store_true", help="skip the pass with Triton visible")


def run(args) -> int:
    from vllm_contract.fixes.trees import build, tree_name
    from vllm_contract.fixes.vllm_tests import (
        PASSES,
        REPO,
        SUITES_OF,
        FixError,
        compare,
        line,
        run_suites,
        unpack_tests,
    )
    from vllm_contract.spec import profiles

    try:
        patched_root = build(args.fix, args.release, args.variant)
        tests = unpack_tests(args.release)
    except subprocess.CalledProcessError as exc:
        raise FixError(f"the sdist of vLLM {args.release} could not be fetched ({exc})") from None
    out = REPO / "build" / "fixes" / tree_name(args.release, args.fix, args.variant)
    runs, problems, differs = {}, [], []
    print(f"vLLM {args.release}'s own tests, {tree_name(args.release, args.fix, args.variant)} vs the release:")
    passes = PASSES if not args.cpu_only else PASSES[:1]
    if not {p.release: p for p in profiles.RELEASES}[args.release].has_v1_runner:
        # 0.34.0 on: vLLM on a CPU needs Triton (the V1 runner that ran without it is gone);
        # the pass with Triton switched off would fail every test on both trees alike
        print(f"vllm-tests: vLLM {args.release} has no V1 runner and needs Triton on a CPU: only the Triton pass runs")
        if args.cpu_only:
            raise FixError(f"--cpu-only: vLLM {args.release} does not run on a CPU without Triton; leave it out")
        passes = [p for p in PASSES if p[1]]
    for suffix, env, suites in passes:
        suites = suites or SUITES_OF[args.fix]
        here = {}
        for label, tree in (("unpatched", args.release), ("patched", str(patched_root))):
            print(
                f"vllm-tests: {label}{suffix}: pytest on {len(suites)} suite(s) (a few minutes)",
                file=sys.stderr,
                flush=True,
            )
            here[label] = run_suites(
                tests, tree, args.release, out / f"vllm-tests-{label}{suffix}.xml", suites, args.select, env
            )
        print(f"  {', '.join(suites)}" + (f"  [{' '.join(f'{k}={v}' for k, v in env.items())}]" if env else ""))
        for label, run in here.items():
            print("    " + line(label, run))
            runs[label + suffix] = run
        for reason, n in sorted(here["patched"]["skip_reasons"].items(), key=lambda x: -x[1]):
            same = here["unpatched"]["skip_reasons"].get(reason) == n
            print(f"    skipped{' on both' if same else ' (patched)'}: {n}  {reason}")
        unpatched_failed = sorted(n for n, o in here["unpatched"]["outcomes"].items() if o in ("failed", "error"))
        for name in unpatched_failed:
            print(f"    fails on the release too: {name}")
        for d in compare(here["unpatched"], here["patched"]):
            print("    differs: " + d)
            differs.append(d + suffix)
        problems += [
            n + suffix
            for n, o in here["patched"]["outcomes"].items()
            if o in ("failed", "error")
            and (here["unpatched"]["outcomes"].get(n) not in ("failed", "error") or "test_async_scheduler" in n)
        ]
        for label, run in here.items():
            if run["exit"] not in (0, 1):
                print(f"    {label}: pytest exited {run['exit']}:\n{run['tail']}")
                problems.append(f"{label}{suffix}: pytest exit {run['exit']}")
    ok = not problems
    (out / "vllm-tests.json").write_text(
        json.dumps(
            {
                "fix": args.fix,
                "release": args.release,
                "variant": args.variant,
                "ok": ok,
                "differs": differs,
                "problems": problems,
                "runs": {
                    k: {x: v[x] for x in ("tree", "exit", "seconds", "counts", "skip_reasons", "env", "suites")}
                    for k, v in runs.items()
                },
            },
            indent=2,
        )
        + "\n"
    )
    print("OK" if ok else "FAILED: " + ", ".join(problems))
    return ExitStatus.OK if ok else ExitStatus.FINDING
