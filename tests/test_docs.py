"""Every path, make target, configuration and module the Markdown files name exists, and no
internal issue numbers are left in code, docs or the Makefile."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = (
    "spec",
    "model",
    "codegen",
    "targets",
    "report",
    "fixes",
    "bench",
    "kernels",
    "vllm_contract",
    "tests",
    "generated_tests",
    "docs",
    "requirements",
    ".ci",
)
TOP = ("README.md", "ARCHITECTURE.md", "Makefile", "pyproject.toml", "package.json", "package-lock.json")
SKIP_DIRS = {".git", ".venv", "node_modules", ".vllm_trees", ".vllm_cache", "build", "__pycache__"}


# review summaries kept as records: the paths they name are the reviewed vLLM tree's, not ours
RECORDS = ROOT / "bench" / "results" / "review"


def markdown_files() -> list[Path]:
    return sorted(
        p
        for p in ROOT.rglob("*.md")
        if not SKIP_DIRS & set(p.relative_to(ROOT).parts) and not p.is_relative_to(RECORDS)
    )


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    found = set(re.findall(r"^([a-zA-Z0-9_.%-]+):", text, re.M))
    # vllm-X.Y.Z: one rule for every release with a pinned wheel (requirements/vllm-tree-X.Y.Z.txt)
    pinned = [
        p.name.removeprefix("vllm-tree-").removesuffix(".txt") for p in (ROOT / "requirements").glob("vllm-tree-*.txt")
    ]
    return found | {f"vllm-{release}" for release in pinned}


def known_names() -> set[str]:
    """Every name a document may put in backticks that looks like a configuration."""
    from vllm_contract.adapter import internals
    from vllm_contract.spec import citations
    from vllm_contract.spec.config import EVENT_FAMILIES, FAULTS, GUARDS
    from vllm_contract.spec.matrix import MATRIX
    from vllm_contract.spec.profiles import PROFILES
    from vllm_contract.spec.properties import ASSERTS, PROPERTIES
    from vllm_contract.spec.runner_variants import RUNNERS
    from vllm_contract.targets.fuzz.presets import KNOWN, PRESETS

    names = {c.name for c in MATRIX} | {c.scenario for c in MATRIX}
    names |= set(PROPERTIES) | set(ASSERTS) | set(PROFILES) | set(RUNNERS) | set(GUARDS)
    names |= set(EVENT_FAMILIES) | set(FAULTS) | set(PRESETS) | set(KNOWN) | set(citations.load())
    names |= set(internals.VARIANT)  # the adapter's variants (docs/adapter.md)
    return names


# a backticked token that names one of our files: a top-level folder of ours, or a top file
PATH = re.compile(r"`((?:" + "|".join(re.escape(d) for d in OURS) + r")/[^`\s:]*|" + "|".join(TOP) + r")`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
MAKE = re.compile(r"`make ([A-Za-z0-9][A-Za-z0-9.-]*)")
# vLLM's own files, named as such ("vLLM's `tests/v1/core/test_scheduler.py`"), are not ours
FOREIGN = re.compile(r"vLLM's `[^`]+`")
CONFIG = re.compile(r"`((?:v1|v2|h[1-4]|guard|kvfail)[a-z0-9-]*(?:@\d+\.\d+\.\d+)?)`")
MODULE = re.compile(r"\b(test_[a-z0-9_]+\.py)\b")


def exported_modules() -> set[str]:
    """The modules `make export` writes that the committed export-check results name
    (bench/results/export/<release>.json): build/ output, measured and committed."""
    import json

    names = set()
    for path in (ROOT / "bench" / "results" / "export").glob("*.json"):
        report = json.loads(path.read_text())
        for key in ("turned_passing", "failing_with_guard"):
            names |= {test.split("::")[0] for test in report.get(key, [])}
    return names


def _exists(rel: str, md: Path) -> bool:
    rel = rel.rstrip("/").rstrip(".,;")
    if any(ch in rel for ch in "*<>{}") or "X.Y.Z" in rel or "CONFIG" in rel or "PROPERTY" in rel:
        return True  # a pattern, not a path
    from vllm_contract.codegen.generate import USER_TRACES

    if ROOT / rel == USER_TRACES:
        return True  # made by the first `generate --trace`
    return (ROOT / rel).exists() or (md.parent / rel).exists()


@pytest.mark.parametrize("md", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_path_target_configuration_and_module_exists(md):
    text = FOREIGN.sub("", md.read_text(encoding="utf-8"))
    problems = []
    for rel in PATH.findall(text):
        if not _exists(rel, md):
            problems.append(f"path {rel}")
    for rel in LINK.findall(text):
        if "://" in rel or rel.startswith("mailto:"):
            continue
        if not _exists(rel, md):
            problems.append(f"link {rel}")
    targets = make_targets()
    for name in MAKE.findall(text):
        if name not in targets and "X.Y.Z" not in name:
            problems.append(f"make {name}")
    names = known_names()
    for name in CONFIG.findall(text):
        if name not in names:
            problems.append(f"configuration or name {name}")
    modules = {p.name for p in (ROOT / "generated_tests" / "cases").rglob("test_*.py")}
    modules |= {p.name for p in (ROOT / "tests").glob("test_*.py")}
    modules |= exported_modules()
    for name in MODULE.findall(text):
        if name not in modules:
            problems.append(f"module {name}")
    assert not problems, f"{md.relative_to(ROOT)} names what does not exist: {sorted(set(problems))}"


def test_the_front_page_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_a_users_q_still_prints_the_count_line():
    """pytest's -q is a habit: the configured options must not hold it too (twice is -qq,
    which prints no "1 passed" line); make passes -q itself."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", f"{Path(__file__)}::test_the_front_page_is_short"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^1 passed\b", done.stdout, re.M), done.stdout


def test_no_internal_issue_numbers():
    """vLLM's own issues (#57562) are facts; this project's issue numbers are not."""
    pattern = re.compile(r"\b[Ii]ssues? \d+\b")
    files = [ROOT / "Makefile"] + [
        p
        for p in ROOT.rglob("*")
        if p.suffix in (".py", ".md", ".toml", ".j2", ".txt")
        and not SKIP_DIRS & set(p.relative_to(ROOT).parts)
        and p.is_file()
    ]
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found
