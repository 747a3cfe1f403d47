"""The counterexamples exported as tests of vLLM's own suite (codegen/export.py), and
the checker that runs them there (fixes/export_check.py): what the modules import, what
they assert and where, and that the checker catches a test that does not fail as
predicted. The run in vLLM's test tree itself is `make export-check` (and the sweep test
at the end)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_contract.adapter.tree import INSTALLED
from vllm_contract.codegen.cases import build
from vllm_contract.codegen.export import export_release

from vllm_contract.commands.export import RELEASES

ROOT = Path(__file__).resolve().parent.parent
# the scenarios the modules here are made from: V1 and V2, a KV-load failure, an
# over-delivery, streaming (a resumable session), each with its healthy path; and on
# 0.32.0 a KV-load failure on a block another request found in the prefix cache
SCENARIOS = ("v2-kvfail", "v1-over-delivery", "v1-kvfail", "kvfail-stream")
PREFIX_SCENARIO = "v2-kvfail-shared"
ALLOWED = {"collections", "time", "pytest", "vllm"}  # and vLLM's own tests/v1/core/utils.py


@pytest.fixture(scope="module")
def prove_dir(prove_results) -> Path:
    configs = [f"{s}@{r}" for s in SCENARIOS for r in ("0.29.0", "0.32.0", "0.33.0")]
    return prove_results(configs + [f"{PREFIX_SCENARIO}@0.32.0"])


@pytest.fixture(scope="module")
def sources(prove_dir):
    wanted = (*SCENARIOS, PREFIX_SCENARIO)
    paths = sorted(p for p in (prove_dir / "traces").rglob("*.itf.json") if p.parent.name.split("@")[0] in wanted)
    assert paths, f"no traces of {wanted} under {prove_dir}"
    return [build(p) for p in paths]


@pytest.fixture(scope="module")
def exported(sources):
    return {release: export_release(sources, release) for release in ("0.32.0", "0.33.0")}


def _imports(text: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or "").split(".")[0])
    return found


def test_an_exported_module_imports_only_vllm_pytest_and_vllms_own_test_helpers(exported):
    for release, (files, done, _left) in exported.items():
        assert done, release
        for name, text in files.items():
            if not name.endswith(".py"):
                continue
            imports = _imports(text)
            assert imports - ALLOWED == {".utils"}, (release, name, imports)
            for word in ("targets", "codegen", "model", "spec", "vllm_contract", "fixes"):
                assert f"import {word}" not in text and f"from {word}" not in text, (release, name, word)


def test_export_is_byte_identical_from_the_same_traces(sources, exported):
    again = export_release(sources, "0.32.0")[0]
    assert again == exported["0.32.0"][0]


def test_the_v2_kvfail_counter_case_fails_at_vllms_assert_on_0_32_0_and_passes_with_the_guard(exported):
    files = exported["0.32.0"][0]
    module = "test_contract_v2_kvfail__counter_nonnegative.py"
    expected = json.loads(files["expected.json"])
    test = expected[f"{module}::test_v2_kvfail__counter_nonnegative"]
    assert test["release"] == {
        "outcome": "failed",
        "step": 7,
        "statement": "assert request.num_output_placeholders >= 0",
    }
    assert test["guard"] == {"outcome": "passed"}
    control = expected[f"{module}::test_v2_kvfail__healthy_path_control"]
    assert control["release"] == control["guard"] == {"outcome": "passed"}
    text = files[module]
    # the runner's decisions are data, each with its rule evaluated
    assert re.search(r'in_flight\.append\(_schedule\(scheduler, budget=\d+, returns=\{"r0": 1\}\)\)', text)
    assert re.search(r"\(the V2 runner: g \+ n = \d+ \+ \d+ = 16 < prefill_len = 16\? no -> samples\)", text)
    assert '_deliver(scheduler, in_flight.popleft(), kv_failed=("r0", 0))' in text
    assert 'assert r0.num_output_placeholders >= 0, f"step 7:' in text
    # every step's call lines map back to the step (how the checker names a failure's step)
    assert sorted(set(test["lines"].values())) == list(range(1, 8))


def test_0_33_0_exports_what_it_violates_and_says_why_the_rest_is_left_out(exported):
    files, done, left = exported["0.33.0"]
    names = {m.case for m in done}
    # 0.33.0 asserts the counter only after a delivery that found it positive: the
    # KV-failure trace's counter holds there, the over-delivery still crashes
    assert "v1_over_delivery__counter_nonnegative" in names
    assert "v2_kvfail__counter_nonnegative" not in names
    reasons = dict(left)
    assert reasons["v2_kvfail__counter_nonnegative"].startswith("counter-nonnegative holds on vLLM 0.33.0")
    assert "runner-level property" in reasons["v2_kvfail__predicates_agree"]
    assert "v2_kvfail__counter_nonnegative: counter-nonnegative holds" in files["README.md"]


def test_a_prefix_cache_case_runs_with_prefix_caching_and_prompts_that_share_the_traces_prefix(exported):
    """The step-5-versus-7 bug: exported without prefix caching (create_scheduler's default
    is off) and with create_requests' prompts (all alike), the second request found no
    cached block, its step was a prefill chunk without a placeholder, and vLLM's counter
    assert fired two steps before the model's (docs/export.md)."""
    files = exported["0.32.0"][0]
    text = files["test_contract_v2_kvfail_shared__counter_nonnegative.py"]
    assert "        enable_prefix_caching=True,\n" in text
    requests = re.findall(r'r(\d) = _request\("r\1", prompt_len=(\d+), block_size=16, shared_prefix=(\d+)\)', text)
    assert len(requests) == 4, requests  # two in the violation test, two in its control
    shared = {int(s) for _r, _len, s in requests[:2]}
    assert len(shared) == 1 and shared.pop() >= 16  # the trace's prefix covers the failed block
    assert "prompt_token_ids=[SHARED_TOKEN_ID] * common + [own] * (prompt_len - common)" in text
    assert "from .utils import create_scheduler\n" in text
    plain = files["test_contract_v2_kvfail__counter_nonnegative.py"]
    assert "enable_prefix_caching" not in plain and "shared_prefix" not in plain
    assert "from .utils import create_requests, create_scheduler" in plain


def test_a_v2_module_says_that_triton_interpret_alone_does_not_run_it_on_a_cpu(exported):
    text = exported["0.32.0"][0]["test_contract_v2_kvfail__counter_nonnegative.py"]
    assert "TRITON_INTERPRET=1 alone does not turn it on" in text
    assert "with vLLM seeing it" not in text


def test_a_resumable_session_is_exported_resumable(exported):
    text = exported["0.32.0"][0]["test_contract_kvfail_stream__safe_frontier_nonnegative.py"]
    assert "    r0.resumable = True  # a streaming session: more input may follow" in text


FAILURE_AT_VLLM = """tests/v1/core/test_contract_x.py:120: in test_x
    _deliver(scheduler, in_flight.popleft())
tests/v1/core/test_contract_x.py:94: in _deliver
    scheduler.update_from_output(output, runner_output)
{sched}:3: in _update_request_with_output
    assert request.num_output_placeholders >= 0
E   AssertionError"""


def test_the_checker_names_the_assert_and_the_step_and_refuses_any_other(tmp_path):
    from vllm_contract.fixes.export_check import judge

    sched = tmp_path / "async_scheduler.py"
    sched.write_text("x = 1\ny = 2\n        assert request.num_output_placeholders >= 0\n")
    failure = FAILURE_AT_VLLM.format(sched=sched)
    expect = {
        "outcome": "failed",
        "step": 7,
        "statement": "assert request.num_output_placeholders >= 0",
        "lines": {"120": 7, "119": 6},
    }
    assert judge(expect, "failed", failure, tmp_path) is None
    assert "step 6" in judge({**expect, "lines": {"120": 6}}, "failed", failure, tmp_path)
    assert "predicted vLLM's" in judge({**expect, "statement": "assert other >= 0"}, "failed", failure, tmp_path)
    assert judge(expect, "passed", "", tmp_path) == "predicted failed, observed passed"
    assert judge({"outcome": "passed"}, "failed", failure, tmp_path).startswith("predicted passed, observed failed")


def test_the_broken_copy_loses_its_violating_step(exported, tmp_path):
    from vllm_contract.fixes.export_check import BROKEN_PREFIX, break_one

    files = exported["0.32.0"][0]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    expected = json.loads(files["expected.json"])
    broken_id, exp = break_one(tmp_path, expected)
    module, _test = broken_id.split("::")
    assert module.startswith(BROKEN_PREFIX)
    original = (tmp_path / module.replace(BROKEN_PREFIX, "test_contract_")).read_text().splitlines()
    kept = (tmp_path / module).read_text().splitlines()
    step_calls = [original[int(n) - 1] for n, s in exp["lines"].items() if s == exp["release"]["step"]]
    removed = [ln for ln in step_calls if ln.strip().startswith(("_", "in_flight"))]
    assert removed and len(kept) == len(original) - len(removed)


def test_releases_whose_v2_runner_refuses_ngram_drafts_say_so_and_export_the_rest(sources):
    files, done, left = export_release(sources, "0.29.0")
    reasons = dict(left)
    assert reasons["v2_kvfail__counter_nonnegative"] == (
        "vLLM 0.29.0's Model Runner V2 refuses ngram drafts (vllm/config/vllm.py:2564-2565) "
        "and every draft method it accepts needs a draft model"
    )
    assert "test_contract_v1_over_delivery__counter_nonnegative.py" in files  # V1: exported


def test_make_export_and_export_check_default_to_every_release():
    """Not fix-check's RELEASE default (the Makefile's ASKED_RELEASE)."""
    import os

    # a make of its own (under `make test` the parent's MAKEFLAGS would print directories)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "RELEASE")}

    def command(*argv: str) -> str:
        done = subprocess.run(
            ["make", "-n", "--no-print-directory", *argv], cwd=ROOT, capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        return [line for line in done.stdout.splitlines() if "vllm-contract export" in line][-1]

    assert "--release" not in command("export")
    assert all(r in command("export-check") for r in ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"))
    assert command("export", "RELEASE=0.30.0").endswith("--release 0.30.0")


def test_the_guard_readme_lists_what_export_check_measured():
    """fixes/step-reservation-guard/README.md's list is the committed results' (make
    export-check rewrites it)."""
    from vllm_contract.fixes.export_check import README, readme_block

    block = readme_block()
    assert block in README.read_text(), "the README's exported tests are stale: run `make export-check`"
    assert "- `test_contract_v2_kvfail__counter_nonnegative.py`" in block.split("vLLM 0.32.0")[1]


def _passing_record(files: dict[str, str]) -> dict:
    """The results export-check writes for a run of `files` in which everything held."""
    from vllm_contract.fixes.export_check import digests, predictions

    predicted = predictions(json.loads(files["expected.json"]))
    observed = {arm: {t: p[arm]["outcome"] for t, p in predicted.items()} for arm in ("release", "guard")}
    return {
        "digests": digests(files),
        "predicted": predicted,
        "observed": observed,
        "ok": True,
        "broken_copy_caught": True,
    }


def test_committed_results_of_other_modules_or_predictions_are_stale(tmp_path):
    """fixes/export_check.stale, the check below, on a made-up export: a passing record of
    the same modules is not stale, and each way a record stops matching is named."""
    from vllm_contract.fixes.export_check import stale

    expect = {"outcome": "failed", "step": 7, "statement": None}
    expected = {"test_contract_x.py::test_x": {"release": expect, "guard": {"outcome": "passed"}, "lines": {}}}
    files = {"test_contract_x.py": "def test_x(): ...\n", "expected.json": json.dumps(expected)}

    def write(record: dict) -> None:
        (tmp_path / "0.32.0.json").write_text(json.dumps(record))

    assert stale("0.32.0", files, tmp_path)[0].startswith("0.32.0: no committed results")
    write(_passing_record(files))
    assert stale("0.32.0", files, tmp_path) == []
    changed = {**files, "test_contract_x.py": "def test_x(): pass\n"}
    assert "changed since they were checked (test_contract_x.py)" in stale("0.32.0", changed, tmp_path)[0]
    added = {**files, "test_contract_y.py": "def test_y(): ...\n"}
    assert "exported now but never checked (test_contract_y.py)" in stale("0.32.0", added, tmp_path)[0]
    moved = json.loads(files["expected.json"])
    moved["test_contract_x.py::test_x"]["release"] = {**expect, "step": 5}
    said = stale("0.32.0", {**files, "expected.json": json.dumps(moved)}, tmp_path)
    assert "1 test(s) predicted otherwise than committed" in said[0]
    write({**_passing_record(files), "ok": False, "problems": ["x"]})
    assert stale("0.32.0", files, tmp_path) == [
        "0.32.0: the committed run did not pass (1 problem(s)): run `make export-check RELEASE=0.32.0` and "
        "commit 0.32.0.json and 0.32.0.txt"
    ]
    record = _passing_record(files)
    record["observed"]["guard"]["test_contract_x.py::test_x"] = "failed"
    write(record)
    assert (
        "1 committed outcome(s) are not the predicted ones (test_contract_x.py::test_x [guard]"
        in (stale("0.32.0", files, tmp_path)[0])
    )


@pytest.fixture(scope="module")
def whole_matrix(tmp_path_factory) -> Path:
    """The prover's results of the whole matrix: build/prove when it is complete and
    computed from the sources here now (make test proves it first), else a prover run of
    its own (about 70 s on 2 cores)."""
    from vllm_contract.model.results import StaleSummary, load_summary

    built = ROOT / "build" / "prove"
    try:
        if load_summary(built)["complete"]:
            return built
    except StaleSummary:
        pass
    out = tmp_path_factory.mktemp("prove") / "prove"
    done = subprocess.run(
        [sys.executable, "-m", "vllm_contract", "prove", "--no-walks", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return out


@pytest.mark.slow  # every trace of the matrix replayed on every arm (make export's work, about 35 s of CPU)
def test_the_committed_export_check_results_are_of_what_make_export_writes_now(whole_matrix, sweep):
    """bench/results/export/<release>.json is a passing export-check of exactly the modules
    and predictions `make export` writes now: for the installed release and the newest one,
    and for every release under --sweep (vLLM's test tree is not run: export-check itself
    did that when the results were written)."""
    from vllm_contract.codegen.generate import plan
    from vllm_contract.fixes.export_check import stale

    sources = plan(whole_matrix, [], None).sources
    releases = RELEASES if sweep else sorted({INSTALLED, RELEASES[-1]})
    said = [line for release in releases for line in stale(release, export_release(sources, release)[0])]
    assert not said, "\n".join(said)


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.sweep  # two pytest runs in vLLM's sdist test tree per release (make export-check)
@pytest.mark.parametrize("release", RELEASES)
def test_export_check_passes_in_vllms_own_test_tree(release, tmp_path):
    done = subprocess.run([sys.executable, "-m", "vllm_contract", "export"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    check = subprocess.run(
        [sys.executable, "-m", "vllm_contract", "export-check", release, "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    report = json.loads((tmp_path / f"{release}.json").read_text())
    assert report["ok"] and report["broken_copy_caught"] and report["modules"] > 0


def test_a_reset_that_a_session_makes_fail_is_exported_as_raising():
    """A reset while a streaming session holds KV blocks raises in vLLM after the
    preemptions (the model's observed `reset_fails`): the exported step expects that
    RuntimeError, and a reset that succeeds is a plain call."""
    from types import SimpleNamespace

    from vllm_contract.codegen.export import _steps
    from vllm_contract.spec.config import Config

    cfg = Config("reset-stream", runner="v1", events=frozenset({"stream", "reset"}), profile="vllm-0.32.0")
    steps = [
        ("schedule", {"budget": 10}),
        ("schedule", {"budget": 10}),
        ("deliver", {"stop": [1, 0]}),  # r0's session waits for input, holding its blocks
        ("reset_prefix_cache", {}),
        ("schedule", {"budget": 10}),
        ("deliver", {}),
        ("stream_update", {"req": 0, "new_tokens": 3}),
        ("reset_prefix_cache", {}),
        ("schedule", {"budget": 10}),
        ("deliver", {}),
        ("reset_prefix_cache", {}),  # both were scheduled and are preempted: nothing is held
    ]
    case = SimpleNamespace(init={"prompt_len": [3, 3], "resumable": [True, False]}, steps=steps)
    resets = [step["code"] for step in _steps(cfg, case, None, set()) if step["event"] == "reset_prefix_cache"]
    raising = [
        'with pytest.raises(RuntimeError, match="Failed to reset KV cache"):',
        "    scheduler.reset_prefix_cache(reset_running_requests=True)",
    ]
    assert resets == [raising, raising, ["scheduler.reset_prefix_cache(reset_running_requests=True)"]]


def test_a_plugin_runners_finding_is_exported_for_its_ci_with_a_control_on_which_its_property_holds(prove_results):
    """vllm-metal before #179 on 0.32.0: the counter case is exported (the runner's returns as
    data, nothing of the plugin imported); the stray-token case is not, because the
    scenario's only healthy path samples a chunk on its way, and a control asserts the
    case's property at every step."""
    from vllm_contract.codegen.export import _release_arm

    prove_dir = prove_results(["plugin-metal@0.32.0"])
    sources = [build(p) for p in sorted((prove_dir / "traces" / "plugin-metal@0.32.0").glob("*.itf.json"))]
    files, done, left = export_release(sources, "0.32.0")
    names = {m.case for m in done}
    assert "plugin_metal__counter_nonnegative" in names
    text = files["test_contract_plugin_metal__counter_nonnegative.py"]
    assert "For vllm-metal's CI" in text and "needs\nnothing of vllm-metal installed" in text
    assert _imports(text) - ALLOWED == {".utils"}  # vLLM's own tests/v1/core/utils.py, no plugin
    reasons = dict(left)
    assert "no healthy path of plugin-metal on 0.32.0" in reasons["plugin_metal__no_token_while_prefilling"]
    # what rules it out: the healthy path breaks the property (the model says where)
    (witness,) = [s for s in sources if s.case.kind == "witness"]
    others = dict(_release_arm(witness, "0.32.0")[1].others)
    assert others.get("no-token-while-prefilling") and "counter-nonnegative" not in others
