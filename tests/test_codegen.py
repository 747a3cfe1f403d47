"""The generator: deterministic output, stale suites detected, wrong targets caught."""

from pathlib import Path

import pytest
from vllm_contract.codegen import generate
from vllm_contract.codegen.cases import CaseError, build
from vllm_contract.codegen.render import render
from vllm_contract.model.check import check_config
from vllm_contract.model.itf import write
from vllm_contract.model.workers import isolated_pool
from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.matrix import by_name
from vllm_contract.targets.harness import Divergence, replay_case
from vllm_contract.targets.reference import ReferenceTarget


def isolated(name: str):
    """check_config in a fresh process, as make prove runs it."""
    with isolated_pool(1) as pool:
        return pool.submit(check_config, by_name([name])[0]).result()


@pytest.fixture(scope="module")
def kvfail_trace(tmp_path_factory) -> Path:
    """The v2-kvfail counterexample, produced by the prover."""
    folder = tmp_path_factory.mktemp("prove")
    for rel, doc in isolated("v2-kvfail@0.32.0").documents.items():
        write(folder / rel, doc)
    return folder / "traces/v2-kvfail@0.32.0/counter-nonnegative.itf.json"


def test_same_spec_gives_byte_identical_traces_and_modules(kvfail_trace, tmp_path):
    again = isolated("v2-kvfail@0.32.0")
    write(tmp_path / "again.itf.json", again.documents["traces/v2-kvfail@0.32.0/counter-nonnegative.itf.json"])
    assert (tmp_path / "again.itf.json").read_bytes() == kvfail_trace.read_bytes()
    first, second = render(build(kvfail_trace)), render(build(tmp_path / "again.itf.json"))
    assert first.replace(str(kvfail_trace), "TRACE") == second.replace(str(tmp_path / "again.itf.json"), "TRACE")


def test_cases_built_on_several_processes_are_the_ones_built_in_one(kvfail_trace, monkeypatch):
    """check-generated shares the prover's traces out over worker processes: the cases, in
    their order, are what one process builds (and a damaged trace still stops it)."""
    traces = sorted(kvfail_trace.parent.parent.rglob("*.itf.json"))
    monkeypatch.setattr(generate, "BUILD_CHUNK", 1)
    if len(traces) < 2:
        pytest.fail(f"the v2-kvfail run wrote {len(traces)} trace(s); this check needs two")
    alone = [render(src) for src in generate._build_prover_traces(traces)]
    shared = [render(src) for src in generate._build_all(traces)]
    assert shared == alone
    broken = kvfail_trace.parent / "zz-broken.itf.json"
    broken.write_text("{")
    try:
        with pytest.raises(CaseError, match="damaged"):
            generate._build_all([*traces, broken])
    finally:
        broken.unlink()


def test_check_catches_a_hand_edit(kvfail_trace, tmp_path):
    committed = tmp_path / "cases"
    sources = [build(kvfail_trace)]
    generate.write_all(sources, committed)
    assert generate.check(sources, committed) == 0
    victim = sorted(committed.rglob("test_*.py"))[0]
    victim.write_text(victim.read_text().replace("runs=", "runs=1 + ", 1))
    assert generate.check(sources, committed) == 1


def test_check_catches_a_spec_change(kvfail_trace, monkeypatch):
    before = render(build(kvfail_trace))
    from vllm_contract.spec import deliver

    # a weaker clamp: it keeps one token more than was reserved
    def leaky(ops, applies, delivered, reserved):
        over = ops.all(applies, delivered > reserved + 1)
        kept = ops.ite(over, ops.max(reserved + 1, 0), delivered)
        return kept, delivered - kept

    monkeypatch.setattr(deliver, "clamp_delivery", leaky)
    assert render(build(kvfail_trace)) != before


def test_harness_catches_a_target_that_does_not_clamp(kvfail_trace, monkeypatch):
    """Negative control: a clamp-on target that behaves like the unpatched scheduler."""
    case = build(kvfail_trace).case

    class NoClamp(ReferenceTarget):
        def reset(self, cfg, init):
            super().reset(cfg.with_(clamp=False) if cfg.clamp else cfg, init)
            self.interp.cfg = cfg.with_(clamp=False)

        def project(self):
            state = dict(self.state)
            for r in range(2):
                state.setdefault(("clamp_dropped", r), 0)
            return {k: v for k, v in state.items() if k[0] != "clamp_dropped"}

    with pytest.raises((Divergence, AssertionError)):
        replay_case(case, NoClamp(clamp=True))
    replay_case(case, ReferenceTarget(clamp=True))  # the honest target passes


def test_a_trace_that_does_not_violate_is_refused(kvfail_trace, tmp_path):
    import json

    doc = json.loads(kvfail_trace.read_text())
    doc["states"] = doc["states"][:-1]  # drop the violating delivery
    short = tmp_path / "short.itf.json"
    short.write_text(json.dumps(doc))
    with pytest.raises(SpecError, match="#meta.violated_at_step is 7 but the trace has 6 step"):
        build(short)  # the file contradicts itself
    del doc["#meta"]["violated_at_step"]
    short.write_text(json.dumps(doc))
    with pytest.raises(CaseError, match="not violated at its last step"):
        build(short)


def test_a_quint_style_trace_becomes_the_same_case(kvfail_trace, tmp_path):
    """ITF as Quint writes it: every integer a #bigint, picks as Some(...) options, no
    config record in #meta (named with --config instead)."""
    import json

    def quint(value):
        if isinstance(value, bool):
            return value
        if isinstance(value, int):
            return {"#bigint": str(value)}
        if isinstance(value, list):
            return [quint(v) for v in value]
        if isinstance(value, dict):
            return {k: quint(v) for k, v in value.items()}
        return value

    doc = json.loads(kvfail_trace.read_text())
    meta = {"violated": doc["#meta"]["violated"]}
    states = []
    for state in doc["states"]:
        picks = {k: {"tag": "Some", "value": quint(v)} for k, v in state["mbt::nondetPicks"].items()}
        states.append({**quint(state), "mbt::nondetPicks": picks})
    other = tmp_path / "quint.itf.json"
    other.write_text(json.dumps({"#meta": meta, "vars": doc["vars"], "states": states}))
    ours, theirs = build(kvfail_trace), build(other, "v2-kvfail@0.32.0")
    assert theirs.case.steps == ours.case.steps and theirs.case.arms == ours.case.arms


def test_the_generated_modules_load_from_their_files_in_one_place(tmp_path):
    """codegen's generated_cases is what the benchmarks, the fix checks and the report read
    the committed cases with: every module's CASE in path order; a module that does not
    import is one line naming it, and the report says the same line."""
    import pytest
    from vllm_contract.codegen.cases import CaseError
    from vllm_contract.codegen.generate import CASES, generated_cases
    from vllm_contract.fixes.arms import load_cases
    from vllm_contract.report.data import ReportError, generated_modules

    found = generated_cases()
    assert found and [p for p, _ in found] == sorted(CASES.rglob("test_*.py"))
    assert [c.name for c in load_cases()] == [c.name for _, c in found]
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "test_broken.py").write_text("raise RuntimeError('half-written')\n")
    with pytest.raises(CaseError, match=r"test_broken.py: does not import \(RuntimeError: half-written\)"):
        generated_cases(tmp_path)
    with pytest.raises(ReportError, match="test_broken.py: does not import"):
        generated_modules(tmp_path)
