"""`make explain`: the operator's counters, read in every form, reached or refuted per configuration."""

from __future__ import annotations

import json

import pytest
from vllm_contract.model.explain import explain_config
from vllm_contract.report import explain
from vllm_contract.spec import expectations
from vllm_contract.spec.matrix import by_name
from vllm_contract.spec.verdicts import Fired
from vllm_contract.spec.vocabulary import Status

from vllm_contract.cli import main as cli

SEED = "placeholders=-1 new_tokens=1 computed=8448 num_tokens=9119 prompt=9118 output=1 prefill_chunk=True"
SEED_VALUES = {
    "placeholders": -1,
    "new_tokens": 1,
    "computed": 8448,
    "num_tokens": 9119,
    "prompt": 9118,
    "output": 1,
    "prefill_chunk": True,
}


def test_the_seed_log_line():
    values, ignored, form = explain.parse(SEED)
    assert values == SEED_VALUES and not ignored and form == "log line"


def test_a_json_object_and_spec_names():
    values, _, form = explain.parse('{"num_output_placeholders": -1, "is_prefill_chunk": true, "status": "RUNNING"}')
    assert values == {"placeholders": -1, "prefill_chunk": True, "status": Status.RUNNING} and form == "JSON"


def test_a_request_repr():
    text = (
        "Request(request_id='r0', status=<RequestStatus.RUNNING: 2>, num_output_placeholders=-1, "
        "num_computed_tokens=8448, prompt_token_ids=[5, 5, 5], spec_token_ids=[], sampling_params=SamplingParams(n=1))"
    )
    values, ignored, form = explain.parse(text)
    assert values == {"status": Status.RUNNING, "placeholders": -1, "computed": 8448, "prompt": 3, "drafts": 0}
    assert set(ignored) == {"request_id", "sampling_params"} and form == "Request repr"


@pytest.mark.parametrize(
    "text, words",
    [
        ("placeholder=-1", ["'placeholder'", "placeholders", "prefill_chunk"]),
        ("computed=abc", ["'computed'", "whole number", "'abc'"]),
        ("prefill_chunk=maybe", ["'prefill_chunk'", "True or False"]),
        ("status=SLEEPING", ["'status'", "RUNNING"]),
        ("computed", ["name=value"]),
        ('{"placeholders": true}', ["'placeholders'", "whole number"]),
    ],
)
def test_bad_fields_are_one_line_naming_the_field(text, words, capsys):
    assert cli(["explain", text, "--configs", "v1@0.32.0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    for word in words:
        assert word in err


def test_the_seed_counters_are_reached_by_the_kv_load_failure_recompute():
    cfg = by_name(["v2-kvfail@0.32.0"])[0]
    big = explain_config(cfg, SEED_VALUES)
    assert big.verdict == "reached" and big.depth == 7
    assert str(big.fired) == "crash: placeholders-nonnegative" and big.mechanisms == ["kv-load-failure"]
    last = big.trace.states[-1]
    assert last[("num_output_placeholders", 0)] == -1 and last[("num_prompt_tokens", 0)] == 9118
    # integer sizes are taken as given: a small prompt needs the same trace shape
    small = explain_config(cfg, {**SEED_VALUES, "computed": 16, "num_tokens": 19, "prompt": 18})
    assert small.depth == big.depth
    assert [s.event for s in small.trace.steps] == [s.event for s in big.trace.steps]


def test_a_configuration_that_proves_the_counter_cannot_reach_them():
    answer = explain_config(by_name(["v1@0.32.0"])[0], SEED_VALUES)
    assert answer.verdict == "unreachable" and "k-induction" in answer.how


def test_unknown_is_never_no():
    answer = explain_config(by_name(["v2-kvfail@0.33.0"])[0], SEED_VALUES, max_depth=3)
    assert answer.verdict == "unknown" and "no proof" in answer.how


def test_the_command_ranks_mechanisms_and_writes_a_replayable_trace(tmp_path, capsys):
    from vllm_contract.codegen.cases import build

    code = cli(
        [
            "explain",
            SEED,
            "--configs",
            "v2-kvfail@0.32.0",
            "v1@0.32.0",
            "--out",
            str(tmp_path / "explain"),
            "--from",
            str(tmp_path / "none"),
            "--report",
            str(tmp_path / "none"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "REACHED by 1 configuration(s)" in out and "PROVED UNREACHABLE in 1 configuration(s)" in out
    assert "1. kv-load-failure: 7 step(s); v2-kvfail@0.32.0" in out
    trace = tmp_path / "explain" / "v2-kvfail@0.32.0.itf.json"
    src = build(trace, user=True)  # the operator's crash as a regression case
    assert src.case.property == "counter-nonnegative" and len(src.case.steps) == 7


def _first_lines(counters: str, configs: list[str], tmp_path, capsys, json_out: bool = False) -> str:
    argv = ["explain", counters, "--configs", *configs, "--out", str(tmp_path / "explain")]
    cli(argv + (["--json"] if json_out else []))
    return capsys.readouterr().out


def test_the_answer_comes_first_vllms_own_events_before_an_injected_fault(tmp_path, capsys):
    """The seed's counters: the stale-slot fault reaches them in fewer steps, but the
    KV-load-failure recompute, which vLLM's own events reach, is the answer; then what
    to do, each mitigation with what this run proved of it."""
    configs = ["v2-stale-slot@0.32.0", "v2-kvfail@0.32.0", "guard-v2-faults@0.32.0", "v1@0.32.0"]
    out = _first_lines(SEED, configs, tmp_path, capsys).splitlines()
    assert out[0] == "for the 4 configuration(s) named with --configs (vLLM 0.32.0)"
    assert out[1] == (
        "most likely: kv-load-failure (vLLM's own events; vLLM 0.32.0; 7 step(s); crash "
        "(placeholders-nonnegative)); 1 other mechanism(s) can also produce these counters"
    )
    todo = next(i for i, line in enumerate(out) if line.startswith("WHAT TO DO NOW"))
    assert todo <= 4  # after at most a line on the budget
    block = " ".join(" ".join(out[todo + 1 : out.index("THE COUNTERS, as the spec names them:")]).split())
    assert "`--scheduler-cls vllm_contract.adapter.guard_scheduler.GuardAsyncScheduler`" in block
    assert "Here: proved unreachable in 1 of its 1 configuration(s)" in block
    assert "`VLLM_USE_V2_MODEL_RUNNER=0`" in block


def test_counters_only_a_fault_reaches_say_so_first(tmp_path, capsys):
    out = _first_lines(
        "placeholders=-1 new_tokens=2 prefill_chunk=False", ["v1-over-delivery@0.32.0", "v1@0.32.0"], tmp_path, capsys
    )
    assert out.splitlines()[1].startswith("most likely: over-delivery (an injected fault; vLLM 0.32.0;")


def test_counters_no_configuration_reaches_are_a_proved_no(tmp_path, capsys):
    doc = json.loads(
        _first_lines(
            "placeholders=-3 new_tokens=0 prefill_chunk=True",
            ["v1@0.32.0", "v1-kvfail@0.32.0"],
            tmp_path,
            capsys,
            json_out=True,
        )
    )
    assert doc["answer"] == "no configuration reaches these counters: 2 proved unreachable"
    assert doc["mechanisms"] == [] and {a["verdict"] for a in doc["answers"]} == {"unreachable"}


def test_a_configuration_that_raises_is_could_not_run_with_its_cause(monkeypatch):
    """An exception in one configuration's search is that configuration's outcome (the
    others still answer), never unreachable or unknown."""

    def broken(*args, **kwargs):
        raise RuntimeError("Z3 exception: out of memory\n(the rest of the message)")

    monkeypatch.setattr(explain, "explain_config", broken)
    answer = explain._worker(by_name(["v1@0.32.0"])[0], SEED_VALUES, 4, 1.0, 1.0)
    assert answer.verdict == explain.COULD_NOT_RUN
    assert answer.how == "RuntimeError: Z3 exception: out of memory"


def test_could_not_run_exits_3_and_its_cause_is_printed_once(monkeypatch, tmp_path, capsys):
    from vllm_contract.model.explain import Answer

    def run(configs, *args, **kwargs):
        return [Answer(c.name, explain.COULD_NOT_RUN, 0.0, "MemoryError: no message") for c in configs]

    monkeypatch.setattr(explain, "run", run)
    code = cli(["explain", SEED, "--configs", "v1@0.32.0", "v2@0.32.0", "--out", str(tmp_path / "e")])
    out = capsys.readouterr().out
    assert code == 3
    assert "COULD NOT RUN in 2 configuration(s)" in out
    assert out.count("MemoryError: no message (2: v1@0.32.0, v2@0.32.0)") == 1
    assert "0 reach the counters, 0 proved unreachable, 0 unknown, 2 could not run" in out


SAME_MODEL = ["v1", "v2-pp4", "guard-healthy", "kvfail-stream", "v2-stale-slot"]


def _model_text(cfg) -> str:
    from vllm_contract.model.encoding import Encoding

    enc = Encoding(cfg)
    return "\n".join(f.sexpr() for f in (enc.initial(), enc.transition(0), enc.fatal_ok(0)))


@pytest.mark.parametrize("scenario", SAME_MODEL)
def test_equal_semantics_is_an_equal_model_and_unequal_is_not(scenario):
    """What lets explain answer 0.32.0 with 0.31.0's answer: their encodings are the
    same formulas; 0.33.0's differ, and so does its semantics (the negative control)."""
    old, new, newest = by_name([f"{scenario}@0.31.0", f"{scenario}@0.32.0", f"{scenario}@0.33.0"])
    assert old.semantics() == new.semantics() and _model_text(old) == _model_text(new)
    assert new.semantics() != newest.semantics() and _model_text(new) != _model_text(newest)


def test_only_releases_that_model_alike_share_an_answer():
    """Which configurations of the matrix share a model: 0.31.0 and 0.32.0 of each
    scenario (spec/profiles.py says they agree in every modelled mechanism), no other."""
    models: dict[str, list[str]] = {}
    for cfg in by_name([]):
        models.setdefault(json.dumps(cfg.semantics(), sort_keys=True), []).append(cfg.name)
    shared = [names for names in models.values() if len(names) > 1]
    assert shared and all(
        len(names) == 2 and names[0].endswith("@0.31.0") and names[1] == names[0].replace("0.31.0", "0.32.0")
        for names in shared
    )


def test_a_shared_answer_is_the_configurations_own_trace(tmp_path, capsys):
    from vllm_contract.codegen.cases import build

    out = tmp_path / "explain"
    code = cli(["explain", SEED, "--configs", "v2-kvfail@0.31.0", "v2-kvfail@0.32.0", "--json", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0
    assert "v2-kvfail@0.32.0" in captured.err and "the model of v2-kvfail@0.31.0" in captured.err
    first, second = json.loads(captured.out)["answers"]
    assert first["verdict"] == second["verdict"] == "reached" and first["depth"] == second["depth"] == 7
    assert "answered once for v2-kvfail@0.31.0" in second["how"] and "answered once" not in first["how"]
    doc = json.loads((out / "v2-kvfail@0.32.0.itf.json").read_text())
    assert doc["#meta"]["config"]["name"] == "v2-kvfail@0.32.0"
    assert doc["#meta"]["config"]["profile"] == "vllm-0.32.0"
    assert build(out / "v2-kvfail@0.32.0.itf.json", user=True).case.property == "counter-nonnegative"


def test_a_proof_may_use_a_property_the_matrix_does_not_claim():
    """guard-v1-healthy's matrix entry is about drops, but under the guard the counter
    never goes negative: explain proves that too, and refutes the seed's counters."""
    cfg = by_name(["guard-v1-healthy@0.31.0"])[0]
    assert "counter-nonnegative" not in cfg.expect
    answer = explain_config(cfg, SEED_VALUES)
    assert answer.verdict == "unreachable" and "counter-nonnegative" in answer.how


def test_an_unknown_answer_stops_at_its_budget_not_after_it():
    """A search whose budget runs out mid-query is cut there (the query's limit is what
    is left of the budget), and it is unknown, not an interrupt or a no."""
    answer = explain_config(by_name(["v2-pp4@0.29.0"])[0], SEED_VALUES, budget_s=0.5)
    assert answer.verdict == "unknown" and "budget" in answer.how


def test_release_keeps_the_configurations_of_the_release_that_crashed():
    chosen = explain.of_releases(by_name([]), ["0.32.0"])
    assert chosen and [c.name for c in chosen] == [c.name for c in by_name([]) if c.name.endswith("@0.32.0")]
    assert not any(c.prof.historical for c in chosen)


# ------------------------------------------------------------------- which release


@pytest.fixture
def no_solving(monkeypatch):
    """The configurations explain would solve, caught before any solving."""
    asked = []

    def run(configs, *args, **kwargs):
        asked.append([c.name for c in configs])
        raise AssertionError("stop: the configurations were chosen")

    monkeypatch.setattr(explain, "run", run)
    return asked


def test_without_release_it_answers_for_the_installed_vllms_and_says_so_first(
    monkeypatch, tmp_path, capsys, no_solving
):
    """The Makefile's fix-check default once made explain answer 0.33.0 only; now it
    answers for the release the counters came from, the installed one unless told."""
    monkeypatch.setattr(explain, "installed_release", lambda: ("0.32.0", "it declares 0.32.0"))
    with pytest.raises(AssertionError, match="stop"):
        cli(["explain", SEED, "--out", str(tmp_path / "e")])
    assert no_solving == [[c.name for c in by_name([]) if c.name.endswith("@0.32.0") and not c.prof.historical]]
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("for vLLM 0.32.0 (the installed vLLM: it declares 0.32.0; another release: --release")
    assert "--all-releases" in first


def test_the_release_named_wins_and_every_release_is_asked_for_by_name(tmp_path, capsys, no_solving):
    with pytest.raises(AssertionError, match="stop"):
        cli(["explain", SEED, "--release", "0.30.0", "--out", str(tmp_path / "e")])
    assert capsys.readouterr().out.splitlines()[0] == "for vLLM 0.30.0 (--release)"
    with pytest.raises(AssertionError, match="stop"):
        cli(["explain", SEED, "--all-releases", "--out", str(tmp_path / "e")])
    assert capsys.readouterr().out.startswith("for every release of the matrix (--all-releases)")
    assert no_solving == [
        [c.name for c in by_name([]) if c.name.endswith("@0.30.0") and not c.prof.historical],
        [c.name for c in by_name([])],
    ]


def test_no_release_and_no_vllm_installed_is_one_line_before_any_work(monkeypatch, tmp_path, capsys, no_solving):
    monkeypatch.setattr(explain, "installed_release", lambda: None)
    assert cli(["explain", SEED, "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--release X.Y.Z" in err and "--all-releases" in err
    assert cli(["explain", SEED, "--all-releases", "--release", "0.32.0"]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert no_solving == [] and not (tmp_path / "e").exists()


def test_every_release_is_answered_as_it_completes_then_the_whole(tmp_path, capsys):
    code = cli(
        ["explain", SEED, "--configs", "v1@0.31.0", "v1@0.32.0", "v1@0.33.0", "--all-releases"]
        + ["--out", str(tmp_path / "e"), "--jobs", "1"]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 1  # v1 reaches none of the seed's counters: each is proved unreachable
    assert out[0].startswith("for every release of the matrix (--all-releases)")
    # one process solves 0.31.0 (which answers 0.32.0 too, the same model), then 0.33.0
    assert out[1:4] == [
        f"vLLM {r}: no configuration reaches these counters: 1 proved unreachable"
        for r in ("0.31.0", "0.32.0", "0.33.0")
    ]
    assert out[4] == "" and out[5] == "no configuration reaches these counters: 3 proved unreachable"


def test_an_answer_at_the_edge_of_its_budget_says_so_and_so_does_a_budget_that_ran_out(monkeypatch):
    from vllm_contract.model import explain as model_explain
    from vllm_contract.model.explain import Answer

    cfgs = {c.name: c for c in by_name(["v2-kvfail@0.32.0", "v2@0.32.0", "v1@0.32.0"])}
    reached = Answer("v2-kvfail@0.32.0", "reached", 4.6, "BMC", depth=7, mechanisms=["kv-load-failure"], edge=True)
    reached.fired = Fired("placeholders-nonnegative")
    ran_out = Answer("v2@0.32.0", "unknown", 5.0, "budget", out_of_budget=True)
    proved = Answer("v1@0.32.0", "unreachable", 0.4, "k-induction")
    note = explain.budget_note([reached, ran_out, proved], cfgs)
    assert "found at the edge of its budget (v2-kvfail@0.32.0, 4.6 s)" in note
    assert "1 configuration(s) ran out of their budget" in note
    assert explain.budget_note([proved], cfgs) == ""
    # an answer decided after EDGE of its budget says so in its own words too
    monkeypatch.setattr(model_explain, "EDGE", 0.0)
    edge = explain_config(by_name(["v2-kvfail@0.32.0"])[0], SEED_VALUES)
    assert edge.verdict == "reached" and edge.edge and "at the edge of its 5 s budget" in edge.how
    monkeypatch.undo()
    # the budget covers the proof too: a configuration whose proof takes long stops at it
    answer = explain_config(by_name(["v2-kvfail-shared@0.32.0"])[0], SEED_VALUES, budget_s=0.5)
    assert answer.verdict == "unknown" and answer.out_of_budget and "0.5 s budget" in answer.how
    assert answer.seconds < 0.5 + 3  # one query may overrun what is left of it a little


# ------------------------------------------------------------------- bad counters


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"placeholders": -1, "placeholders": 3}', ["'placeholders' is given twice"]),  # probe #11
        ('{"computed": 1, "computed": 2}', ["'computed' is given twice"]),  # N05
        ("{'computed': 1, 'computed': 2}", ["field 'computed' given twice"]),
        (
            "Request(request_id='r', num_computed_tokens=1, num_computed_tokens=2)",
            ["'num_computed_tokens' given twice"],
        ),
        ("placeholders=１", ["'placeholders'", "ASCII digits", "'１'"]),  # #41
        ('{"placeholders": "１"}', ["'placeholders'", "ASCII digits"]),  # #41, the JSON string form
        ("computed=1_000", ["'computed'", "ASCII digits"]),
        ("placeholders=-1000000000000000000000000000000", ["'placeholders'", "64-bit"]),  # N01
        ('{"placeholders": NaN}', ["placeholders is NaN"]),
        ('{"placeholders": 1e400}', ["placeholders is 1e400"]),
        ('{"placeholders": -1.0}', ["'placeholders'", "whole number"]),
    ],
    ids=["#11", "N05", "dict twice", "repr twice", "#41", "#41 JSON", "underscore", "N01", "NaN", "1e400", "float"],
)
def test_bad_counters_are_one_line_before_any_solving(text, words, tmp_path, capsys, no_solving):
    assert cli(["explain", text, "--release", "0.32.0", "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    for word in words:
        assert word in err
    assert no_solving == [] and not (tmp_path / "e").exists()


def test_counters_from_a_file_are_read_only_from_a_regular_file_of_bounded_size(tmp_path, capsys, no_solving):
    """N06: `explain @/dev/zero` grew to 10 GB in 8 s; a folder or a huge file is one line too."""
    big = tmp_path / "big.txt"
    with big.open("wb") as handle:
        handle.truncate(explain.MAX_COUNTERS_BYTES + 1)  # sparse: nothing is read to refuse it
    for path, says in (("/dev/zero", "is a character device"), (tmp_path, "is a folder"), (big, "larger than")):
        assert cli(["explain", f"@{path}", "--release", "0.32.0"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err
    assert no_solving == []


def test_an_unknown_release_is_one_line_naming_the_known_ones(tmp_path, capsys):
    code = cli(["explain", SEED, "--release", "0.28.0", "--out", str(tmp_path / "explain")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0
    assert "--release 0.28.0" in err and "0.29.0, 0.30.0, 0.31.0, 0.32.0, 0.33.0" in err
    assert not (tmp_path / "explain").exists()


# ------------------------------------------------------------------- explain --trace


def _case_trace(tmp_path, module: str):
    """A generated counterexample as the ITF file a monitor would write (no vLLM needed)."""
    import importlib

    from vllm_contract.model.interpreter import Interpreter, args_for, flat
    from vllm_contract.model.itf import text, to_itf
    from vllm_contract.model.trace import Step, Trace, confirm

    case = importlib.import_module(module).CASE
    cfg = expectations.from_record(case.config)
    it = Interpreter(cfg)
    steps = [Step(e, args_for(it.event(e), cfg, a)) for e, a in case.steps]
    trace = confirm(it, Trace(cfg.name, flat(case.init), steps, case.property, "violation"))
    path = tmp_path / "case.itf.json"
    path.write_text(text(to_itf(trace, cfg.record(), "a generated case")))
    return path


def test_explain_trace_names_the_mechanism_of_a_counterexample(tmp_path, capsys):
    path = _case_trace(tmp_path, "generated_tests.cases.vllm_0_29_0.test_v2_kvfail_shared__counter_nonnegative")
    assert cli(["explain", "--trace", str(path)]) == 0
    first, rest = capsys.readouterr().out.split("\n", 1)
    assert first == "for vLLM 0.29.0 (the trace's configuration, #meta.config.profile)"
    out = " ".join(rest.split())
    assert out.startswith("the recorded trace is kv-load-failure, prefix-hit, shared-block-failure (vLLM's own events)")
    assert "generated_tests/cases/vllm_0_29_0/test_v2_kvfail_shared__counter_nonnegative.py" in out
    assert cli(["explain", "--trace", str(path), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["mechanisms"] == ["kv-load-failure", "prefix-hit", "shared-block-failure"]


def test_explain_trace_for_one_release_only_leaves_the_others_out(tmp_path):
    """The monitor's tests ask only whether the model reproduces a trace: the same answer,
    mechanisms and headline, without the other releases' predictions."""
    from vllm_contract.report.explain_trace import explain_trace

    path = _case_trace(tmp_path, "generated_tests.cases.vllm_0_29_0.test_v2_kvfail_shared__counter_nonnegative")
    whole, alone = explain_trace(path), explain_trace(path, every_release=False)
    assert len(whole.releases) > 1 and alone.releases == []
    assert (alone.status, alone.mechanisms, alone.headline) == (whole.status, whole.mechanisms, whole.headline)


def test_explain_trace_a_value_the_model_does_not_give_is_a_finding(tmp_path, capsys):
    path = _case_trace(tmp_path, "generated_tests.cases.vllm_0_29_0.test_v2_kvfail__counter_nonnegative")
    doc = json.loads(path.read_text())
    doc["states"][4]["q_sampled"][1][0] = 0  # the runner said to have discarded the recompute
    path.write_text(json.dumps(doc))
    assert cli(["explain", "--trace", str(path)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "leaves the model" in out and "state 4, after step 4 (schedule): q_sampled[1][0]" in out
    assert "a finding about the model" in out


@pytest.mark.parametrize(
    "argv, words",
    [
        (["explain"], "give the counters or --trace FILE"),
        (["explain", "placeholders=-1", "--trace", "x.itf.json"], "give the counters or --trace FILE"),
        (["explain", "--trace", "/nonexistent.itf.json"], "cannot be read"),
    ],
)
def test_explain_trace_bad_input_is_one_line(argv, words, capsys):
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and words in err
