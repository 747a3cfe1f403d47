"""`make diff-versions A=0.32.0 B=0.33.0`: what changed between two vLLM releases.

    python -m model.diff_versions A B [--from build/prove]

Reads the verdicts `make prove` wrote (summary.json) and prints, per scenario and
property, the verdict and vLLM's reaction on each release side by side: "crash"
(an assert kills the engine at the violating step), "silent" (violated, nothing
fires), "holds" (proved), or "none found" (no counterexample within the search depth,
no proof claimed). Rows whose verdict or reaction changed come first, each with the
generated test that shows it. Exit 0 when the table could be built, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from spec.profiles import RELEASES

ROOT = Path(__file__).resolve().parent.parent


def reaction(row: dict) -> str:
    verdict = row["verdict"]
    if verdict == "proved":
        return "holds (proved)"
    if verdict == "bounded":
        return f"none found (<= {row['depth']} steps)"
    if verdict == "violated":
        how = row.get("reaction") or "?"
        if how.startswith("crash"):
            return f"CRASH at {row['depth']} ({how.split(': ', 1)[-1]})"
        return f"SILENT at {row['depth']}"
    return verdict.upper()


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def case_module(row: dict) -> str | None:
    """The generated module of a row's counterexample (a trace found on several releases
    is generated once, under the oldest: look there too)."""
    if row["verdict"] != "violated":
        return None
    scenario = row["config"].split("@", 1)[0]
    name = f"test_{_slug(scenario)}__{_slug(row['property'])}.py"
    for profile in [row["profile"]] + [p.name for p in RELEASES]:
        path = ROOT / "generated_tests" / "cases" / _slug(profile) / name
        if path.exists():
            return str(path.relative_to(ROOT))
    return None


def table(summary: dict, a: str, b: str) -> tuple[list[tuple], list[tuple]]:
    """(changed rows, unchanged rows): (scenario, property, A, B, test)."""
    rows: dict[tuple, dict] = {}
    for row in summary["results"]:
        if "@" not in row["config"]:
            continue  # historical profiles belong to no release
        scenario, release = row["config"].split("@", 1)
        rows.setdefault((scenario, row["property"]), {})[release] = row
    changed, same = [], []
    for (scenario, prop), by_release in rows.items():
        if a not in by_release and b not in by_release:
            continue
        left = reaction(by_release[a]) if a in by_release else _missing(scenario, prop, a)
        right = reaction(by_release[b]) if b in by_release else _missing(scenario, prop, b)
        test = case_module(by_release[b]) if b in by_release else None
        test = test or (case_module(by_release[a]) if a in by_release else None)
        entry = (scenario, prop, left, right, test or "")
        (same if _kind(left) == _kind(right) else changed).append(entry)
    return changed, same


def _missing(scenario: str, prop: str, release: str) -> str:
    """Why a release has no verdict for a property: it does not apply there (an assert
    the release does not have), or the matrix does not check it."""
    from spec.matrix import MATRIX
    from spec.properties import PROPERTIES

    for cfg in MATRIX:
        if cfg.name == f"{scenario}@{release}" and not PROPERTIES[prop].applies(cfg):
            return "n/a (no such assert)"
    return "not checked"


def _kind(text: str) -> str:
    """The verdict and reaction, without the depth: what counts as a change."""
    return text.split(" at ")[0].split(" (")[0] if not text.startswith("none found") else "none found"


def render(changed: list[tuple], same: list[tuple], a: str, b: str) -> str:
    head = f"{'scenario':<30} {'property':<29} {a:<40} {b:<40}"
    lines = [
        f"vLLM {a} -> {b}: {len(changed)} change(s) of verdict or reaction, {len(same)} unchanged",
        "",
        "CHANGED",
        head,
        "-" * len(head),
    ]
    for scenario, prop, left, right, test in changed:
        lines.append(f"{scenario:<30} {prop:<29} {left:<40} {right:<40}")
        if test:
            lines.append(f"{'':<30} shown by {test}")
    lines += ["", "UNCHANGED", head, "-" * len(head)]
    for scenario, prop, left, right, _ in same:
        lines.append(f"{scenario:<30} {prop:<29} {left:<40} {right:<40}")
    lines += [
        "",
        "CRASH: vLLM's assert kills the engine at that step; SILENT: the property is violated and "
        "nothing fires; holds: proved for every depth; none found: no counterexample within the depth, "
        "no proof claimed.",
    ]
    return "\n".join(line.rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    releases = [p.release for p in RELEASES]
    parser = argparse.ArgumentParser(prog="make diff-versions", description=__doc__.split("\n\n")[0])
    parser.add_argument("a", nargs="?", default=releases[0])
    parser.add_argument("b", nargs="?", default=releases[-1])
    parser.add_argument("--from", dest="prove_dir", default="build/prove")
    args = parser.parse_args(argv)
    for release in (args.a, args.b):
        if release not in releases:
            print(f"error: no release profile for vLLM {release}; known: {', '.join(releases)}", file=sys.stderr)
            return 2
    path = Path(args.prove_dir) / "summary.json"
    if not path.is_file():
        print(
            f"error: {path} not found: run `make prove` first (it writes the verdicts compared here)", file=sys.stderr
        )
        return 2
    summary = json.loads(path.read_text())
    changed, same = table(summary, args.a, args.b)
    if not changed and not same:
        print(f"error: {path} holds no configuration of {args.a} or {args.b}: run `make prove`", file=sys.stderr)
        return 2
    print(render(changed, same, args.a, args.b))
    if not summary.get("complete", True):
        print(
            f"\nnote: {path} is from a partial run ({', '.join(summary.get('configs', []))}); "
            "`make prove` checks the whole matrix"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
