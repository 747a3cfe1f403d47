"""The exported tests (codegen/export.py) on vLLM's own code, in vLLM's own test tree.

    python -m vllm_contract.fixes.export_check RELEASE [--out bench/results/export]

The modules of build/export/<RELEASE>/ are copied into the release's sdist test tree
(.vllm_trees/tests-<RELEASE>/tests/v1/core/, as `make vllm-tests` unpacks it) and run
there with vLLM's tests/v1/core/utils.py, twice: on the release as it is and on the
release with the step-reservation guard patch (fixes/trees.py). Triton is made visible
(interpreted), so that V2 configurations build. Required, from expected.json:

  * a violation test fails on the release at the predicted place: vLLM's own assert
    (the raising line's text is the statement) or the test's assert, in the predicted
    step (the test function's frame names the step);
  * with the guard it passes where the model says the guard removes the violation, and
    fails where it does not; every `_control` test passes on both trees;
  * a deliberately broken copy of one module (its violating step removed) is caught:
    it does not fail as predicted;
  * every module is ruff-clean under the release's own ruff configuration (its sdist's
    pyproject.toml).

Writes <out>/<RELEASE>.txt and .json, with the command and the date, the predictions
checked and each module's digest (tests/test_export.py holds them against what
`make export` writes now); exit 0 when everything holds.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from vllm_contract.fixes import trees
from vllm_contract.fixes.trees import REPO, FixError
from vllm_contract.fixes.vllm_tests import fetch_sdist, parse_junit, run_suites, unpack_tests

EXPORT_DIR = REPO / "build" / "export"
OUT_DIR = REPO / "bench" / "results" / "export"
FIX = "step-reservation-guard"
TRITON = {"FIX_ENABLE_TRITON": "1", "TRITON_INTERPRET": "1"}
BROKEN_PREFIX = "test_contract_broken_"
_FRAME = re.compile(r"^(\S+\.py):(\d+): ", re.M)


def frames(text: str) -> list[tuple[str, int]]:
    """(file, line) of every frame a --tb=short failure shows, outermost first."""
    return [(m.group(1), int(m.group(2))) for m in _FRAME.finditer(text)]


def failures(junit: Path) -> dict[str, str]:
    """{test id: the failure's text} from a JUnit file."""
    import xml.etree.ElementTree as ET

    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        for child in case:
            if child.tag in ("failure", "error"):
                out[f"{case.get('classname')}::{case.get('name')}"] = (child.text or "") + (child.get("message") or "")
    return out


def _module_and_test(test_id: str) -> tuple[str, str]:
    classname, name = test_id.rsplit("::", 1)
    return classname.rsplit(".", 1)[-1] + ".py", name


def judge(expect: dict, outcome: str, failure: str, tests_dir: Path) -> str | None:
    """Why the observed outcome is not the predicted one (None: it is)."""
    want = expect["outcome"]
    if outcome != want:
        return f"predicted {want}, observed {outcome}" + (f": {failure.strip().splitlines()[-1]}" if failure else "")
    if want != "failed":
        return None
    seen = frames(failure)
    if not seen:
        return "failed without a traceback to check"
    file, line = seen[-1]
    path = Path(file) if Path(file).is_absolute() else tests_dir / file
    try:
        raised = path.read_text().splitlines()[line - 1].strip()
    except (OSError, IndexError):
        raised = "?"
    statement = expect.get("statement")
    if statement and raised != statement:
        return f"predicted vLLM's `{statement}`, raised at {file}:{line} `{raised}`"
    if not statement and not raised.startswith("assert r"):
        return f"predicted the test's own assert, raised at {file}:{line} `{raised}`"
    in_test = [ln for f, ln in seen if f.endswith(".py") and Path(f).name.startswith("test_contract_")]
    step = expect["lines"].get(str(in_test[0])) if in_test else None
    if step != expect["step"]:
        return f"failed in step {step}, predicted step {expect['step']}"
    return None


def _ruff(files: list[Path], pyproject: Path) -> list[str]:
    """Findings of ruff check and format --check under vLLM's configuration (vllm is
    first-party there: its CI runs ruff at the repository root)."""
    ruff = Path(sys.executable).parent / "ruff"
    common = ["--config", str(pyproject), "--config", "lint.isort.known-first-party=['vllm']"]
    said = []
    for args in (["check", "--quiet", *common], ["format", "--check", "--quiet", *common]):
        done = subprocess.run([str(ruff), *args, *map(str, files)], capture_output=True, text=True)
        if done.returncode != 0:
            said += [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()][:20]
    return said


def _pyproject(release: str, dest: Path) -> Path:
    target = dest / "vllm-config" / "pyproject.toml"  # the name tells ruff how to read it
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fetch_sdist(release)) as archive:
        member = archive.getmember(f"vllm-{release}/pyproject.toml")
        target.write_bytes(archive.extractfile(member).read())
    return target


def break_one(folder: Path, expected: dict) -> tuple[str, dict] | None:
    """A copy of the first violation module with its last step's calls removed: the
    negative control (it must not fail as predicted)."""
    for test_id, exp in sorted(expected.items()):
        if exp["release"]["outcome"] != "failed":
            continue
        module, name = test_id.split("::")
        text = (folder / module).read_text()
        lines = text.splitlines()
        step = str(exp["release"]["step"])
        drop = {int(n) for n, s in exp["lines"].items() if str(s) == step}
        kept = [ln for i, ln in enumerate(lines, 1) if i not in drop or not ln.strip().startswith(("_", "in_flight"))]
        broken = BROKEN_PREFIX + module.removeprefix("test_contract_")
        (folder / broken).write_text("\n".join(kept) + "\n")
        return f"{broken}::{name}", exp
    return None


def predictions(expected: dict) -> dict:
    """What the model predicts of each test on each tree (expected.json less the line map)."""
    return {test_id: {arm: exp[arm] for arm in ("release", "guard")} for test_id, exp in sorted(expected.items())}


def digests(files: dict[str, str]) -> dict[str, str]:
    """{module: sha256 of its text}: the modules a result was measured on."""
    return {
        name: hashlib.sha256(text.encode()).hexdigest()
        for name, text in sorted(files.items())
        if name.startswith("test_contract_")
    }


def stale(release: str, files: dict[str, str], out: Path = OUT_DIR) -> list[str]:
    """Why the committed results of `release` (<out>/<release>.json) are not a passing
    run of the modules `files` (build/export/<release>/ as `make export` writes it now):
    one line per cause, none when they are."""
    path = out / f"{release}.json"
    again = f"run `make export-check RELEASE={release}` and commit {path.name} and {release}.txt"
    if not path.is_file():
        return [f"{release}: no committed results ({path}): {again}"]
    committed = json.loads(path.read_text())
    said = []
    now, then = digests(files), committed.get("digests", {})
    for what, names in (
        ("exported now but never checked", sorted(set(now) - set(then))),
        ("checked but no longer exported", sorted(set(then) - set(now))),
        ("changed since they were checked", sorted(m for m in set(now) & set(then) if now[m] != then[m])),
    ):
        if names:
            said.append(f"{release}: {len(names)} module(s) {what} ({', '.join(names)}): {again}")
    predicted = predictions(json.loads(files["expected.json"]))
    differ = sorted(
        t
        for t in set(predicted) | set(committed.get("predicted", {}))
        if predicted.get(t) != committed.get("predicted", {}).get(t)
    )
    if differ:
        said.append(f"{release}: {len(differ)} test(s) predicted otherwise than committed ({differ[0]}, ...): {again}")
    observed = committed.get("observed", {})
    wrong = [
        f"{t} [{arm}]"
        for t, exp in sorted(predicted.items())
        for arm in ("release", "guard")
        if observed.get(arm, {}).get(t) != exp[arm]["outcome"]
    ]
    if wrong:
        said.append(
            f"{release}: {len(wrong)} committed outcome(s) are not the predicted ones ({wrong[0]}, ...): {again}"
        )
    if not committed.get("ok") or not committed.get("broken_copy_caught"):
        said.append(
            f"{release}: the committed run did not pass ({len(committed.get('problems', []))} problem(s)): {again}"
        )
    return said


def _plugin_path(expected: dict) -> dict[str, str]:
    """PYTHONPATH holding the pinned tree of every plugin a module needs installed (a
    plugin's scheduler patch the module calls), or nothing; a tree not fetched stops the
    check with what to do."""
    from vllm_contract.targets import plugin_fetch

    folders = []
    for name in sorted({e["plugin"] for e in expected.values() if e.get("plugin")}):
        folder, why = plugin_fetch.tree(name)
        if folder is None:
            raise FixError(f"the exported tests for {name}'s CI need its code: {why}")
        folders.append(str(folder))
    return {"PYTHONPATH": os.pathsep.join(folders)} if folders else {}


def check(release: str, out: Path = OUT_DIR, command: str | None = None) -> dict:
    folder = EXPORT_DIR / release
    if not (folder / "expected.json").is_file():
        raise FixError(f"{folder} has no exported tests: run `make export RELEASE={release}` first")
    expected = json.loads((folder / "expected.json").read_text())
    tests_dir = unpack_tests(release)
    core = tests_dir / "tests" / "v1" / "core"
    for old in core.glob("test_contract_*.py"):
        old.unlink()
    modules = sorted(folder.glob("test_contract_*.py"))
    for path in modules:
        shutil.copyfile(path, core / path.name)
    broken = break_one(core, expected)
    suites = [f"tests/v1/core/{p.name}" for p in sorted(core.glob("test_contract_*.py"))]
    junit_dir = REPO / "build" / "export-check" / release
    trees_run = {"release": release, "guard": str(trees.build(FIX, release))}
    results, problems = {}, []
    env = {**TRITON, "PYTEST_ADDOPTS": "--tb=short", **_plugin_path(expected)}
    for arm, tree in trees_run.items():
        print(f"export-check {release}: {len(suites)} module(s) on {arm} ({tree})", file=sys.stderr, flush=True)
        run = run_suites(tests_dir, tree, release, junit_dir / f"{arm}.xml", suites=suites, extra_env=env)
        outcomes, _ = parse_junit(junit_dir / f"{arm}.xml")
        failed = failures(junit_dir / f"{arm}.xml")
        by_test = {_short(k): v for k, v in outcomes.items()}
        text_of = {_short(k): v for k, v in failed.items()}
        results[arm] = {"seconds": run["seconds"], "outcomes": by_test, "failures": text_of}
        for test_id, exp in sorted(expected.items()):
            want = exp[arm]
            got = by_test.get(test_id, "absent")
            why = judge({**want, "lines": exp["lines"]}, got, text_of.get(test_id, ""), tests_dir)
            if why:
                problems.append(f"{test_id} [{arm}]: {why}")
    caught = None
    if broken is not None:
        broken_id, exp = broken
        got = results["release"]["outcomes"].get(broken_id, "absent")
        failure = results["release"]["failures"].get(broken_id, "")
        caught = judge({**exp["release"], "lines": exp["lines"]}, got, failure, tests_dir) is not None
        if not caught:
            problems.append(f"the broken copy {broken_id} was not caught: it fails as the intact one")
    lint = _ruff([core / p.name for p in modules], _pyproject(release, junit_dir))
    problems += [f"ruff (vLLM {release}'s configuration): {ln}" for ln in lint]
    observed = {a: results[a]["outcomes"] for a in trees_run}
    violations = [test_id for test_id in sorted(expected) if not test_id.endswith("_control")]
    report = {
        "release": release,
        "command": command or f"vllm-contract export-check {release}",
        "date": datetime.date.today().isoformat(),
        "modules": len(modules),
        "tests": len(expected),
        "digests": digests({p.name: p.read_text() for p in modules}),
        "predicted": predictions(expected),
        "observed": observed,
        # what the guard patch does to the violation tests, as observed on vLLM's code
        "turned_passing": [
            i for i in violations if observed["release"].get(i) == "failed" and observed["guard"].get(i) == "passed"
        ],
        "failing_with_guard": [
            i for i in violations if observed["release"].get(i) == "failed" and observed["guard"].get(i) == "failed"
        ],
        "arms": {a: {"tree": _shown(t), "seconds": results[a]["seconds"]} for a, t in trees_run.items()},
        "broken_copy_caught": caught,
        "problems": problems,
        "ok": not problems and bool(modules),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{release}.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    (out / f"{release}.txt").write_text(_text(report, expected, results))
    return report


README = REPO / "fixes" / FIX / "README.md"
BEGIN = "<!-- exported tests: written by `make export-check` from bench/results/export/ -->"
END = "<!-- end of the exported tests -->"


def readme_block(out: Path = OUT_DIR) -> str:
    """The fix README's list of the exported tests its patch turns from failing to
    passing, per release, from the committed export-check results."""
    lines = [
        BEGIN,
        "",
        "## The exported tests it turns from failing to passing",
        "",
        "The counterexamples as tests of vLLM's own suite (`make export`, docs/export.md), run in",
        "vLLM's `tests/v1/core/` of each release's sdist by `make export-check`, on the release and",
        "with this patch (bench/results/export/). Each fails on the release as released and passes",
        "patched; its `_control` test passes on both.",
        "",
    ]
    for release in trees.PATCHED[FIX]:
        path = out / f"{release}.json"
        if not path.is_file():
            lines += [f"- vLLM {release}: not checked yet (`make export-check RELEASE={release}`)", ""]
            continue
        report = json.loads(path.read_text())
        state = "as predicted" if report["ok"] else f"{len(report['problems'])} problem(s), see {release}.txt"
        lines.append(f"vLLM {release} ({report['modules']} module(s), {state}):")
        lines.append("")
        lines += [f"- `{test.split('::')[0]}`" for test in report.get("turned_passing", [])]
        still = report.get("failing_with_guard", [])
        if still:
            lines += [
                "",
                "Still failing with the patch, as the model predicts (violations the guard does not "
                f"remove): {len(still)}, " + ", ".join(f"`{t.split('::')[0]}`" for t in still) + ".",
            ]
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def refresh_readme(out: Path = OUT_DIR, readme: Path = README) -> None:
    text = readme.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise FixError(f"{readme} has not exactly one exported-tests block ({BEGIN!r} ... {END!r})")
    head, rest = text.split(BEGIN)
    _old, tail = rest.split(END)
    readme.write_text(head + readme_block(out) + tail)


def _shown(tree: str) -> str:
    """A tree as the results name it: relative to this repository when inside it."""
    path = Path(tree)
    return path.relative_to(REPO).as_posix() if path.is_absolute() and path.is_relative_to(REPO) else tree


def _short(test_id: str) -> str:
    """tests.v1.core.test_contract_x::test_y -> test_contract_x.py::test_y"""
    module, name = _module_and_test(test_id)
    return f"{module}::{name}"


def _text(report: dict, expected: dict, results: dict) -> str:
    lines = [
        f"vLLM {report['release']}: {report['modules']} exported module(s), {report['tests']} test(s), run in "
        "vLLM's own test tree (tests/v1/core/utils.py)",
        f"measured by `{report['command']}` on {report['date']}",
        f"{'test':<78} {'release':>8} {'guard':>8}",
    ]
    for test_id, exp in sorted(expected.items()):
        row = [results[a]["outcomes"].get(test_id, "absent") for a in ("release", "guard")]
        want = [exp[a]["outcome"] for a in ("release", "guard")]
        marks = ["" if r == w else "!" for r, w in zip(row, want)]
        lines.append(f"{test_id:<78} {row[0] + marks[0]:>8} {row[1] + marks[1]:>8}")
    lines.append(f"broken copy caught: {report['broken_copy_caught']}")
    lines.append("problems: " + (str(len(report["problems"])) if report["problems"] else "none"))
    lines += [f"  {p}" for p in report["problems"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm-contract export-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("release", choices=trees.PATCHED["step-reservation-guard"])
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    try:
        report = check(args.release, args.out, "vllm-contract export-check " + " ".join(argv or sys.argv[1:]))
    except subprocess.CalledProcessError as exc:
        print(f"error: the sdist of vLLM {args.release} could not be fetched ({exc})", file=sys.stderr)
        return 4
    except FixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 4
    for p in report["problems"]:
        print(f"export-check {args.release}: {p}", file=sys.stderr)
    if args.out == OUT_DIR:
        refresh_readme()
    print(
        f"export-check {args.release}: {report['tests']} test(s) in {report['modules']} module(s): "
        + (
            "as predicted on the release and with the guard"
            if report["ok"]
            else f"{len(report['problems'])} problem(s)"
        )
    )
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
