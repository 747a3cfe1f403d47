"""What changed between two vLLM releases, from the prover's verdicts (`vllm-contract diff-versions A B`).

Reads the verdicts the prover wrote (summary.json) and prints, per scenario and
property, the verdict and vLLM's reaction on each release side by side: "crash"
(an assert kills the engine at the violating step), "silent" (violated, nothing
fires), "holds" (proved), or "none found" (no counterexample within the search depth,
no proof claimed). Rows whose verdict or reaction changed come first, each with the
generated test that shows it. Exit 0 when the table could be built, 2 on bad input.
"""

from __future__ import annotations

import re
from pathlib import Path

from vllm_contract.codegen.cases import module_path
from vllm_contract.model.results import VerdictRow
from vllm_contract.spec.profiles import RELEASES
from vllm_contract.spec.verdicts import Fired, Kind, Reaction

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
        return f"{fired.reaction.label} at {row.depth}"
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


UNSTATED = ("not checked", "n/a")  # cells that state no verdict: never a change


def span(a: str, b: str) -> list[str]:
    """The releases from a to b, both included, oldest first (either order given)."""
    known = [p.release for p in RELEASES]
    i, j = sorted((known.index(a), known.index(b)))
    return known[i : j + 1]


def table(summary: dict, a: str, b: str) -> tuple[list[tuple], list[tuple]]:
    """(changed rows, unchanged rows): (scenario, property, [cell per release of span(a, b)],
    test). A row changed when its verdict or reaction differs between any two releases
    it is checked on."""
    releases = span(a, b)
    rows: dict[tuple, dict] = {}
    for row in summary["rows"]:
        if row.release is None:
            continue  # historical profiles belong to no release
        rows.setdefault((row.scenario, row.property), {})[row.release] = row
    changed, same = [], []
    for (scenario, prop), by_release in rows.items():
        if not any(r in by_release for r in releases):
            continue
        cells = [reaction(by_release[r]) if r in by_release else _missing(scenario, prop, r) for r in releases]
        cells = [c + _on_v2_note(scenario, r) if r in by_release else c for c, r in zip(cells, releases)]
        test = None
        for r in reversed(releases):
            if r in by_release:
                test = test or case_module(by_release[r])
        kinds = {_kind(c) for c in cells if not c.startswith(UNSTATED)}
        if any(c.startswith("gone:") for c in cells) and kinds - {"gone: no V1 runner"}:
            kinds.add("gone")  # a verdict a release no longer has the runner for is a change
        entry = (scenario, prop, cells, test or "")
        (changed if len(kinds) > 1 else same).append(entry)
    return changed, same


def _missing(scenario: str, prop: str, release: str) -> str:
    """Why a release has no verdict for a property: it does not apply there (an assert
    the release does not have), or the matrix does not check it."""
    from vllm_contract.spec.matrix import MATRIX
    from vllm_contract.spec.profiles import release_profile
    from vllm_contract.spec.properties import PROPERTIES

    for cfg in MATRIX:
        if cfg.name == f"{scenario}@{release}" and not PROPERTIES[prop].applies(cfg):
            return "n/a (no such assert)"
    if not release_profile(release).has_v1_runner and any(
        cfg.scenario == scenario and cfg.on_vllm_v1 for cfg in MATRIX
    ):
        return "gone: no V1 runner"
    return "not checked"


def _on_v2_note(scenario: str, release: str) -> str:
    """' (on V2)' where a V1 scenario runs on V2 because the release has no V1 runner."""
    from vllm_contract.spec.matrix import MATRIX

    for cfg in MATRIX:
        if cfg.name == f"{scenario}@{release}":
            v1_elsewhere = any(c.scenario == scenario and c.on_vllm_v1 for c in MATRIX)
            return " (on V2)" if v1_elsewhere and not cfg.is_v1 else ""
    return ""


def _kind(text: str) -> str:
    """The verdict and reaction, without the depth: what counts as a change."""
    if text.startswith("gone:"):
        return text
    return text.split(" at ")[0].split(" (")[0] if not text.startswith("none found") else "none found"


def render(changed: list[tuple], same: list[tuple], a: str, b: str) -> str:
    releases = span(a, b)
    width = 26
    head = f"{'scenario':<24} {'property':<28} " + " ".join(f"{r:<{width}}" for r in releases)
    lines = [
        f"vLLM {releases[0]} -> {releases[-1]} ({', '.join(releases)}): {len(changed)} row(s) whose verdict "
        f"or reaction changes, {len(same)} unchanged; * marks a release where it changes",
        "",
        "CHANGED",
        head,
        "-" * len(head),
    ]

    def cells(values: list[str]) -> str:
        out, before = [], None
        for value in values:
            checked = not value.startswith(UNSTATED)
            mark = "*" if checked and before is not None and _kind(value) != _kind(before) else " "
            out.append(f"{mark}{_short(value, width - 1):<{width - 1}}")
            before = value if checked else before
        return " ".join(out)

    for scenario, prop, values, test in changed:
        lines.append(f"{scenario:<24} {prop:<28} {cells(values)}")
        if test:
            lines.append(f"{'':<24} shown by {test}")
    lines += ["", "UNCHANGED", head, "-" * len(head)]
    for scenario, prop, values, _ in same:
        lines.append(f"{scenario:<24} {prop:<28} {cells(values)}")
    lines += [
        "",
        "CRASH: vLLM's assert kills the engine at that step (the assert named); SILENT: the property "
        "is violated and nothing fires; HANG: nothing fires and the engine, run on, never runs a request "
        "again; holds: proved for every depth; none found: no counterexample "
        "within the depth, no proof claimed; not checked: the matrix states nothing for that release.",
    ]
    return "\n".join(line.rstrip() for line in lines)


def _short(text: str, width: int = 25) -> str:
    """A cell that fits its column: the assert named by its first word."""
    text = re.sub(r"\(([a-z]+)-[a-z-]+\)", r"(\1)", text).replace("(proved)", "").strip()
    return text[:width]
