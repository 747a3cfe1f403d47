"""`make review`: what a vLLM tree does on a case, and base against head.

The classification and the citation comparison are tested on small observations; the
observer itself runs a generated case on the loaded vLLM tree (`--vllm`), as review's
subprocesses do, and must see the assert the model predicts, where it predicts it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from report import review


def obs(reaction="holds", violations=None, fired=None, error=None, diverged=None):
    return {
        "reaction": reaction,
        "observed": {"violations": violations or {}, "fired": fired, "error": error, "diverged": diverged},
    }


def arm(module, prop, o, clamp=False, kind="violation"):
    return {"case": Path(module).stem, "module": module, "kind": kind, "property": prop, "clamp": clamp, **o}


CRASH = obs("crash", {"counter-nonnegative": 7}, ["placeholders-nonnegative", 7, "async_scheduler.py:71"])
SILENT = obs("silent", {"counter-nonnegative": 7})


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


def test_the_summary_fits_one_comment_and_says_the_verdict():
    tree = {"title": "vLLM X", "described": "vLLM X", "label": "x", "kind": "release", "version": "x"}
    base = {"tree": tree, "cases": [arm("m/a.py", "counter-nonnegative", CRASH)], "fuzz": []}
    head = {"tree": tree, "cases": [arm("m/a.py", "counter-nonnegative", SILENT)], "fuzz": []}
    cmp = review.compare(base, head)
    cites = {"moved": [], "changed": [], "only_base": [], "only_head": []}
    text = review.summary_md(base, head, cmp, cites, 1.0, 0)
    assert "**Head breaks nothing base did not.**" in text and "### Changed reaction (1)" in text
    assert len(text) < review.COMMENT_LIMIT


def test_citations_between_the_two_releases():
    from targets.vllm_tree import resolve

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
    assert review.main(["--base", "0.33.0", "--head", "/nonexistent/vllm"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "/nonexistent/vllm" in err


@pytest.mark.vllm
def test_the_observer_sees_what_vllm_does():
    from report.observe import case_modules, observe
    from targets import vllm_env
    from targets.vllm_target import VllmTarget

    profile = vllm_env.tree().profile
    module = next(m for m in case_modules() if m.path.endswith("vllm_0_32_0/test_v2_kvfail__counter_nonnegative.py"))
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
    from generated_tests.cases.vllm_0_32_0 import test_v2_kvfail__no_token_while_prefilling as module
    from report.observe import reviewed_arms

    arms = dict(reviewed_arms(module.CASE, "vllm-0.33.0"))
    assert sorted(arms) == ["vllm-0.33.0", "vllm-0.33.0+clamp"]
    assert "vllm-0.33.0+guard" in module.CASE.arms
