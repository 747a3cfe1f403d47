"""The Makefile's variables: each one a person sets belongs to the targets that say so.

`RELEASE ?= 0.33.0`, meant for fix-check, once made `make explain` answer for 0.33.0 only,
the class that had been fixed for export. Here every variable a person sets has its
targets (the README's command table), and `make -n` of each target, with every such
variable set to an expansion that reports where make reads it, must read exactly its own:
a variable read by another target fails, and so does one its target no longer reads. What
to run has no default at the top of the Makefile, where every target reads it.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = (ROOT / "Makefile").read_text()

# what to run: variable -> the targets that read it (export-check through its prerequisite export)
OWNERS = {
    "VLLM": {"test", "test-preflight", "cite-check", "fuzz"},
    "CONFIGS": {"prove"},
    "COUNTERS": {"explain"},
    "ALL_RELEASES": {"explain"},
    "RELEASE": {"explain", "cite-check", "fix-check", "vllm-tests", "export", "export-check"},
    "FIX": {"fix-check", "vllm-tests"},
    "FIX_CASES": {"fix-check"},
    "CASE": {"export", "export-check"},
    "CASES": {"fuzz"},
    "SEED": {"fuzz"},
    "RELEASES": {"fuzz"},
    "RUNNER": {"fuzz"},
    "WORKERS": {"fuzz"},
    "RAY": {"fuzz"},
    "OUT": {"fuzz"},
    "RESUME": {"fuzz"},
    "A": {"diff-versions"},
    "B": {"diff-versions"},
    "BASE": {"review"},
    "HEAD": {"review"},
    "FUZZ": {"review"},
}
# how to run (the interpreter, parallelism, a tool's path): the same meaning wherever it is
# read, so a default at the top is everyone's
HOW = {"PYTHON", "JOBS", "READY_JOBS", "LANES", "STAGE_WORKERS", "CHROMIUM"}
BUILTIN = {"MAKE", "CURDIR", "MAKEFLAGS"}


def _names(pattern: str) -> set[str]:
    return set(re.findall(pattern, MAKEFILE, re.M))


def user_variables() -> set[str]:
    """The variables the Makefile reads but does not set itself (a `?=` default counts as unset)."""
    read = _names(r"\$\(([A-Z_][A-Z0-9_]*)\)") | _names(r"\$\$\{?([A-Z_][A-Z0-9_]*)")
    assigned = _names(r"^(?:export\s+)?([A-Z_][A-Z0-9_]*)\s*(?::=|\+=|=)")
    return (read | _names(r"^([A-Z_][A-Z0-9_]*)\s*\?=")) - assigned - BUILTIN


def make_n(*args: str) -> subprocess.CompletedProcess:
    """`make -n` in a clean environment: no variable of ours, nothing from an outer make."""
    env = {k: v for k, v in os.environ.items() if k not in user_variables() | {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done


# each variable set to an expansion that reports where make expands it (and expands to
# nothing, so the target runs as with the variable unset): a read shows whatever the
# construct, $(if $(RESUME),--resume) or $(or $(RELEASES),$(VLLM),0.32.0) included
WATCHED = [f"{name}=$(warning READ {name})" for name in OWNERS if name != "COUNTERS"]
READ = re.compile(r"^Makefile:(\d+): READ (\w+)$", re.M)


def reads_at(stderr: str) -> set[tuple[int, str]]:
    return {(int(line), name) for line, name in READ.findall(stderr)}


def rule_at(line: int) -> str:
    """The target whose rule holds a Makefile line (its header is the last one above)."""
    header = re.compile(r"^([A-Za-z][\w.-]*)\s*:(?!=)")
    for text in reversed(MAKEFILE.splitlines()[:line]):
        match = header.match(text)
        if match:
            return match.group(1)
    return ""


@functools.cache
def read_while_parsing() -> frozenset:
    return frozenset(reads_at(make_n("--eval=nothing-at-all:", "nothing-at-all", *WATCHED).stderr))


def reads(target: str) -> set[str]:
    """The variables `make TARGET` expands: in its recipes and its prerequisites' (a
    conditional read while the Makefile is parsed counts for the rule that holds it);
    COUNTERS is read by the shell ($$COUNTERS)."""
    parsing = read_while_parsing()
    done = make_n(target, *WATCHED)
    found = {name for line, name in reads_at(done.stderr) - parsing}
    found |= {name for line, name in parsing if rule_at(line) == target}
    if re.search(r"\$\{?COUNTERS\b", done.stdout):
        found.add("COUNTERS")
    return found


def phony_targets() -> list[str]:
    database = subprocess.run(
        ["make", "-pnq", ".DEFAULT"], cwd=ROOT, capture_output=True, text=True, env={"PATH": os.environ["PATH"]}
    ).stdout
    line = next(line for line in database.splitlines() if line.startswith(".PHONY:"))
    return sorted(line.split(":", 1)[1].split())


def test_every_variable_a_person_sets_has_its_targets():
    assert user_variables() == set(OWNERS) | HOW


def test_what_to_run_has_no_default_at_the_top():
    """A default at the top is read by every target that reads the variable: fix-check's
    RELEASE ?= 0.33.0 made explain answer 0.33.0 only. Such a default goes into the recipe
    of the target it is for: $(or $(RELEASE),0.33.0)."""
    defaults = _names(r"^([A-Z_][A-Z0-9_]*)\s*\?=")
    assert defaults <= HOW, f"a default at the top for what to run: {sorted(defaults - HOW)}"


@pytest.mark.parametrize("make_target", phony_targets())
def test_each_target_reads_only_its_own_variables(make_target):
    read = reads(make_target)
    mine = {name for name, targets in OWNERS.items() if make_target in targets}
    assert read == mine, f"make {make_target} reads {sorted(read - mine)} it should not, misses {sorted(mine - read)}"


def test_explain_answers_for_the_release_the_counters_came_from_not_fix_checks():
    def out(*args: str) -> str:
        return make_n(*args).stdout

    assert "--release" not in out("explain", "COUNTERS=placeholders=-1")
    assert "--release 0.32.0" in out("explain", "COUNTERS=placeholders=-1", "RELEASE=0.32.0")
    assert "--all-releases" in out("explain", "COUNTERS=placeholders=-1", "ALL_RELEASES=1")
    for target in ("export", "cite-check"):
        assert "--release" not in out(target)
    # fix-check keeps its own defaults
    assert "fix-check step-reservation-guard 0.34.0" in out("fix-check")
    assert "vllm-tests v2-recompute-rollback 0.32.0" in out("vllm-tests", "FIX=v2-recompute-rollback", "RELEASE=0.32.0")
