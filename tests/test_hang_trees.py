"""Negative controls on vLLM's own code: trees edited to hang, and the releases as released.

Each edit is one line of 0.33.0's scheduler, of a class users report (docs/findings.md):
update_from_output never drains a step's stale share (a missing drain, the tpu-inference
#3492 class by any amount), _update_after_schedule counts one token more in flight than
it scheduled (an extra in-flight count: the stale share a preemption makes is never
drained), _preempt_request never puts its victim back in the waiting queue (a lost
wake-up: with nothing else to do has_requests() is false and the engine idles, the
local-inference-lab/vllm #191 symptom). Each must be named as a hang by the generated
liveness cases on the tree, by a preemption played on it (tests/hang_probe.py: the
harness runs the engine on by itself after the last step), by the contract monitor
(a HANG line and a trace that `explain --trace` places on the tree, not on the model)
and by review (its first line); the releases as released by none of them.

One vLLM tree per process: every run on an edited tree is a child process. The full set
is `make test-all` (sweep); `make test` runs the missing drain and the 0.33.0 control.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from vllm_contract.adapter import released
from vllm_contract.adapter.forkserver import interpreter
from vllm_contract.adapter.tree import RELEASES, resolve
from vllm_contract.spec.properties import PROPERTIES

REPO = Path(__file__).resolve().parent.parent
SCHEDULER = "vllm/v1/core/sched/scheduler.py"


@dataclass(frozen=True)
class Edit:
    old: str  # the line of vllm/v1/core/sched/scheduler.py, found exactly once in every release
    new: str
    what: str
    why: str  # model/hang.py's code for what then holds the request


EDITS = {
    "missing-drain": Edit(
        "                    request.num_stale_output_tokens -= num_tokens_scheduled\n",
        "                    pass\n",
        "update_from_output never drains a step's stale share",
        "stale",
    ),
    "extra-in-flight": Edit(
        "            request.num_in_flight_tokens += num_scheduled_token\n",
        "            request.num_in_flight_tokens += num_scheduled_token + 1\n",
        "_update_after_schedule counts one token more in flight than it scheduled",
        "stale",
    ),
    "lost-wakeup": Edit(
        "        self.waiting.prepend_request(request)\n",
        "        pass\n",
        "_preempt_request never puts its victim back in the waiting queue",
        "asleep",
    ),
}
# make test runs the first; make test-all every one
EDIT_PARAMS = [pytest.param(name, marks=[] if name == "missing-drain" else [pytest.mark.sweep]) for name in EDITS]
RELEASE_PARAMS = [pytest.param(r, marks=[] if r == "0.33.0" else [pytest.mark.sweep]) for r in RELEASES]


def edited_tree(root: Path, edit: str, release: str = "0.33.0") -> Path:
    """A copy of a release's `vllm` package with one edit (a checkout declaring the release)."""
    package = resolve(release).package
    if not (package / "__init__.py").is_file():
        pytest.fail(f"vLLM {release} is not fetched: run `make vllm-{release}`")
    shutil.copytree(package, root / "vllm", ignore=shutil.ignore_patterns("*.so"))
    change = EDITS[edit]
    text = (root / SCHEDULER).read_text()
    assert text.count(change.old) == 1, f"{SCHEDULER} of {release} changed; pick another line for {edit}"
    (root / SCHEDULER).write_text(text.replace(change.old, change.new))
    return root


def _child(*argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VLLM"}
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def probe(tree: str, folder: Path) -> dict:
    proc = _child(*interpreter(), str(REPO / "tests" / "hang_probe.py"), tree, str(folder))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ which code ran


def test_the_released_table_is_each_releases_tree_and_an_edit_departs(tmp_path):
    """adapter/released.py holds the hashes of each release's tree as the project resolves
    it (the negative control: one edited line is a departure from the release)."""
    for release in RELEASES:
        package = resolve(release).package
        if not (package / "__init__.py").is_file():
            pytest.fail(f"vLLM {release} is not fetched: run `make vllm-{release}`")
        found = released.fingerprint(package)
        assert found == released.RELEASED[release], release
        assert released.departures(found, release) == []
    tree = edited_tree(tmp_path / "t", "missing-drain")
    assert released.departures(released.fingerprint(tree / "vllm"), "0.33.0") == ["v1/core/sched/scheduler.py"]
    assert released.departures(released.fingerprint(tree / "vllm"), "9.9.9") == list(released.FILES)


# ------------------------------------------------------------------ edited trees


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("edit", EDIT_PARAMS)
def test_a_tree_edited_to_hang_is_a_hang_to_the_cases_and_the_monitor(tmp_path, edit):
    tree = edited_tree(tmp_path / "tree", edit)
    seen = probe(str(tree), tmp_path / "monitor")
    for name in ("cases", "monitor"):
        said = seen[name]
        assert said.startswith("hang_probe [vllm-0.33.0]") and "HANG on the target" in said, said
        assert "request r0 never runs again" in said, said
    assert seen["flushed"] and seen["traces"], seen
    (trace,) = [t for t in seen["traces"] if t["violated"] == "bounded-progress"]
    assert trace["hang"]["request"] == "r0" and trace["hang"]["why"] == EDITS[edit].why, trace
    assert trace["hang"]["bound"] == 6
    # explain places it on the tree: the file the edit changed, never a finding about the model
    assert trace["status"] == 1, trace
    assert (
        "departs from the 0.33.0 model" in trace["headline"] and "vllm/v1/core/sched/scheduler.py" in trace["headline"]
    )
    assert "a finding about the model" not in trace["headline"].replace("not a finding about the model", "")

    # the generated liveness cases (the under-drain ones: each preempts with its prompt in
    # flight, its output delivered) name the stuck request on the tree, and the count that holds it
    liveness = {f"test_under_drain__{name.replace('-', '_')}.py" for name, p in PROPERTIES.items() if p.hangs}
    cases = sorted(
        str(p.relative_to(REPO)) for p in (REPO / "generated_tests" / "cases").glob("*/*.py") if p.name in liveness
    )
    assert cases, "no generated under-drain case: regenerate the suites (make generate)"
    pytest_argv = ["-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--tb=native", *cases]
    run = _child(*interpreter(), *pytest_argv, "--target=vllm", f"--vllm={tree}")
    assert run.returncode == 1, run.stdout[-3000:]
    failed = int(re.search(r"(\d+) failed", run.stdout).group(1))
    said = [ln for ln in run.stdout.splitlines() if ln.startswith("vllm_contract.targets.harness.Divergence: ")]
    assert len(said) == failed == len(cases), run.stdout[-3000:]
    assert all("HANG on the target" in ln and "request r0 never runs again" in ln for ln in said), said


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASE_PARAMS)
def test_no_release_as_released_hangs_on_a_preemption(tmp_path, release):
    """The control: each release resumes the preempted request; the monitor writes nothing."""
    seen = probe(release, tmp_path / "monitor")
    assert seen["cases"] == "passed" and seen["monitor"] == "passed", seen
    assert seen["traces"] == [], seen


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.sweep  # two observers a review; the classification: tests/test_review.py
@pytest.mark.parametrize("edit", list(EDITS))
def test_review_says_first_that_head_hangs(tmp_path, edit):
    tree = edited_tree(tmp_path / "tree", edit)
    out = tmp_path / "review"
    argv = ["review", "--base", "0.33.0", "--fuzz", "1", "--cases", "*under_drain__*", "--out", str(out)]
    run = _child(*interpreter(), "-m", "vllm_contract", *argv, "--head", str(tree))
    assert run.returncode == 1, run.stderr[-3000:]
    first = (out / "summary.md").read_text().splitlines()[0]
    assert first.startswith("**Head breaks ") and "of them a hang: the engine runs on and r" in first, first
    assert "never runs again" in first, first
    control = _child(*interpreter(), "-m", "vllm_contract", *argv, "--head", "0.33.0")
    assert control.returncode == 0, control.stderr[-3000:]
    assert (out / "summary.md").read_text().splitlines()[0] == "**Head breaks nothing base did not.**"
