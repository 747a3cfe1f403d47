"""A fix on vLLM's real code: the generated cases on the patched, unpatched and key-line-less trees.

    vllm-contract fix-check FIX RELEASE [--cases GLOB]

Builds the patched tree (.vllm_trees/<release>+<fix>/) and each variant (the fix minus
its key line, fixes/trees.py), then runs fixes/arms.py once per tree, each in
its own process (one vLLM tree per process):

    patched    --expect fixed    every arm holds: the tree does what the model of the fix does
    unpatched  --expect control  the release fails exactly the arms where the fix acts
    variant    --expect minus    some arm where the fix acts fails; nothing else does

step-reservation-guard plays the cases' `+guard` arms on the tree's plain AsyncScheduler;
v2-recompute-rollback plays the V2 cases' plain arms with the `v2-rollback-history` runner
model and the scheduler's `release_skipped` on vLLM's own V2 model runner
(targets/real_runner/) beside the tree's scheduler. Writes
build/fixes/<release>+<fix>/<run>.json and check.json; exit 0 when every run is as
expected, 1 when one is not, 4 when a run cannot start (e.g. the real-runner target
cannot run the patched tree yet).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from vllm_contract.adapter import child
from vllm_contract.fixes.trees import REPO, VARIANTS, build, patch_path, touched_files, tree_name

CHECK_OF = {"step-reservation-guard": "guard", "v2-recompute-rollback": "rollback"}


def plan(fix: str, release: str) -> list[tuple[str, str, str | None, str]]:
    """(run name, expectation, variant or None, tree spec) for every run of a fix."""
    runs = [("patched", "fixed", None, ""), ("unpatched", "control", None, release)]
    runs += [(f"minus-{v}", "minus", v, "") for v in VARIANTS[fix]]
    return runs


def patched_modules(fix: str, release: str) -> list[str]:
    """The modules the fix's patch touches, as dotted names."""
    return [name.removesuffix(".py").replace("/", ".") for name in sorted(touched_files(patch_path(fix, release)))]


def run_one(
    fix: str,
    release: str,
    name: str,
    expect: str,
    tree: str,
    out: Path,
    cases: str | None = None,
    modules: list[str] = (),
) -> dict:
    """One run (fixes/arm_child.py) in a fresh process holding the tree; its JSON, plus exit
    status and output. `modules` are imported from the tree first (the patched run imports
    every module its patch touches)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    args = [CHECK_OF[fix], f"--vllm={tree}", "--expect", expect, "--json", str(out)]
    args += (["--cases", cases] if cases else []) + (["--import", ",".join(modules)] if modules else [])
    done = child.run("vllm_contract.fixes.arm_child", args, child.environment(profile=release), REPO)
    result = json.loads(out.read_text()) if out.is_file() else {}
    result.update({"run": name, "exit": done.returncode, "output": (done.stdout + done.stderr)[-4000:]})
    return result


def check(
    fix: str,
    release: str,
    cases: str | None = None,
    runs: list[str] | None = None,
    log=lambda line: None,
    out: Path | None = None,
) -> dict:
    """Every run of the plan (or the named ones); {"ok": ..., "runs": {name: result}}.
    log(line) says which run starts (each takes a minute or so: a fresh vLLM per run).
    The results go to `out` (default build/fixes/<release>+<fix>/)."""
    folder = Path(out) if out is not None else REPO / "build" / "fixes" / tree_name(release, fix)
    results = {}
    chosen = [p for p in plan(fix, release) if runs is None or p[0] in runs]
    for i, (name, expect, variant, tree) in enumerate(chosen, 1):
        log(f"fix-check: run {i}/{len(chosen)}: {name} (expect {expect})")
        if not tree:
            tree = str(build(fix, release, variant))
        started = time.monotonic()
        modules = patched_modules(fix, release) if name == "patched" else []
        results[name] = run_one(fix, release, name, expect, tree, folder / f"{name}.json", cases, modules)
        log(f"fix-check: {name} ended with exit {results[name]['exit']} in {time.monotonic() - started:.0f} s")
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
