"""`make review`: what a vLLM tree does on a case, and base against head.

The classification and the citation comparison are tested on small observations; the
observer itself runs a generated case on the loaded vLLM tree (`--vllm`), as review's
subprocesses do, and must see the assert the model predicts, where it predicts it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from vllm_contract.report import review
from vllm_contract.spec.errors import ExitStatus

from vllm_contract.cli import main as cli


def obs(
    reaction="holds", violations=None, fired=None, error=None, diverged=None, could_not_run=None, stuck=(), model=()
):
    return {
        "reaction": reaction,
        "observed": {
            "violations": violations or {},
            "fired": fired,
            "error": error,
            "diverged": diverged,
            "could_not_run": could_not_run,
            "stuck": [list(s) for s in stuck],
            "model_stuck": [list(s) for s in model],
        },
    }


def arm(module, prop, o, clamp=False, kind="violation"):
    return {"case": Path(module).stem, "module": module, "kind": kind, "property": prop, "clamp": clamp, **o}


CRASH = obs("crash", {"counter-nonnegative": 7}, ["placeholders-nonnegative", 7, "async_scheduler.py:71"])
SILENT = obs("silent", {"counter-nonnegative": 7})
V2_DRAFTS = "ValidationError: 1 validation error for VllmConfig Model Runner V2 does not yet support: ngram_gpu"
NOT_RUN = obs("could not run", could_not_run=V2_DRAFTS)
TREE = {"title": "vLLM X", "described": "vLLM X", "label": "x", "kind": "release", "version": "x"}
NO_CITES = {"moved": [], "changed": [], "only_base": [], "only_head": []}


def test_fixed_still_broken_changed_reaction_and_newly_broken():
    base = {
        "cases": [
            arm("m/a.py", "counter-nonnegative", CRASH),
            arm("m/b.py", "counter-nonnegative", CRASH),
            arm("m/c.py", "no-token-while-prefilling", obs()),
            arm("m/h.py", None, obs(), kind="witness"),
        ],
        "fuzz": [{"id": "t1", **obs()}, {"id": "t2", **SILENT}],
    }
    head = {
        "cases": [
            arm("m/a.py", "counter-nonnegative", obs(diverged={"step": 7, "event": "deliver", "keys": {}})),
            arm("m/b.py", "counter-nonnegative", SILENT),
            arm("m/c.py", "no-token-while-prefilling", obs("silent", {"computed-nonnegative": 5})),
            arm("m/h.py", None, obs(error="step 2 deliver: RuntimeError: boom"), kind="witness"),
        ],
        "fuzz": [{"id": "t1", **SILENT}, {"id": "t2", **obs()}],
    }
    cmp = review.compare(base, head)
    assert [i["case"] for i in cmp["fixed"]] == ["a"]
    assert [i["case"] for i in cmp["still"]] == ["b"] and [i["case"] for i in cmp["reaction"]] == ["b"]
    assert {i["case"]: i["newly"] for i in cmp["new"]} == {"c": ["computed-nonnegative"], "h": ["raises"]}
    assert [i["trace"] for i in cmp["fuzz"]["new"]] == ["t1"] and [i["trace"] for i in cmp["fuzz"]["fixed"]] == ["t2"]
    assert "step 7 deliver" in cmp["fixed"][0]["head_differs"]
    # crash on base, silent on head, the property still violated: breaking, as is an
    # assert that no longer guards its state (b's counter goes negative with nothing firing)
    assert {i["case"] for i in review.breaking(cmp)} == {"b", "c", "h", "t1"}
    assert [i["case"] for i in cmp["unguarded"]] == ["b"] and cmp["unguarded"][0]["asserts"] == [
        "placeholders-nonnegative"
    ]


STALE = (0, "stale", "num_stale_output_tokens 2 > 0 token(s) its steps in flight drain, so schedule() skips it")
HUNG = obs("hang", {"stale-drains": 4, "bounded-progress": 6}, stuck=[STALE])


def test_a_head_that_newly_hangs_is_breaking_said_first_and_never_fixed():
    """A head that leaves a request behind where base runs it: newly broken, breaking, named
    in the first line; a case whose own property head no longer violates is still not
    fixed when head hangs; and a hang the model does not predict is never "same as the model"."""
    base = {
        "tree": TREE,
        "cases": [arm("m/a.py", "counter-nonnegative", CRASH), arm("m/w.py", None, obs(), kind="witness")],
        "fuzz": [{"id": "t1", **obs()}],
    }
    head = {
        "tree": TREE,
        "cases": [arm("m/a.py", "counter-nonnegative", HUNG), arm("m/w.py", None, HUNG, kind="witness")],
        "fuzz": [{"id": "t1", **HUNG}],
    }
    cmp = review.compare(base, head)
    assert not cmp["fixed"]  # a's counter holds on head, but head hangs
    assert {i["case"]: "hangs" in i["newly"] for i in cmp["new"]} == {"a": True, "w": True}
    assert {i["case"] for i in review.breaking(cmp)} == {"a", "w", "t1"}
    status, first = review.outcome(cmp)
    assert status == ExitStatus.FINDING
    assert first.startswith("**Head breaks 3 thing(s) base did not, 3 of them a hang: the engine runs on and r0 never")
    assert "num_stale_output_tokens 2" in first
    text = review.summary_md(base, head, cmp, NO_CITES, 1.0, 0)
    assert text.splitlines()[0] == first
    assert "the tree hangs where the model predicts no hang" in text and "same as the model" not in text
    assert "| ... of which head hangs (run on by itself, a request never runs again) | 2 | 1 |" in text
    # the model predicting that very hang: both hang, nothing breaks, and it reads as the model's
    predicted = obs("hang", {"stale-drains": 4, "bounded-progress": 6}, stuck=[STALE], model=[STALE[:2]])
    both = {"tree": TREE, "cases": [arm("m/u.py", "stale-drains", predicted)], "fuzz": []}
    again = review.compare(both, both)
    assert [i["case"] for i in again["still"]] == ["u"] and not review.breaking(again)
    assert again["still"][0]["head_differs"] == "same as the model"


def test_crash_to_silent_is_breaking_and_said_first():
    base = {"tree": TREE, "cases": [arm("m/a.py", "counter-nonnegative", CRASH)], "fuzz": []}
    head = {"tree": TREE, "cases": [arm("m/a.py", "counter-nonnegative", SILENT)], "fuzz": []}
    cmp = review.compare(base, head)
    text = review.summary_md(base, head, cmp, NO_CITES, 1.0, 0)
    assert text.splitlines()[0] == "**Head breaks 1 thing(s) base did not**."
    assert "### Breaking: crash → silent (1)" in text and len(text) < review.COMMENT_LIMIT
    assert review.outcome(cmp)[0] == ExitStatus.FINDING


def test_reactions_are_read_as_the_one_vocabulary_and_a_misspelt_one_is_refused():
    """review compares reactions as spec/verdicts.py's Reaction, not as free words: an
    error on head is no changed reaction, and a word the vocabulary lacks stops it."""
    base = {"tree": TREE, "cases": [arm("m/a.py", "counter-nonnegative", CRASH)], "fuzz": []}
    errored = obs("error", {"counter-nonnegative": 7}, error="RuntimeError: boom")
    head = {"tree": TREE, "cases": [arm("m/a.py", "counter-nonnegative", errored)], "fuzz": []}
    assert review.compare(base, head)["reaction"] == []
    misspelt = {"tree": TREE, "cases": [arm("m/a.py", "counter-nonnegative", {**SILENT, "reaction": "silnet"})]}
    with pytest.raises(ValueError, match="silnet"):
        review.compare(base, {**misspelt, "fuzz": []})


def test_arms_that_could_not_run_are_counted_apart_never_fixed():
    """A head tree that cannot build the V2 configurations with draft tokens: those arms
    are could-not-run, once per cause, never fixed or broken; the review is incomplete."""
    base = {
        "tree": TREE,
        "cases": [arm(f"m/{n}.py", "counter-nonnegative", CRASH) for n in "abc"]
        + [arm("m/d.py", "counter-nonnegative", SILENT)],
        "fuzz": [{"id": "t1", **SILENT}],
    }
    head = {
        "tree": TREE,
        "cases": [arm(f"m/{n}.py", "counter-nonnegative", NOT_RUN) for n in "abc"]
        + [arm("m/d.py", "counter-nonnegative", SILENT)],
        "fuzz": [{"id": "t1", **NOT_RUN}],
    }
    cmp = review.compare(base, head)
    assert not cmp["fixed"] and not cmp["new"] and not review.breaking(cmp)
    assert [i["case"] for i in cmp["could_not_run"]] == ["a", "b", "c"] and len(cmp["fuzz"]["could_not_run"]) == 1
    assert cmp["could_not_run_causes"] == [{"cause": V2_DRAFTS, "count": 4, "sides": ["head"]}]
    status, first = review.outcome(cmp)
    assert status == ExitStatus.COULD_NOT_RUN and first.startswith("**Incomplete: 4 arm(s) or trace(s) could not run")
    text = review.summary_md(base, head, cmp, NO_CITES, 1.0, 0)
    assert text.splitlines()[0] == first and "### Could not run" in text and "| 4 | head |" in text
    assert "### Fixed (0)" in text
    # the other direction: base could not run them, head can; still not fixed nor broken
    back = review.compare(head, base)
    assert not back["fixed"] and not back["new"] and len(back["could_not_run"]) == 3


def test_arms_of_a_runner_head_removed_end_with_it_and_leave_the_review_complete():
    """0.33.0 -> 0.34.0: the V1 arms cannot run on head because head has no V1 runner (by
    design): counted apart as ended, never fixed, broken or could-not-run; the first line
    gives the outcome and says so; exit 0 when nothing else changed."""
    gone = obs("could not run", could_not_run="vLLM 0.34.0 has no V1 model runner")
    gone["observed"]["runner_removed"] = True
    base = {"tree": TREE, "cases": [arm("m/a.py", "counter-nonnegative", CRASH), arm("m/b.py", "x", SILENT)]}
    head = {"tree": TREE, "cases": [arm("m/a.py", "counter-nonnegative", gone), arm("m/b.py", "x", SILENT)]}
    base["fuzz"] = head["fuzz"] = []
    cmp = review.compare(base, head)
    assert [i["case"] for i in cmp["runner_removed"]] == ["a"] and not cmp["could_not_run"] and not cmp["fixed"]
    status, first = review.outcome(cmp)
    assert status == ExitStatus.OK
    assert first == "**Head breaks nothing base did not**; 1 arm(s) end with the V1 runner, which head removed."
    text = review.summary_md(base, head, cmp, NO_CITES, 1.0, 0)
    assert "| ended: the runner the arm runs on is not in head (V1, removed in 0.34.0) | 1 | 0 |" in text


def test_nothing_broken_is_said_first():
    base = {"tree": TREE, "cases": [arm("m/a.py", "counter-nonnegative", CRASH)], "fuzz": []}
    cmp = review.compare(base, base)
    assert review.outcome(cmp) == (ExitStatus.OK, "**Head breaks nothing base did not.**")


def test_citations_between_the_two_releases():
    from vllm_contract.adapter.tree import resolve

    views = {}
    for spec in ("0.32.0", "0.33.0"):
        tree = resolve(spec)
        views[spec] = review.cite_view(tree.root, spec)
    cites = review.compare_cites(views["0.32.0"], views["0.33.0"])
    assert "delivery-decrement-0.32" in {c["id"] for c in cites["only_base"]}
    assert "delivery-decrement-0.33" in {c["id"] for c in cites["only_head"]}
    assert len(cites["moved"]) > 50
    same = review.compare_cites(views["0.33.0"], views["0.33.0"])
    assert same == {"moved": [], "changed": [], "only_base": [], "only_head": []}


def test_a_bad_tree_is_one_line(capsys):
    assert cli(["review", "--base", "0.33.0", "--head", "/nonexistent/vllm"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "/nonexistent/vllm" in err


@pytest.mark.vllm
def test_the_observer_sees_what_vllm_does():
    from vllm_contract.adapter import current as vllm_env
    from vllm_contract.report.observe import case_modules, observe
    from vllm_contract.targets.vllm_target import VllmTarget

    profile = vllm_env.tree().profile
    module = next(m for m in case_modules() if m.path.endswith("vllm_0_29_0/test_v2_kvfail__counter_nonnegative.py"))
    case = module.case
    label, (overrides, expect) = next(
        (lb, a) for lb, a in case.arms.items() if a[0]["profile"] == profile and not a[0]["clamp"]
    )
    seen = observe(case.config_for(overrides), dict(case.init), case.steps, VllmTarget(clamp=False))
    assert seen.reaction == expect.reaction  # crash on 0.32.0, silent on 0.33.0
    assert seen.diverged is None  # the tree follows the model of its release
    if expect.fired:
        assert seen.fired[:2] == list(expect.fired)
    assert ("no-token-while-prefilling" in seen.violations) == any(
        p == "no-token-while-prefilling" for p, _ in expect.others
    )


def test_a_review_plays_the_release_and_its_clamp_not_our_guard_arm():
    """The +guard arm models the fix on top of the release; keyed like the plain arm
    (module, clamp off), it used to replace the plain arm and hide what the tree does."""
    from vllm_contract.report.observe import reviewed_arms

    from generated_tests.cases.vllm_0_29_0 import test_v2_kvfail__no_token_while_prefilling as module

    arms = dict(reviewed_arms(module.CASE, "vllm-0.33.0"))
    assert sorted(arms) == ["vllm-0.33.0", "vllm-0.33.0+clamp"]
    assert "vllm-0.33.0+guard" in module.CASE.arms


# ------------------------------------------------------------------ whole reviews of edited trees


def edited_tree(root: Path, rel: str, line: str, replacement: str) -> Path:
    """A copy of vLLM 0.33.0's package with one line of `rel` replaced (a checkout)."""
    import shutil

    release = Path(__file__).resolve().parent.parent / ".vllm_trees" / "0.33.0"
    if not (release / "vllm" / "__init__.py").is_file():
        pytest.fail("vLLM 0.33.0 is not fetched: run `make vllm-0.33.0`")
    shutil.copytree(release / "vllm", root / "vllm")  # with its byte-code: only the edited file compiles
    text = (root / rel).read_text()
    assert text.count(line) == 1, f"{rel} changed; pick another line"
    (root / rel).write_text(text.replace(line, replacement))
    return root


def review_run(head: Path, out: Path, cases: str, capsys, fuzz: int = 0, prove_dir: Path | None = None):
    argv = ["review", "--base", "0.33.0", "--head", str(head), "--fuzz", str(fuzz), "--cases", cases, "--out", str(out)]
    code = cli(argv + (["--from", str(prove_dir)] if prove_dir else []))
    return code, capsys.readouterr().err


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.sweep  # end to end on an edited tree; the counting itself is checked above in-process
def test_a_head_that_cannot_build_some_arms_counts_them_only_as_could_not_run(tmp_path, capsys):
    """Model Runner V2 refusing every draft method: the arms with drafts could not run,
    their cause is said once with its count, nothing is fixed, exit 3. (Not a refusal of
    ngram_gpu alone: the targets lift that one, as 0.29.0-0.31.0 listed it although their
    V2 ran the same code, adapter/objects.py v2_accepts_ngram_gpu.)"""
    line = 'if speculative_config.method in ("suffix", "custom_class"):'
    refuse = 'if True:\n                unsupported.append("draft tokens of any method")\n            '
    head = edited_tree(tmp_path / "head", "vllm/config/vllm.py", line, refuse + line)
    code, err = review_run(head, tmp_path / "review", "*v2_kvfail__*", capsys, fuzz=1)
    assert code == ExitStatus.COULD_NOT_RUN, err[-2000:]
    text = (tmp_path / "review" / "summary.md").read_text()
    assert text.splitlines()[0].startswith("**Incomplete: ")
    compared = json.loads((tmp_path / "review" / "summary.json").read_text())["compare"]
    # every arm of these cases has a draft token (K = 1): each could not run, for one cause
    arms = len(compared["could_not_run"])
    assert arms > 0 and len(compared["could_not_run_causes"]) == 1
    assert not compared["fixed"] and not compared["still"] and not compared["new"] and not compared["both_hold"]
    assert text.count("Model Runner V2 does not yet support: draft tokens of any method") == 1
    assert "| fixed (base violates the case's property, head does not) | 0 | 0 |" in text
    # the fuzz traces with draft tokens cannot be built on head either: counted apart too
    fuzz_not_run = re.search(r"\| \*\*could not run\*\* on base or head [^|]*\| (\d+) \| (\d+) \|", text)
    assert fuzz_not_run and int(fuzz_not_run.group(1)) == arms and int(fuzz_not_run.group(2)) > 0, text[:3000]


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.sweep  # end to end on two edited trees; the classification is checked above in-process
def test_a_head_without_the_counter_assert_is_breaking_and_a_failed_review_leaves_no_summary(
    tmp_path, capsys, prove_results
):
    """The counter assert replaced by `pass`: crash -> silent and an unguarded assert, said
    first, exit 1, with the case as a vLLM test of head's release. Then a review whose head
    cannot be driven (exit 4) leaves that summary only as the previous one, never as its own."""
    prove_dir = prove_results(["v1-over-delivery@0.33.0"])
    head = edited_tree(
        tmp_path / "head",
        "vllm/v1/core/sched/scheduler.py",
        "            assert request.num_output_placeholders >= 0\n",
        "            pass\n",
    )
    out = tmp_path / "review"
    code, err = review_run(head, out, "*over_delivery__counter_nonnegative*", capsys, prove_dir=prove_dir)
    assert code == ExitStatus.FINDING, err[-2000:]
    text = (out / "summary.md").read_text()
    assert text.splitlines()[0].startswith("**Head breaks ")
    assert "### Breaking: crash → silent (2)" in text and "### Breaking: an assert no longer guards (2)" in text
    assert "the model fires placeholders-nonnegative, the tree nothing" in text
    assert "same as the model" not in text.split("### Still broken")[0].split("### Breaking")[1]
    # the violated case as a test of vLLM 0.33.0's own suite, collapsed, with how to run it
    exported = text.split("### As tests of vLLM's own suite (1)")[1].split("### Citations")[0]
    assert "pytest tests/v1/core/test_contract_v1_over_delivery__counter_nonnegative.py" in exported
    assert "<details>" in exported and "def test_v1_over_delivery__counter_nonnegative(" in exported

    broken = edited_tree(
        tmp_path / "broken",
        "vllm/v1/core/sched/scheduler.py",
        "        self.kv_holding_waiting = create_request_queue(self.policy)\n",
        "        pass\n",
    )
    code, err = review_run(broken, out, "*over_delivery__counter_nonnegative*", capsys)
    assert code == ExitStatus.TREE, err[-2000:]
    assert "Scheduler.kv_holding_waiting" in err
    assert not (out / "summary.md").exists()
    assert (out.parent / "review.previous" / "summary.md").read_text() == text
