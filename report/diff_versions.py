"""What changed between two vLLM releases, from the prover's verdicts (`vllm-contract diff-versions A B`).

Reads the verdicts the prover wrote (summary.json) and prints, per scenario and
property, the verdict and vLLM's reaction on each release side by side: "crash"
(an assert kills the engine at the violating step), "silent" (violated, nothing
fires), "holds" (proved), or "none found" (no counterexample within the search depth,
no proof claimed). Rows whose verdict or reaction changed come first, each with the
generated test that shows it. Exit 0 when the table could be built, 2 on bad input.
"""

from __future__ import annotations

from pathlib import Path

from codegen.cases import module_path
from model.results import VerdictRow
from spec.profiles import RELEASES
from spec.verdicts import Fired, Kind, Reaction

ROOT = Path(__file__).resolve().parent.parent


def reaction(row: VerdictRow) -> str:
    kind = row.verdict.kind
    if kind is Kind.PROVED:
        return "holds (proved)"
    if kind is Kind.BOUNDED:
        return f"none found (<= {row.depth} steps)"
    if kind is Kind.VIOLATED:
        fired = row.fired or Fired()
        if fired.assert_name:
            return f"{Reaction.CRASH.label} at {row.depth} ({fired.assert_name})"
        return f"{Reaction.SILENT.label} at {row.depth}"
    return str(row.verdict).upper()


def case_module(row: VerdictRow) -> str | None:
    """The generated module of a row's counterexample (a trace found on several releases
    is generated once, under the oldest: look there too)."""
    if row.verdict.kind is not Kind.VIOLATED:
        return None
    for profile in [row.profile] + [p.name for p in RELEASES]:
        rel = module_path(profile, row.scenario, "violation", row.property, 0)
        if (ROOT / rel).exists():
            return rel
    return None


def table(summary: dict, a: str, b: str) -> tuple[list[tuple], list[tuple]]:
    """(changed rows, unchanged rows): (scenario, property, A, B, test)."""
    rows: dict[tuple, dict] = {}
    for row in summary["rows"]:
        if row.release is None:
            continue  # historical profiles belong to no release
        rows.setdefault((row.scenario, row.property), {})[row.release] = row
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
