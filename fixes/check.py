"""A fix on vLLM's real code: the generated cases on the patched, unpatched and key-line-less trees.

    python -m fixes.check FIX RELEASE [--cases GLOB]

Builds the patched tree (.vllm_trees/<release>+<fix>/) and each variant (the fix minus
its key line, fixes/trees.py), then runs targets/fix_target.py once per tree, each in
its own process (one vLLM tree per process):

    patched    --expect fixed    every arm holds: the tree does what the model of the fix does
    unpatched  --expect control  the release fails exactly the arms where the fix acts
    variant    --expect minus    some arm where the fix acts fails; nothing else does

step-reservation-guard plays the cases' `+guard` arms on the tree's plain AsyncScheduler;
v2-recompute-rollback plays the V2 cases' plain arms with the `v2-rollback` runner model
on vLLM's own V2 model runner (targets/real_runner.py). Writes
build/fixes/<release>+<fix>/<run>.json and check.json; exit 0 when every run is as
expected, 1 when one is not, 4 when a run cannot start (e.g. the real-runner target
cannot run the patched tree yet).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from fixes.trees import FIXES, RELEASES, REPO, VARIANTS, FixError, build, tree_name
from targets.fix_target import CLAIMS

CHECK_OF = {"step-reservation-guard": "guard", "v2-recompute-rollback": "rollback"}


def plan(fix: str, release: str) -> list[tuple[str, str, str | None, str]]:
    """(run name, expectation, variant or None, tree spec) for every run of a fix."""
    runs = [("patched", "fixed", None, ""), ("unpatched", "control", None, release)]
    runs += [(f"minus-{v}", "minus", v, "") for v in VARIANTS[fix]]
    return runs


def run_one(fix: str, release: str, name: str, expect: str, tree: str, out: Path, cases: str | None = None) -> dict:
    """targets.fix_target in a fresh process; its JSON, plus exit status and output."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    env = {**os.environ, "VLLM_PROFILE": release}
    env.pop("VLLM", None)
    cmd = [
        sys.executable,
        "-m",
        "targets.fix_target",
        CHECK_OF[fix],
        f"--vllm={tree}",
        "--expect",
        expect,
        "--json",
        str(out),
    ] + (["--cases", cases] if cases else [])
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    result = json.loads(out.read_text()) if out.is_file() else {}
    result.update({"run": name, "exit": done.returncode, "output": (done.stdout + done.stderr)[-4000:]})
    return result


def check(fix: str, release: str, cases: str | None = None, runs: list[str] | None = None) -> dict:
    """Every run of the plan (or the named ones); {"ok": ..., "runs": {name: result}}."""
    folder = REPO / "build" / "fixes" / tree_name(release, fix)
    results = {}
    for name, expect, variant, tree in plan(fix, release):
        if runs is not None and name not in runs:
            continue
        if not tree:
            tree = str(build(fix, release, variant))
        results[name] = run_one(fix, release, name, expect, tree, folder / f"{name}.json", cases)
    ok = bool(results) and all(r["exit"] == 0 and r.get("ok") for r in results.values())
    report = {
        "fix": fix,
        "release": release,
        "cases": cases,
        "ok": ok,
        "runs": {
            k: {x: v.get(x) for x in ("exit", "ok", "expect", "tree", "seconds", "summary")} for k, v in results.items()
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "check.json").write_text(json.dumps(report, indent=2) + "\n")
    report["details"] = results
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m fixes.check", description=__doc__.split("\n\n")[0])
    parser.add_argument("fix", choices=FIXES)
    parser.add_argument("release", choices=RELEASES)
    parser.add_argument("--cases", default=None, help="only the generated cases whose name matches this glob")
    args = parser.parse_args(argv)
    try:
        report = check(args.fix, args.release, args.cases)
    except FixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{tree_name(args.release, args.fix)}: the generated cases on vLLM's real code")
    status = 0
    for name, r in report["details"].items():
        s = r.get("summary") or {}
        if r["exit"] == 4:
            print(f"  {name:22} cannot run: {r['output'].strip().splitlines()[-1] if r['output'].strip() else '?'}")
            status = max(status, 4)
            continue
        verdict = "as expected" if r.get("ok") else "NOT AS EXPECTED"
        print(
            f"  {name:22} expect {r.get('expect', '?'):8} {verdict:16} arms {s.get('arms')}: "
            f"{s.get('holds')} hold, {s.get('fails')} fail; the fix acts on {s.get('acts')} "
            f"({s.get('acts_and_fails')} of them fail); {r.get('seconds')} s"
        )
        if not r.get("ok"):
            status = max(status, 1)
            for line in r["output"].splitlines():
                if line.startswith(("  unexpected", "error")):
                    print("    " + line.strip())
    patched = report["details"].get("patched", {}).get("summary") or {}
    if patched:
        print(
            f"  in the model, arms violating what the fix claims ({', '.join(CLAIMS[CHECK_OF[args.fix]])}): "
            f"{patched['claims_violated_before']} without the fix, {patched['claims_violated_after']} with it"
        )
    print("OK" if status == 0 else "FAILED")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
