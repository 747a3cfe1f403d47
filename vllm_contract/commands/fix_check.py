"""A fix on vLLM's real code: the generated cases on the patched, unpatched and key-line-less trees.

Builds the patched tree (.vllm_trees/<release>+<fix>/) and each variant (the fix minus its
key line), then runs fixes/arm_child.py once per tree, each in its own process:

    patched    expect fixed    every arm holds: the tree does what the model of the fix does
    unpatched  expect control  the release fails exactly the arms where the fix acts
    variant    expect minus    some arm where the fix acts fails; nothing else does

Writes build/fixes/<release>+<fix>/<run>.json and check.json (fixes/check.py).
"""

from __future__ import annotations

from vllm_contract.spec.errors import ExitStatus
from vllm_contract.spec.heartbeat import to_stderr

NAME = "fix-check"
HELP = "a fix on vLLM's real code: the generated cases on the patched, unpatched and minus-key-line trees"
STATUSES = {
    ExitStatus.OK: "every run is as expected",
    ExitStatus.FINDING: "a run is not as expected",
    ExitStatus.BAD_INPUT: "the fix does not build",
    ExitStatus.COULD_NOT_RUN: "a run could not run any arm (its cause is printed, once)",
}


def add_arguments(parser) -> None:
    from vllm_contract.fixes.trees import FIXES, RELEASES

    parser.add_argument("fix", choices=FIXES)
    parser.add_argument("release", choices=RELEASES)
    parser.add_argument("--cases", default=None, help="only the generated cases whose name matches these globs")


def run(args) -> int:
    from vllm_contract.fixes.arms import CLAIMS, FAULT_FREE_CLAIMS
    from vllm_contract.fixes.check import CHECK_OF, check
    from vllm_contract.fixes.trees import tree_name

    report = check(args.fix, args.release, args.cases, log=to_stderr)
    print(f"{tree_name(args.release, args.fix)}: the generated cases on vLLM's real code")
    status = ExitStatus.OK
    for name, r in report["details"].items():
        s = r.get("summary") or {}
        if r["exit"] in (ExitStatus.TREE, ExitStatus.COULD_NOT_RUN) or not s:
            last = r["output"].strip().splitlines()[-1] if r["output"].strip() else "no output"
            print(f"  {name:22} COULD NOT RUN: {last}")
            status = max(status, ExitStatus.COULD_NOT_RUN) if status != ExitStatus.FINDING else status
            continue
        verdict = "as expected" if r.get("ok") else "NOT AS EXPECTED"
        print(
            f"  {name:22} expect {r.get('expect', '?'):8} {verdict:16} arms {s.get('arms')}: "
            f"{s.get('holds')} hold, {s.get('fails')} fail, {s.get('could_not_run', 0)} could not run; "
            f"the fix acts on {s.get('acts')} ({s.get('acts_and_fails')} of them fail); {r.get('seconds')} s"
        )
        if not r.get("ok"):
            status = ExitStatus.FINDING
            for line in r["output"].splitlines():
                if line.startswith(("  unexpected", "error", "  could not run")):
                    print("    " + line.strip())
    patched = report["details"].get("patched", {}).get("summary") or {}
    if patched:
        check_name = CHECK_OF[args.fix]
        scope = FAULT_FREE_CLAIMS.get(check_name, ())
        claims = ", ".join(CLAIMS[check_name]) + (
            f"; {', '.join(scope)} on arms without an injected fault" if scope else ""
        )
        print(
            f"  in the model, arms violating what the fix claims ({claims}): "
            f"{patched['claims_violated_before']} without the fix, {patched['claims_violated_after']} with it"
        )
    print({ExitStatus.OK: "OK", ExitStatus.FINDING: "FAILED"}.get(status, "INCOMPLETE: some runs could not run"))
    return status
